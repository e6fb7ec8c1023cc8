"""The linear head of the fine-tuners (``coef_``, ``intercept_``) and its classifier.

:class:`LinearHead` scores :meth:`transform`'s features; :class:`LinearHeadClassifier`
turns the scores into classes and probabilities, as LogisticRegression does
(BertClassifier, BertWordClassifier), and checks the samples and labels of a fit.
"""

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import column_or_1d


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
        classes one decision, for ``classes_[1]``, as in LogisticRegression."""
        if len(classes) == 2:
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
            ``classes_[1]``); otherwise one column per class of ``classes_``.
        """
        scores = self._linear_outputs(X)
        return scores[:, 0] if len(self.classes_) == 2 else scores

    def predict_proba(self, X):
        """Class probabilities (softmax of the head's scores).

        Parameters
        ----------
        X : samples as ``fit`` takes them

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            One column per class, in the order of ``classes_``; rows sum to 1.
        """
        from scipy.special import expit, softmax

        scores = self.decision_function(X)
        if scores.ndim == 1:
            positive = expit(scores)
            return np.column_stack([1 - positive, positive])
        return softmax(scores, axis=1)

    def predict(self, X):
        """The most probable class of each sample.

        Parameters
        ----------
        X : samples as ``fit`` takes them

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
            Labels from ``classes_``.
        """
        scores = self.decision_function(X)
        best = (scores > 0).astype(int) if scores.ndim == 1 else scores.argmax(axis=1)
        return self.classes_[best]


def _check_samples(X, y, estimator, what="texts"):
    if y is not None and len(X) != len(y):
        raise ValueError(f"{estimator} got {len(X)} {what} and {len(y)} labels: give one "
                         "label per sample.")
    if not X:
        raise ValueError(f"Found 0 {what} while a minimum of 1 is required by {estimator}.")
