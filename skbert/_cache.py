"""The forward-pass cache: one encoder pass per distinct window, reused by every setting.

An entry holds the *parts* of one window (see :mod:`skbert._features`): for
every layer the [CLS] and final [SEP] vectors, masked mean and max with and
without special tokens, the token counts, the pooler output, and max pooling
of the usual layer averages. That serves any ``layer``, ``layer_combine``,
``pooling``, ``include_special_tokens`` and ``norm`` without another forward
pass, at ``(8 * n_layers + 2 * (n_layers + 1)) * hidden * 4`` bytes a window
(n_layers counting the embedding output): about 90 KB for all-MiniLM-L6-v2
(7 x 384) and 330 KB for BERT-base (13 x 768).

Entries are keyed by a hash of the model's weights fingerprint, the compute
dtype and the window's token ids and token type ids. The window's tokens
already reflect ``max_length``, ``truncation`` and ``stride``, so a setting
that changes what the encoder reads changes the key, and one that does not
(a short text under any truncation) is served from the same entry.

In memory, entries live in one process-wide store with a byte budget and
least-recently-used eviction (:func:`set_cache_limit`, default 2 GiB, or the
``SKBERT_CACHE_BYTES`` environment variable). On disk, each entry is one file
``<key>.npz`` written atomically (temporary file + rename), so concurrent
writers are safe; each file starts with a BLAKE2 checksum of the rest, and a
file that fails to read or verify is recomputed and rewritten, never served.
"""

import ast
import collections
import hashlib
import io
import os
import tempfile
import threading
from pathlib import Path

import numpy as np

FORMAT = b"skbert-cache-v1"
_CHUNK_WINDOWS = 1024
_DIGEST_SIZE = 32


def window_keys(windows, model_fingerprint, dtype):
    """One hex key per window: (format, weights, dtype, token ids, token type ids)."""
    prefix = hashlib.blake2b(FORMAT + model_fingerprint.encode() + dtype.encode(), digest_size=16)
    types = windows.token_type_ids or [None] * len(windows)
    keys = []
    for ids, type_ids in zip(windows.input_ids, types):
        digest = prefix.copy()
        digest.update(np.asarray(ids, dtype=np.int64).tobytes())
        if type_ids is not None:
            digest.update(b"|" + np.asarray(type_ids, dtype=np.int8).tobytes())
        keys.append(digest.hexdigest())
    return keys


def _nbytes(record):
    return sum(value.nbytes + 100 for value in record.values())


class MemoryStore:
    """Thread-safe LRU mapping key -> record, bounded by the records' bytes."""

    def __init__(self, max_bytes):
        self.max_bytes = max_bytes
        self.n_bytes = 0
        self._entries = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            record = self._entries.get(key)
            if record is not None:
                self._entries.move_to_end(key)
            return record

    def put(self, key, record):
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.n_bytes -= _nbytes(old)
            self._entries[key] = record
            self.n_bytes += _nbytes(record)
            self._evict()

    def _evict(self):
        while self.n_bytes > self.max_bytes and self._entries:
            _, record = self._entries.popitem(last=False)
            self.n_bytes -= _nbytes(record)

    def resize(self, max_bytes):
        with self._lock:
            self.max_bytes = max_bytes
            self._evict()

    def clear(self):
        with self._lock:
            self._entries.clear()
            self.n_bytes = 0

    def __len__(self):
        return len(self._entries)


MEMORY = MemoryStore(int(os.environ.get("SKBERT_CACHE_BYTES", 2 * 1024**3)))


def set_cache_limit(max_bytes):
    """Set the in-memory forward-pass cache's byte budget; return the previous one.

    Least recently used entries are evicted to fit. ``0`` disables in-memory
    caching (a directory cache still works).

    Examples
    --------
    >>> import skbert
    >>> previous = skbert.set_cache_limit(512 * 1024**2)
    >>> _ = skbert.set_cache_limit(previous)
    """
    previous = MEMORY.max_bytes
    MEMORY.resize(int(max_bytes))
    return previous


def clear_cache():
    """Drop every entry of the in-memory forward-pass cache (directory caches are kept)."""
    MEMORY.clear()


class DiskStore:
    """Records as checksummed ``.npz`` files in ``directory``, with the memory store in front."""

    def __init__(self, directory):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, key):
        return self.directory / key[:2] / f"{key}.npz"

    def get(self, key):
        record = MEMORY.get(key)
        if record is not None:
            return record
        try:
            data = self._path(key).read_bytes()
            payload = data[_DIGEST_SIZE:]
            if hashlib.blake2b(payload, digest_size=_DIGEST_SIZE).digest() != data[:_DIGEST_SIZE]:
                return None
            with np.load(io.BytesIO(payload), allow_pickle=False) as arrays:
                record = {ast.literal_eval(name): arrays[name] for name in arrays.files}
        except (OSError, ValueError, EOFError):
            return None  # missing or unreadable: the caller recomputes and rewrites it
        MEMORY.put(key, record)
        return record

    def put(self, key, record):
        MEMORY.put(key, record)
        buffer = io.BytesIO()
        np.savez(buffer, **{repr(part): value for part, value in record.items()})
        payload = buffer.getvalue()
        path = self._path(key)
        path.parent.mkdir(exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(hashlib.blake2b(payload, digest_size=_DIGEST_SIZE).digest())
                file.write(payload)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise


def cached_parts(store, keys, needed, wanted, compute):
    """Parts for every window, computing only the windows that ``store`` cannot serve.

    Parameters
    ----------
    store : MemoryStore or DiskStore
    keys : list of str
        One cache key per window (duplicates allowed: each distinct key is computed once).
    needed : set of part keys
        What the caller will read.
    wanted : set of part keys
        What to compute and store for a window that misses (a superset of ``needed``).
    compute : callable (window indices, part keys) -> {part key: array with one row per index}

    Returns
    -------
    dict mapping each needed part key to an array with one row per window.
    """
    first_index = {}
    for index, key in enumerate(keys):
        first_index.setdefault(key, index)
    records = {key: store.get(key) for key in first_index}
    missing = [key for key, record in records.items()
               if record is None or not needed.issubset(record)]
    # Misses go through the encoder in chunks, so that a large corpus never holds every
    # window's full set of parts twice (as computed arrays and as records) at once.
    for start in range(0, len(missing), _CHUNK_WINDOWS):
        chunk = missing[start:start + _CHUNK_WINDOWS]
        computed = compute(np.array([first_index[key] for key in chunk]), wanted)
        for row, key in enumerate(chunk):
            record = {**(records[key] or {}),
                      **{part: values[row].copy() for part, values in computed.items()}}
            store.put(key, record)
            records[key] = record
    return {part: np.stack([records[key][part] for key in keys]) for part in needed}


def deduplicated_parts(keys, needed, compute):
    """Parts for every window without a store: each distinct key is computed once."""
    first_index = {}
    inverse = np.fromiter((first_index.setdefault(key, len(first_index)) for key in keys),
                          dtype=np.int64, count=len(keys))
    if len(first_index) == len(keys):
        return compute(np.arange(len(keys)), needed)
    firsts = np.unique(inverse, return_index=True)[1]
    return {part: values[inverse] for part, values in compute(firsts, needed).items()}
