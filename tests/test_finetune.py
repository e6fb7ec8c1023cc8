"""BertClassifier and BertRegressor on a tiny random BERT, and accuracy with a real one."""

import os
import pickle
import subprocess
import sys
from unittest import mock

import joblib
import numpy as np
import pandas as pd
import pytest
import torch
from scipy.special import expit
from sklearn import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.utils import check_random_state, estimator_checks

from skbert import BertClassifier, BertRegressor, BertVectorizer
from skbert._encoder import _loading
from skbert._train._training import shuffled_batches
from skbert.datasets import load_stsb, load_trec
from tests.conftest import DATA_FREE_CHECKS

POSITIVE = ["good movie", "great film", "a great good movie", "good good", "great",
            "the film was good", "great great film", "good and great"]
NEGATIVE = ["awful movie", "bad film", "a bad awful film", "bad bad", "awful",
            "the film was bad", "awful awful film", "bad and awful"]
QUESTIONS = ["who ran ?", "who is it ?", "who was that", "where is the river ?",
             "where is the city", "where was it", "when was it ?", "when is the day",
             "what time ?"]


@pytest.fixture(scope="module")
def binary():
    return POSITIVE + NEGATIVE, np.array(["pos"] * 8 + ["neg"] * 8, dtype=object)


@pytest.fixture(scope="module")
def multiclass():
    return QUESTIONS * 2, ["who"] * 3 + ["where"] * 3 + ["when"] * 3 + ["who"] * 3 + \
        ["where"] * 3 + ["when"] * 3


@pytest.fixture(scope="module")
def classifier(tiny_model_dir, multiclass):
    X, y = multiclass
    return BertClassifier(tiny_model_dir, epochs=2, random_state=0, device="cpu").fit(X, y)


@pytest.fixture(scope="module")
def regressor(tiny_model_dir, binary):
    X, _ = binary
    y = np.linspace(0, 5, len(X))
    return BertRegressor(tiny_model_dir, epochs=2, random_state=0, device="cpu").fit(X, y)


def state(model):
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def changed(before, after):
    return {name for name in before if not torch.equal(before[name], after[name])}


# --- classifier and regressor conventions ------------------------------------------------------

def test_multiclass_string_labels(classifier, multiclass):
    X, y = multiclass
    assert list(classifier.classes_) == ["when", "where", "who"]
    proba = classifier.predict_proba(X)
    assert proba.shape == (len(X), 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    scores = classifier.decision_function(X)
    assert scores.shape == (len(X), 3)
    # Columns follow classes_: the best column names the prediction.
    np.testing.assert_array_equal(classifier.predict(X), classifier.classes_[proba.argmax(1)])
    np.testing.assert_array_equal(scores.argmax(1), proba.argmax(1))
    assert 0 <= classifier.score(X, y) <= 1
    assert classifier.coef_.shape == (3, 32) and classifier.intercept_.shape == (3,)


def test_binary_has_one_decision_like_logistic_regression(tiny_model_dir, binary):
    X, y = binary
    clf = BertClassifier(tiny_model_dir, epochs=1, random_state=0).fit(X, y)
    assert list(clf.classes_) == ["neg", "pos"]
    scores = clf.decision_function(X)
    assert scores.shape == (len(X),) and clf.coef_.shape == (1, 32)
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(proba[:, 1], expit(scores))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(clf.predict(X), np.where(scores > 0, "pos", "neg"))


@pytest.mark.parametrize("labels", [[0, 1, 2], [True, False, True], ["b", "a", "c"]])
def test_any_label_type(tiny_model_dir, labels):
    X = QUESTIONS[:6]
    y = pd.Series(labels * 2)
    clf = BertClassifier(tiny_model_dir, epochs=1, random_state=0).fit(X, y)
    np.testing.assert_array_equal(clf.classes_, np.unique(y))
    assert set(clf.predict(X)) <= set(clf.classes_)


def test_regressor_shapes_and_score(regressor, binary):
    X, _ = binary
    y = np.linspace(0, 5, len(X))
    assert regressor.predict(X).shape == (len(X),)
    assert regressor.coef_.shape == (1, 32) and regressor.n_outputs_ == 1
    assert np.isfinite(regressor.score(X, y))


def test_regressor_targets_are_scaled_and_scaled_back(tiny_model_dir, binary):
    X, _ = binary
    y = np.linspace(0, 5, len(X))
    base = BertRegressor(tiny_model_dir, epochs=1, random_state=0)
    small = clone(base).fit(X, y).predict(X)
    # Standardized targets are the same, so the same training: predictions in the new units.
    large = clone(base).fit(X, 1000 * y + 5e4).predict(X)
    np.testing.assert_allclose(large, 1000 * small + 5e4, rtol=1e-6)


def test_regressor_several_outputs(tiny_model_dir, binary):
    X, _ = binary
    y = np.column_stack([np.linspace(0, 5, len(X)), np.ones(len(X))])
    reg = BertRegressor(tiny_model_dir, epochs=1, random_state=0).fit(X, y)
    predicted = reg.predict(X)
    assert predicted.shape == (len(X), 2) and reg.n_outputs_ == 2
    np.testing.assert_allclose(predicted[:, 1], 1.0, atol=0.5)  # a constant target


@pytest.mark.parametrize("Estimator", [BertClassifier, BertRegressor])
def test_text_pairs_cross_encoder(tiny_model_dir, Estimator):
    pairs = [(a, b) for a, b in zip(POSITIVE, NEGATIVE)]
    y = [0, 1] * 4
    estimator = Estimator(tiny_model_dir, epochs=1, random_state=0).fit(pairs, y)
    assert estimator.predict(pairs).shape == (8,)
    assert estimator.transform(np.array(pairs)).shape == (8, 32)
    with pytest.raises(ValueError, match="truncation='tail' applies to single texts"):
        clone(estimator).set_params(truncation="tail").fit(pairs, y)


def test_empty_input_gives_zero_rows(classifier, regressor):
    assert classifier.predict([]).shape == (0,)
    assert classifier.predict_proba([]).shape == (0, 3)
    assert classifier.transform([]).shape == (0, 32)
    assert regressor.predict([]).shape == (0,)


def test_accepts_list_tuple_array_series(classifier, multiclass):
    X, _ = multiclass
    expected = classifier.predict_proba(X)
    for container in (tuple(X), np.array(X, dtype=object), pd.Series(X)):
        np.testing.assert_allclose(classifier.predict_proba(container), expected, atol=1e-6)


# --- transform -------------------------------------------------------------------------------

@pytest.mark.parametrize("pooling, layer, width", [("cls", -1, 32), ("mean", 1, 32),
                                                   ("mean_max", -1, 64), ("pooler", -1, 32)])
def test_transform_with_frozen_encoder_equals_vectorizer(tiny_model_dir, multiclass, pooling,
                                                         layer, width):
    X, y = multiclass
    clf = BertClassifier(tiny_model_dir, freeze="all", pooling=pooling, layer=layer,
                         epochs=1).fit(X, y)
    features = clf.transform(X)
    assert features.shape == (len(X), width) and features.dtype == np.float32
    expected = BertVectorizer(tiny_model_dir, pooling=pooling, layer=layer).fit_transform(X)
    np.testing.assert_allclose(features, expected, atol=1e-5)


def test_transform_reads_the_tuned_encoder(classifier, tiny_model_dir, multiclass):
    X, _ = multiclass
    frozen = BertVectorizer(tiny_model_dir, pooling="cls").fit_transform(X)
    tuned = classifier.transform(X)
    assert not np.allclose(tuned, frozen, atol=1e-5)
    np.testing.assert_allclose(classifier.decision_function(X),
                               tuned @ classifier.coef_.T + classifier.intercept_, atol=1e-5)


# --- freezing and sharing ------------------------------------------------------------------------

def test_freeze_all_changes_no_encoder_tensor(tiny_model_dir, multiclass):
    shared = _loading.load(tiny_model_dir, None, "float32", torch.device("cpu")).model
    before = state(shared)
    X, y = multiclass
    clf = BertClassifier(tiny_model_dir, freeze="all", pooling="mean", epochs=20,
                         random_state=0, device="cpu").fit(X, y)
    assert all(parameter.requires_grad for parameter in shared.parameters())
    assert changed(before, state(clf.model_)) == set()
    assert clf.loss_curve_[-1] < clf.loss_curve_[0]  # the head did learn


def test_with_everything_frozen_only_the_head_learning_rate_matters(tiny_model_dir, multiclass):
    X, y = multiclass
    frozen = BertClassifier(tiny_model_dir, freeze="all", epochs=2, random_state=0)
    expected = clone(frozen).fit(X, y).predict_proba(X)
    np.testing.assert_array_equal(
        clone(frozen).set_params(learning_rate=0.5).fit(X, y).predict_proba(X), expected)
    other = clone(frozen).set_params(head_learning_rate=1e-4).fit(X, y).predict_proba(X)
    assert not np.allclose(other, expected)


def test_fine_tuning_never_modifies_the_shared_model(tiny_model_dir, multiclass):
    shared = _loading.load(tiny_model_dir, None, "float32", torch.device("cpu"))
    vectorizer = BertVectorizer(tiny_model_dir, device="cpu").fit()
    assert vectorizer.model_ is shared.model
    X, y = multiclass
    expected = vectorizer.transform(X)
    clf = BertClassifier(tiny_model_dir, device="cpu", epochs=1).fit(X, y)
    assert clf.model_ is not shared.model
    assert changed(state(shared.model), state(clf.model_))  # the copy trained
    assert _loading.model_fingerprint(shared.model) == shared.fingerprint
    np.testing.assert_array_equal(clone(vectorizer).set_params(cache=False).fit().transform(X),
                                  expected)


@pytest.mark.parametrize("freeze, frozen_prefixes", [
    ("embeddings", ["embeddings."]),
    (0, ["embeddings."]),
    (1, ["embeddings.", "encoder.layer.0."]),
])
def test_partial_freeze(tiny_model_dir, multiclass, freeze, frozen_prefixes):
    shared = _loading.load(tiny_model_dir, None, "float32", torch.device("cpu")).model
    X, y = multiclass
    clf = BertClassifier(tiny_model_dir, freeze=freeze, learning_rate=1e-3, epochs=1,
                         random_state=0, device="cpu").fit(X, y)
    before = {name: t for name, t in state(shared).items() if "pooler" not in name}
    moved = changed(before, state(clf.model_))
    frozen = {name for name in before if name.startswith(tuple(frozen_prefixes))}
    assert not moved & frozen
    # Everything else the head's input depends on trains.
    assert moved == {name for name in before if name not in frozen
                     and not name.endswith("position_ids")}


# --- randomness ----------------------------------------------------------------------------------

def test_same_random_state_same_model(classifier, multiclass):
    X, y = multiclass
    again = clone(classifier).fit(X, y)
    np.testing.assert_array_equal(again.predict_proba(X), classifier.predict_proba(X))
    other = clone(classifier).set_params(random_state=1).fit(X, y)
    assert not np.array_equal(other.predict_proba(X), classifier.predict_proba(X))


def test_global_torch_random_state_is_left_alone(classifier, multiclass):
    X, y = multiclass
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    clone(classifier).fit(X, y)
    torch.testing.assert_close(torch.rand(3), expected)


def test_training_batches_cover_every_text_once_and_pad_less():
    lengths = np.random.default_rng(0).integers(3, 40, size=1000)
    indices = np.arange(100, 1000)
    batches = shuffled_batches(indices, lengths, 16, np.random.RandomState(0))
    assert len(batches) == -(-len(indices) // 16)
    assert max(map(len, batches)) == 16
    np.testing.assert_array_equal(np.sort(np.concatenate(batches)), indices)
    plain = shuffled_batches(indices, None, 16, np.random.RandomState(0))
    padded = [sum(lengths[b].max() * len(b) for b in found) for found in (batches, plain)]
    assert padded[0] < 0.8 * padded[1]


# --- early stopping ------------------------------------------------------------------------------

def test_early_stopping_restores_the_best_epoch(tiny_model_dir, multiclass):
    X, y = multiclass
    clf = BertClassifier(tiny_model_dir, early_stopping=True, validation_fraction=0.34,
                         n_iter_no_change=2, epochs=8, learning_rate=1e-3,
                         random_state=0).fit(X, y)
    assert len(clf.validation_scores_) == len(clf.loss_curve_) == clf.n_iter_ <= 8
    assert clf.best_validation_score_ == max(clf.validation_scores_)
    if clf.n_iter_ < 8:  # it stopped: the last n_iter_no_change epochs did not improve
        assert max(clf.validation_scores_[-2:]) <= max(clf.validation_scores_[:-2])
    # The held-out split, redrawn as fit draws it: the kept weights score the best score.
    seed = check_random_state(0).randint(np.iinfo(np.int32).max)
    _, valid = train_test_split(np.arange(len(X)), test_size=0.34, random_state=seed,
                                stratify=np.unique(y, return_inverse=True)[1])
    assert clf.score([X[i] for i in valid], [y[i] for i in valid]) == clf.best_validation_score_


def test_no_validation_scores_without_early_stopping(classifier):
    assert classifier.validation_scores_ is None and classifier.best_validation_score_ is None
    assert classifier.n_iter_ == len(classifier.loss_curve_) == 2


# --- persistence ---------------------------------------------------------------------------------

def test_round_trips_give_identical_output(classifier, regressor, multiclass, tmp_path):
    X, _ = multiclass
    for estimator, method in [(classifier, "predict_proba"), (regressor, "predict")]:
        expected = getattr(estimator, method)(X)
        np.testing.assert_array_equal(getattr(pickle.loads(pickle.dumps(estimator)), method)(X),
                                      expected)
        joblib.dump(estimator, tmp_path / "estimator.joblib")
        np.testing.assert_array_equal(
            getattr(joblib.load(tmp_path / "estimator.joblib"), method)(X), expected)


def test_joblib_round_trip_in_a_new_process(classifier, multiclass, tmp_path):
    X, _ = multiclass
    joblib.dump(classifier, tmp_path / "clf.joblib")
    script = (
        "import joblib, numpy as np, sys\n"
        f"clf = joblib.load({str(tmp_path / 'clf.joblib')!r})\n"
        f"np.save({str(tmp_path / 'proba.npy')!r}, clf.predict_proba({X!r}))\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True,
                   env={**os.environ, "HF_HUB_OFFLINE": "1"})
    # Another process may pick other kernels (oneDNN, thread count): equal to rounding, not bits.
    np.testing.assert_allclose(np.load(tmp_path / "proba.npy"), classifier.predict_proba(X),
                               rtol=0, atol=1e-6)


def test_pickle_carries_tuned_weights_and_loads_on_a_cpu_only_machine(classifier, multiclass):
    X, _ = multiclass
    files = classifier.__getstate__()["_vectorizer"].__getstate__()["_files"]
    assert all(isinstance(v, bytes) for v in files.values())
    assert "_engine" in classifier._vectorizer.__dict__  # the live object keeps its model
    payload = pickle.dumps(classifier)
    with mock.patch("torch.cuda.is_available", return_value=False):
        reloaded = pickle.loads(payload)
        assert str(next(reloaded.model_.parameters()).device) == "cpu"
        np.testing.assert_array_equal(reloaded.predict_proba(X), classifier.predict_proba(X))


# Set after a fit, none of these changes a prediction until the next fit.
SET_SINCE = {"layer": 0, "pooling": "max", "max_length": 4, "truncation": "tail",
             "dtype": "bfloat16"}


def test_predictions_and_pickles_read_the_fit_not_parameters_set_since(classifier, multiclass):
    X, _ = multiclass
    expected = classifier.predict_proba(X)
    clf = pickle.loads(pickle.dumps(classifier)).set_params(freeze="all", **SET_SINCE)
    np.testing.assert_array_equal(clf.predict_proba(X), expected)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(clf)).predict_proba(X), expected)


def test_a_light_pickle_of_a_fine_tuned_encoder_is_refused(tiny_model_dir, multiclass):
    X, y = multiclass
    message = (r"persist_weights=False pickles a reference to the base model, which a fit with "
               r"freeze=None changes by training it: fit with freeze='all' or 'lora', or use "
               r"persist_weights=True")
    with pytest.raises(ValueError, match=message):
        BertClassifier(tiny_model_dir, persist_weights=False, epochs=1).fit(X, y)
    tuned = BertClassifier(tiny_model_dir, epochs=1).fit(X, y)
    # Set after the fit: what trained decides, not the freeze set since.
    tuned.set_params(freeze="all", persist_weights=False)
    with pytest.raises(ValueError, match=message):
        pickle.dumps(tuned)


def test_unfitted_pickle_is_small(tiny_model_dir):
    assert len(pickle.dumps(BertClassifier(tiny_model_dir))) < 2000


# --- options ---------------------------------------------------------------------------------

@pytest.mark.parametrize("class_weight", ["balanced", {"who": 5.0, "where": 1.0, "when": 1.0}])
def test_class_weight_changes_the_loss(classifier, multiclass, class_weight):
    X, y = multiclass
    weighted = clone(classifier).set_params(class_weight=class_weight).fit(X[:-2], y[:-2])
    plain = clone(classifier).fit(X[:-2], y[:-2])
    assert weighted.loss_curve_ != plain.loss_curve_


@pytest.mark.parametrize("seed", range(2))
def test_balanced_class_weight_raises_the_minority_recall(tiny_model_dir, seed):
    from sklearn.metrics import recall_score

    words = ["cat", "dog", "bird", "mat", "red", "big", "the", "a"]
    rng = np.random.default_rng(0)
    X = [" ".join(rng.choice(words, 4)) for _ in range(40)]
    y = np.array(["common"] * 40)
    y[[3, 11, 19, 27, 35]] = "rare"  # 5 of 40
    recall = {}
    for class_weight in (None, "balanced"):
        clf = BertClassifier(tiny_model_dir, freeze="all", pooling="mean", epochs=20,
                             class_weight=class_weight, random_state=seed, device="cpu")
        recall[class_weight] = recall_score(y, clf.fit(X, y).predict(X), pos_label="rare")
    assert recall["balanced"] > recall[None] + 0.3, recall


@pytest.mark.filterwarnings("ignore:This CPU has no native")
def test_bfloat16_mixed_precision_runs(tiny_model_dir, multiclass):
    X, y = multiclass
    clf = BertClassifier(tiny_model_dir, dtype="bfloat16", epochs=1, random_state=0,
                         device="cpu").fit(X, y)
    assert next(clf.model_.parameters()).dtype == torch.float32  # master weights stay float32
    proba = clf.predict_proba(X)
    assert np.isfinite(proba).all() and proba.dtype == np.float64


def test_verbose_shows_the_loss_per_epoch(tiny_model_dir, multiclass, capsys):
    X, y = multiclass
    BertClassifier(tiny_model_dir, epochs=2, verbose=True, early_stopping=True,
                   validation_fraction=0.34).fit(X, y)
    err = capsys.readouterr().err
    assert "epoch 1/2" in err and "loss=" in err and "validation_score=" in err


# --- parameters ----------------------------------------------------------------------------------

@pytest.mark.parametrize("params, message", [
    ({"freeze": 3}, r"freeze=3 freezes the embeddings and the bottom 3 layers \(.* has 2\), and "
                    r"the estimator reads hidden state\(s\) \[2\] of .*: nothing that is read "
                    r"would train. Use an int from 0 to 1, 'embeddings', 'lora' or None, or "
                    r"'all' to train the head alone"),
    ({"freeze": 2}, r"freeze=2 freezes the embeddings and the bottom 2 layers"),
    ({"freeze": 1, "layer": 1}, r"reads hidden state\(s\) \[1\] .* Use 'embeddings', 'lora' "
                                r"or None, or 'all'"),
    ({"freeze": "embeddings", "layer": 0}, r"reads hidden state\(s\) \[0\] .* Use None, or "
                                           r"'all'"),
    ({"freeze": "some"}, r"The 'freeze' parameter of BertClassifier must be"),
    ({"truncation": "chunks"}, r"The 'truncation' parameter of BertClassifier must be a str "
                               r"among .*'head_tail'.*Got 'chunks'"),
    ({"layer": 3}, r"layer=3 is out of range for .*, which has 3 hidden states: use an index "
                   r"from -3 to 2"),
    ({"pooling": "pooler", "layer": -2}, r"pooling='pooler' reads the last layer only"),
    ({"pooling": "avg"}, r"The 'pooling' parameter of BertClassifier must be a str among"),
    ({"learning_rate": 0}, r"The 'learning_rate' parameter of BertClassifier must be a float "
                           r"in the range \(0.0, inf\)"),
    ({"warmup": 1.5}, r"The 'warmup' parameter"),
    ({"warmup_ratio": 1.5}, r"The 'warmup_ratio' parameter"),
    ({"epochs": 0}, r"The 'epochs' parameter"),
    ({"head_learning_rate": None}, r"The 'head_learning_rate' parameter"),
    ({"class_weight": "balance"}, r"The 'class_weight' parameter"),
    ({"max_length": 65}, r"max_length=65 exceeds the model's limit of 64 tokens"),
    ({"device": "cuda:0"}, r"device='cuda:0' but CUDA is not available"),
])
def test_invalid_parameters_fail_at_fit(tiny_model_dir, multiclass, params, message):
    X, y = multiclass
    clf = BertClassifier(tiny_model_dir, **params)  # __init__ validates nothing
    with pytest.raises(ValueError, match=message):
        clf.fit(X, y)


def test_invalid_data(tiny_model_dir, multiclass):
    X, y = multiclass
    with pytest.raises(ValueError, match="at least 2 classes .* only one class: 'who'"):
        BertClassifier(tiny_model_dir).fit(X[:3], y[:3])
    with pytest.raises(ValueError, match="got 18 texts and 17 labels"):
        BertClassifier(tiny_model_dir).fit(X, y[:-1])
    with pytest.raises(ValueError, match="Found 0 texts while a minimum of 1 is required by "
                                         "BertRegressor"):
        BertRegressor(tiny_model_dir).fit([], [])
    with pytest.raises(ValueError, match="Iterable over raw text documents expected"):
        BertRegressor(tiny_model_dir).fit("a text", [1.0])
    with pytest.raises(ValueError, match="Unknown label type"):
        BertClassifier(tiny_model_dir).fit(X, np.linspace(0, 1, len(X)))


@pytest.mark.parametrize("Estimator", [BertClassifier, BertRegressor])
def test_unfitted_estimator_raises(tiny_model_dir, Estimator):
    estimator = Estimator(tiny_model_dir)
    for method in ("predict", "transform"):
        with pytest.raises(NotFittedError):
            getattr(estimator, method)(["text"])


# --- scikit-learn conventions ------------------------------------------------------------------

@pytest.mark.parametrize("check", DATA_FREE_CHECKS)
@pytest.mark.parametrize("Estimator", [BertClassifier, BertRegressor])
def test_sklearn_data_free_check(tiny_model_dir, check, Estimator):
    getattr(estimator_checks, check)(Estimator.__name__, Estimator(tiny_model_dir))


def test_fit_returns_self_and_leaves_params_unchanged(tiny_model_dir, multiclass):
    X, y = multiclass
    clf = BertClassifier(tiny_model_dir, freeze=1, epochs=1, class_weight="balanced")
    before = clf.get_params()
    assert clf.fit(X, y) is clf
    assert clf.get_params() == before


def test_tags(classifier, regressor):
    for estimator, kind in [(classifier, "classifier"), (regressor, "regressor")]:
        tags = estimator.__sklearn_tags__()
        assert tags.estimator_type == kind and tags.target_tags.required
        assert tags.input_tags.string and not tags.input_tags.two_d_array


def test_grid_search_over_freeze(tiny_model_dir, binary):
    X, y = binary
    search = GridSearchCV(BertClassifier(tiny_model_dir, epochs=1, random_state=0),
                          {"freeze": [None, 1, "all"]}, cv=2).fit(X, y)
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    assert search.predict(X).shape == (len(X),)


# --- the real all-MiniLM-L6-v2 -------------------------------------------------------------------

@pytest.fixture(scope="module")
def trec_classifier(minilm_dir):
    X, y = load_trec("train", return_X_y=True)
    return BertClassifier(minilm_dir, random_state=0).fit(X[:1000], y[:1000])


@pytest.mark.slow
def test_trec_accuracy_after_1000_questions(trec_classifier):
    # 1,000 training questions, 3 epochs, default settings: at least 90% on the test set.
    X_test, y_test = load_trec("test", return_X_y=True)
    assert trec_classifier.score(X_test, y_test) >= 0.90
    proba = trec_classifier.predict_proba(X_test[:50])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(trec_classifier.classes_[proba.argmax(1)],
                                  trec_classifier.predict(X_test[:50]))


@pytest.mark.slow
def test_trec_joblib_round_trip_in_a_new_process(trec_classifier, tmp_path):
    X_test = load_trec("test").data[:50]
    joblib.dump(trec_classifier, tmp_path / "clf.joblib")
    script = (
        "import joblib, numpy as np\n"
        f"clf = joblib.load({str(tmp_path / 'clf.joblib')!r})\n"
        f"np.save({str(tmp_path / 'proba.npy')!r}, clf.predict_proba({X_test!r}))\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True,
                   env={**os.environ, "HF_HUB_OFFLINE": "1"})
    # Another process may pick other kernels (oneDNN, thread count): equal to rounding, not bits.
    np.testing.assert_allclose(np.load(tmp_path / "proba.npy"),
                               trec_classifier.predict_proba(X_test), rtol=0, atol=1e-6)


long_test = pytest.mark.skipif(os.environ.get("SKBERT_LONG_TESTS") != "1",
                               reason="takes minutes on a CPU: set SKBERT_LONG_TESTS=1")


@pytest.mark.slow
@long_test
def test_stsb_cross_encoder_regressor_learns(minilm_dir):
    from scipy.stats import spearmanr

    X, y = load_stsb("train", return_X_y=True)
    regressor = BertRegressor(minilm_dir, random_state=0).fit(X[:1500], y[:1500])
    X_test, y_test = load_stsb("test", return_X_y=True)
    assert spearmanr(regressor.predict(X_test), y_test).statistic > 0.6
