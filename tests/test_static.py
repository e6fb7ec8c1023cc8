"""StaticVectorizer: distillation against a hand-written reference, the learned table against
dense least squares, a torch-free transform, the model2vec folder, and bad input."""

import json
import pickle

import numpy as np
import pytest
from scipy import sparse
from sklearn.base import clone
from sklearn.decomposition import PCA
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline

from skbert import BertVectorizer, StaticVectorizer
from skbert._embeddings._static_vectorizer import (
    learned_table,
    sif_weights,
    token_bags,
    zipf_probabilities,
)
from skbert._encoder._features import Layout, parts_for_cache
from tests.conftest import run_without_torch


@pytest.fixture(scope="module")
def distilled(tiny_model_dir):
    return StaticVectorizer(BertVectorizer(tiny_model_dir, pooling="mean"), n_components=8).fit()


def reference_table(model_dir, n_components, sif_coefficient=1e-4, layer=-1):
    """Each counted token alone ([CLS] token [SEP]) through the model, the mean of the three
    states of ``layer``, PCA, Zipf SIF weights: written out with transformers and numpy."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    ids = [index for token, index in sorted(tokenizer.get_vocab().items(), key=lambda x: x[1])
           if index not in tokenizer.all_special_ids]
    inputs = torch.tensor([[tokenizer.cls_token_id, index, tokenizer.sep_token_id]
                           for index in ids])
    with torch.no_grad():
        states = model(input_ids=inputs, output_hidden_states=True).hidden_states[layer]
    vectors = states.mean(dim=1).double().numpy()
    reduced = PCA(n_components, svd_solver="full").fit_transform(vectors)
    p = 1.0 / np.arange(2, len(ids) + 2)
    table = np.zeros((max(ids) + 1, n_components))
    table[ids] = reduced * (sif_coefficient / (sif_coefficient + p / p.sum()))[:, None]
    return table, tokenizer


def test_distilled_table_equals_a_hand_written_reference(tiny_model_dir, distilled):
    expected, tokenizer = reference_table(tiny_model_dir, 8)
    np.testing.assert_allclose(distilled.embeddings_, expected, atol=2e-5)
    assert not distilled.counted_[tokenizer.all_special_ids].any()
    assert distilled.embeddings_.dtype == np.float32
    assert distilled.get_feature_names_out().tolist() == [f"staticvectorizer{i}"
                                                          for i in range(8)]


def test_layer_and_no_pca_reach_the_table(tiny_model_dir):
    static = StaticVectorizer(BertVectorizer(tiny_model_dir, pooling="mean", layer=1),
                              n_components=None, sif_coefficient=None).fit()
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(tiny_model_dir).eval()
    token = 30  # a letter of the tiny vocabulary
    with torch.no_grad():
        states = model(input_ids=torch.tensor([[2, token, 3]]), output_hidden_states=True)
    expected = states.hidden_states[1][0].mean(dim=0).numpy()
    np.testing.assert_allclose(static.embeddings_[token], expected, atol=1e-5)
    assert static.embeddings_.shape == (161, 32)


def test_transform_is_the_mean_of_the_tokens_rows(tiny_model_dir, distilled, texts):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    texts = texts + ["€€", "the [SEP] cat"]
    expected = []
    for text in texts:
        ids = [i for i in tokenizer(text, add_special_tokens=False)["input_ids"]
               if i not in tokenizer.all_special_ids]
        row = distilled.embeddings_[ids].mean(axis=0) if ids else np.zeros(8)
        expected.append(row / (np.linalg.norm(row) or 1))
    got = distilled.transform(texts)
    assert got.dtype == np.float32 and got.shape == (len(texts), 8)
    np.testing.assert_allclose(got, np.array(expected), atol=1e-6)
    assert not got[texts.index("")].any() and not got[texts.index("€€")].any()  # zero rows
    assert distilled.transform([]).shape == (0, 8)


def test_norm_and_float16(tiny_model_dir, distilled, texts):
    raw = clone(distilled).set_params(norm=None).fit()
    half = clone(distilled).set_params(dtype="float16").fit()
    np.testing.assert_allclose(raw.embeddings_, distilled.embeddings_)
    unit = raw.transform(texts)
    norms = np.linalg.norm(unit, axis=1, keepdims=True)
    np.testing.assert_allclose(unit / np.where(norms, norms, 1), distilled.transform(texts),
                               atol=1e-6)
    assert half.embeddings_.dtype == np.float16
    assert half.transform(texts).dtype == np.float32
    np.testing.assert_allclose(half.transform(texts), distilled.transform(texts), atol=2e-3)


def test_zipf_and_sif():
    p = zipf_probabilities(4)
    np.testing.assert_allclose(p, np.array([1 / 2, 1 / 3, 1 / 4, 1 / 5]) / (77 / 60))
    np.testing.assert_allclose(sif_weights(p, 0.1), 0.1 / (0.1 + p))


def test_token_bags_mean_the_counted_tokens():
    keep = np.array([False, True, True, True])
    bags = token_bags([np.array([1, 1, 2]), np.array([0]), np.array([], dtype=int),
                       np.array([3, 0])], keep)
    np.testing.assert_allclose(bags.toarray(), [[0, 2 / 3, 1 / 3, 0], [0, 0, 0, 0],
                                                [0, 0, 0, 0], [0, 0, 0, 1]])


def test_learned_table_equals_dense_least_squares():
    rng = np.random.RandomState(0)
    n_texts, n_vocabulary, width, alpha = 40, 12, 3, 0.05
    dense = rng.binomial(1, 0.3, size=(n_texts, n_vocabulary)) * rng.rand(n_texts, n_vocabulary)
    dense[:, 11] = 0  # a token in no text: its row stays the scaled prior
    bags = sparse.csr_matrix(dense)
    prior, targets = rng.randn(n_vocabulary, width), rng.randn(n_texts, width)
    table = learned_table(bags, prior, targets, alpha)
    fitted = dense @ prior
    scale = (fitted * targets).sum() / (fitted * fitted).sum()
    used = dense.any(axis=0)
    a = dense[:, used]
    delta = np.linalg.solve(a.T @ a + alpha * n_texts * np.eye(used.sum()),
                            a.T @ (targets - scale * fitted))
    expected = scale * prior
    expected[used] += delta
    np.testing.assert_allclose(table, expected, atol=1e-5)
    # The objective it minimizes: lower than at the scaled prior, and at a neighbour.
    def objective(t):
        return ((dense @ t - targets) ** 2).sum() / n_texts + alpha * ((t - scale * prior)
                                                                       ** 2).sum()
    assert objective(table) < objective(scale * prior)
    assert objective(table) < objective(table + 1e-3 * rng.randn(*table.shape))


def test_fit_on_texts_learns_toward_the_teachers_vectors(tiny_model_dir, texts):
    teacher = BertVectorizer(tiny_model_dir, pooling="mean", norm="l2")
    corpus = [text for text in texts if text] * 4
    targets = teacher.fit(corpus).transform(corpus)
    distilled = StaticVectorizer(teacher, n_components=None).fit()
    learned = StaticVectorizer(teacher, n_components=None, alpha=1e-4).fit(corpus)

    def agreement(static):  # cosine of each text's static vector to the teacher's, centered
        centered = targets - targets.mean(axis=0)
        got = static.set_params(norm=None).transform(corpus)
        got = got - got.mean(axis=0)
        return np.mean(np.sum(got * centered, axis=1) / np.linalg.norm(got, axis=1)
                       / np.linalg.norm(centered, axis=1))

    assert agreement(learned) > agreement(distilled) + 0.1
    assert agreement(learned) > 0.95
    # A strong penalty keeps the distilled table, to its fitted scale.
    stiff = StaticVectorizer(teacher, n_components=None, alpha=1e6).fit(corpus)
    cosines = np.sum(stiff.embeddings_ * distilled.embeddings_, axis=1) / np.maximum(
        np.linalg.norm(stiff.embeddings_, axis=1) * np.linalg.norm(distilled.embeddings_, axis=1),
        1e-12)
    assert np.all(cosines[distilled.counted_] > 0.999)


def test_a_grid_over_the_teachers_setting_forwards_the_vocabulary_once(counted):
    from skbert import clear_cache

    teacher, counter = counted  # a fitted BertVectorizer with a forward counter, used as is
    clear_cache()  # other tests distilled the same weights
    tables = []
    for layer in (-1, 1):
        for pooling in ("mean", "max", "cls"):
            teacher.set_params(layer=layer, pooling=pooling)
            tables.append(StaticVectorizer(FrozenTeacher(teacher), n_components=4).fit())
    assert counter["rows"] == int(tables[0].counted_.sum())  # six settings, one pass
    assert not np.allclose(tables[0].embeddings_, tables[1].embeddings_)


def test_a_vocabulary_over_the_cache_budget_leaves_the_cached_texts(counted, texts):
    import warnings

    from skbert import clear_cache, set_cache_limit

    teacher, counter = counted
    clear_cache()
    record = Layout.of(parts_for_cache(teacher.n_layers_, teacher._has_pooler),
                       teacher._config.hidden_size)
    previous = set_cache_limit(record.width * 4 * 2 * len(texts))  # the texts fit, not the tokens
    try:
        teacher.transform(texts)
        rows = counter["rows"]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "cache is full" warning
            first = StaticVectorizer(FrozenTeacher(teacher), n_components=4).fit()
        assert first.counted_.sum() > 2 * len(texts)  # over the budget
        assert counter["rows"] == rows + int(first.counted_.sum())
        rows = counter["rows"]
        teacher.transform(texts)  # still cached
        assert counter["rows"] == rows
        second = StaticVectorizer(FrozenTeacher(teacher), n_components=4).fit()
        assert counter["rows"] == rows + int(first.counted_.sum())  # computed again, not stored
        np.testing.assert_allclose(second.embeddings_, first.embeddings_, atol=1e-6)
    finally:
        set_cache_limit(previous)


def test_a_budget_that_holds_one_layer_keeps_the_layer_read(counted):
    from skbert import clear_cache, set_cache_limit

    teacher, counter = counted
    clear_cache()
    # Half of it holds the tokens' states of one layer (~120 KB), not of every layer and the
    # pooler (~260 KB); their text records (~500 KB) would not fit at all.
    previous = set_cache_limit(300_000)
    try:
        tables = []
        for pooling in ("mean", "max", "cls"):
            teacher.set_params(pooling=pooling)
            tables.append(StaticVectorizer(FrozenTeacher(teacher), n_components=4).fit())
        n_tokens = int(tables[0].counted_.sum())
        assert counter["rows"] == n_tokens
        teacher.set_params(layer=1)
        StaticVectorizer(FrozenTeacher(teacher), n_components=4).fit()
        assert counter["rows"] == 2 * n_tokens  # another layer: forwarded again
    finally:
        set_cache_limit(previous)
        clear_cache()


def test_a_cache_directory_keeps_every_layer(counted, tmp_path):
    from skbert import clear_cache

    teacher, counter = counted
    teacher.set_params(cache=str(tmp_path / "cache"))
    first = StaticVectorizer(FrozenTeacher(teacher), n_components=4).fit()
    n_tokens = int(first.counted_.sum())
    assert len(list((tmp_path / "cache").rglob("*.f32"))) == n_tokens  # one file a token
    clear_cache()  # the directory alone serves them now
    teacher.set_params(layer=[1, -1], pooling="max", layer_combine="mean")
    again = StaticVectorizer(FrozenTeacher(teacher), n_components=4).fit()
    assert counter["rows"] == n_tokens
    expected = StaticVectorizer(FrozenTeacher(teacher.set_params(cache=False)),
                                n_components=4).fit()
    assert counter["rows"] == 2 * n_tokens
    np.testing.assert_allclose(again.embeddings_, expected.embeddings_, atol=1e-6)


def FrozenTeacher(vectorizer):
    from sklearn.frozen import FrozenEstimator

    return FrozenEstimator(vectorizer)


def test_grid_search_and_pipeline(tiny_model_dir, texts):
    from sklearn.linear_model import LogisticRegression

    X = [text for text in texts if text] * 3
    y = np.arange(len(X)) % 2
    pipe = Pipeline([("static", StaticVectorizer(BertVectorizer(tiny_model_dir,
                                                                pooling="mean"),
                                                 n_components=4)),
                     ("clf", LogisticRegression())])
    search = GridSearchCV(pipe, {"static__vectorizer__layer": [-1, 1],
                                 "static__alpha": [1e-3, 1e-1]}, cv=2).fit(X, y)
    assert search.predict(X).shape == (len(X),)


def test_set_output_pandas(distilled, texts):
    pd = pytest.importorskip("pandas")
    series = pd.Series(texts, index=range(100, 100 + len(texts)))
    frame = pickle.loads(pickle.dumps(distilled)).set_output(transform="pandas")
    out = frame.transform(series)
    assert list(out.columns) == list(distilled.get_feature_names_out())
    assert list(out.index) == list(series.index)
    np.testing.assert_array_equal(out.to_numpy(), distilled.transform(texts))


def test_pickle_holds_no_teacher_weights_and_transforms_without_torch(distilled, texts,
                                                                     tmp_path):
    blob = pickle.dumps(distilled)
    loaded = pickle.loads(blob)
    np.testing.assert_array_equal(loaded.transform(texts), distilled.transform(texts))
    assert "_engine" not in loaded.vectorizer.__dict__  # the teacher as parameters only
    path = tmp_path / "static.pkl"
    path.write_bytes(blob)
    expected = tmp_path / "expected.npy"
    np.save(expected, distilled.transform(texts))
    assert run_without_torch(f"""
import pickle
import numpy as np
static = pickle.loads(open({str(path)!r}, "rb").read())
np.testing.assert_array_equal(static.transform({json.dumps(texts)}), np.load({str(expected)!r}))
print("ok")
""").strip() == "ok"


@pytest.fixture(scope="module")
def gapless_model_dir(tmp_path_factory):
    """The tiny model's kind with ids 0..n-1 (the shared one's vocabulary has a duplicate,
    hence a gap, which a model2vec folder cannot hold)."""
    import torch
    from conftest import LETTERS, SPECIAL, SUBWORDS, WORDS
    from transformers import BertConfig, BertModel, BertTokenizerFast

    directory = tmp_path_factory.mktemp("gapless-bert")
    vocab = list(dict.fromkeys(SPECIAL + LETTERS + ["##" + c for c in LETTERS] + WORDS
                               + SUBWORDS))
    BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)},
                      model_max_length=64).save_pretrained(directory)
    torch.manual_seed(1)
    BertModel(BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=37,
                         max_position_embeddings=64)).eval().save_pretrained(directory)
    return str(directory)


def test_model2vec_folder_round_trip(gapless_model_dir, texts, tmp_path):
    model2vec = pytest.importorskip("model2vec")
    static = StaticVectorizer(BertVectorizer(gapless_model_dir, pooling="mean"),
                              n_components=8).fit([text for text in texts if text])
    folder = static.save_model2vec(tmp_path / "m2v")
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "model2vec" and config["hidden_dim"] == 8
    # Beyond 512 tokens, read whole on both sides (truncation would change the direction).
    long_text = "the cat sat on the mat " * 100 + "awful film " * 200
    probe = texts + [long_text]
    theirs = model2vec.StaticModel.from_pretrained(str(folder)).encode(probe)
    np.testing.assert_allclose(theirs, static.transform(probe), atol=1e-5)

    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(folder), device="cpu").encode(texts)
    assert (folder / "modules.json").exists()
    nonzero = np.linalg.norm(st, axis=1) > 0
    np.testing.assert_allclose(st[nonzero], static.transform(texts)[nonzero], atol=1e-6)


def three_readers(static, folder, texts):
    """The vectors of ``texts`` from transform, model2vec and sentence-transformers."""
    model2vec = pytest.importorskip("model2vec")
    st = pytest.importorskip("sentence_transformers")
    return (static.transform(texts),
            np.asarray(model2vec.StaticModel.from_pretrained(str(folder)).encode(texts),
                       dtype=np.float32),
            st.SentenceTransformer(str(folder), device="cpu").encode(texts))


def test_a_float16_folder_gives_zero_rows_to_texts_of_no_token(gapless_model_dir, tmp_path):
    static = StaticVectorizer(BertVectorizer(gapless_model_dir, pooling="mean"),
                              n_components=8, dtype="float16").fit()
    probe = ["", "€€", "the cat sat on the mat", "a big red dog"]
    ours, model2vec, st = three_readers(static, static.save_model2vec(tmp_path / "half"), probe)
    for theirs in (model2vec, st):  # sentence-transformers' Normalize in float16 gave NaN
        assert not np.isnan(theirs).any()
        assert not theirs[:2].any()
        np.testing.assert_allclose(theirs, ours, atol=2e-3)
    assert not ours[:2].any()


@pytest.mark.parametrize("norm", [None, "l2"])
def test_literal_special_tokens_in_a_model2vec_folder(gapless_model_dir, tmp_path, norm):
    """The one difference of the folder's readers, documented in save_model2vec: literal
    special tokens (and, in sentence-transformers, [UNK]) count in their mean as zero rows,
    where transform leaves them out. Without norm, their vectors are shorter by that share;
    with norm="l2", the same."""
    static = StaticVectorizer(BertVectorizer(gapless_model_dir, pooling="mean"),
                              n_components=8, norm=norm).fit()
    probe = ["the cat [SEP] sat", "[MASK] [MASK] dog", "the cat €", "the cat sat"]
    ours, model2vec, st = three_readers(static, static.save_model2vec(tmp_path / "m2v"), probe)
    shares = {None: ([3 / 4, 1 / 3, 1, 1], [3 / 4, 1 / 3, 2 / 3, 1]),
              "l2": ([1, 1, 1, 1], [1, 1, 1, 1])}[norm]
    np.testing.assert_allclose(model2vec, ours * np.array(shares[0])[:, None], atol=1e-6)
    np.testing.assert_allclose(st, ours * np.array(shares[1])[:, None], atol=1e-6)


def test_save_model2vec_writes_a_new_or_empty_folder_only(distilled, gapless_model_dir,
                                                          tmp_path):
    import os

    static = StaticVectorizer(BertVectorizer(gapless_model_dir, pooling="mean"),
                              n_components=8).fit()
    teacher = tmp_path / "teacher"
    teacher.mkdir()
    (teacher / "model.safetensors").write_bytes(b"the teacher's weights")
    with pytest.raises(FileExistsError, match="teacher' is not empty; save_model2vec writes a "
                                              "new or empty folder and never overwrites"):
        static.save_model2vec(teacher)
    assert (teacher / "model.safetensors").read_bytes() == b"the teacher's weights"
    assert os.listdir(teacher) == ["model.safetensors"]
    (tmp_path / "file").write_text("mine")
    with pytest.raises(FileExistsError, match="file' is a file; save_model2vec writes"):
        static.save_model2vec(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    assert static.save_model2vec(str(tmp_path / "empty")) == tmp_path / "empty"
    assert static.save_model2vec(tmp_path / "new" / "m2v") == tmp_path / "new" / "m2v"
    assert sorted(os.listdir(tmp_path / "empty")) == sorted(os.listdir(tmp_path / "new" / "m2v"))
    assert sorted(os.listdir(tmp_path)) == ["empty", "file", "new", "teacher"]  # no temporary


@pytest.fixture(scope="module")
def tuned(tiny_model_dir):
    from skbert import FineTunedVectorizer

    pairs = [("the cat sat", "a cat sat"), ("a big dog", "the big dog"),
             ("what river", "which river"), ("good movie", "great film")]
    return FineTunedVectorizer(BertVectorizer(tiny_model_dir, pooling="mean"), epochs=1,
                               batch_size=2, random_state=0).fit(pairs)


def assert_same_params(left, right):
    """get_params(deep=True) equal: estimators by type, the rest (their own parameters
    included) by value."""
    left, right = left.get_params(deep=True), right.get_params(deep=True)
    assert left.keys() == right.keys()
    for name, value in left.items():
        if hasattr(value, "get_params"):
            assert type(value) is type(right[name]), name
        else:
            assert value == right[name], name


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
@pytest.mark.parametrize("kind", ["fine-tuned", "frozen"])
def test_a_copy_keeps_a_teacher_used_fitted(tiny_model_dir, tuned, kind, how):
    import copy

    teacher = tuned if kind == "fine-tuned" else FrozenTeacher(
        BertVectorizer(tiny_model_dir, pooling="max").fit())
    unfitted = StaticVectorizer(teacher, n_components=4)
    fitted = StaticVectorizer(teacher, n_components=4).fit()
    for original in (unfitted, fitted):
        duplicate = (copy.deepcopy(original) if how == "deepcopy"
                     else pickle.loads(pickle.dumps(original)))
        assert_same_params(duplicate, original)
        np.testing.assert_allclose(duplicate.fit().embeddings_, fitted.embeddings_, atol=1e-6)


def test_a_grid_search_in_processes_over_a_fine_tuned_teacher(tuned, texts):
    from sklearn.linear_model import LogisticRegression

    X = [text for text in texts if text] * 3
    y = np.arange(len(X)) % 2
    pipe = Pipeline([("static", StaticVectorizer(FrozenTeacher(tuned))),
                     ("clf", LogisticRegression())])
    search = GridSearchCV(pipe, {"static__n_components": [2, 4]}, cv=2, n_jobs=2,
                          error_score="raise").fit(X, y)
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    assert search.best_estimator_.named_steps["static"].vectorizer.estimator is tuned


def test_a_fitted_fine_tuned_vectorizer_teaches(tiny_model_dir, tuned):
    static = StaticVectorizer(tuned, n_components=4).fit()
    base = StaticVectorizer(BertVectorizer(tiny_model_dir, pooling="mean"),
                            n_components=4).fit()
    assert not np.allclose(static.embeddings_, base.embeddings_)
    expected = StaticVectorizer(FrozenTeacher(tuned.vectorizer_), n_components=4).fit()
    np.testing.assert_allclose(static.embeddings_, expected.embeddings_)
    # An unfitted one has nothing to teach.
    with pytest.raises(Exception, match="fit it first"):
        StaticVectorizer(clone(tuned), n_components=4).fit()


@pytest.mark.parametrize("params, X, error, match", [
    ({"n_components": 40}, None, ValueError, r"n_components=40 exceeds .* at most 32"),
    ({"alpha": 0}, None, ValueError, "alpha"),
    ({"sif_coefficient": 1.5}, None, ValueError, "sif_coefficient"),
    ({"norm": "l3"}, None, ValueError, "norm"),
    ({}, [("a", "b")], ValueError, "single texts"),
    ({}, "the cat", ValueError, "string object received"),
])
def test_bad_input(tiny_model_dir, params, X, error, match):
    static = StaticVectorizer(BertVectorizer(tiny_model_dir, pooling="mean"), **params)
    with pytest.raises(error, match=match):
        static.fit(X)


def test_bad_teacher_and_unfitted_use(tiny_model_dir, distilled, tmp_path):
    from sklearn.feature_extraction.text import TfidfVectorizer

    with pytest.raises(TypeError, match="must be a BertVectorizer.*Got TfidfVectorizer"):
        StaticVectorizer(TfidfVectorizer()).fit()
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        StaticVectorizer().transform(["a"])
    with pytest.raises(ValueError, match="single texts"):
        distilled.transform([("a", "b")])
    with pytest.raises(ValueError, match="norm='l1' has no equivalent"):
        clone(distilled).set_params(norm="l1").fit().save_model2vec(tmp_path / "x")
    with pytest.raises(ValueError, match="run from 0 to 160 with 159 tokens"):
        distilled.save_model2vec(tmp_path / "y")  # the shared tiny vocabulary has a gap


def test_a_failed_fit_keeps_the_last_fit(distilled):
    before = distilled.embeddings_
    with pytest.raises(ValueError, match="exceeds"):
        distilled.set_params(n_components=1000).fit()
    distilled.set_params(n_components=8)
    assert distilled.embeddings_ is before


@pytest.mark.parametrize("prompt, pool_prompt", [("", True), ("query: ", True),
                                                 ("query: ", False)])
def test_token_windows_are_the_windows_of_a_one_token_text(tiny_model_dir, prompt, pool_prompt):
    from transformers import AutoTokenizer

    from skbert._encoder._encoding import token_windows, tokenize

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    words = ["cat", "river", "good"]  # one token each
    ids = [tokenizer.convert_tokens_to_ids(word) for word in words]
    expected = tokenize(tokenizer, words, 64, prompt=prompt, pool_prompt=pool_prompt)
    got = token_windows(tokenizer, ids, prompt, pool_prompt)
    for left, right in zip(got._rows()[:2], expected._rows()[:2]):
        assert [row.tolist() for row in left] == [row.tolist() for row in right]
    np.testing.assert_array_equal(got.owner, expected.owner)


def test_fit_refuses_no_texts_before_distilling(counted):
    teacher, counter = counted
    for X in ([], iter([])):
        with pytest.raises(ValueError, match="empty X: give the texts to learn the table from, "
                                             r"or X=None \(fit\(\)\)"):
            StaticVectorizer(FrozenTeacher(teacher), n_components=4).fit(X)
    with pytest.raises(ValueError, match="None of the 2 texts given to fit has a token that "
                                         "counts"):
        StaticVectorizer(FrozenTeacher(teacher), n_components=4).fit(["", "[SEP] €€"])
    assert counter["rows"] == 0  # before the vocabulary's forward passes


@pytest.mark.slow
def test_a_grid_over_minilm_forwards_its_vocabulary_once_at_the_default_budget(minilm_dir):
    """Each token's states, not a text's record, are kept: all-MiniLM-L6-v2's fit in half the
    default budget, so that every grid point after the first is served from them."""
    import time

    from conftest import count_forward_rows

    from skbert import clear_cache
    from skbert._encoder import _loading, _stores

    if _stores.MEMORY.max_bytes != _stores.DEFAULT_BYTES:
        pytest.skip("SKBERT_CACHE_BYTES sets another budget")
    teacher = BertVectorizer(minilm_dir).fit()
    teacher.model_ = _loading.from_pretrained(minilm_dir, None, "float32")[0]  # its own hook
    counter = count_forward_rows(teacher)
    texts = [f"the {adjective} {word} sat by the river" for word in ("cat", "dog", "man")
             for adjective in ("big", "small", "old", "young")]
    grid = [({}, {}), ({"layer": -2, "pooling": "max"}, {"n_components": 32}),
            ({"layer": [-1, -2], "pooling": "cls"}, {"sif_coefficient": 1e-3}),
            ({}, {"alpha": 1e-5}), ({}, {"alpha": 1e-3})]
    clear_cache()
    try:
        seconds, tables = [], []
        for setting, params in grid:
            teacher.set_params(**{"layer": -1, "pooling": "mean", **setting})
            start = time.perf_counter()
            tables.append(StaticVectorizer(FrozenTeacher(teacher), **{"n_components": 64, **params})
                          .fit(texts if "alpha" in params else None))
            seconds.append(time.perf_counter() - start)
        assert _stores.MEMORY.n_bytes <= _stores.DEFAULT_BYTES / 2
    finally:
        clear_cache()
    assert counter["rows"] == tables[0].counted_.sum() + len(texts)  # once each
    assert tables[1].embeddings_.shape[1] == 32
    assert not np.allclose(tables[0].embeddings_, tables[3].embeddings_)
    print(f"\nall-MiniLM-L6-v2 distilled: first fit {seconds[0]:.1f} s, then "
          + ", ".join(f"{second:.1f}" for second in seconds[1:]) + " s")
