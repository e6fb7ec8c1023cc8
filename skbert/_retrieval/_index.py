"""Corpus indexes for exact search in bounded memory: float32 rows, int8 codes or bits.

Every index scores float32 query rows against a range of its corpus rows
(:meth:`similarity`), so that :func:`top_k_blocked` walks any of them block by
block. The int8 index learns each dimension's range from the corpus and scores
with the query kept in float32 (only the corpus side is quantized). The binary
index finds candidates by Hamming distance between sign bits and rescores them
with their float32 rows, read from a memory-mapped file.
"""

import os

import numpy as np
from scipy import sparse


def unit_rows(vectors, dtype=np.float32):
    """The rows of ``vectors`` as ``dtype``, scaled to unit L2 norm (a zero row stays zero)."""
    vectors = np.asarray(vectors, dtype=dtype)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, np.finfo(dtype).tiny)


class FloatIndex:
    """The corpus rows as they are, float32: exact inner products."""

    def __init__(self, vectors):
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)

    def __len__(self):
        return len(self.vectors)

    @property
    def nbytes(self):
        return self.vectors.nbytes

    def similarity(self, queries, start, stop):
        return queries @ self.vectors[start:stop].T

    def decode(self, start=0, stop=None):
        return self.vectors[start:stop]


class SparseIndex:
    """Sparse corpus rows (CSR, float32), for lexical rows such as BM25's: exact inner
    products with sparse query rows, and nothing dense of the corpus's size."""

    def __init__(self, rows):
        self.rows = sparse.csr_matrix(rows, dtype=np.float32)

    def __len__(self):
        return self.rows.shape[0]

    @property
    def nbytes(self):
        return self.rows.data.nbytes + self.rows.indices.nbytes + self.rows.indptr.nbytes

    def similarity(self, queries, start, stop):
        scores = queries @ self.rows[start:stop].T
        return scores.toarray() if sparse.issparse(scores) else np.asarray(scores)

    def decode(self, start=0, stop=None):
        return self.rows[start:stop]


class Int8Index:
    """One byte per value: each dimension's corpus range [min, max] cut into 256 steps.

    A value decodes to ``offset + code * scale``, so a query scores
    ``(query * scale) @ codes.T + query @ offset``: the codes of one block are
    widened to float32 for the matmul, never the whole corpus.
    """

    def __init__(self, vectors):
        low, high = vectors.min(axis=0), vectors.max(axis=0)
        self.scale = np.maximum((high - low) / 255, np.finfo(np.float32).tiny).astype(np.float32)
        self.offset = (low + 128 * self.scale).astype(np.float32)
        codes = np.rint((vectors - self.offset) / self.scale)
        self.codes = np.clip(codes, -128, 127).astype(np.int8)

    def __len__(self):
        return len(self.codes)

    @property
    def nbytes(self):
        return self.codes.nbytes + self.scale.nbytes + self.offset.nbytes

    def similarity(self, queries, start, stop):
        block = self.codes[start:stop].astype(np.float32)
        return (queries * self.scale) @ block.T + (queries @ self.offset)[:, None]

    def decode(self, start=0, stop=None):
        return self.offset + self.codes[start:stop].astype(np.float32) * self.scale


class BinaryIndex:
    """One bit per value, its sign: 1/32 of the float32 bytes in memory.

    :meth:`similarity` compares the signs of the query with the bits:
    ``n_bits - 2 * hamming``, the inner product of the two rows as -1/+1 signs.
    With ``keep_vectors``, the float32 rows are also written to a temporary
    file and memory-mapped, for :meth:`rescored` to read its candidates' rows
    from: the operating system's page cache, not the process, holds them.
    """

    def __init__(self, vectors, keep_vectors=True):
        self.n_bits = vectors.shape[1]
        self.packed = np.packbits(vectors > 0, axis=1)
        self.vectors = _memory_mapped(vectors) if keep_vectors else None

    def __len__(self):
        return len(self.packed)

    @property
    def nbytes(self):
        return self.packed.nbytes

    def signs(self, start, stop):
        bits = np.unpackbits(self.packed[start:stop], axis=1, count=self.n_bits)
        return 2 * bits.astype(np.float32) - 1

    def similarity(self, queries, start, stop):
        return np.where(queries > 0, 1.0, -1.0).astype(np.float32) @ self.signs(start, stop).T

    def decode(self, start=0, stop=None):
        """The float32 rows when kept, else the signs scaled to unit length."""
        if self.vectors is not None:
            return np.asarray(self.vectors[start:stop])
        return self.signs(start, stop) / np.sqrt(self.n_bits, dtype=np.float32)

    def rescored(self, queries, candidates, k, block_size=256):
        """The top ``k`` of each query's ``candidates`` (row indices) by float32 similarity."""
        scores = np.empty((len(queries), k), dtype=np.float32)
        indices = np.empty((len(queries), k), dtype=np.int64)
        for start in range(0, len(queries), block_size):
            block, rows = queries[start:start + block_size], candidates[start:start + block_size]
            sims = np.einsum("qd,qcd->qc", block, self.vectors[rows])
            order = np.lexsort((rows, -sims), axis=1)[:, :k]
            scores[start:start + len(block)] = np.take_along_axis(sims, order, axis=1)
            indices[start:start + len(block)] = np.take_along_axis(rows, order, axis=1)
        return scores, indices

    def __getstate__(self):
        state = self.__dict__.copy()
        if self.vectors is not None:
            state["vectors"] = np.asarray(self.vectors)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        if self.vectors is not None:
            self.vectors = _memory_mapped(self.vectors)


def _memory_mapped(vectors):
    """A read-only memory map of ``vectors`` in a temporary file (TMPDIR), removed with it."""
    import tempfile
    import weakref

    handle, path = tempfile.mkstemp(prefix="skbert-rescore-", suffix=".npy")
    os.close(handle)
    np.save(path, np.ascontiguousarray(vectors, dtype=np.float32))
    mapped = np.load(path, mmap_mode="r")
    try:  # POSIX: the mapping outlives the name, and the space is freed when it closes
        os.remove(path)
    except OSError:  # Windows: remove the file when the map is collected
        weakref.finalize(mapped, os.remove, path)
    return mapped


INDEXES = {"float32": FloatIndex, "int8": Int8Index, "binary": BinaryIndex}


def best_k(scores, indices, k):
    """The ``k`` best ``(scores, indices)`` of each row, in no order: by score, and where
    scores tie at the cut (BM25's zeros, repeated texts), the lower indices."""
    keep = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    # argpartition chose among the ties at the cut at random: take the lower indices there.
    lowest = np.take_along_axis(scores, keep, axis=1).min(axis=1)
    tied = (scores >= lowest[:, None]).sum(axis=1) > k
    if tied.any():
        keep[tied] = np.lexsort((indices[tied], -scores[tied]), axis=1)[:, :k]
    return np.take_along_axis(scores, keep, axis=1), np.take_along_axis(indices, keep, axis=1)


def in_order(scores, indices):
    """Each row's ``(scores, indices)`` by score descending, then by the lower index."""
    order = np.lexsort((indices, -scores), axis=1)
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(indices, order, axis=1)


def top_k_blocked(queries, corpus, k, block_size):
    """Top-``k`` similarities of each query row over ``corpus``, descending.

    ``corpus`` is an index, scored by its ``similarity``, or a 2-D array of
    rows, scored by inner product; ``queries`` are dense rows, or sparse ones
    for a :class:`SparseIndex`. Works through blocks of ``block_size``
    queries x ``block_size`` corpus rows, keeping a running top-k, so memory
    is O(block_size * (block_size + k)) however large the corpus. Ties are
    broken by the lower corpus index.

    Returns
    -------
    scores : ndarray of shape (n_queries, k), float32
    indices : ndarray of shape (n_queries, k), int64
    """
    if isinstance(corpus, np.ndarray):
        corpus = FloatIndex(corpus)
    n_queries = queries.shape[0]
    scores = np.empty((n_queries, k), dtype=np.float32)
    indices = np.empty((n_queries, k), dtype=np.int64)
    for q_start in range(0, n_queries, block_size):
        block = queries[q_start:q_start + block_size]
        best_scores = np.full((block.shape[0], 0), -np.inf, dtype=np.float32)
        best_indices = np.empty((block.shape[0], 0), dtype=np.int64)
        for c_start in range(0, len(corpus), block_size):
            sims = corpus.similarity(block, c_start, min(c_start + block_size, len(corpus)))
            ids = np.broadcast_to(np.arange(c_start, c_start + sims.shape[1]), sims.shape)
            best_scores = np.concatenate([best_scores, sims.astype(np.float32)], axis=1)
            best_indices = np.concatenate([best_indices, ids], axis=1)
            if best_scores.shape[1] > k:
                best_scores, best_indices = best_k(best_scores, best_indices, k)
        scores[q_start:q_start + block_size], indices[q_start:q_start + block_size] = (
            in_order(best_scores, best_indices))
    return scores, indices
