"""BertClassifier and BertRegressor through their BertVectorizer: one engine and one cache with
the vectorizers, inference that changes nothing, light pickles."""

import contextlib
import pickle

import numpy as np
import pytest
import torch
from sklearn import config_context
from sklearn.base import BaseEstimator
from sklearn.model_selection import GridSearchCV

from skbert import BertClassifier, BertRegressor, BertVectorizer, clear_cache
from skbert._encoder import _loading
from tests.test_finetune import QUESTIONS

LABELS = ["who"] * 3 + ["where"] * 3 + ["when"] * 3
X, Y = QUESTIONS * 2, LABELS * 2
FROZEN = {"freeze": "all", "epochs": 1, "random_state": 0, "device": "cpu"}
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))]


@contextlib.contextmanager
def forward_rows(directory):
    """Rows through the forward of the process's shared model of ``directory`` (on the CPU),
    counted as tests/conftest.py counts them; the hook is removed on exit."""
    loaded = _loading.load(directory, None, "float32", torch.device("cpu"))  # kept alive here
    rows = []
    handle = loaded.model.register_forward_pre_hook(
        lambda module, args, kwargs: rows.append(kwargs["input_ids"].shape[0]), with_kwargs=True)
    try:
        yield rows
    finally:
        handle.remove()


def test_a_grid_over_the_head_forwards_each_distinct_text_once(tiny_model_dir):
    clear_cache()
    with forward_rows(tiny_model_dir) as rows:
        # A vectorizer of the same setting fills the cache that every fit below reads.
        BertVectorizer(tiny_model_dir, device="cpu").fit().transform(X[:4])
        search = GridSearchCV(BertClassifier(tiny_model_dir, **FROZEN),
                              {"head_learning_rate": [1e-2, 1e-1], "epochs": [1, 2]},
                              cv=3).fit(X, Y)
        search.predict(X)
    assert len(search.cv_results_["params"]) == 4
    assert sum(rows) == len(set(X))


def attributes(estimator):
    """The ids of the attributes of ``estimator``, and of those of the estimators among them."""
    return {name: (id(value), attributes(value) if isinstance(value, BaseEstimator) else None)
            for name, value in vars(estimator).items()}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("freeze", ["all", None])
def test_predict_changes_no_attribute(tiny_model_dir, freeze, device):
    clf = BertClassifier(tiny_model_dir, **{**FROZEN, "freeze": freeze}).fit(X, Y)
    expected = clf.predict_proba(X)
    clf.set_params(device=device, batch_size=2)
    before, parameters = attributes(clf), [id(p) for p in clf.model_.parameters()]
    for method in ("predict", "predict_proba", "decision_function", "transform"):
        getattr(clf, method)(X)
    np.testing.assert_allclose(clf.predict_proba(X), expected, rtol=0, atol=1e-5)
    assert attributes(clf) == before
    assert [id(p) for p in clf.model_.parameters()] == parameters
    assert str(next(clf.model_.parameters()).device) == "cpu"  # where fit left it


def test_features_stay_numpy_under_a_pandas_output_config(tiny_model_dir):
    clf = BertClassifier(tiny_model_dir, **FROZEN).fit(X, Y)
    with config_context(transform_output="pandas"):
        assert isinstance(clf.transform(X), np.ndarray)
        assert clf.predict(X).shape == (len(X),)


def light(estimator):
    """``estimator`` through a ``persist_weights=False`` pickle, and that pickle's size."""
    data = pickle.dumps(estimator.set_params(persist_weights=False))
    return pickle.loads(data), len(data)


@pytest.mark.parametrize("Estimator, y", [(BertClassifier, Y),
                                          (BertRegressor, np.linspace(0, 5, len(X)))])
def test_light_pickles_round_trip(tiny_model_dir, Estimator, y):
    estimator = Estimator(tiny_model_dir, **FROZEN, persist_weights=False).fit(X, y)
    expected = estimator.predict(X)
    once, size = light(estimator)
    twice, _ = light(once)
    assert size < 20_000  # a reference, not the tiny model's ~0.4 MB of weights
    for loaded in (once, twice):
        np.testing.assert_array_equal(loaded.predict(X), expected)
        assert loaded.model_ is estimator.model_  # the process's shared model, found again


def test_a_light_pickle_of_an_unpickled_lora_fit_finds_the_base_again(tiny_model_dir):
    pytest.importorskip("peft")
    clf = BertClassifier(tiny_model_dir, **{**FROZEN, "freeze": "lora"}).fit(X, Y)
    expected = clf.predict_proba(X)
    full = pickle.loads(pickle.dumps(clf))  # the merged weights, no base model in it
    reloaded, size = light(full)
    assert size < 0.2 * len(pickle.dumps(clf))
    np.testing.assert_allclose(reloaded.predict_proba(X), expected, rtol=0, atol=1e-6)


def test_a_frozen_head_reads_a_cpu_engines_int8_features(tiny_model_dir):
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    engine = {"backend": "openvino", "dtype": "int8", "calibration": "fit"}
    clf = BertClassifier(tiny_model_dir, **FROZEN, **engine).fit(X, Y)
    expected = BertVectorizer(tiny_model_dir, **engine).fit(X).transform(X)
    np.testing.assert_array_equal(clf.transform(X), expected)
    assert clf.predict(X).shape == (len(X),)
    light = pickle.loads(pickle.dumps(clf.set_params(persist_weights=False)))
    np.testing.assert_array_equal(light.predict_proba(X), clf.predict_proba(X))


@pytest.mark.parametrize("setting", [{"backend": "onnx"}, {"dtype": "int8"}])
@pytest.mark.parametrize("freeze", [None, "lora", 1])
def test_an_engine_that_cannot_train_is_refused_where_the_encoder_trains(tiny_model_dir,
                                                                         setting, freeze):
    with pytest.raises(ValueError, match=r"runs a frozen encoder, and freeze=.* trains it: use "
                                         "freeze='all'"):
        BertClassifier(tiny_model_dir, freeze=freeze, **setting).fit(X, Y)
