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


def test_the_frozen_path_through_one_vs_rest_and_a_grid_over_c_forwards_each_text_once(
        counted):
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.pipeline import make_pipeline

    from skbert import BertVectorizer
    from tests.test_cache import _fit_keeping_model

    vectorizer, counter = counted
    texts = [f"{text} and the cat again" for text in TEXTS]  # in no cache yet
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BertVectorizer, "fit", _fit_keeping_model(vectorizer.model_))
        pipeline = make_pipeline(vectorizer, OneVsRestClassifier(LogisticRegression()))
        assert pipeline.fit(texts, Y).predict(texts).shape == Y.shape
        search = GridSearchCV(pipeline, {"onevsrestclassifier__estimator__C": [0.1, 1.0, 10.0]},
                              cv=2, scoring="f1_micro").fit(texts, sparse.csr_matrix(Y))
        assert search.predict(texts).shape == Y.shape
    assert counter["rows"] == len(set(texts))  # 3 values x 2 folds + refits + predicts


# --- skbert.probe with a label-indicator y ------------------------------------------------------


@pytest.mark.parametrize("labels", [Y, sparse.csr_matrix(Y)])
def test_layer_report_takes_a_label_indicator(tiny_model_dir, labels):
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from skbert import BertVectorizer
    from skbert.probe import layer_report

    report = layer_report(BertVectorizer(tiny_model_dir), TEXTS, labels, layers=[-1],
                          poolings=["mean"], cv=2)
    assert report.attrs["scoring"] == "f1_micro"
    features = BertVectorizer(tiny_model_dir, pooling="mean").fit().transform(TEXTS)
    expected = cross_val_score(make_pipeline(StandardScaler(), OneVsRestClassifier(
        LogisticRegression(max_iter=2000))), features, Y, cv=2, scoring="f1_micro")
    assert report.iloc[0, 0] == pytest.approx(expected.mean())


def test_learning_curve_takes_a_label_indicator(tiny_model_dir):
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score
    from sklearn.model_selection import train_test_split
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from skbert import BertVectorizer
    from skbert.probe import learning_curve

    # 16 texts with 7 label sets, some of one text: no stratified sample of 8 exists.
    curve = learning_curve(tiny_model_dir, TEXTS, sparse.csr_matrix(Y), TEXTS[:8], Y[:8],
                           sizes=[8, None])
    assert list(curve.index) == [8, 16] and curve.attrs["scoring"] == "f1_micro"
    assert list(curve.columns) == ["frozen + logistic regression", "LoRA", "full fine-tuning"]
    assert curve.notna().all().all()
    train, y_train = train_test_split(TEXTS, Y, train_size=8, random_state=0)[::2]
    frozen = make_pipeline(BertVectorizer(tiny_model_dir, pooling="mean"), StandardScaler(),
                           OneVsRestClassifier(LogisticRegression(max_iter=2000)))
    with warnings.catch_warnings():  # a label absent from the sample of 8 is never predicted
        warnings.simplefilter("ignore", UserWarning)
        predicted = frozen.fit(train, y_train).predict(TEXTS[:8])
    assert curve.loc[8, "frozen + logistic regression"] == pytest.approx(
        f1_score(Y[:8], predicted, average="micro"))


# --- FineTunedVectorizer(loss="supcon") on a label indicator ------------------------------------


def previous_supcon(columns, labels, scale):
    """skbert._train._losses.supcon before label-indicator targets (8d43de2), as it was: the
    loss of one label per text must not change by one bit."""
    import torch

    unit = torch.nn.functional.normalize(columns[0].float(), dim=1)
    similarities = scale * unit @ unit.T
    itself = torch.eye(len(unit), dtype=torch.bool, device=unit.device)
    log_p = similarities - torch.logsumexp(similarities.masked_fill(itself, float("-inf")),
                                           dim=1, keepdim=True)
    positives = (labels[:, None] == labels[None, :]) & ~itself
    counts = positives.sum(dim=1)
    anchors = counts > 0
    per_anchor = (log_p * positives).sum(dim=1)[anchors] / counts[anchors]
    return -per_anchor.mean()


def test_supcon_on_one_hot_rows_is_the_single_label_loss_bit_for_bit():
    import torch

    from skbert._train import _losses

    vectors = torch.randn(12, 5, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([0, 1, 0, 2, 1, 0, 5, 2, 2, 7, 1, 0])  # 5 and 7 alone: no positive
    one_hot = torch.nn.functional.one_hot(torch.unique(labels, return_inverse=True)[1]).float()
    expected = previous_supcon([vectors], labels, 20.0)
    assert torch.equal(_losses.supcon([vectors], labels, 20.0), expected)
    for overlap in ("jaccard", "any"):
        assert torch.equal(_losses.supcon([vectors], one_hot, 20.0, overlap), expected)


# Label sets {0, 1}, {1}, {2}, {}, {0, 1, 2}, {1}: the positives' weights written out.
ROWS = [[1, 1, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0], [1, 1, 1], [0, 1, 0]]
JACCARD = [[0, 1 / 2, 0, 0, 2 / 3, 1 / 2],
           [1 / 2, 0, 0, 0, 1 / 3, 1],
           [0, 0, 0, 0, 1 / 3, 0],
           [0, 0, 0, 0, 0, 0],  # no labels: no text's positive, and none its own
           [2 / 3, 1 / 3, 1 / 3, 0, 0, 1 / 3],
           [1 / 2, 1, 0, 0, 1 / 3, 0]]
ANY = (np.array(JACCARD) > 0).astype(float)


@pytest.mark.parametrize("overlap, weights", [("jaccard", JACCARD), ("any", ANY)])
def test_overlap_positives_on_a_hand_made_example(overlap, weights):
    import torch

    from skbert._train import _losses

    rows = torch.tensor(ROWS, dtype=torch.float32)
    torch.testing.assert_close(_losses.positive_weights(rows, overlap),
                               torch.tensor(weights, dtype=torch.float32))
    # The loss: per anchor with positives, the weighted mean of -log p over its positives,
    # p the softmax over every other text (the one without labels too).
    vectors = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
    cosines = torch.nn.functional.cosine_similarity(vectors[:, None], vectors[None], dim=2)
    terms = []
    for i in range(6):
        others = [j for j in range(6) if j != i]
        if sum(weights[i]) == 0:
            continue
        log_p = {j: 20 * cosines[i, j] - torch.logsumexp(20 * cosines[i, others], dim=0)
                 for j in others}
        terms.append(-sum(weights[i][j] * log_p[j] for j in others) / sum(weights[i]))
    torch.testing.assert_close(_losses.supcon([vectors], rows, 20.0, overlap),
                               torch.stack(terms).mean())


def tuner(tiny_model_dir, **params):
    from skbert import BertVectorizer, FineTunedVectorizer

    settings = dict(loss="supcon", batch_size=8, learning_rate=1e-3, random_state=0)
    return FineTunedVectorizer(BertVectorizer(tiny_model_dir), **{**settings, **params})


@pytest.fixture(scope="module")
def tuned(tiny_model_dir):
    return tuner(tiny_model_dir, epochs=6, learning_rate=2e-3).fit(TEXTS, Y)


def test_supcon_learns_from_a_label_indicator(tuned, tiny_model_dir):
    assert tuned.loss_ == "supcon"
    assert tuned.loss_curve_[-1] < 0.9 * tuned.loss_curve_[0]
    assert tuner(tiny_model_dir, loss="auto", epochs=1).fit(TEXTS, Y).loss_ == "supcon"


def test_sparse_and_dense_indicators_tune_alike_and_one_hot_is_one_label(tiny_model_dir):
    dense = tuner(tiny_model_dir, epochs=1).fit(TEXTS, Y).transform(TEXTS)
    np.testing.assert_array_equal(
        tuner(tiny_model_dir, epochs=1).fit(TEXTS, sparse.csr_matrix(Y)).transform(TEXTS), dense)
    labels = np.array(["cat", "dog", "cat", "bird"] * 4)
    one_hot = MultiLabelBinarizer().fit_transform(labels[:, None])
    np.testing.assert_array_equal(
        tuner(tiny_model_dir, epochs=1).fit(TEXTS, one_hot).transform(TEXTS),
        tuner(tiny_model_dir, epochs=1).fit(TEXTS, labels).transform(TEXTS))


def test_texts_without_labels_train_as_negatives_only(tiny_model_dir):
    texts = TEXTS + ["a red house", "the long river"]
    y = np.vstack([Y, np.zeros((2, 3), dtype=int)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert tuner(tiny_model_dir, epochs=1).fit(texts, y).transform(texts).shape[0] == 18
    assert not [w for w in caught if "hold for no" in str(w.message)]  # every label holds


@pytest.mark.parametrize("X, y, message", [
    (TEXTS, np.where(Y == 1, 0.7, 0.0), r"FineTunedVectorizer takes a 2-D y as a label "
                                        r"indicator .* MultiLabelBinarizer"),
    (TEXTS, Y + np.eye(len(TEXTS), 3, dtype=int), r"such as \[0, 1, 2\]"),
    (TEXTS, Y[:3], r"y has 3 values for the 16 items of X"),
    (TEXTS, np.ones((len(TEXTS), 3), dtype=int), r"at least 2 different label sets; every "
                                                 r"row of y is the same"),
    (list(zip(TEXTS, TEXTS[::-1])), Y, r"A label-indicator y \(n_items, n_labels\) is for "
                                       r"loss='supcon' on texts; loss='cosent'"),
])
def test_a_bad_indicator_is_refused(tiny_model_dir, X, y, message):
    with pytest.raises(ValueError, match=message):
        tuner(tiny_model_dir, loss="auto", epochs=1).fit(X, y)


def test_a_label_that_no_text_holds_warns_in_supcon(tiny_model_dir):
    y = np.column_stack([Y, np.zeros(len(TEXTS), dtype=int)])
    with pytest.warns(UserWarning, match=r"labels \[3\] \(columns of y\) hold for no text of "
                                         r"this fit: they make no two texts positives"):
        tuner(tiny_model_dir, epochs=1).fit(TEXTS, y)


def test_score_ranks_each_texts_labels_by_their_centroids(tiny_model_dir, tuned):
    from sklearn.model_selection import GridSearchCV

    vectors = tuned.transform(TEXTS).astype(np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    precisions = []
    for i in range(len(TEXTS)):
        scores = []
        for label in range(Y.shape[1]):
            holders = [j for j in range(len(TEXTS)) if j != i and Y[j, label]]
            centroid = vectors[holders].sum(axis=0)
            scores.append(vectors[i] @ centroid / np.linalg.norm(centroid) if holders else -2)
        scores = np.array(scores)
        relevant = np.flatnonzero(Y[i])
        precisions.append(np.mean([np.sum(scores[relevant] >= scores[r])
                                   / np.sum(scores >= scores[r]) for r in relevant]))
    assert tuned.score(TEXTS, Y) == pytest.approx(np.mean(precisions))
    assert tuned.score(TEXTS, sparse.csr_matrix(Y)) == tuned.score(TEXTS, Y)
    # A text without labels has nothing to rank: left out.
    with_empty = np.vstack([Y, np.zeros((1, 3), dtype=int)])
    assert tuned.score(TEXTS + ["a red house"], with_empty) == tuned.score(TEXTS, Y)
    with pytest.raises(ValueError, match="label-indicator y takes single texts"):
        tuned.score(list(zip(TEXTS, TEXTS)), Y)
    search = GridSearchCV(tuner(tiny_model_dir, epochs=1),
                          {"temperature": [0.05, 0.1]}, cv=2, error_score="raise").fit(TEXTS, Y)
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
