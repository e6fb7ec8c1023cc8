"""freeze="lora": adapters on a shared, unchanged encoder; light pickles; the learning curve."""

import pickle
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV

from skbert import BertClassifier, BertRegressor
from skbert._encoder import _loading
from skbert._encoder._encoding import _model_inputs, tokenize
from skbert._train import _lora
from tests.test_architectures import ARCHS, TEXTS, model_dir  # noqa: F401 (a fixture)
from tests.test_finetune import QUESTIONS, SET_SINCE, changed, state

pytest.importorskip("peft")

LABELS = ["who"] * 3 + ["where"] * 3 + ["when"] * 3
X, Y = QUESTIONS * 2, LABELS * 2
LORA = {"freeze": "lora", "learning_rate": 1e-2, "epochs": 4, "random_state": 0,
        "device": "cpu"}


def shared_model(directory):
    return _loading.load(directory, None, "float32", torch.device("cpu")).model


def test_the_base_weights_stay_as_they_were_and_are_not_copied(tiny_model_dir):
    shared = shared_model(tiny_model_dir)
    before = state(shared)
    clf = BertClassifier(tiny_model_dir, **{**LORA, "epochs": 20}).fit(X, Y)
    assert changed(before, state(shared)) == set()  # bit for bit
    assert all(parameter.requires_grad for parameter in shared.parameters())  # flags too
    # model_ shares every tensor but the adapted projections, which hold W + (alpha / r) B A
    moved = changed(before, state(clf.model_))
    assert moved == {name for name in before if name.endswith(("query.weight", "value.weight"))}
    kept = dict(clf.model_.named_parameters())
    for name, parameter in shared.named_parameters():
        if name not in moved:
            assert kept[name].data_ptr() == parameter.data_ptr(), name
    # the adapters trained (B starts at 0); how well they learn: benchmarks/finetune.py on TREC
    assert all(np.abs(b).max() > 0 for _, b, _ in clf._fitted.lora_factors.values())


def adapted_projections(model, arch):
    """The state-dict names of the weights that LoRA adapts in ``model``."""
    suffixes = tuple(f".{name}.weight" for name in _lora.targets(model, arch))
    names = {name for name in model.state_dict() if name.endswith(suffixes)}
    assert len(names) >= 2  # two layers, or ALBERT's one shared layer with two projections
    return names


@pytest.mark.parametrize("arch", ARCHS)  # ModernBERT's one fused Wqkv, ALBERT's shared layers
def test_merged_projections_equal_the_adapters(model_dir, arch):  # noqa: F811 (the fixture)
    from peft.tuners.lora import LoraLayer

    directory = model_dir(arch)
    loaded = _loading.load(directory, None, "float32", torch.device("cpu"))
    shared = loaded.model
    encoder, trainable = _lora.adapted(shared, arch, rank=4, alpha=8, dropout=0.0)
    assert trainable and all(".lora_" in name for name in trainable)
    assert sum(p.numel() for p in trainable.values()) < 0.2 * sum(
        p.numel() for p in shared.parameters())
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in trainable.values():  # as if trained (B starts at 0), and more
            parameter.normal_(std=0.2, generator=generator)
    windows = tokenize(loaded.tokenizer, TEXTS, 64, "head")
    inputs, _ = _model_inputs(loaded.tokenizer, windows, np.arange(len(TEXTS)),
                              torch.device("cpu"))
    merged = _lora.merged(shared, _lora.factors(encoder))
    with torch.no_grad():
        adapted_out = encoder.eval()(**inputs).last_hidden_state
        merged_out = merged(**inputs).last_hidden_state
        base_out = shared(**inputs).last_hidden_state
    mask = inputs["attention_mask"].bool()
    torch.testing.assert_close(merged_out[mask], adapted_out[mask], rtol=0, atol=1e-5)
    assert not torch.allclose(merged_out[mask], base_out[mask])
    assert not any(isinstance(module, LoraLayer) for module in merged.modules())
    assert changed(state(shared), state(merged)) == adapted_projections(shared, arch)


@pytest.mark.parametrize("freeze", ["lora", None])
@pytest.mark.parametrize("arch", ARCHS)
def test_every_architecture(model_dir, arch, freeze):  # noqa: F811 (the fixture)
    directory = model_dir(arch)
    shared = shared_model(directory)
    before = state(shared)
    clf = BertClassifier(directory, pooling="mean", **{**LORA, "freeze": freeze}).fit(X, Y)
    assert clf.predict_proba(X).shape == (len(X), 3)
    assert changed(before, state(shared_model(directory))) == set()
    moved, projections = changed(before, state(clf.model_)), adapted_projections(shared, arch)
    if freeze == "lora":
        assert moved == projections  # what trained, merged in
    else:
        assert projections < moved  # everything trains


def test_an_architecture_without_targets_is_named(tiny_model_dir, monkeypatch):
    monkeypatch.setattr(_lora, "TARGETS", {})
    with pytest.raises(ValueError, match=r"freeze='lora' does not know which projections of "
                                         r"BertModel \(model_type 'bert', '.*'\) to adapt"):
        BertClassifier(tiny_model_dir, **LORA).fit(X, Y)


def test_without_peft_the_install_is_named(tiny_model_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)
    with pytest.raises(ImportError, match=r"pip install 'skbert\[peft\]'"):
        BertClassifier(tiny_model_dir, **LORA).fit(X, Y)


def test_regressor(tiny_model_dir):
    y = np.linspace(0, 5, len(X))
    reg = BertRegressor(tiny_model_dir, **LORA).fit(X, y)
    assert reg.predict(X).shape == (len(X),)
    assert all(np.abs(b).max() > 0 for _, b, _ in reg._fitted.lora_factors.values())


@pytest.mark.parametrize("freeze", ["all", "lora"])
def test_a_light_pickle_loads_in_another_process(tiny_model_dir, tmp_path, freeze):
    clf = BertClassifier(tiny_model_dir, **{**LORA, "freeze": freeze},
                         persist_weights=False).fit(X, Y)
    data = pickle.dumps(clf)
    full = pickle.dumps(clone(clf).set_params(persist_weights=True).fit(X, Y))
    assert len(data) < 0.2 * len(full)  # the tiny model's weights are ~0.4 MB
    (tmp_path / "clf.pkl").write_bytes(data)
    np.save(tmp_path / "expected.npy", clf.predict_proba(X))
    script = ("import pickle, sys, numpy as np\n"
              "clf = pickle.loads(open(sys.argv[1], 'rb').read())\n"
              f"np.testing.assert_allclose(clf.predict_proba({X!r}), np.load(sys.argv[2]), "
              "rtol=0, atol=1e-6)")
    done = subprocess.run([sys.executable, "-c", script, tmp_path / "clf.pkl",
                           tmp_path / "expected.npy"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_light_pickle_refuses_changed_base_weights(tiny_model_dir, tmp_path):
    folder = shutil.copytree(tiny_model_dir, tmp_path / "model")
    clf = BertClassifier(str(folder), **LORA, persist_weights=False).fit(X, Y)
    data = pickle.dumps(clf)
    model, _ = _loading.from_pretrained(str(folder), None, "float32")
    with torch.no_grad():
        model.encoder.layer[0].output.dense.weight.mul_(2.0)
    model.save_pretrained(folder)
    with pytest.raises(ValueError, match=r"The weights of '.*model' \(revision=None\) changed "
                                         r"since this BertClassifier was pickled with "
                                         r"persist_weights=False"):
        pickle.loads(data)


@pytest.mark.parametrize("fitted, set_since", [
    ("all", {"freeze": "lora"}),
    ("lora", {"freeze": None, "lora_rank": 2, "model": "no/such-model", "revision": "main"}),
])
def test_a_light_pickle_reads_the_fit_not_parameters_set_since(tiny_model_dir, fitted,
                                                               set_since):
    clf = BertClassifier(tiny_model_dir, **{**LORA, "freeze": fitted},
                         persist_weights=False).fit(X, Y)
    expected = clf.predict_proba(X)
    clf.set_params(**set_since, **SET_SINCE)
    np.testing.assert_array_equal(clf.predict_proba(X), expected)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(clf)).predict_proba(X), expected)


def test_a_refit_without_lora_keeps_no_adapters(tiny_model_dir):
    light = {**LORA, "freeze": "all", "persist_weights": False}
    refit = BertClassifier(tiny_model_dir, **{**light, "freeze": "lora"}).fit(X, Y)
    refit.set_params(freeze="all").fit(X, Y)
    fresh = BertClassifier(tiny_model_dir, **light).fit(X, Y)
    assert refit._fitted.lora_factors is None
    assert set(refit.__getstate__()) == set(fresh.__getstate__())
    assert len(pickle.dumps(refit)) == len(pickle.dumps(fresh))  # no adapters left inside
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(refit)).predict_proba(X),
                                  fresh.predict_proba(X))


def test_grid_search_over_freeze_and_rank_shares_the_base(tiny_model_dir):
    shared = shared_model(tiny_model_dir)
    before = state(shared)
    grid = [{"freeze": ["all", None]}, {"freeze": ["lora"], "lora_rank": [2, 4]}]
    search = GridSearchCV(BertClassifier(tiny_model_dir, **{**LORA, "epochs": 1}), grid,
                          cv=3).fit(X, Y)
    assert len(search.cv_results_["params"]) == 4
    assert changed(before, state(shared)) == set()
    for freeze, rank in [("all", 8), ("lora", 2), ("lora", 4)]:
        clf = clone(search.estimator).set_params(freeze=freeze, lora_rank=rank).fit(X, Y)
        embeddings = clf.model_.embeddings.word_embeddings.weight
        assert embeddings.data_ptr() == shared.embeddings.word_embeddings.weight.data_ptr()
        if freeze == "lora":
            (a, b, _), *_ = clf._fitted.lora_factors.values()
            assert a.shape[0] == rank and b.shape[1] == rank


# --- the learning curve -------------------------------------------------------------------------

TEST_X = ["who sat ?", "who was the cat", "where is the house ?", "where was the river",
          "when is it ?", "when was the year"]
TEST_Y = ["who", "who", "where", "where", "when", "when"]


def test_learning_curve_scores_three_strategies_as_labels_grow(tiny_model_dir):
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from skbert import BertVectorizer
    from skbert.probe import learning_curve, plot_learning_curve

    # The log loss tells apart what accuracy on six texts may not.
    curve = learning_curve(tiny_model_dir, X, Y, TEST_X, TEST_Y, sizes=[6, 12, None],
                           scoring="neg_log_loss")
    assert list(curve.index) == [6, 12, 18] and curve.index.name == "n_labels"
    assert list(curve.columns) == ["frozen + logistic regression", "LoRA", "full fine-tuning"]
    assert curve.attrs["scoring"] == "neg_log_loss"
    assert (curve.attrs["fit_seconds"] > 0).all().all()

    def held_out(estimator):
        return -log_loss(TEST_Y, estimator.predict_proba(TEST_X), labels=estimator.classes_)

    # Each cell is its estimator's own score, recomputed here: the frozen features on a
    # stratified sample of every size, fine-tuning (40 epochs for few labels) on all texts.
    for n in (6, 12, 18):
        train, y_train = (X, Y) if n == len(X) else train_test_split(
            X, Y, train_size=n, stratify=Y, random_state=0)[::2]
        frozen = make_pipeline(BertVectorizer(tiny_model_dir, pooling="mean"), StandardScaler(),
                               LogisticRegression(max_iter=2000)).fit(train, y_train)
        assert curve.loc[n, "frozen + logistic regression"] == pytest.approx(held_out(frozen))
    for name, params in [("LoRA", {"freeze": "lora", "pooling": "mean"}),
                         ("full fine-tuning", {})]:
        tuned = BertClassifier(tiny_model_dir, epochs=40, random_state=0, **params)
        assert curve.loc[18, name] == pytest.approx(held_out(tuned.fit(X, Y)))
    assert curve.nunique().min() == 3  # each strategy's score changes with the labels
    ax = plot_learning_curve(curve)
    assert [line.get_label() for line in ax.get_lines()] == list(curve.columns)


def test_learning_curve_limits_blas_threads_for_the_logistic_regression_alone(tiny_model_dir,
                                                                              monkeypatch):
    import contextlib

    from sklearn.linear_model import LogisticRegression

    from skbert import _threads, _vectorizer, clear_cache
    from skbert._train import _training
    from skbert.probe import learning_curve

    clear_cache()  # so that the frozen features are encoded here
    limits, seen = [], {}

    @contextlib.contextmanager
    def limit():
        limits.append(1)
        try:
            yield
        finally:
            limits.pop()

    def recording(name, function):
        def recorded(*args, **kwargs):
            seen.setdefault(name, set()).add(bool(limits))
            return function(*args, **kwargs)
        return recorded

    monkeypatch.setattr(_threads, "one_blas_thread", limit)
    monkeypatch.setattr(_training, "train", recording("fine-tuning", _training.train))
    monkeypatch.setattr(_vectorizer, "forward_parts",
                        recording("encoding", _vectorizer.forward_parts))
    monkeypatch.setattr(LogisticRegression, "fit",
                        recording("logistic regression", LogisticRegression.fit))
    learning_curve(tiny_model_dir, X, Y, TEST_X, TEST_Y, sizes=[9])
    assert seen == {"fine-tuning": {False}, "encoding": {False}, "logistic regression": {True}}


def test_learning_curve_encodes_the_frozen_features_once(tiny_model_dir, monkeypatch):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from skbert import BertVectorizer, _vectorizer, clear_cache
    from skbert.probe import learning_curve

    clear_cache()
    rows = []
    original = _vectorizer.forward_parts

    def counting(model, tokenizer, windows, *args, **kwargs):
        rows.append(len(windows.lengths))
        return original(model, tokenizer, windows, *args, **kwargs)

    monkeypatch.setattr(_vectorizer, "forward_parts", counting)
    frozen = make_pipeline(BertVectorizer(tiny_model_dir), LogisticRegression())
    curve = learning_curve(tiny_model_dir, X, Y, X[:9], Y[:9], sizes=[6, 9, 12, None],
                           estimators={"frozen": frozen}, scoring="accuracy")
    assert curve.shape == (4, 1) and curve.attrs["scoring"] == "accuracy"
    assert sum(rows) == len(set(X))  # each distinct question through the encoder once


def test_an_int_random_state_gives_the_same_adapters(tiny_model_dir):
    first = BertClassifier(tiny_model_dir, **LORA).fit(X, Y)
    second = BertClassifier(tiny_model_dir, **LORA).fit(X, Y)
    for (a1, b1, _), (a2, b2, _) in zip(first._fitted.lora_factors.values(),
                                        second._fitted.lora_factors.values()):
        np.testing.assert_array_equal(a1, a2)
        np.testing.assert_array_equal(b1, b2)
    np.testing.assert_array_equal(first.predict_proba(X), second.predict_proba(X))
