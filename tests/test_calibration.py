"""BertClassifier's probabilities calibrated by scikit-learn's CalibratedClassifierCV
(temperature, sigmoid, isotonic), on a held-back split or on cross-validation folds; skbert
adds no calibrator of its own."""

import pickle

import numpy as np
import pytest
import sklearn
from packaging.version import Version
from sklearn.calibration import CalibratedClassifierCV
from sklearn.frozen import FrozenEstimator
from sklearn.metrics import log_loss
from sklearn.preprocessing import MultiLabelBinarizer

from skbert import BertClassifier

# method="temperature" came with scikit-learn 1.8; skbert runs from 1.6.
needs_temperature = pytest.mark.skipif(Version(sklearn.__version__) < Version("1.8"),
                                       reason="method='temperature' needs scikit-learn >= 1.8")
METHODS = [pytest.param("temperature", marks=needs_temperature), "sigmoid", "isotonic"]

TOPICS = {"animal": ["cat", "dog"], "colour": ["red", "blue", "green"],
          "place": ["river", "city", "country", "house"]}
FILLERS = "the a of and is was it that big small fast slow good bad day time long".split()


def topic_texts(n_texts, seed):
    """Texts of four words, one of them naming the topic, whose label is wrong one time in
    five: probabilities between 0 and 1 for the calibrators to move."""
    rng = np.random.RandomState(seed)
    names = sorted(TOPICS)
    labels = np.array(names * (n_texts // len(names)), dtype=object)
    texts = []
    for label in labels:
        words = [*rng.choice(FILLERS, 3), rng.choice(TOPICS[label])]
        texts.append(" ".join(rng.permutation(words)))
    noisy = rng.rand(len(labels)) < 0.2
    labels[noisy] = rng.choice(names, noisy.sum())
    return texts, labels


X_TRAIN, Y_TRAIN = topic_texts(36, seed=0)
X_CAL, Y_CAL = topic_texts(36, seed=1)  # at least 5 of each class: 5 folds of predictions
TARGETS = {  # 3 classes as strings; 2 as 0 and 1
    3: (Y_TRAIN, Y_CAL),
    2: ((Y_TRAIN == "animal").astype(int), (Y_CAL == "animal").astype(int)),
}


def classifier(tiny_model_dir):
    return BertClassifier(tiny_model_dir, freeze="all", pooling="mean", epochs=30, batch_size=36,
                          random_state=0, device="cpu")


@pytest.fixture(scope="module", params=sorted(TARGETS), ids=lambda n: f"{n}-classes")
def fitted(request, tiny_model_dir):
    """A fitted classifier, the calibration split's labels and the number of classes."""
    y_train, y_cal = TARGETS[request.param]
    return classifier(tiny_model_dir).fit(X_TRAIN, y_train), y_cal, request.param


def calibrated(clf, y_cal, method):
    return CalibratedClassifierCV(FrozenEstimator(clf), method=method).fit(X_CAL, y_cal)


@pytest.mark.parametrize("method", METHODS)
def test_calibrated_probabilities_of_a_fitted_classifier(fitted, method):
    clf, y_cal, n_classes = fitted
    model = calibrated(clf, y_cal, method)
    np.testing.assert_array_equal(model.classes_, clf.classes_)
    for texts in (X_CAL, X_TRAIN[:5]):
        proba = model.predict_proba(texts)
        assert proba.shape == (len(texts), n_classes)
        assert ((proba >= 0) & (proba <= 1)).all()
        np.testing.assert_allclose(proba.sum(axis=1), 1)
        np.testing.assert_array_equal(model.predict(texts),
                                      model.classes_[proba.argmax(axis=1)])
    assert not np.allclose(model.predict_proba(X_CAL), clf.predict_proba(X_CAL))


@needs_temperature
def test_temperature_divides_the_logits_by_one_positive_number(fitted):
    # log(p_j / p_0) is the difference of two logits: calibrated, it is beta times the
    # uncalibrated one, with the same beta > 0 for every text and class.
    clf, y_cal, _ = fitted
    texts = X_CAL + X_TRAIN
    before = clf.predict_proba(texts)
    after = calibrated(clf, y_cal, "temperature").predict_proba(texts)
    log_odds, calibrated_log_odds = (np.log(p[:, 1:] / p[:, :1]) for p in (before, after))
    away_from_zero = np.abs(log_odds) > 1e-3
    ratio = calibrated_log_odds[away_from_zero] / log_odds[away_from_zero]
    assert ratio.min() > 0 and not np.isclose(ratio.mean(), 1)
    np.testing.assert_allclose(ratio, ratio.mean(), rtol=1e-6)
    np.testing.assert_array_equal(after.argmax(axis=1), before.argmax(axis=1))


@needs_temperature
def test_temperature_lowers_the_log_loss_it_minimizes(fitted):
    clf, y_cal, _ = fitted
    model = calibrated(clf, y_cal, "temperature")
    before = log_loss(y_cal, clf.predict_proba(X_CAL), labels=clf.classes_)
    after = log_loss(y_cal, model.predict_proba(X_CAL), labels=clf.classes_)
    assert after < before  # the tiny head is not calibrated: its temperature is not 1


@pytest.mark.parametrize("method", ["sigmoid", "isotonic"])
def test_two_classes_calibrate_as_a_monotone_map_of_the_decision(tiny_model_dir, method):
    clf = classifier(tiny_model_dir).fit(X_TRAIN, TARGETS[2][0])
    order = np.argsort(clf.decision_function(X_CAL + X_TRAIN))
    positive = calibrated(clf, TARGETS[2][1], method).predict_proba(X_CAL + X_TRAIN)[order, 1]
    steps = np.diff(positive)
    assert (steps >= -1e-12).all() or (steps <= 1e-12).all()  # sigmoid: either direction


@needs_temperature
def test_an_unfitted_classifier_trains_on_each_fold(tiny_model_dir):
    estimator = classifier(tiny_model_dir)
    model = CalibratedClassifierCV(estimator, method="temperature", cv=2).fit(X_CAL, Y_CAL)
    assert not hasattr(estimator, "classes_")  # clones trained, not the estimator given
    assert len(model.calibrated_classifiers_) == 2
    proba = model.predict_proba(X_TRAIN)
    assert proba.shape == (len(X_TRAIN), 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1)


@needs_temperature
def test_a_calibrated_classifier_pickles(fitted):
    clf, y_cal, _ = fitted
    model = calibrated(clf, y_cal, "temperature")
    loaded = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(loaded.predict_proba(X_CAL), model.predict_proba(X_CAL))


@needs_temperature
@pytest.mark.xfail(strict=True, reason="scikit-learn 1.9 label-encodes only a y of strings "
                   "for method='temperature': integer classes other than 0 ... n_classes - 1 "
                   "fit a wrong temperature (the guide says so; update it when this passes)")
def test_temperature_with_integer_classes_from_one(tiny_model_dir):
    encoded = {name: np.searchsorted(sorted(TOPICS), name) for name in TOPICS}
    probas = []
    for first in (0, 1):  # classes 0, 1, 2, then 1, 2, 3: the same fit, the same logits
        y_train, y_cal = ([encoded[name] + first for name in y] for y in (Y_TRAIN, Y_CAL))
        clf = classifier(tiny_model_dir).fit(X_TRAIN, y_train)
        probas.append(calibrated(clf, y_cal, "temperature").predict_proba(X_CAL))
    np.testing.assert_allclose(probas[1], probas[0], rtol=1e-6)


def test_multilabel_targets_are_refused_by_scikit_learn(tiny_model_dir):
    # CalibratedClassifierCV takes one label per text, and says so in these words.
    tags = [{"cat"}, {"dog"}, {"cat", "dog"}, {"river"}] * 6
    Y = MultiLabelBinarizer().fit_transform(tags)
    texts = ["the cat", "a dog", "the cat and the dog", "the river"] * 6
    clf = classifier(tiny_model_dir).fit(texts, Y)
    for method in ("sigmoid", "isotonic"):
        with pytest.raises(ValueError, match=r"y should be a 1d array, got an array of shape"):
            CalibratedClassifierCV(FrozenEstimator(clf), method=method).fit(texts, Y)
