"""The linear head of the fine-tuners (``coef_``, ``intercept_``) and its classifier.

:class:`LinearHead` scores :meth:`transform`'s features; :class:`LinearHeadClassifier`
turns the scores into classes and probabilities, as LogisticRegression does
(BertClassifier, BertWordClassifier), and checks the samples and labels of a fit.
"""

import numpy as np
from scipy import sparse
from sklearn.base import ClassifierMixin
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import column_or_1d

from skbert._validation import warn_at_caller


class LinearHead:
    """The linear head over :meth:`transform`'s features (``coef_``, ``intercept_``)."""

    def _linear_outputs(self, X):
        return self.transform(X).astype(np.float64) @ self.coef_.T + self.intercept_


class LinearHeadClassifier(ClassifierMixin, LinearHead):
    """A classifier whose scores are its linear head's: BertClassifier, BertWordClassifier.

    ``X`` below is what the estimator's ``fit`` takes: texts (or pairs) for
    BertClassifier, word samples for BertWordClassifier.
    """

    _reads_words = False  # its samples are texts (skbert._words._samples.reads_words)
    _multilabel = False  # one label per sample; BertClassifier sets it where fit saw more

    def _label_targets(self, X, y, device):
        """For a label-indicator ``y`` (n_samples, n_labels) of 0/1, dense or sparse:
        ``classes_`` (0 ... n_labels - 1, as MLPClassifier's), the targets as a float array
        and ``class_weight``'s weights of each label's 1 and 0, two tensors of shape
        (n_labels,) on ``device`` (or None)."""
        import torch

        name = type(self).__name__
        Y = indicator_rows(y)
        _check_samples(X, Y, name, "word samples" if self._reads_words else "texts")
        # As OneVsRestClassifier: the label trains towards never holding.
        warn_empty_labels(Y, name, "sample", "the classifier learns that they never hold")
        weights = self.class_weight
        if weights is None:
            return np.arange(Y.shape[1]), Y, None
        per_label = (isinstance(weights, list) and len(weights) == Y.shape[1]
                     and all(isinstance(weight, dict) for weight in weights))
        if weights != "balanced" and not per_label:
            raise ValueError(
                f"class_weight={weights!r} must be 'balanced' or a list of {Y.shape[1]} dicts "
                "{0: weight, 1: weight}, one per label column, for a label-indicator y (as "
                "scikit-learn's multi-output class_weight).")
        table = np.ones((2, Y.shape[1]))
        for j in range(Y.shape[1]):
            present = np.unique(Y[:, j])
            if weights == "balanced":
                table[present.astype(int), j] = compute_class_weight(
                    "balanced", classes=present, y=Y[:, j])
            else:
                table[:, j] = [weights[j].get(0, 1.0), weights[j].get(1, 1.0)]
        table = torch.as_tensor(table, dtype=torch.float32, device=device)
        return np.arange(Y.shape[1]), Y, (table[1], table[0])

    def _class_targets(self, X, y, device):
        """The classes of ``y`` (sorted), the class of each sample of ``X`` (as indices into
        them) and ``class_weight``'s weights as a tensor on ``device`` (or None)."""
        import torch

        name = type(self).__name__
        y = column_or_1d(y, warn=True)
        _check_samples(X, y, name, "word samples" if self._reads_words else "texts")
        check_classification_targets(y)
        classes, encoded = np.unique(y, return_inverse=True)
        if len(classes) < 2:
            raise ValueError(
                f"{name} needs samples of at least 2 classes in the data, but the data "
                f"contains only one class: {classes.tolist()[0]!r}."
            )
        if self.class_weight is None:
            return classes, encoded, None
        weights = compute_class_weight(self.class_weight, classes=classes, y=y)
        return classes, encoded, torch.as_tensor(weights, dtype=torch.float32, device=device)

    def _set_head(self, classes, weight, bias):
        """``classes_``, ``coef_`` and ``intercept_`` from the trained head's arrays: for two
        classes one decision, for ``classes_[1]``, as in LogisticRegression (one per label for
        a label-indicator y)."""
        if len(classes) == 2 and not self._multilabel:
            weight, bias = weight[1:] - weight[:1], bias[1:] - bias[:1]
        self.classes_, self.coef_, self.intercept_ = classes, weight, bias

    def decision_function(self, X):
        """Scores of the linear head (logits).

        Parameters
        ----------
        X : samples as ``fit`` takes them

        Returns
        -------
        scores : ndarray of shape (n_samples,) or (n_samples, n_classes)
            For two classes, the score of ``classes_[1]`` (positive means
            ``classes_[1]``); otherwise one column per class of ``classes_``
            (per label, for a label-indicator ``y``).
        """
        scores = self._linear_outputs(X)
        return scores[:, 0] if len(self.classes_) == 2 and not self._multilabel else scores

    def predict_proba(self, X):
        """Class probabilities (softmax of the head's scores; one sigmoid per label).

        Parameters
        ----------
        X : samples as ``fit`` takes them

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            One column per class, in the order of ``classes_``; rows sum to 1.
            Fitted on a label-indicator ``y``: the probability that each
            label holds, one column per label, each on its own.
        """
        from scipy.special import expit, softmax

        scores = self.decision_function(X)
        if self._multilabel:
            return expit(scores)
        if scores.ndim == 1:
            positive = expit(scores)
            return np.column_stack([1 - positive, positive])
        return softmax(scores, axis=1)

    def predict(self, X):
        """The most probable class of each sample; the labels that hold, for multi-label.

        Parameters
        ----------
        X : samples as ``fit`` takes them

        Returns
        -------
        y_pred : ndarray of shape (n_samples,) or (n_samples, n_labels)
            Labels from ``classes_``. Fitted on a label-indicator ``y``: a 0/1
            indicator, 1 where a label's probability is at least
            ``threshold``.
        """
        if self._multilabel:
            return (self.predict_proba(X) >= self.threshold).astype(int)
        scores = self.decision_function(X)
        best = (scores > 0).astype(int) if scores.ndim == 1 else scores.argmax(axis=1)
        return self.classes_[best]


def is_label_indicator(y, estimator):
    """Whether ``y`` is scikit-learn's "multilabel-indicator": an (n, n_labels) array or
    sparse matrix of 0/1. Refuses another 2-D ``y`` (floats, several classes a column)."""
    kind = type_of_target(y)
    if kind not in ("continuous-multioutput", "multiclass-multioutput", "multilabel-indicator"):
        return False
    values = np.unique(y.data if sparse.issparse(y) else np.asarray(y))
    if not np.isin(values, [0, 1]).all():  # scikit-learn calls any two values an indicator
        raise ValueError(
            f"{estimator} takes a 2-D y as a label indicator (n_samples, n_labels) of 0 and 1 "
            f"only; this y holds values such as {values[:4].tolist()}. For texts with "
            "several labels, MultiLabelBinarizer().fit_transform(lists of labels) makes one; "
            "for one label per text, give a 1-D y.")
    return True


def indicator_rows(y):
    """A label-indicator ``y`` (dense or sparse) as a dense float32 array."""
    return (y.toarray() if sparse.issparse(y) else np.asarray(y)).astype(np.float32)


def warn_empty_labels(Y, estimator, sample, consequence):
    """Warn where a column of the label indicator ``Y`` holds for no ``sample`` of the fit,
    saying its ``consequence``: an error would break the cross-validation folds of a rare
    label."""
    empty = np.flatnonzero(Y.sum(axis=0) == 0)
    if len(empty):
        warn_at_caller(f"{estimator}: labels {empty.tolist()} (columns of y) hold for no "
                       f"{sample} of this fit: {consequence}.")


def _check_samples(X, y, estimator, what="texts"):
    if y is not None and len(X) != len(y):
        raise ValueError(f"{estimator} got {len(X)} {what} and {len(y)} labels: give one "
                         "label per sample.")
    if not X:
        raise ValueError(f"Found 0 {what} while a minimum of 1 is required by {estimator}.")
