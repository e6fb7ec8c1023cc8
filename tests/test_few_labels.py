"""Few labelled texts: epochs="auto" takes enough optimizer steps for a small training set,
and BertClassifier's linear_probe starts its head where frozen features and a logistic
regression end (LP-FT)."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import MultiLabelBinarizer

from skbert import BertClassifier, BertVectorizer, FineTunedVectorizer
from skbert._train._training import auto_epochs

TEXTS = ["the cat sat", "a dog ran", "the cat and the dog", "a bird sang", "the cat ran",
         "a dog sat", "the bird and the cat", "a dog and a bird", "my cat", "his dog"]
LABELS = ["cat", "dog", "cat", "bird", "cat", "dog", "bird", "dog", "cat", "dog"]


@pytest.mark.parametrize(("epochs", "n_rows", "expected"), [
    ("auto", 16, 50),  # one batch a pass: 50 passes
    ("auto", 48, 17),  # three batches a pass: 17 passes, 51 steps
    ("auto", 10_000, 3),  # enough steps in the least epochs
    (2, 16, 2),  # an int is as given
])
def test_auto_epochs_take_the_least_steps(epochs, n_rows, expected):
    assert auto_epochs(epochs, n_rows, 16, 3, 50) == expected


def test_auto_epochs_of_the_fine_tuners(tiny_model_dir):
    classifier = BertClassifier(tiny_model_dir, freeze="all", random_state=0,
                                device="cpu").fit(TEXTS, LABELS)
    assert classifier.n_iter_ == 50  # 10 texts, one batch of 16 a pass
    assert BertClassifier(tiny_model_dir, freeze="all", epochs=2, random_state=0,
                          device="cpu").fit(TEXTS, LABELS).n_iter_ == 2
    supcon = FineTunedVectorizer(BertVectorizer(tiny_model_dir, device="cpu"), loss="supcon",
                                 batch_size=4, random_state=0)
    tuned = supcon.fit(TEXTS, LABELS)  # 3 classes: at least 30 steps, 3 batches a pass
    assert tuned.epochs_ == len(tuned.loss_curve_) == 10
    indicator = MultiLabelBinarizer().fit_transform(  # 5 labels
        [[label, "short" if len(text) < 10 else "long"] for text, label in zip(TEXTS, LABELS)])
    tuned = supcon.fit(TEXTS, indicator)  # at least 50 steps: 17 passes
    assert tuned.epochs_ == len(tuned.loss_curve_) == 17


def untrained(tiny_model_dir, **settings):
    """A classifier whose head barely moves from its start: the linear probe's, frozen."""
    settings = {"linear_probe": True, **settings}
    return BertClassifier(tiny_model_dir, freeze="all", epochs=1, learning_rate=1e-12,
                          random_state=0, device="cpu", **settings)


def frozen_features(tiny_model_dir):
    return BertVectorizer(tiny_model_dir, device="cpu").fit().transform(TEXTS)


@pytest.mark.parametrize("labels", [LABELS, [label == "cat" for label in LABELS]],
                         ids=["3-classes", "2-classes"])
def test_the_head_starts_from_a_logistic_regression(tiny_model_dir, labels):
    clf = untrained(tiny_model_dir).fit(TEXTS, labels)
    assert clf.head_learning_rate_ == clf.learning_rate_ == 1e-12  # no longer a random start
    logistic = LogisticRegression(max_iter=1000).fit(frozen_features(tiny_model_dir), labels)
    np.testing.assert_allclose(clf.coef_, logistic.coef_, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(clf.intercept_, logistic.intercept_, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(clf.predict_proba(TEXTS), logistic.predict_proba(
        frozen_features(tiny_model_dir)), atol=1e-5)
    random_start = untrained(tiny_model_dir, linear_probe=False).fit(TEXTS, labels)
    assert random_start.head_learning_rate_ == 1e-2
    assert not np.allclose(random_start.coef_, logistic.coef_, atol=1e-2)


def test_the_probe_weighs_classes_as_class_weight(tiny_model_dir):
    weights = {"cat": 1.0, "dog": 5.0, "bird": 0.5}
    clf = untrained(tiny_model_dir, class_weight=weights).fit(TEXTS, LABELS)
    logistic = LogisticRegression(max_iter=1000, class_weight=weights).fit(
        frozen_features(tiny_model_dir), LABELS)
    np.testing.assert_allclose(clf.coef_, logistic.coef_, rtol=1e-4, atol=1e-5)


def test_the_probe_of_a_label_indicator(tiny_model_dir):
    tags = [{label} for label in LABELS]
    tags[0].add("dog")
    mlb = MultiLabelBinarizer(classes=["bird", "cat", "dog", "fish"])  # fish: never holds
    Y = mlb.fit_transform(tags)
    with pytest.warns(UserWarning, match=r"labels \[3\]"):
        clf = untrained(tiny_model_dir).fit(TEXTS, Y)
    features = frozen_features(tiny_model_dir)
    for j in range(3):
        logistic = LogisticRegression(max_iter=1000).fit(features, Y[:, j])
        np.testing.assert_allclose(clf.coef_[j], logistic.coef_[0], rtol=1e-4, atol=1e-5)
    # A label of no text starts from its smoothed log-odds, 0.5 / 10.5: never predicted.
    np.testing.assert_allclose(clf.coef_[3], 0, atol=1e-6)
    np.testing.assert_allclose(clf.intercept_[3], np.log(0.5 / 10.5), rtol=1e-5)
    assert not clf.predict(TEXTS)[:, 3].any()
