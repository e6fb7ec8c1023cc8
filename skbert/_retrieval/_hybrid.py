"""HybridSearch: several first stages (BM25, a bi-encoder, ...) fused into one ranking.

Each first stage is a :class:`skbert.SimilaritySearch` that ranks the corpus
its own way; :func:`fuse` combines their top ``depth`` of each query by
reciprocal ranks (Cormack et al. 2009) or by a weighted sum of per-query
normalized scores (a convex combination, which beats RRF once its weight is
tuned: Bruch et al. 2023). The fusion's parameters are read at search time,
so a grid over them searches the fitted stages again without encoding any
document.
"""

import numbers

import numpy as np
from sklearn.utils import Bunch
from sklearn.utils.validation import check_is_fitted

from skbert._compat import (
    HasMethods,
    Interval,
    StrOptions,
    _BaseComposition,
    _fit_context,
    validate_parameter_constraints,
)
from skbert._fitted_state import _fitted, _unfrozen
from skbert._retrieval._search import fitted_reranker, reranked, without_self
from skbert._validation import check_single_texts


def fuse(rankings, weights, fusion="convex", normalization="minmax", rrf_k=60, k=10):
    """One ranking of each query from the rankings of several first stages.

    Parameters
    ----------
    rankings : list of (scores, indices)
        Each stage's ranking: arrays of shape (n_queries, depth_s), scores
        descending, corpus indices (unique in a row).
    weights : sequence of float
        One non-negative weight per stage.
    fusion : {"convex", "rrf"}
        "convex": the weighted sum of each stage's scores, normalized per
        query over the stage's ranking; a document a stage did not rank takes
        that stage's lowest normalized score (0 for "minmax"). "rrf": the
        weighted sum of ``1 / (rrf_k + rank)``, ranks from 1; a document a stage
        did not rank takes nothing from it.
    normalization : {"minmax", "zscore"}
        "convex"'s per-query scaling: to [0, 1] (all equal scores: 0), or to
        mean 0 and standard deviation 1 (all equal: 0).
    rrf_k : float
        "rrf"'s rank offset: larger flattens the gap between ranks.
    k : int
        Documents to return per query: at most the number of distinct
        documents the stages ranked for that query, for every query.

    Returns
    -------
    scores : ndarray of shape (n_queries, k), float32
        The fused scores, descending (ties: the lower corpus index first).
    indices : ndarray of shape (n_queries, k), int64
    """
    n_queries = len(rankings[0][1])
    rows, documents, parts = [], [], []
    floor = np.zeros(n_queries)
    for weight, (scores, indices) in zip(weights, rankings):
        indices = np.asarray(indices, dtype=np.int64)
        if fusion == "rrf":
            part = np.broadcast_to(weight / (rrf_k + np.arange(1, indices.shape[1] + 1)),
                                   indices.shape)
        else:
            normalized = _normalized(np.asarray(scores, dtype=np.float64), normalization)
            low = normalized.min(axis=1, keepdims=True)
            # Relative to the stage's lowest score, so that a missing document adds nothing;
            # that lowest score goes to every document of the query through ``floor``.
            part = weight * (normalized - low)
            floor += weight * low[:, 0]
        rows.append(np.repeat(np.arange(n_queries), indices.shape[1]))
        documents.append(indices.ravel())
        parts.append(part.ravel())
    rows, documents = np.concatenate(rows), np.concatenate(documents)
    n_documents = int(documents.max()) + 1
    keys, position = np.unique(rows * n_documents + documents, return_inverse=True)
    sums = np.bincount(position, weights=np.concatenate(parts))
    key_rows, key_documents = np.divmod(keys, n_documents)
    sums += floor[key_rows]
    # Each query's candidates, padded to the longest list, sorted by score then index.
    counts = np.bincount(key_rows, minlength=n_queries)
    if counts.min() < k:
        raise ValueError(f"The first stages ranked {counts.min()} distinct documents for a "
                         f"query, fewer than k={k}.")
    width = counts.max()
    column = np.arange(len(keys)) - np.repeat(np.cumsum(counts) - counts, counts)
    padded_scores = np.full((n_queries, width), -np.inf)
    padded_indices = np.full((n_queries, width), np.iinfo(np.int64).max)
    padded_scores[key_rows, column] = sums
    padded_indices[key_rows, column] = key_documents
    order = np.lexsort((padded_indices, -padded_scores), axis=1)[:, :k]
    return (np.take_along_axis(padded_scores, order, axis=1).astype(np.float32),
            np.take_along_axis(padded_indices, order, axis=1))


def _normalized(scores, normalization):
    if normalization == "minmax":
        low, high = scores.min(axis=1, keepdims=True), scores.max(axis=1, keepdims=True)
        return (scores - low) / np.where(high > low, high - low, 1.0)
    spread = scores.std(axis=1, keepdims=True)
    return (scores - scores.mean(axis=1, keepdims=True)) / np.where(spread > 0, spread, 1.0)


class HybridSearch(_BaseComposition):
    """Search by several first stages at once, fused into one ranking: BM25 and meaning.

    Each first stage is a :class:`~skbert.SimilaritySearch` over the same
    corpus (``SimilaritySearch(BM25Vectorizer())``, a bi-encoder
    ``SimilaritySearch(BertVectorizer(model))``, a
    :class:`~skbert.StaticVectorizer` or ``TfidfVectorizer`` one); each ranks
    its top ``depth`` of a query, and the fusion combines those rankings. On
    SciFact (BEIR test, nDCG@10), BM25 alone (English stemmer, Lucene's stop
    words) scores 0.6863 and the
    all-MiniLM-L6-v2 bi-encoder 0.6451; reciprocal-rank fusion of the two
    0.7171, and the convex combination chosen on the train queries (z-scores,
    equal weights) 0.7301.

    ``searches`` has scikit-learn's ``VotingClassifier`` shape: a list of
    ``(name, search)`` whose parameters ``set_params`` reaches by name
    (``bm25__vectorizer__k1=1.2``, ``dense__vectorizer__pooling="cls"``);
    those take effect at the next ``fit``. The fusion's own parameters
    (``fusion``, ``weights``, ``normalization``, ``rrf_k``, ``depth``) are
    read at each search: changed after ``fit``, they apply to the next
    search with nothing encoded again, so a grid over them costs searches
    only (the user guide shows how to tune them on judged queries).

    Parameters
    ----------
    searches : list of (str, SimilaritySearch)
        The first stages, each with a vectorizer (they search texts). Each is
        cloned and fitted on the corpus at ``fit``; a
        :class:`sklearn.frozen.FrozenEstimator` of one fitted on this same
        corpus is used as it is.
    fusion : {"convex", "rrf"}, default="convex"
        "convex": the weighted sum of each stage's scores, normalized per
        query over its top ``depth`` (``normalization``); a document outside a
        stage's top ``depth`` takes that stage's lowest normalized score there
        (0 for "minmax"). "rrf": reciprocal-rank fusion, the weighted sum of
        ``1 / (rrf_k + rank)`` over the stages that ranked the document.
    weights : array-like of shape (n_searches,) or None, default=None
        Each stage's non-negative weight, in the order of ``searches``; None
        weighs them equally. Only their ratios change a ranking. Tune them:
        an untuned equal weight of a weak stage drags a strong one down.
    normalization : {"minmax", "zscore"}, default="minmax"
        "convex"'s per-query scaling of each stage's scores: to [0, 1], or to
        mean 0 and standard deviation 1. Unused by "rrf".
    rrf_k : float, default=60
        "rrf"'s rank offset (60 in Cormack et al.). Unused by "convex".
    depth : int, default=100
        Documents each stage ranks per query, the candidates of the fusion
        (more where ``k`` or ``rerank_k`` asks for more).
    n_neighbors : int, default=10
        Default number of neighbours for :meth:`kneighbors`.
    reranker : estimator or None, default=None
        A second stage that rescores the fused top ``rerank_k`` of each query
        (a :class:`~skbert.BertReranker`), as in
        :class:`~skbert.SimilaritySearch`: an unfitted one is cloned and
        fitted with no data, a fitted or frozen one used as it is.
    rerank_k : int, default=100
        Fused candidates per query that the reranker scores.

    Attributes
    ----------
    searches_ : list of (str, SimilaritySearch)
        The fitted first stages.
    named_searches_ : :class:`~sklearn.utils.Bunch`
        The same, by name.
    reranker_ : estimator or None
        The fitted reranker.
    n_samples_fit_ : int
        Number of corpus documents.

    See Also
    --------
    skbert.SimilaritySearch : one first stage.
    skbert.BM25Vectorizer : the lexical rows.

    Examples
    --------
    >>> from sklearn.feature_extraction.text import TfidfVectorizer
    >>> from skbert import BM25Vectorizer, HybridSearch, SimilaritySearch
    >>> corpus = ["the cat sat on the mat", "a kitten naps on a rug",
    ...           "stock markets fell", "shares dropped sharply"]
    >>> search = HybridSearch([
    ...     ("bm25", SimilaritySearch(BM25Vectorizer())),
    ...     ("chars", SimilaritySearch(TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 4)))),
    ... ], weights=[0.5, 0.5]).fit(corpus)
    >>> scores, indices = search.search(["where did the cat sit"], k=2)
    >>> int(indices[0, 0])
    0
    >>> search.set_params(fusion="rrf").search(["stocks fell"], k=1)[1].tolist()
    [[2]]
    """

    _parameter_constraints: dict = {
        "searches": [list],
        "fusion": [StrOptions({"convex", "rrf"})],
        "weights": ["array-like", None],
        "normalization": [StrOptions({"minmax", "zscore"})],
        "rrf_k": [Interval(numbers.Real, 0, None, closed="left")],
        "depth": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_neighbors": [Interval(numbers.Integral, 1, None, closed="left")],
        "reranker": [HasMethods(["fit", "predict"]), None],
        "rerank_k": [Interval(numbers.Integral, 1, None, closed="left")],
    }

    def __init__(self, searches, *, fusion="convex", weights=None, normalization="minmax",
                 rrf_k=60, depth=100, n_neighbors=10, reranker=None, rerank_k=100):
        self.searches = searches
        self.fusion = fusion
        self.weights = weights
        self.normalization = normalization
        self.rrf_k = rrf_k
        self.depth = depth
        self.n_neighbors = n_neighbors
        self.reranker = reranker
        self.rerank_k = rerank_k

    def get_params(self, deep=True):
        """Parameters of this search and, with ``deep``, of each first stage by its name.

        Parameters
        ----------
        deep : bool, default=True

        Returns
        -------
        params : dict
        """
        return self._get_params("searches", deep=deep)

    def set_params(self, **params):
        """Set parameters, a first stage's as ``name__parameter``.

        Parameters
        ----------
        **params : dict

        Returns
        -------
        self : HybridSearch
        """
        self._set_params("searches", **params)
        return self

    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X, y=None):
        """Fit every first stage on the corpus.

        Parameters
        ----------
        X : iterable of str
            The corpus, read once.
        y : None
            Ignored.

        Returns
        -------
        self : HybridSearch
        """
        if not self.searches or not all(isinstance(item, tuple) and len(item) == 2
                                        for item in self.searches):
            raise ValueError("searches must be a non-empty list of (name, SimilaritySearch) "
                             f"tuples; got {self.searches!r}.")
        names = [name for name, _ in self.searches]
        self._validate_names(names)
        texts = check_single_texts(X, "HybridSearch")
        fitted = []
        for name, search in self.searches:
            inner = _unfrozen(search)
            if not hasattr(inner, "search") or getattr(inner, "vectorizer", None) is None:
                raise ValueError(f"The search {name!r} ({type(inner).__name__}) must be a "
                                 "SimilaritySearch with a vectorizer: HybridSearch searches "
                                 "texts.")
            search = _fitted(search, texts)
            if search.n_samples_fit_ != len(texts):
                raise ValueError(f"The search {name!r} is used fitted, on "
                                 f"{search.n_samples_fit_} documents; the corpus has "
                                 f"{len(texts)}: fit it on this corpus.")
            fitted.append((name, search))
        self._checked_weights(len(fitted))
        self.reranker_ = fitted_reranker(self.reranker)
        self.searches_ = fitted
        self.named_searches_ = Bunch(**dict(fitted))
        self._texts = texts
        self.n_samples_fit_ = len(texts)
        return self

    def _checked_weights(self, n_searches):
        if self.weights is None:
            return np.ones(n_searches)
        weights = np.asarray(self.weights, dtype=np.float64)
        if (weights.shape != (n_searches,) or not np.isfinite(weights).all()
                or (weights < 0).any() or not weights.any()):
            raise ValueError(f"weights={self.weights!r} must give one finite, non-negative "
                             f"weight to each of the {n_searches} searches, not all 0.")
        return weights

    def _ranked(self, queries, k, exclude_self=False, name="k"):
        """The fused (then reranked) top ``k`` of each query; with ``exclude_self`` the queries
        are the corpus texts, each without itself. ``name``: what the caller calls ``k``."""
        check_is_fitted(self)
        validate_parameter_constraints(self._parameter_constraints, self.get_params(deep=False),
                                       caller_name=type(self).__name__)
        extra = int(exclude_self)
        if not isinstance(k, numbers.Integral) or not 1 <= k <= self.n_samples_fit_ - extra:
            raise ValueError(f"{name}={k!r} must be an int between 1 and "
                             f"{self.n_samples_fit_ - extra} (the corpus size"
                             f"{' less the query itself' if extra else ''}).")
        weights = self._checked_weights(len(self.searches_))
        if not len(queries):
            return np.empty((0, k), dtype=np.float32), np.empty((0, k), dtype=np.int64)
        n_fused = min(max(k, self.rerank_k) if self.reranker_ is not None else k,
                      self.n_samples_fit_ - extra) + extra
        n_ranked = min(max(self.depth, n_fused), self.n_samples_fit_)
        rankings = [search.search(queries, k=n_ranked) for _, search in self.searches_]
        fused = fuse(rankings, weights, self.fusion, self.normalization, self.rrf_k, n_fused)
        if exclude_self:
            fused = without_self(*fused)
        if self.reranker_ is None:
            return fused[0][:, :k], fused[1][:, :k]
        return reranked(self.reranker_, self._texts, queries, fused, k)

    def search(self, queries, k=10):
        """The ``k`` best corpus documents of each query, by the fused score.

        Parameters
        ----------
        queries : iterable of str
        k : int, default=10

        Returns
        -------
        scores : ndarray of shape (n_queries, k), float32
            Descending. The fused scores: "convex"'s weighted sum of
            normalized scores, or "rrf"'s weighted sum of reciprocal ranks;
            with a ``reranker``, its scores of the (query, document) pairs.
        indices : ndarray of shape (n_queries, k), int64
            Corpus indices.
        """
        return self._ranked(check_single_texts(queries, "HybridSearch"), k)

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """The nearest documents by the fused score, with scikit-learn's semantics.

        Parameters
        ----------
        X : iterable of str or None, default=None
            Queries. None queries the corpus itself, and a document is then
            not its own neighbour.
        n_neighbors : int or None, default=None
            None uses ``self.n_neighbors``.
        return_distance : bool, default=True

        Returns
        -------
        distances : ndarray of shape (n_queries, n_neighbors)
            ``1 - scores`` of :meth:`search`, ascending: not a metric's
            distance (a fused score is no similarity of two vectors). Only
            when ``return_distance=True``.
        indices : ndarray of shape (n_queries, n_neighbors)
        """
        check_is_fitted(self)
        n_neighbors = self.n_neighbors if n_neighbors is None else n_neighbors
        if X is None:
            scores, indices = self._ranked(self._texts, n_neighbors, True, "n_neighbors")
        else:
            scores, indices = self._ranked(check_single_texts(X, "HybridSearch"), n_neighbors,
                                           name="n_neighbors")
        return (1.0 - scores, indices) if return_distance else indices

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = False
        tags.target_tags.required = False
        return tags
