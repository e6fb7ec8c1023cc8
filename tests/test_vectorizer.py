"""BertVectorizer on a tiny random BERT: exactness, sklearn behaviour, input, persistence."""

import pickle
import shutil
from unittest import mock

import joblib
import numpy as np
import pandas as pd
import pytest
from sklearn import clone
from sklearn.compose import ColumnTransformer
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import normalize
from sklearn.utils import estimator_checks

from skbert import BertVectorizer
from tests.conftest import TRANSFORMER_CHECKS
from tests.reference import reference_features

POOLINGS = ["mean", "cls", "max", "mean_sqrt_len", "mean_max", "last"]
LAYERS = [-1, -2, 0, 1, [-1, -2], [0, -1], "all"]


@pytest.fixture(scope="module")
def fitted(tiny_model_dir):
    return BertVectorizer(tiny_model_dir, device="cpu").fit()


# --- exactness -------------------------------------------------------------------------------

@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("layer_combine", ["mean", "sum", "concat"])
def test_matches_direct_transformers_computation(tiny_model_dir, texts, pooling, layer,
                                                 layer_combine):
    vectorizer = BertVectorizer(tiny_model_dir, pooling=pooling, layer=layer,
                                layer_combine=layer_combine, batch_size=3)
    got = vectorizer.fit_transform(texts)
    expected = reference_features(tiny_model_dir, texts, pooling=pooling, layer=layer,
                                  layer_combine=layer_combine)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("pooling", ["mean", "max", "mean_sqrt_len", "mean_max"])
def test_without_special_tokens_matches_reference(tiny_model_dir, texts, pooling):
    got = BertVectorizer(tiny_model_dir, pooling=pooling, include_special_tokens=False,
                         layer=[-1, -2]).fit_transform(texts)
    expected = reference_features(tiny_model_dir, texts, pooling=pooling, layer=[-1, -2],
                                  include_special_tokens=False)
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)
    with_special = BertVectorizer(tiny_model_dir, pooling=pooling, layer=[-1, -2])
    with_special = with_special.fit_transform(texts)
    assert not np.allclose(got, with_special)


def test_pooler_matches_reference(tiny_model_dir, texts):
    got = BertVectorizer(tiny_model_dir, pooling="pooler").fit_transform(texts)
    np.testing.assert_allclose(got, reference_features(tiny_model_dir, texts, pooling="pooler"),
                               atol=1e-5)


@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
def test_norm_is_sklearn_normalize(fitted, texts, norm):
    raw = fitted.transform(texts)
    got = clone(fitted).set_params(norm=norm).fit().transform(texts)
    np.testing.assert_allclose(got, normalize(raw, norm=norm), rtol=1e-6, atol=1e-7)


def test_max_length_truncates_to_the_first_tokens(tiny_model_dir, texts):
    got = BertVectorizer(tiny_model_dir, max_length=5).fit_transform(texts)
    expected = reference_features(tiny_model_dir, texts, max_length=5)
    np.testing.assert_allclose(got, expected, atol=1e-4)


# --- batching ----------------------------------------------------------------------------------

def test_batch_size_invariance(fitted, texts):
    reference = clone(fitted).set_params(batch_size=1).fit().transform(texts)
    for batch_size in (2, 3, 100):
        got = clone(fitted).set_params(batch_size=batch_size).fit().transform(texts)
        np.testing.assert_allclose(got, reference, atol=1e-5)


def test_order_preserved(fitted, texts):
    order = np.random.default_rng(0).permutation(len(texts))
    forward = fitted.transform(texts)
    shuffled = fitted.transform([texts[i] for i in order])
    np.testing.assert_allclose(shuffled, forward[order], atol=1e-5)


def test_empty_input_gives_zero_rows(fitted):
    for pooling, width in [("mean", 32), ("mean_max", 64)]:
        out = clone(fitted).set_params(pooling=pooling).fit().transform([])
        assert out.shape == (0, width) and out.dtype == np.float32


def test_output_width_for_concat_and_mean_max(tiny_model_dir, texts):
    vectorizer = BertVectorizer(tiny_model_dir, layer=[0, 1, 2], layer_combine="concat",
                                pooling="mean_max").fit()
    assert vectorizer.transform(texts).shape == (len(texts), 2 * 3 * 32)
    assert len(vectorizer.get_feature_names_out()) == 2 * 3 * 32


# --- input -------------------------------------------------------------------------------------

def test_accepts_list_tuple_array_series(fitted, texts):
    expected = fitted.transform(texts)
    for container in (tuple(texts), np.array(texts, dtype=object), np.array(texts),
                      pd.Series(texts), pd.DataFrame({"text": texts})):
        np.testing.assert_allclose(fitted.transform(container), expected, atol=1e-6)


def test_bare_string_is_rejected(fitted):
    with pytest.raises(ValueError, match="Iterable over raw text documents expected, string "
                                         "object received."):
        fitted.transform("just one text")


@pytest.mark.parametrize("bad, kind", [(None, "NoneType"), (float("nan"), "NaN"), (3, "int"),
                                       (b"bytes", "bytes")])
def test_non_text_item_is_named_with_its_index(fitted, bad, kind):
    with pytest.raises(ValueError, match=rf"Text at index 2 is {kind} .*every text must be a str"):
        fitted.transform(["fine", "also fine", bad])


def test_transform_before_fit_raises(tiny_model_dir):
    with pytest.raises(NotFittedError):
        BertVectorizer(tiny_model_dir).transform(["text"])


# --- parameters --------------------------------------------------------------------------------

@pytest.mark.parametrize("params, message", [
    ({"pooling": "avg"}, r"The 'pooling' parameter of BertVectorizer must be a str among"),
    ({"norm": "l3"}, r"The 'norm' parameter of BertVectorizer must be"),
    ({"batch_size": 0}, r"The 'batch_size' parameter of BertVectorizer must be an int in the "
                        r"range \[1, inf\)"),
    ({"layer_combine": "max"}, r"The 'layer_combine' parameter"),
    ({"dtype": "float64"}, r"The 'dtype' parameter"),
    ({"layer": 3}, r"layer=3 is out of range for .*, which has 3 hidden states: use indices from "
                   r"-3 to 2"),
    ({"layer": [-1, 7]}, r"layer=\[-1, 7\] is out of range"),
    ({"layer": []}, r"layer=\[\] is out of range"),
    ({"layer": [1.5]}, r"layer=\[1.5\] is out of range"),
    ({"pooling": "pooler", "layer": -2}, r"pooling='pooler' reads the last layer only, got "
                                         r"layer=-2; use layer=-1"),
    ({"max_length": 65}, r"max_length=65 exceeds the model's limit of 64 tokens"),
    ({"device": "cuda:0"}, r"device='cuda:0' but CUDA is not available"),
])
def test_invalid_parameters_fail_at_fit(tiny_model_dir, params, message):
    vectorizer = BertVectorizer(tiny_model_dir, **params)  # __init__ validates nothing
    with pytest.raises(ValueError, match=message):
        vectorizer.fit()


def test_missing_model_directory_is_named(tmp_path):
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(FileNotFoundError, match=f"Model directory '{missing}' does not exist"):
        BertVectorizer(missing).fit()


# --- scikit-learn conventions ------------------------------------------------------------------

@pytest.mark.parametrize("check", TRANSFORMER_CHECKS)
def test_sklearn_data_free_check(tiny_model_dir, check):
    getattr(estimator_checks, check)("BertVectorizer", BertVectorizer(tiny_model_dir))


def test_fit_returns_self_and_leaves_params_unchanged(tiny_model_dir, texts):
    vectorizer = BertVectorizer(tiny_model_dir, layer=[-1, -2])
    before = vectorizer.get_params()
    assert vectorizer.fit(texts) is vectorizer
    assert vectorizer.get_params() == before


def test_clones_share_one_loaded_model(fitted):
    assert clone(fitted).fit().model_ is fitted.model_
    assert clone(fitted).set_params(pooling="cls").fit().model_ is fitted.model_


def test_round_trips_give_identical_output(fitted, texts, tmp_path):
    expected = fitted.transform(texts)
    np.testing.assert_array_equal(clone(fitted).fit().transform(texts), expected)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(fitted)).transform(texts), expected)
    joblib.dump(fitted, tmp_path / "vectorizer.joblib")
    np.testing.assert_array_equal(joblib.load(tmp_path / "vectorizer.joblib").transform(texts),
                                  expected)


def test_pickle_is_self_contained(tiny_model_dir, texts, tmp_path):
    private_copy = tmp_path / "model"
    shutil.copytree(tiny_model_dir, private_copy)
    vectorizer = BertVectorizer(str(private_copy), pooling="max", layer=[0, -1]).fit()
    expected = vectorizer.transform(texts)
    joblib.dump(Pipeline([("bert", vectorizer)]), tmp_path / "pipe.joblib")
    shutil.rmtree(private_copy)
    reloaded = joblib.load(tmp_path / "pipe.joblib")
    np.testing.assert_array_equal(reloaded.transform(texts), expected)


def test_pickle_made_for_a_gpu_loads_on_a_cpu_only_machine(tiny_model_dir, texts):
    vectorizer = BertVectorizer(tiny_model_dir).fit()
    expected = vectorizer.transform(texts)
    state = vectorizer.__getstate__()
    # Weights travel as safetensors bytes, not as device-bound tensors.
    assert "model_" not in state and all(isinstance(v, bytes) for v in state["_files"].values())
    payload = pickle.dumps(vectorizer)
    with mock.patch("torch.cuda.is_available", return_value=False):
        reloaded = pickle.loads(payload)
        assert str(next(reloaded.model_.parameters()).device) == "cpu"
        np.testing.assert_array_equal(reloaded.transform(texts), expected)


def test_unfitted_pickle_is_small(tiny_model_dir):
    assert len(pickle.dumps(BertVectorizer(tiny_model_dir))) < 2000


def test_feature_names_and_pandas_output(fitted, texts):
    names = fitted.get_feature_names_out()
    assert list(names[:2]) == ["bertvectorizer0", "bertvectorizer1"] and len(names) == 32
    frame = clone(fitted).set_output(transform="pandas").fit().transform(pd.Series(texts))
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == list(names)
    np.testing.assert_allclose(frame.to_numpy(), fitted.transform(texts), atol=1e-6)


def test_text_input_tags(fitted):
    tags = fitted.__sklearn_tags__()
    assert tags.input_tags.string and not tags.input_tags.two_d_array
    assert not tags.target_tags.required


# --- in pipelines ------------------------------------------------------------------------------

@pytest.fixture
def labelled():
    positive = ["good movie", "great film", "a great good movie", "good good", "great"]
    negative = ["awful movie", "bad film", "a bad awful film", "bad bad", "awful"]
    return positive + negative, [1] * 5 + [0] * 5


def test_pipeline_grid_search_and_cross_val(tiny_model_dir, labelled):
    X, y = labelled
    pipe = Pipeline([("bert", BertVectorizer(tiny_model_dir)),
                     ("clf", LogisticRegression(max_iter=1000))])
    search = GridSearchCV(pipe, {"bert__pooling": ["cls", "mean", "max"],
                                 "bert__layer": [-1, [-1, -2]]}, cv=2).fit(X, y)
    assert len(search.cv_results_["params"]) == 6
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    assert cross_val_score(pipe, X, y, cv=2).shape == (2,)


def test_column_transformer_on_a_text_column(fitted, labelled):
    X, _ = labelled
    frame = pd.DataFrame({"text": X, "number": np.arange(len(X))})
    columns = ColumnTransformer([("bert", clone(fitted), "text")], remainder="passthrough")
    out = columns.fit_transform(frame)
    assert out.shape == (len(X), 33)
    np.testing.assert_allclose(out[:, :32], fitted.transform(X), atol=1e-6)


def test_reference_pickle_is_small_and_reloads(tiny_model_dir, texts):
    vectorizer = BertVectorizer(tiny_model_dir, persist_weights=False, pooling="cls").fit()
    payload = pickle.dumps(vectorizer)
    assert len(payload) < 20_000 < len(pickle.dumps(clone(vectorizer).set_params(
        persist_weights=True).fit()))
    reloaded = pickle.loads(payload)
    np.testing.assert_array_equal(reloaded.transform(texts), vectorizer.transform(texts))


def test_reference_pickle_detects_changed_weights(tiny_model_dir, texts, tmp_path):
    import torch
    from transformers import AutoModel

    from skbert._encoder import _loading

    private_copy = tmp_path / "model"
    shutil.copytree(tiny_model_dir, private_copy)
    payload = pickle.dumps(BertVectorizer(str(private_copy), persist_weights=False).fit())
    model = AutoModel.from_pretrained(private_copy)
    with torch.no_grad():
        model.encoder.layer[0].output.dense.weight.mul_(1.5)
    model.save_pretrained(private_copy)
    _loading._shared.clear()
    _loading._recent.clear()
    with pytest.raises(ValueError, match=r"The weights of .*model' \(revision=None\) changed since "
                                         r"this BertVectorizer was pickled with "
                                         r"persist_weights=False: expected weights fingerprint"):
        pickle.loads(payload)
