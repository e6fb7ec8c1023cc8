"""The path that BertVectorizer and BertWordVectorizer share: fit_transform as fit validates,
and a memory budget of 0 that computes as cache=False does."""

import numpy as np
import pytest
import sklearn
from sklearn.utils._param_validation import InvalidParameterError

import skbert
from skbert import BertVectorizer, BertWordVectorizer
from skbert._encoder import _loading, _stores

SAMPLES = [("the cat sat on the mat".split(), 1), ("a big red dog runs fast".split(), 3),
           ("the cat sat on the mat".split(), 5)]
TEXTS = ["the cat sat on the mat", "a big red dog runs fast", "good"]
VECTORIZERS = [(BertVectorizer, TEXTS), (BertWordVectorizer, SAMPLES)]


@pytest.mark.parametrize("vectorizer, X", VECTORIZERS)
def test_fit_transform_validates_parameters_as_fit_does(tiny_model_dir, vectorizer, X):
    message = rf"The 'norm' parameter of {vectorizer.__name__} must be"
    for method in ("fit", "fit_transform"):
        estimator = vectorizer(tiny_model_dir, norm="bogus")
        with pytest.raises(InvalidParameterError, match=message):
            getattr(estimator, method)("a bare string")  # parameters first, then input
        assert not hasattr(estimator, "n_layers_")  # nothing fitted
    with sklearn.config_context(skip_parameter_validation=True):  # skipped as fit skips it
        got = vectorizer(tiny_model_dir, verbose="yes").fit_transform(X)
    np.testing.assert_array_equal(got, vectorizer(tiny_model_dir).fit_transform(X))


@pytest.mark.parametrize("vectorizer, X", VECTORIZERS)
def test_a_memory_budget_of_zero_computes_only_what_the_setting_reads(tiny_model_dir,
                                                                     monkeypatch, vectorizer,
                                                                     X):
    fitted = vectorizer(tiny_model_dir, layer=-2).fit()
    fitted.model_, _ = _loading.from_pretrained(tiny_model_dir, None, "float32")  # private
    runs = []  # of the last layer, which layer=-2 does not read
    fitted.model_.encoder.layer[-1].register_forward_hook(lambda *args: runs.append(1))
    puts = []
    put = _stores.MemoryStore.put
    monkeypatch.setattr(_stores.MemoryStore, "put",
                        lambda store, *args: puts.append(1) or put(store, *args))
    expected = fitted.set_params(cache=False).transform(X)
    skbert.clear_cache()
    previous = skbert.set_cache_limit(0)
    try:
        got = fitted.set_params(cache=True).transform(X)
    finally:
        skbert.set_cache_limit(previous)
    assert runs == [] and puts == []  # as with cache=False: nothing more computed or copied
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_allclose(fitted.transform(X), expected, rtol=0, atol=1e-6)  # all layers
    assert runs and puts
