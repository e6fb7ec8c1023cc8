"""BertClassifier on multi-label targets (a label-indicator y): one sigmoid per label, its
outputs as MLPClassifier's, scikit-learn's multi-label scorers, class_weight per label, and
the mistakes a user makes with such a y."""

import pickle
import warnings

import numpy as np
import pytest
from scipy import sparse
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import accuracy_score, f1_score, jaccard_score
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import MultiLabelBinarizer

from skbert import BertClassifier

TEXTS = ["the cat sat", "a dog ran", "the cat and the dog", "a bird sang", "the cat ran",
         "a dog sat", "the bird and the cat", "a dog and a bird"] * 2
TAGS = [{"cat"}, {"dog"}, {"cat", "dog"}, {"bird"}, {"cat"}, {"dog"}, {"bird", "cat"},
        {"bird", "dog"}] * 2
Y = MultiLabelBinarizer().fit_transform(TAGS)  # columns: bird, cat, dog


def frozen(tiny_model_dir, **settings):
    settings = {"epochs": 100, **settings}
    return BertClassifier(tiny_model_dir, freeze="all", pooling="mean", random_state=0,
                          device="cpu", **settings)


@pytest.fixture(scope="module")
def fitted(tiny_model_dir):
    return frozen(tiny_model_dir).fit(TEXTS, Y)


def test_outputs_are_mlpclassifiers(fitted):
    with warnings.catch_warnings():  # five iterations: only its classes_ are read
        warnings.simplefilter("ignore", ConvergenceWarning)
        mlp = MLPClassifier(max_iter=5).fit(np.eye(len(TEXTS)), Y)
    np.testing.assert_array_equal(fitted.classes_, mlp.classes_)
    proba = fitted.predict_proba(TEXTS)
    assert proba.shape == Y.shape and ((proba > 0) & (proba < 1)).all()
    assert not np.allclose(proba.sum(axis=1), 1)  # one sigmoid per label, not a softmax
    predicted = fitted.predict(TEXTS)
    assert predicted.shape == Y.shape and predicted.dtype.kind == "i"
    np.testing.assert_array_equal(predicted, (proba >= 0.5).astype(int))
    assert fitted.decision_function(TEXTS).shape == Y.shape
    assert fitted.coef_.shape[0] == 3 and fitted.intercept_.shape == (3,)
    assert fitted.__sklearn_tags__().classifier_tags.multi_label


def test_a_label_indicator_is_learned(fitted):
    # 100 epochs of the head on frozen features: the training labels are learned.
    assert f1_score(Y, fitted.predict(TEXTS), average="micro") > 0.9


def test_scikit_learns_scorers_read_it(fitted):
    predicted = fitted.predict(TEXTS)
    for average in ("micro", "macro", "samples"):
        f1_score(Y, predicted, average=average)
    jaccard_score(Y, predicted, average="samples")
    assert fitted.score(TEXTS, Y) == accuracy_score(Y, predicted)  # the subset accuracy


def test_threshold_applies_at_predict_without_training_again(fitted):
    proba = fitted.predict_proba(TEXTS)
    coef = fitted.coef_.copy()
    for threshold in (0.0, 0.3, 0.9, 1.0):
        fitted.set_params(threshold=threshold)
        np.testing.assert_array_equal(fitted.predict(TEXTS), (proba >= threshold).astype(int))
    fitted.set_params(threshold=0.5)
    np.testing.assert_array_equal(fitted.coef_, coef)


def test_sparse_and_dense_indicators_train_alike(tiny_model_dir, fitted):
    other = frozen(tiny_model_dir).fit(TEXTS, sparse.csr_matrix(Y))
    np.testing.assert_allclose(other.predict_proba(TEXTS), fitted.predict_proba(TEXTS),
                               rtol=1e-5)


def test_pickles_and_a_refit_on_one_label_per_text(tiny_model_dir, fitted):
    loaded = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(loaded.predict_proba(TEXTS), fitted.predict_proba(TEXTS))
    np.testing.assert_array_equal(loaded.predict(TEXTS), fitted.predict(TEXTS))
    single = pickle.loads(pickle.dumps(fitted)).fit(TEXTS, Y.argmax(axis=1))
    assert single.predict(TEXTS).shape == (len(TEXTS),)
    np.testing.assert_allclose(single.predict_proba(TEXTS).sum(axis=1), 1, rtol=1e-6)


def test_class_weight_per_label(tiny_model_dir, fitted):
    ones = frozen(tiny_model_dir, class_weight=[{0: 1, 1: 1}] * 3).fit(TEXTS, Y)
    np.testing.assert_allclose(ones.coef_, fitted.coef_, rtol=1e-6)
    # One rare label (2 texts of 16): "balanced" weighs its positives up, so their
    # probability rises against the unweighted fit's.
    rare = np.zeros((len(TEXTS), 2), dtype=int)
    rare[:, 0] = 1 - np.arange(len(TEXTS)) % 2
    rare[[3, 11], 1] = 1
    settings = dict(epochs=3)
    plain = BertClassifier(tiny_model_dir, freeze="all", pooling="mean", random_state=0,
                           device="cpu", **settings).fit(TEXTS, rare)
    balanced = BertClassifier(tiny_model_dir, freeze="all", pooling="mean", random_state=0,
                              device="cpu", class_weight="balanced", **settings).fit(TEXTS, rare)
    positives = rare[:, 1] == 1
    assert (balanced.predict_proba(TEXTS)[positives, 1].mean()
            > plain.predict_proba(TEXTS)[positives, 1].mean() + 0.05)


@pytest.mark.parametrize("y, message", [
    (np.where(Y == 1, 0.7, 0.0), r"label indicator .* of 0 and 1 only; this y holds values "
                                 r"such as \[0.0, 0.7"),
    (Y * 2, r"of 0 and 1 only; this y holds values such as \[0, 2\]"),
    (Y + np.eye(len(TEXTS), 3, dtype=int), r"such as \[0, 1, 2\]"),
])
def test_a_2d_y_that_is_no_indicator_is_refused(tiny_model_dir, y, message):
    with pytest.raises(ValueError, match=message):
        frozen(tiny_model_dir, epochs=1).fit(TEXTS, y)


def test_other_mistakes_say_what_is_wrong(tiny_model_dir, fitted):
    with pytest.raises(ValueError, match=r"threshold=0.3 says where a label holds for "
                                         r"multi-label targets"):
        frozen(tiny_model_dir, threshold=0.3, epochs=1).fit(TEXTS, Y.argmax(axis=1))
    with pytest.raises(ValueError, match=r"class_weight=\{0: 1\} must be 'balanced' or a list "
                                         r"of 3 dicts"):
        frozen(tiny_model_dir, class_weight={0: 1}, epochs=1).fit(TEXTS, Y)
    with pytest.raises(ValueError, match="The 'threshold' parameter of BertClassifier must be"):
        frozen(tiny_model_dir, threshold=1.5, epochs=1).fit(TEXTS, Y)
    coef = fitted.coef_.copy()
    with pytest.raises(ValueError, match="got 16 texts and 3 labels"):
        fitted.fit(TEXTS, Y[:3])
    np.testing.assert_array_equal(fitted.coef_, coef)  # a failed fit leaves the last one


def test_a_label_that_never_holds_warns(tiny_model_dir):
    y = np.column_stack([Y, np.zeros(len(TEXTS), dtype=int)])
    with pytest.warns(UserWarning, match=r"labels \[3\] \(columns of y\) hold for no sample"):
        clf = frozen(tiny_model_dir, epochs=1).fit(TEXTS, y)
    assert clf.predict_proba(TEXTS).shape == (len(TEXTS), 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        frozen(tiny_model_dir, epochs=1).fit(TEXTS, Y)


def test_the_frozen_path_forwards_each_text_once_for_every_label(counted):
    # BertVectorizer before scikit-learn's multi-label wrappers: a MultiOutputClassifier
    # fits a clone of the whole pipeline per label, and the cache serves every clone.
    from sklearn.linear_model import LogisticRegression
    from sklearn.multioutput import ClassifierChain, MultiOutputClassifier
    from sklearn.pipeline import make_pipeline

    from skbert import BertVectorizer
    from tests.test_cache import _fit_keeping_model

    vectorizer, counter = counted
    texts = [" ".join(reversed(text.split())) for text in TEXTS]  # in no cache yet
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BertVectorizer, "fit", _fit_keeping_model(vectorizer.model_))
        per_label = MultiOutputClassifier(make_pipeline(vectorizer, LogisticRegression()))
        chain = make_pipeline(vectorizer, ClassifierChain(LogisticRegression(), random_state=0))
        for estimator in (per_label, chain):
            assert estimator.fit(texts, Y).predict(texts).shape == Y.shape
    assert counter["rows"] == len(set(texts))
