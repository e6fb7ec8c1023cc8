"""polars input and output, wherever pandas works."""

import subprocess
import sys

import numpy as np
import pytest

from skbert import BertClassifier, BertVectorizer, PairSimilarity, SimilaritySearch
from skbert.probe import layer_report
from tests.test_architectures import PAIRS

pl = pytest.importorskip("polars")


@pytest.fixture
def vectorizer(tiny_model_dir):
    return BertVectorizer(tiny_model_dir).fit()


def test_a_series_and_a_one_column_frame_are_texts(vectorizer, texts):
    expected = vectorizer.transform(texts)
    np.testing.assert_array_equal(vectorizer.transform(pl.Series("text", texts)), expected)
    np.testing.assert_array_equal(vectorizer.transform(pl.DataFrame({"text": texts})), expected)
    np.testing.assert_array_equal(vectorizer.fit_transform(pl.Series(texts)), expected)


def test_a_two_column_frame_is_pairs(vectorizer):
    frame = pl.DataFrame({"first": [a for a, _ in PAIRS], "second": [b for _, b in PAIRS]})
    np.testing.assert_array_equal(vectorizer.transform(frame), vectorizer.transform(PAIRS))


@pytest.mark.parametrize("bad, message", [
    (pl.Series(["a", None, "c"]), r"Text at index 1 is NoneType \(None\)"),
    (pl.DataFrame({"a": ["x", "y"], "b": ["z", None]}),
     r"The second text of the pair at index 1 is NoneType \(None\)"),
    (pl.Series([1, 2]), r"Text at index 0 is int \(1\)"),
    (pl.DataFrame({"a": ["x"], "b": ["y"], "c": ["z"]}),
     r"text pairs as an \(n, 2\) array, got an array of shape \(1, 3\)"),
])
def test_missing_values_and_wrong_shapes_are_named(vectorizer, bad, message):
    with pytest.raises(ValueError, match=message):
        vectorizer.transform(bad)


def test_a_lazy_frame_is_refused_until_collected(vectorizer, texts):
    lazy = pl.LazyFrame({"text": texts})
    with pytest.raises(ValueError, match=r"Iterable over raw text documents expected, polars "
                                         r"LazyFrame object received: it holds no rows until it "
                                         r"is computed\. Call \.collect\(\) on it first\."):
        vectorizer.transform(lazy)
    np.testing.assert_array_equal(vectorizer.transform(lazy.collect()), vectorizer.transform(texts))


def test_set_output_polars(vectorizer, texts):
    out = vectorizer.set_output(transform="polars").transform(pl.Series(texts))
    assert isinstance(out, pl.DataFrame) and out.shape == (len(texts), vectorizer._n_features_out)
    assert out.columns == list(vectorizer.get_feature_names_out())
    np.testing.assert_array_equal(out.to_numpy(), vectorizer.set_output(transform="default")
                                  .transform(texts))


def test_classifier_search_pairs_and_probe_take_polars(tiny_model_dir, texts):
    labels = ["a", "b"] * (len(texts) // 2)
    texts = texts[:len(labels)]
    X, y = pl.Series(texts), pl.Series(labels)
    params = {"freeze": "all", "epochs": 1, "random_state": 0}
    expected = BertClassifier(tiny_model_dir, **params).fit(texts, labels).predict_proba(texts)
    classifier = BertClassifier(tiny_model_dir, **params).fit(X, y)
    np.testing.assert_allclose(classifier.predict_proba(X), expected, rtol=0, atol=1e-6)

    search = SimilaritySearch(BertVectorizer(tiny_model_dir)).fit(X)
    for got, want in zip(search.search(X[:2], k=3), search.search(texts[:2], k=3)):
        np.testing.assert_array_equal(got, want)

    frame = pl.DataFrame({"first": [a for a, _ in PAIRS], "second": [b for _, b in PAIRS]})
    pairs = PairSimilarity(BertVectorizer(tiny_model_dir)).fit(frame)
    np.testing.assert_array_equal(pairs.predict(frame), pairs.predict(PAIRS))

    settings = {"layers": [0, -1], "poolings": ["mean"], "cv": 2}
    report = layer_report(BertVectorizer(tiny_model_dir), X, y, **settings)
    np.testing.assert_array_equal(
        report.to_numpy(),
        layer_report(BertVectorizer(tiny_model_dir), texts, labels, **settings).to_numpy())


def test_polars_is_not_imported_by_skbert(tiny_model_dir):
    script = ("import sys; from skbert import BertVectorizer\n"
              f"BertVectorizer({tiny_model_dir!r}).fit_transform(['a text', 'another'])\n"
              "assert 'polars' not in sys.modules")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
