"""HybridSearch: several first stages (BM25, a bi-encoder, ...) fused into one ranking.

Each first stage is a :class:`skbert.SimilaritySearch` that ranks the corpus
its own way; :func:`fuse` combines their top ``depth`` of each query by
reciprocal ranks (Cormack et al. 2009) or by a weighted sum of per-query
normalized scores (a convex combination, which beats RRF once its weight is
tuned: Bruch et al. 2023) into one order of the whole corpus, whose first k a
search returns; :func:`fuse_everywhere` does the same where every stage scored
every document (``depth=None``). The fusion's parameters are read at search time, so a grid
over them searches the fitted stages again without encoding any document.
"""

import math
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
from skbert._retrieval._index import best_k, in_order
from skbert._retrieval._search import fitted_reranker, n_candidates, reranked, without_self
from skbert._validation import check_corpus_not_empty, check_single_texts


def fuse(rankings, weights, n_documents, fusion="convex", normalization="zscore", rrf_k=60,
         k=10, no_match_at_zero=None):
    """The top ``k`` of one fused ranking of the corpus, for each query.

    Every corpus document gets a fused score: the sum of what each stage
    gives it, a stage giving a document outside its ranking its floor (below).
    The documents come in one total order, by score descending then by the
    lower corpus index, in the float32 scores returned; the first ``k`` of it
    are returned, so a smaller ``k`` gives the start of a larger one's list.

    Parameters
    ----------
    rankings : list of (scores, indices)
        Each stage's ranking: arrays of shape (n_queries, depth_s), scores
        descending, corpus indices (unique in a row).
    weights : sequence of float
        One non-negative weight per stage, not all 0; scaled to sum to 1.
    n_documents : int
        The corpus size.
    fusion : {"convex", "rrf"}
        "convex": the weighted sum of each stage's scores, normalized per
        query over the stage's ranking; a document the stage did not rank takes
        that stage's lowest normalized score (0 for "minmax"). "rrf": the
        weighted sum of ``1 / (rrf_k + rank)``, ranks from 1, tied scores
        sharing the best rank of the tie; a document a stage did not rank,
        or did not match, takes nothing from it.
    normalization : {"zscore", "minmax"}
        "convex"'s per-query scaling: to mean 0 and standard deviation 1 (all
        equal scores: 0), or to [0, 1] (all equal: 0).
    rrf_k : float
        "rrf"'s rank offset: larger flattens the gap between ranks.
    k : int
        Documents to return per query, at most ``n_documents``.
    no_match_at_zero : sequence of bool or None
        For each stage, whether a score of exactly 0 means that it did not
        match the document (sparse rows with no term in common: BM25,
        TF-IDF): "rrf" then gives such an entry nothing. "convex" is
        unaffected (its normalization counts the zeros). None: no stage.

    Returns
    -------
    scores : ndarray of shape (n_queries, k), float32
        The fused scores, descending; equal scores in ascending corpus index.
        With weights summing to 1, "minmax" scores lie in [0, 1] and "rrf"
        scores in [0, 1 / (rrf_k + 1)].
    indices : ndarray of shape (n_queries, k), int64
    """
    if not 1 <= k <= n_documents:
        raise ValueError(f"k={k!r} must be between 1 and the corpus size, {n_documents}.")
    weights = _summing_to_one(weights)
    if no_match_at_zero is None:
        no_match_at_zero = [False] * len(rankings)
    n_queries = len(rankings[0][1])
    keys, parts, floors = [], [], []
    for weight, (scores, indices), zero_is_no_match in zip(weights, rankings,
                                                           no_match_at_zero):
        indices = np.asarray(indices, np.int64)
        part, kept, floor = _stage_parts(np.asarray(scores, dtype=np.float64), weight, fusion,
                                         normalization, rrf_k, zero_is_no_match)
        floors.append(floor)
        keys.append((np.arange(n_queries)[:, None] * n_documents + indices)[kept])
        parts.append(part[kept])
    # Each document's parts summed in one order (by value), whatever the order of the stages.
    keys, parts = np.concatenate(keys), np.concatenate(parts)
    order = np.lexsort((parts, keys))
    keys, position = np.unique(keys[order], return_inverse=True)
    floor = np.sort(floors, axis=0).sum(axis=0)
    rows, documents = np.divmod(keys, n_documents)
    sums = (np.bincount(position, weights=parts[order]) + floor[rows]).astype(np.float32)
    # Parts are >= 0: a candidate scores at least the floor, and one at the floor is in the
    # same place as a document no stage ranked, by its index.
    floor = floor.astype(np.float32)
    above = sums > floor[rows]
    rows, documents, sums = rows[above], documents[above], sums[above]
    order = np.lexsort((documents, -sums, rows))
    rows, documents, sums = rows[order], documents[order], sums[order]
    counts = np.bincount(rows, minlength=n_queries)
    column = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
    first = column < k
    scores = np.repeat(floor[:, None], k, axis=1)
    indices = np.empty((n_queries, k), dtype=np.int64)
    scores[rows[first], column[first]] = sums[first]
    indices[rows[first], column[first]] = documents[first]
    # Then the others by index: the first of the indices below k that are not above the floor
    # (at most ``count`` of those k are), so that nothing of the corpus's width is built.
    taken = np.zeros((n_queries, k), dtype=bool)
    small = documents < k
    taken[rows[small], documents[small]] = True
    rest = np.argsort(taken, axis=1, kind="stable")
    indices[np.arange(k) >= counts[:, None]] = rest[np.arange(k) < (k - counts)[:, None]]
    return scores, indices


def _normalized(scores, normalization):
    if normalization == "minmax":
        low, high = scores.min(axis=1, keepdims=True), scores.max(axis=1, keepdims=True)
        return (scores - low) / np.where(high > low, high - low, 1.0)
    spread = scores.std(axis=1, keepdims=True)
    return (scores - scores.mean(axis=1, keepdims=True)) / np.where(spread > 0, spread, 1.0)


def fuse_everywhere(scores, weights, fusion="convex", normalization="zscore", rrf_k=60, k=10,
                    no_match_at_zero=None):
    """:func:`fuse` where every stage scored every document: its ranking at a ``depth`` of
    the corpus size, each stage's scores normalized (or ranked) over the whole corpus.

    Parameters
    ----------
    scores : list of ndarray of shape (n_queries, n_documents)
        Each stage's score of every document, in corpus order.
    weights, fusion, normalization, rrf_k, k, no_match_at_zero
        As :func:`fuse`'s.

    Returns
    -------
    scores : ndarray of shape (n_queries, k), float32
        The fused scores, descending; equal scores in ascending corpus index.
    indices : ndarray of shape (n_queries, k), int64
    """
    weights = _summing_to_one(weights)
    if no_match_at_zero is None:
        no_match_at_zero = [False] * len(scores)
    totals = []
    for weight, stage_scores, zero_is_no_match in zip(weights, scores, no_match_at_zero):
        part, kept, floor = _stage_parts(np.asarray(stage_scores, dtype=np.float64), weight,
                                         fusion, normalization, rrf_k, zero_is_no_match)
        totals.append(np.where(kept, part, 0.0) + floor[:, None])
    # Summed in one order (by value), whatever the order of the stages, as in fuse.
    total = np.sort(totals, axis=0).sum(axis=0).astype(np.float32)
    indices = np.broadcast_to(np.arange(total.shape[1]), total.shape)
    if k < total.shape[1]:
        total, indices = best_k(total, indices, k)
    return in_order(total, indices)


def _summing_to_one(weights):
    weights = np.asarray(weights, dtype=np.float64)
    return weights / math.fsum(weights)  # fsum: the same total in any order of the stages


def _stage_parts(scores, weight, fusion, normalization, rrf_k, zero_is_no_match):
    """What one stage gives each document it ranked, ``(part, kept, floor)``: ``part`` where
    ``kept``, plus ``floor`` (one value per query) to every document of the corpus."""
    from scipy.stats import rankdata

    if fusion == "rrf":
        kept = scores != 0 if zero_is_no_match else np.ones(scores.shape, dtype=bool)
        return (weight / (rrf_k + rankdata(-scores, method="min", axis=1)), kept,
                np.zeros(len(scores)))
    normalized = _normalized(scores, normalization)
    low = normalized.min(axis=1, keepdims=True)
    # Relative to the stage's lowest score, so that a document the stage did not rank adds
    # nothing; that lowest score goes to every document of the query through the floor.
    return weight * (normalized - low), np.ones(scores.shape, dtype=bool), weight * low[:, 0]


# Scores of one stage held at once by depth=None's fusion (a block of queries x the corpus):
# 32 MiB as float64, a few times that in all.
_BLOCK_VALUES = 2**22


class HybridSearch(_BaseComposition):
    """Search by several first stages at once, fused into one ranking: BM25 and meaning.

    Each first stage is a :class:`~skbert.SimilaritySearch` over the same
    corpus (``SimilaritySearch(BM25Vectorizer())``, a bi-encoder
    ``SimilaritySearch(BertVectorizer(model))``, a
    :class:`~skbert.StaticVectorizer` or ``TfidfVectorizer`` one); each ranks
    its top ``depth`` of a query, and the fusion combines those rankings into
    one order of the corpus: every document has a fused score (one that no
    stage ranked has the lowest, the floor), documents come by score then by
    the lower corpus index, and ``search(queries, k)`` returns the first ``k``
    of that order, so a smaller ``k`` gives the start of a larger one's list. On
    SciFact (BEIR test, nDCG@10), BM25 alone (English stemmer, Lucene's stop
    words) scores 0.6863 and the
    all-MiniLM-L6-v2 bi-encoder 0.6451; reciprocal-rank fusion of the two
    0.7171, and the convex combination at its defaults (z-scores, equal
    weights) 0.7301, which is also what tuning on the 809 train queries
    chooses; with ``depth=None`` and BM25's weight tuned, 0.7331.

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
        corpus (the same texts in the same order) is used as it is, and one
        fitted on other documents is refused.
    fusion : {"convex", "rrf"}, default="convex"
        "convex": the weighted sum of each stage's scores, normalized per
        query over its top ``depth`` (``normalization``); a document outside a
        stage's top ``depth`` takes that stage's lowest normalized score there
        (0 for "minmax"). "rrf": reciprocal-rank fusion, the weighted sum of
        ``1 / (rrf_k + rank)`` over the stages that ranked the document, where
        documents tied in a stage's scores share the best rank of the tie, and
        a stage over sparse rows (``BM25Vectorizer``, ``TfidfVectorizer``)
        gives nothing to a document it scored 0 (no term in common), as a
        stage gives nothing to a document outside its top ``depth``.
    weights : sequence of float or None, default=None
        Each stage's non-negative weight, in the order of ``searches`` (a list,
        tuple or 1-D array; not all 0); None weighs them equally. They are
        scaled to sum to 1, so only their ratios matter: "minmax" fused scores
        lie in [0, 1]. Tune them: an untuned equal weight of a weak stage drags
        a strong one down.
    normalization : {"zscore", "minmax"}, default="zscore"
        "convex"'s per-query scaling of each stage's scores: to mean 0 and
        standard deviation 1, or to [0, 1]. Unused by "rrf". Untuned, with
        equal weights, z-scores ranked best on the three corpora measured
        (SciFact, the bundled sample, STS-B as duplicate retrieval; the user
        guide's table).
    rrf_k : float, default=60
        "rrf"'s rank offset (60 in Cormack et al.). Unused by "convex".
    depth : int or None, default=100
        Documents each stage ranks per query (at most the corpus size; at
        least ``rerank_k`` with a reranker), the candidates of the fusion;
        whatever ``k`` a search asks for, the rest of the corpus follows them
        at the floor score, by corpus index. None: every document, as a
        depth of the corpus size: each stage scores the whole corpus for
        each query, and its scores are normalized (or ranked) over all of
        them, exactly, where an int normalizes over the top ``depth`` and
        gives the others the floor. Each stage must score every document
        (``backend="exact"``, no reranker of its own); the scores are
        computed a block of queries at a time (about 4 million scores a
        stage).
    n_neighbors : int, default=10
        Default number of neighbours for :meth:`kneighbors`.
    reranker : estimator or None, default=None
        A second stage that rescores the fused top ``rerank_k`` of each query
        (a :class:`~skbert.BertReranker`), as in
        :class:`~skbert.SimilaritySearch`: an unfitted one is cloned and
        fitted with no data, a fitted or frozen one used as it is.
    rerank_k : int, default=100
        Fused candidates per query that the reranker scores: the first
        ``rerank_k`` of the fused order (the first ``k`` where a search asks
        for more), as in :class:`~skbert.SimilaritySearch`. A search of ``k``
        up to ``rerank_k`` returns the start of the reranker's order of the
        same candidates; one of a larger ``k`` reranks the fused first ``k``,
        which is not the list of ``k = rerank_k`` extended.

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
        "depth": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "n_neighbors": [Interval(numbers.Integral, 1, None, closed="left")],
        "reranker": [HasMethods(["fit", "predict"]), None],
        "rerank_k": [Interval(numbers.Integral, 1, None, closed="left")],
    }

    def __init__(self, searches, *, fusion="convex", weights=None, normalization="zscore",
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
        self._validate_names([name for name, _ in self.searches])
        for name, search in self.searches:
            inner = _unfrozen(search)
            if not hasattr(inner, "search") or getattr(inner, "vectorizer", None) is None:
                raise ValueError(f"The search {name!r} ({type(inner).__name__}) must be a "
                                 "SimilaritySearch with a vectorizer: HybridSearch searches "
                                 "texts.")
        # Before any stage is fitted: a mistake here costs no encoding.
        self._checked_weights(len(self.searches))
        texts = check_single_texts(X, "HybridSearch")
        check_corpus_not_empty(len(texts), "HybridSearch.fit")
        fitted = []
        for name, search in self.searches:
            fitted.append((name, _fitted(search, texts)))
            if fitted[-1][1] is search:  # used as it is: fitted on this corpus?
                self._check_corpus(name, search, texts)
        self.reranker_ = fitted_reranker(self.reranker)
        self.searches_ = fitted
        self.named_searches_ = Bunch(**dict(fitted))
        self._texts = texts
        self.n_samples_fit_ = len(texts)
        return self

    @staticmethod
    def _check_corpus(name, search, texts):
        if search.n_samples_fit_ != len(texts):
            raise ValueError(f"The search {name!r} is used fitted, on {search.n_samples_fit_} "
                             f"documents; the corpus has {len(texts)}: fit it on this corpus.")
        corpus = getattr(_unfrozen(search), "_texts", None)
        if corpus != texts:  # None: a SimilaritySearch pickled before it kept its texts
            differs = next((i for i, (a, b) in enumerate(zip(corpus or (), texts)) if a != b), 0)
            raise ValueError(f"The search {name!r} is used fitted, on other documents than this "
                             f"corpus: they differ first at document {differs}. Fit it on this "
                             "corpus.")

    def _checked_weights(self, n_searches):
        if self.weights is None:
            return np.ones(n_searches)
        try:
            weights = np.asarray(self.weights, dtype=np.float64)
        except (TypeError, ValueError):  # a dict, a set, strings: no sequence of numbers
            weights = None
        if (weights is None or weights.shape != (n_searches,) or not np.isfinite(weights).all()
                or (weights < 0).any() or not weights.any()):
            raise ValueError(f"weights={self.weights!r} must be a sequence (list, tuple, 1-D "
                             f"array) of {n_searches} finite, non-negative numbers, not all 0, "
                             "one for each search in the order of searches; or None, equal "
                             "weights.")
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
        # As SimilaritySearch: the reranker scores the first max(k, rerank_k) of the fused order
        # (the stages rank rerank_k at least, so that the fused order has that many candidates).
        reranking = self.reranker_ is not None
        n_fused = (n_candidates(k, self.rerank_k, self.n_samples_fit_ - extra) if reranking
                   else k) + extra
        no_match_at_zero = [getattr(_unfrozen(search), "_zero_is_no_match", False)
                            for _, search in self.searches_]
        if self.depth is None:
            fused = self._fused_everywhere(queries, weights, n_fused, no_match_at_zero)
        else:
            depth = min(max(self.depth, self.rerank_k) if reranking else self.depth,
                        self.n_samples_fit_)
            rankings = [search.search(queries, k=depth) for _, search in self.searches_]
            fused = fuse(rankings, weights, self.n_samples_fit_, self.fusion,
                         self.normalization, self.rrf_k, n_fused, no_match_at_zero)
        if exclude_self:
            fused = without_self(*fused)
        if not reranking:
            return fused
        return reranked(self.reranker_, self._texts, queries, fused, k)

    def _fused_everywhere(self, queries, weights, k, no_match_at_zero):
        """``depth=None``'s fusion: each stage scores every document, a block of queries at a
        time, so that memory stays near ``_BLOCK_VALUES`` scores a stage."""
        stages = []
        for name, search in self.searches_:
            inner = _unfrozen(search)
            if not hasattr(inner._index, "similarity") or inner.reranker_ is not None:
                what = ("a reranker of its own" if inner.reranker_ is not None
                        else f"backend={inner.backend!r}")
                raise ValueError(f"depth=None scores every document in every stage, and the "
                                 f"search {name!r} ({what}) ranks only its top k: give it "
                                 "backend='exact' and no reranker, or give depth an int.")
            stages.append((inner._index, inner._encode(queries)))
        n_rows = max(1, _BLOCK_VALUES // self.n_samples_fit_)
        blocks = [fuse_everywhere([index.similarity(rows[start:start + n_rows], 0,
                                                    self.n_samples_fit_)
                                   for index, rows in stages],
                                  weights, self.fusion, self.normalization, self.rrf_k, k,
                                  no_match_at_zero)
                  for start in range(0, len(queries), n_rows)]
        return np.concatenate([b[0] for b in blocks]), np.concatenate([b[1] for b in blocks])

    def search(self, queries, k=10):
        """The ``k`` best corpus documents of each query, by the fused score.

        Parameters
        ----------
        queries : iterable of str
        k : int, default=10

        Returns
        -------
        scores : ndarray of shape (n_queries, k), float32
            Descending, equal scores in ascending corpus index. The fused
            scores (weights scaled to sum to 1): "convex"'s weighted sum of
            normalized scores, or "rrf"'s weighted sum of reciprocal ranks;
            with a ``reranker``, its scores of the (query, document) pairs.
        indices : ndarray of shape (n_queries, k), int64
            Corpus indices: the first ``k`` of one fused order of the corpus.
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
            distance (a fused score is no similarity of two vectors). In
            [0, 1] for "minmax" and "rrf"; "zscore" and a reranker's
            scores may take them below 0. Only when ``return_distance=True``.
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
