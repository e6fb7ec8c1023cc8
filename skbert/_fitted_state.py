"""The fitted state of an estimator given to another: used as it is, or cloned and fitted.

A search, a pair similarity or a static vectorizer takes a vectorizer (or a
search, a reranker) and fits a clone of it on its own data, but for one used
as it is, fitted: a :class:`sklearn.frozen.FrozenEstimator`, or a
:class:`skbert.FineTunedVectorizer` that learned from other data
(:func:`_prefit`).
"""

from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted


def _fitted(vectorizer, texts):
    """``vectorizer`` cloned and fitted on ``texts``, or itself where it is used fitted."""
    return vectorizer if _prefit(vectorizer) else clone(vectorizer).fit(texts)


def _unfrozen(estimator):
    """The estimator inside :class:`sklearn.frozen.FrozenEstimator` wrappers, or
    ``estimator`` itself: what to ask what it is (which samples it reads, whether it is
    used fitted)."""
    from sklearn.frozen import FrozenEstimator

    while isinstance(estimator, FrozenEstimator):
        estimator = estimator.estimator
    return estimator


def _is_fitted(estimator):
    try:
        check_is_fitted(estimator)
    except NotFittedError:
        return False
    return True


def _prefit(vectorizer):
    """Whether ``vectorizer`` is used as it is, fitted: a
    :class:`sklearn.frozen.FrozenEstimator`, or an estimator that learns from other data than
    the texts it encodes (a :class:`skbert.FineTunedVectorizer`, which says so with
    ``_used_fitted``). Refuses one that is not fitted."""
    inner = _unfrozen(vectorizer)
    if inner is vectorizer and not getattr(vectorizer, "_used_fitted", False):
        return False
    try:
        check_is_fitted(inner)
    except NotFittedError:
        name = type(inner).__name__
        if inner is not vectorizer:
            raise NotFittedError(f"FrozenEstimator({name}) is used as it is, and the {name} "
                                 "in it is not fitted: fit it first.") from None
        raise NotFittedError(
            f"{name} learns from its own training data (pairs, labels), not from the texts it "
            "encodes here: fit it first and pass it fitted, wrapped in "
            "sklearn.frozen.FrozenEstimator wherever the estimator it is in is cloned "
            "(cross_val_score, GridSearchCV, TunedThresholdClassifierCV): a clone of a "
            f"fitted {name} is not fitted.") from None
    return True
