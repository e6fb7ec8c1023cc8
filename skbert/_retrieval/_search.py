"""SimilaritySearch: cosine nearest neighbours in bounded memory, optionally reranked."""

import numbers

import numpy as np
from scipy import sparse
from sklearn.base import BaseEstimator, clone
from sklearn.preprocessing import normalize
from sklearn.utils.validation import check_array, check_is_fitted

from skbert._compat import HasMethods, Interval, StrOptions, _fit_context
from skbert._fitted_state import _fitted, _is_fitted, _prefit, _unfrozen
from skbert._retrieval._index import INDEXES, SparseIndex, top_k_blocked, unit_rows
from skbert._validation import _checked_items, check_corpus_not_empty, check_texts, warn_at_caller


def _row_dots(left, right):
    """The inner product of each row of ``left`` with the same row of ``right``."""
    if sparse.issparse(left):
        return np.asarray(left.multiply(right).sum(axis=1)).ravel()
    return (left * right).sum(axis=1)


def fitted_reranker(reranker):
    """``reranker`` used as it is where it is fitted (or frozen), else a clone fitted with no
    data (which reads a cross-encoder folder's head); None stays None."""
    if reranker is None or _prefit(reranker) or _is_fitted(reranker):
        return reranker
    return clone(reranker).fit()


def n_candidates(k, rerank_k, n_documents):
    """First-stage candidates per query for a reranked top ``k``: ``rerank_k``, more where
    ``k`` asks for more, at most the ``n_documents`` there are."""
    return min(max(k, rerank_k), n_documents)


def reranked(reranker, texts, queries, candidates, k):
    """The reranker's ``k`` best of each query's first-stage ``candidates`` (their
    ``(scores, indices)`` into the corpus ``texts``): ``(its scores, descending, as float32;
    indices)``."""
    indices = candidates[1]
    pairs = [(query, texts[j]) for query, row in zip(queries, indices) for j in row]
    scores = np.asarray(reranker.predict(pairs), dtype=np.float64).reshape(indices.shape)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return (np.take_along_axis(scores, order, axis=1).astype(np.float32),
            np.take_along_axis(indices, order, axis=1))


def without_self(scores, indices):
    """Each row's ranking of the corpus without the row's own corpus index (query ``i`` is
    corpus row ``i``), one column fewer: the last column goes where a tie pushed it out."""
    is_self = indices == np.arange(len(indices))[:, None]
    is_self[~is_self.any(axis=1), -1] = True
    shape = (len(indices), indices.shape[1] - 1)
    return scores[~is_self].reshape(shape), indices[~is_self].reshape(shape)


def _vectors(X, whose):
    """``X`` as float32 vectors, dense or CSR, for a search without a vectorizer; texts are
    refused with the way to search them. ``whose`` names the input in the message."""
    try:
        return check_array(X, dtype=np.float32, accept_sparse="csr", ensure_min_samples=0)
    except ValueError:
        try:  # the first cell, of a DataFrame too (iterating over one gives its column names)
            first = np.asarray(X, dtype=object).ravel()[:1].tolist()
        except (TypeError, ValueError):
            first = []
        if not (first and isinstance(first[0], str)):
            raise
        first = first[0]
        raise ValueError(
            f"{whose} vectors (a 2-D array or sparse matrix), not texts such as {str(first)!r}: "
            "to search texts, fit a search with a vectorizer on the corpus texts, e.g. "
            "SimilaritySearch(BertVectorizer(model)) or SimilaritySearch(BM25Vectorizer())."
        ) from None


class SimilaritySearch(BaseEstimator):
    """Cosine-similarity (or BM25) search over a corpus of texts or vectors.

    Parameters
    ----------
    vectorizer : transformer or None, default=None
        Turns texts into vectors: a :class:`~skbert.BertVectorizer`, or any
        transformer or Pipeline fitted on the corpus (e.g. BertVectorizer
        followed by ``PCA(whiten=True)``). It is cloned and fitted at ``fit``,
        but for a fitted :class:`~skbert.FineTunedVectorizer`, which learned
        from its own pairs or labels, and a
        :class:`sklearn.frozen.FrozenEstimator`, both used as they are. Where
        the search itself is cloned (``cross_val_score``, ``GridSearchCV``),
        pass ``FrozenEstimator(tuned)``: a clone of a fitted
        FineTunedVectorizer is not fitted, a FrozenEstimator's clone is itself.
        None means ``fit`` and the queries take vectors (2-D arrays, dense or
        sparse).
        A vectorizer of sparse rows searches them exactly (``backend="exact"``,
        ``precision="float32"``), with nothing dense of the corpus's size: a
        :class:`~skbert.BM25Vectorizer` by the dot product of its
        ``transform_queries`` rows with its document rows, which is the BM25
        score (as for any vectorizer of sparse rows with a ``transform_queries``
        method); any other (``TfidfVectorizer``) by cosine similarity.
    query_vectorizer : transformer or None, default=None
        Turns query texts into vectors, for models that encode queries and
        documents differently (E5's ``"query: "`` / ``"passage: "``
        prompts, BGE's instruction before queries): e.g. ``BertVectorizer(
        model, prompt="query")`` next to ``vectorizer=BertVectorizer(model,
        prompt="document")``. Cloned and fitted on the corpus texts at ``fit``
        (for a BertVectorizer that only loads the model, which clones share).
        None encodes queries with ``vectorizer``.
    n_neighbors : int, default=10
        Default number of neighbours for :meth:`kneighbors`.
    backend : {"exact", "faiss"}, default="exact"
        "exact" searches in blocks of queries x corpus, so memory stays bounded
        for large corpora. "faiss" builds an approximate HNSW index (inner
        product on unit vectors) for very large corpora; needs
        ``pip install skbert[faiss]``.
    precision : {"float32", "int8", "binary"}, default="float32"
        How the exact backend holds the corpus (unit vectors) in memory.
        "int8" keeps one byte per value, each dimension scaled over the range
        the corpus spans in it (a quarter of the bytes); queries stay float32
        and are scored against the decoded values, so scores approximate the
        cosine similarities. "binary" keeps one bit per value, its sign (1/32
        of the bytes), and finds candidates by Hamming distance between the
        query's signs and the corpus bits; see ``rescore``.
    rescore : int or None, default=4
        With ``precision="binary"``: the Hamming search keeps ``k * rescore``
        candidates per query and ranks them by their cosine similarity to the
        query in float32. The float32 rows live in a memory-mapped temporary
        file (in ``TMPDIR``), not in the process's memory: the operating
        system's page cache keeps what is read. None keeps no float32 rows and
        ranks by Hamming distance alone, with scores ``1 - 2 * hamming /
        n_features`` (the cosine of the sign vectors). Unused by the other
        precisions, which score every row.
    block_size : int, default=2048
        Queries and corpus rows per block of the exact search.
    reranker : estimator or None, default=None
        A second stage: a :class:`~skbert.BertReranker` (or any estimator
        whose ``predict`` scores (query, document) pairs) that rescores the
        first stage's ``rerank_k`` candidates of each query; :meth:`search`
        and :meth:`kneighbors` return its top k, by its scores (:meth:`search`
        gives them as they are, :meth:`kneighbors` 1 - them). An unfitted
        one is cloned and fitted with no data at ``fit`` (which reads a
        cross-encoder folder); a fitted one is used as it is. Where the
        search is cloned (``GridSearchCV``), pass one trained in this
        process as ``FrozenEstimator(reranker)``: a clone of a fitted
        reranker is not fitted. Needs a ``vectorizer`` (the corpus texts are
        kept for it).
    rerank_k : int, default=100
        First-stage candidates per query that the reranker scores (at most
        the corpus size; at least the k asked for). Reranking costs one
        cross-encoder pass per candidate: this many per query.

    Attributes
    ----------
    vectorizer_ : transformer or None
        The fitted clone of ``vectorizer``, or ``vectorizer`` itself where it
        is used as it is.
    query_vectorizer_ : transformer or None
        The fitted clone of ``query_vectorizer``, or ``query_vectorizer``
        itself where it is used as it is.
    n_samples_fit_ : int
        Number of corpus rows.
    index_bytes_ : int
        Bytes of the corpus index in memory: float32 vectors, int8 codes with
        their per-dimension ranges, or bits (without the memory-mapped rows
        that binary rescoring reads).
    reranker_ : estimator or None
        The fitted reranker (a clone of ``reranker``, or itself where it is
        used as it is).

    Examples
    --------
    >>> import numpy as np
    >>> from skbert import SimilaritySearch
    >>> corpus = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> search = SimilaritySearch(n_neighbors=2).fit(corpus)
    >>> scores, indices = search.search(np.array([[1.0, 0.1]]), k=2)
    >>> indices.tolist()
    [[0, 2]]
    """

    _parameter_constraints: dict = {
        "vectorizer": [HasMethods(["fit", "transform"]), None],
        "query_vectorizer": [HasMethods(["fit", "transform"]), None],
        "n_neighbors": [Interval(numbers.Integral, 1, None, closed="left")],
        "backend": [StrOptions({"exact", "faiss"})],
        "precision": [StrOptions(set(INDEXES))],
        "rescore": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "block_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "reranker": [HasMethods(["fit", "predict"]), None],
        "rerank_k": [Interval(numbers.Integral, 1, None, closed="left")],
    }

    def __init__(self, vectorizer=None, *, query_vectorizer=None, n_neighbors=10,
                 backend="exact", precision="float32", rescore=4, block_size=2048,
                 reranker=None, rerank_k=100):
        self.vectorizer = vectorizer
        self.query_vectorizer = query_vectorizer
        self.n_neighbors = n_neighbors
        self.backend = backend
        self.precision = precision
        self.rescore = rescore
        self.block_size = block_size
        self.reranker = reranker
        self.rerank_k = rerank_k

    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X, y=None):
        """Encode and index the corpus.

        Parameters
        ----------
        X : iterable of str, or array-like of shape (n_samples, n_features)
            Texts when ``vectorizer`` is set, otherwise vectors.
        y : None
            Ignored.

        Returns
        -------
        self : SimilaritySearch
        """
        if self.backend == "faiss" and self.precision != "float32":
            raise ValueError(f"precision={self.precision!r} is for backend='exact'; the faiss "
                             "backend keeps float32 vectors.")
        if self.query_vectorizer is not None and self.vectorizer is None:
            raise ValueError("query_vectorizer encodes query texts for a corpus of texts: set "
                             "vectorizer as well.")
        if self.reranker is not None and self.vectorizer is None:
            raise ValueError("reranker scores (query, document) texts: set vectorizer, so that "
                             "the corpus is texts.")
        texts = None
        if self.vectorizer is None:
            self.vectorizer_ = self.query_vectorizer_ = None
            vectors = _vectors(X, "SimilaritySearch without a vectorizer takes")
            check_corpus_not_empty(vectors.shape[0], "SimilaritySearch.fit")
        else:
            X = texts = check_texts(X)  # read once: the query vectorizer fits on it too
            check_corpus_not_empty(len(texts), "SimilaritySearch.fit")
            if _prefit(self.vectorizer):
                self.vectorizer_, vectors = self.vectorizer, self.vectorizer.transform(X)
            else:
                self.vectorizer_ = clone(self.vectorizer)
                vectors = self.vectorizer_.fit_transform(X)
            self.query_vectorizer_ = (None if self.query_vectorizer is None
                                      else _fitted(self.query_vectorizer, X))
        self.reranker_ = fitted_reranker(self.reranker)
        # The texts that mining and the reranker read, as fit read them.
        self._texts = texts
        # BM25's rows score by their dot product with query rows of its own; others by cosine.
        self._dot = sparse.issparse(vectors) and hasattr(self.vectorizer_, "transform_queries")
        if sparse.issparse(vectors) and (self.backend, self.precision) != ("exact", "float32"):
            source = ("The sparse input X" if self.vectorizer_ is None
                      else type(_unfrozen(self.vectorizer_)).__name__)
            raise ValueError(f"{source} gives sparse rows, "
                             "which are searched exactly as they are: backend='exact', "
                             f"precision='float32', not {self.backend!r}, {self.precision!r}.")
        unit = self._scored_rows(vectors)
        self.n_samples_fit_, self._n_features = unit.shape
        if sparse.issparse(unit):
            self._index = SparseIndex(unit)
            self.index_bytes_ = self._index.nbytes
        elif self.backend == "faiss":
            self._index = _faiss_index(unit)
            self.index_bytes_ = unit.nbytes
        else:
            extra = {"keep_vectors": self.rescore is not None} if self.precision == "binary" else {}
            self._index = INDEXES[self.precision](unit, **extra)
            self.index_bytes_ = self._index.nbytes
        return self

    def _scored_rows(self, vectors):
        """Rows as the index scores them: as they are for a dot product (BM25), else scaled to
        unit length (cosine), sparse rows kept sparse."""
        if self._dot:
            return sparse.csr_matrix(vectors, dtype=np.float32)
        if sparse.issparse(vectors):
            return normalize(sparse.csr_matrix(vectors, dtype=np.float32))
        return unit_rows(vectors)

    def _encode(self, X):
        if self.query_vectorizer_ is not None:
            vectors = self.query_vectorizer_.transform(X)
        elif self._dot:
            vectors = self.vectorizer_.transform_queries(X)
        elif self.vectorizer_ is not None:
            vectors = self.vectorizer_.transform(X)
        else:
            vectors = _vectors(X, "SimilaritySearch was fitted without a vectorizer: its "
                                  "queries are")
        if vectors.shape[1] != self._n_features:
            source = "Queries" if self.vectorizer_ is None else "The query vectorizer's vectors"
            raise ValueError(f"{source} have {vectors.shape[1]} features, the corpus has "
                             f"{self._n_features}.")
        if isinstance(self._index, SparseIndex):
            return self._scored_rows(vectors)
        return unit_rows(vectors.toarray() if sparse.issparse(vectors) else vectors)

    def _top_k(self, queries, k):
        if self.backend == "faiss":
            scores, indices = self._index.search(queries, k)
            return scores, indices.astype(np.int64)
        if self.precision != "binary":
            return top_k_blocked(queries, self._index, k, self.block_size)
        if self.rescore is not None and self._index.vectors is None:
            raise ValueError(f"rescore={self.rescore!r} reads float32 rows, which this index was "
                             "fitted without (rescore=None): fit it again.")
        n_candidates = k if self.rescore is None else min(k * self.rescore, len(self._index))
        scores, candidates = top_k_blocked(queries, self._index, n_candidates, self.block_size)
        if self.rescore is None:
            return scores / self._n_features, candidates  # n_bits - 2 * hamming, scaled
        return self._index.rescored(queries, candidates, k)

    def _check_k(self, k, name, extra=0):
        if not isinstance(k, numbers.Integral) or not 1 <= k <= self.n_samples_fit_ - extra:
            raise ValueError(f"{name}={k!r} must be an int between 1 and "
                             f"{self.n_samples_fit_ - extra} (the corpus size"
                             f"{' less the query itself' if extra else ''}).")

    def search(self, queries, k=10):
        """The ``k`` most similar corpus rows of each query.

        Parameters
        ----------
        queries : iterable of str, or array-like of shape (n_queries, n_features)
        k : int, default=10

        Returns
        -------
        scores : ndarray of shape (n_queries, k), float32
            Descending. Without a reranker, cosine similarities (as
            ``precision`` and ``rescore`` approximate them), or BM25 scores
            with a :class:`~skbert.BM25Vectorizer`. With a
            ``reranker``, its own scores of the (query, document) pairs, its
            ``predict``: not cosines; a :class:`~skbert.BertReranker` gives
            them in [0, 1] through a sigmoid activation, unbounded through an
            identity one (logits).
        indices : ndarray of shape (n_queries, k), int64
            Corpus row indices.
        """
        check_is_fitted(self)
        self._check_k(k, "k")
        if self.reranker_ is None:
            return self._top_k(self._encode(queries), k)
        queries = self._query_texts(queries)
        return self._reranked(queries, self._top_k(self._encode(queries), self._n_candidates(k)),
                              k)

    def _query_texts(self, queries, what="queries"):
        queries = check_texts(queries)
        if queries and not isinstance(queries[0], str):
            raise ValueError(f"The {what} must be texts (str), not pairs.")
        return queries

    def _positive_texts(self, positives):
        """Mining's positives as texts: corpus indices (all ints) read from the fitted
        corpus, or texts, checked as queries are."""
        items, _ = _checked_items(positives, (2,))
        is_index = [isinstance(item, numbers.Integral) and not isinstance(item, bool)
                    for item in items]
        if not any(is_index):
            return self._query_texts(items, "positives")
        if not all(is_index):
            position = is_index.index(not is_index[0])
            raise ValueError(
                f"positives must be all texts or all corpus indices (ints); the first is "
                f"{'an int' if is_index[0] else type(items[0]).__name__}, the one at index "
                f"{position} is {type(items[position]).__name__} ({items[position]!r}).")
        for position, index in enumerate(items):
            if not 0 <= index < self.n_samples_fit_:
                raise ValueError(f"positives[{position}]={int(index)} is not a corpus index: "
                                 f"they go from 0 to {self.n_samples_fit_ - 1}.")
        return [self._texts[index] for index in items]

    def _n_candidates(self, k, extra=0):
        return n_candidates(k, self.rerank_k, self.n_samples_fit_ - extra)

    @property
    def _zero_is_no_match(self):
        """Whether a score of exactly 0 says that a document shares no term with the query:
        first-stage scores of sparse rows (BM25, TF-IDF), not a reranker's."""
        return isinstance(self._index, SparseIndex) and self.reranker_ is None

    def _reranked(self, queries, candidates, k):
        return reranked(self.reranker_, self._texts, queries, candidates, k)

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """Nearest neighbours by cosine distance (or by the reranker's score), with
        scikit-learn's semantics.

        Parameters
        ----------
        X : iterable of str, array-like or None, default=None
            Queries. None queries the corpus itself, and a point is then not
            its own neighbour.
        n_neighbors : int or None, default=None
            None uses ``self.n_neighbors``.
        return_distance : bool, default=True

        Returns
        -------
        distances : ndarray of shape (n_queries, n_neighbors)
            Ascending; ``1 - scores`` of :meth:`search`. Without a reranker,
            cosine distances (1 - cosine similarity, clipped to [0, 2]), or
            1 - the BM25 score with a :class:`~skbert.BM25Vectorizer` (not
            clipped: below 0 for a score above 1). With
            a ``reranker``, 1 - its score of each (query, document) pair, not
            clipped, and not a cosine distance: in [0, 1] for scores in
            [0, 1] (a sigmoid activation), below 0 for scores above 1 (an
            identity activation's logits). Only when ``return_distance=True``.
        indices : ndarray of shape (n_queries, n_neighbors)
        """
        check_is_fitted(self)
        n_neighbors = self.n_neighbors if n_neighbors is None else n_neighbors
        reranked = self.reranker_ is not None
        if X is not None:
            self._check_k(n_neighbors, "n_neighbors")
            if reranked:
                X = self._query_texts(X)
            n_first = self._n_candidates(n_neighbors) if reranked else n_neighbors
            scores, indices = self._top_k(self._encode(X), n_first)
        else:
            self._check_k(n_neighbors, "n_neighbors", extra=1)
            if self._dot:  # the corpus's texts as queries
                corpus = self._encode(self._texts)
            elif self.backend == "faiss":
                corpus = self._index.reconstruct_n(0, self.n_samples_fit_)
            else:
                corpus = self._index.decode()
            n_first = self._n_candidates(n_neighbors, extra=1) if reranked else n_neighbors
            scores, indices = without_self(*self._top_k(corpus, n_first + 1))
            X = self._texts
        if reranked:  # 1 - the reranker's score: ascending, as distances are
            scores, indices = self._reranked(X, (scores, indices), n_neighbors)
        distances = 1.0 - scores if reranked or self._dot else np.clip(1.0 - scores, 0.0, 2.0)
        return (distances, indices) if return_distance else indices

    def mine_negatives(self, queries, positives, n_negatives=4, *, range_min=0,
                       range_max=100, margin=None, max_score=None, sampling="top",
                       random_state=None):
        """Hard negatives for training: ``(query, positive, negative, ...)`` tuples.

        Each query's candidates are the fitted corpus ranked by the first
        stage (its cosine similarity to the query); a candidate is a negative
        if it passes the filters below, unless its text is the query's own
        (a query that is also a corpus document, as in symmetric data, ranks
        first for itself at cosine 1: a false negative) or one of that
        query's positives (every document given as its positive), and never
        twice in a tuple (a text the corpus holds more than once is one
        negative). Texts are compared exactly, as sentence-transformers'
        ``mine_hard_negatives`` compares them, whose controls these are. The
        tuples feed :class:`~skbert.BertReranker` and
        ``FineTunedVectorizer(loss="in_batch")`` alike.

        Parameters
        ----------
        queries : sequence of str
        positives : sequence of str, or sequence of int
            The positive document of each query (a query with several
            positives appears once per positive, and gets a tuple for each):
            its text, or its row in the fitted corpus (all ints, from 0), whose
            text the tuple then holds. A positive text that no corpus document
            has exactly (a trailing period, other spacing) leaves its document
            a candidate, which may come back as a hard negative of its own
            query: a warning says how many positives are not in the corpus.
        n_negatives : int, default=4
            Negatives per tuple. A query with fewer eligible candidates gives
            no tuple (a warning says how many were left out).
        range_min : int, default=0
            Candidates ranked before this (from 0, the most similar) are
            skipped: the very top of a ranking holds unjudged positives.
            Ranks count every corpus row, the query's own text and repeated
            texts included.
        range_max : int or None, default=100
            Only candidates ranked before this are considered; None considers
            the whole corpus.
        margin : float or None, default=None
            A negative's similarity to the query must be at most the
            positive's less ``margin`` (the positive encoded as the corpus
            is); 0 keeps every negative below its positive. None: no bound.
        max_score : float or None, default=None
            A negative's similarity to the query must be at most this.
        sampling : {"top", "random"}, default="top"
            "top" takes the best-ranked eligible candidates, "random" draws
            them from all eligible ones (kept in rank order).
        random_state : int, RandomState instance or None, default=None
            Seeds ``sampling="random"``.

        Returns
        -------
        tuples : list of tuple of str
            ``(query, positive, negative_1, ..., negative_n)``, in the order
            of the (query, positive) pairs given.
        """
        from sklearn.utils import check_random_state

        check_is_fitted(self)
        if self._texts is None:
            raise ValueError("mine_negatives reads the corpus texts: fit the search on texts "
                             "(with a vectorizer).")
        queries = self._query_texts(queries)
        positives = self._positive_texts(positives)
        if len(queries) != len(positives) or not queries:
            raise ValueError(f"mine_negatives got {len(queries)} queries and {len(positives)} "
                             "positives: give one positive per query, at least one.")
        for name, value in (("n_negatives", n_negatives), ("range_min", range_min)):
            if not isinstance(value, numbers.Integral) or value < (name == "n_negatives"):
                raise ValueError(f"{name}={value!r} must be an int of at least "
                                 f"{int(name == 'n_negatives')}.")
        if range_max is not None and (not isinstance(range_max, numbers.Integral)
                                      or range_max < range_min + n_negatives):
            raise ValueError(f"range_max={range_max!r} must be None or an int of at least "
                             f"range_min + n_negatives ({range_min + n_negatives}).")
        if sampling not in ("top", "random"):
            raise ValueError(f"sampling={sampling!r} must be 'top' or 'random'.")
        corpus = set(self._texts)
        n_missing = sum(positive not in corpus for positive in positives)
        if n_missing:
            warn_at_caller(
                f"{n_missing} of {len(positives)} positives are not in the fitted corpus "
                "(matched by exact text): a corpus document that differs from its positive "
                "only slightly (a trailing period, other spacing) is not known as the "
                "positive, and may come back as a hard negative of its own query. Give the "
                "positives as corpus indices, or as their exact corpus texts.")
        own = {}  # query -> the texts that are never its negatives: its own, its positives'
        for query, positive in zip(queries, positives):
            own.setdefault(query, {query}).add(positive)
        distinct = list(own)
        stop = self.n_samples_fit_ if range_max is None else min(range_max, self.n_samples_fit_)
        encoded = self._encode(distinct)
        scores, indices = self._top_k(encoded, stop)
        row_of = {query: row for row, query in enumerate(distinct)}
        bounds = np.full(len(queries), np.inf)
        if margin is not None:  # each positive's similarity, encoded as the corpus is
            similarity = _row_dots(self._scored_rows(self.vectorizer_.transform(positives)),
                                   encoded[[row_of[query] for query in queries]])
            bounds = similarity - margin
        if max_score is not None:
            bounds = np.minimum(bounds, max_score)
        rng = check_random_state(random_state)
        tuples, n_short = [], 0
        for query, positive, bound in zip(queries, positives, bounds):
            row, taken = row_of[query], set(own[query])
            eligible = []
            for score, j in zip(scores[row, range_min:], indices[row, range_min:]):
                if score <= bound and self._texts[j] not in taken:
                    eligible.append(j)
                    taken.add(self._texts[j])  # a text the corpus repeats is one negative
            if len(eligible) < n_negatives:
                n_short += 1
                continue
            if sampling == "random":
                eligible = [eligible[i] for i in np.sort(
                    rng.choice(len(eligible), n_negatives, replace=False))]
            tuples.append((query, positive, *(self._texts[j] for j in eligible[:n_negatives])))
        if n_short:
            warn_at_caller(f"{n_short} of {len(queries)} (query, positive) pairs found fewer "
                           f"than {n_negatives} eligible negatives and give no tuple; widen "
                           "range_max, loosen margin or max_score, or ask fewer n_negatives.")
        return tuples

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = self.vectorizer is not None
        tags.target_tags.required = False
        return tags

    def __getstate__(self):
        state = dict(super().__getstate__())
        if state.get("backend") == "faiss" and "_index" in state:
            import faiss

            state["_index"] = faiss.serialize_index(state["_index"])
        return state

    def __setstate__(self, state):
        # A pickle of 0.1.0: no reranker, no corpus texts.
        for name, default in (("reranker", None), ("rerank_k", 100), ("reranker_", None),
                              ("_texts", None), ("_dot", False)):
            if name != "reranker_" or "_index" in state:
                state.setdefault(name, default)
        super().__setstate__(state)
        if self.backend == "faiss" and hasattr(self, "_index"):
            import faiss

            self._index = faiss.deserialize_index(self._index)


def _faiss_index(unit_vectors):
    try:
        import faiss
    except ImportError as exc:
        raise ImportError(
            "backend='faiss' needs the faiss library: pip install 'skbert[faiss]' (faiss-cpu)."
        ) from exc
    index = faiss.IndexHNSWFlat(unit_vectors.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efSearch = 128
    index.add(np.ascontiguousarray(unit_vectors))
    return index
