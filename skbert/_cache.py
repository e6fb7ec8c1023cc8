"""The forward-pass cache: one encoder pass per distinct window, reused by every setting.

An entry is the *record* of one window (:class:`skbert._features.Layout`): one
float32 row holding, for every layer, the [CLS] and final [SEP] vectors, the
masked mean and max with and without special tokens, the token counts, the
pooler output, and max pooling of the usual layer averages. That serves any
``layer``, ``layer_combine``, ``pooling``, ``include_special_tokens`` and
``norm`` without another forward pass, at ``(6 * n_layers + 2 * (n_layers + 1)
+ 1) * hidden * 4`` bytes a window (n_layers counting the embedding output):
about 91 KB for all-MiniLM-L6-v2 (7 x 384) and 329 KB for BERT-base (13 x 768).
A rarer multi-layer max gets a record of its own layout next to it.

Entries are keyed by a hash of the model's weights fingerprint, the compute
dtype and the window's token ids and token type ids, plus a tag of the
record's layout. The window's tokens already reflect ``max_length``,
``truncation`` and ``stride``, so a setting that changes what the encoder reads
changes the key, and one that does not (a short text under any truncation) is
served from the same entry.

:func:`window_features` walks the distinct windows of one call, longest first,
in chunks of a few MB of records: a chunk's hits are copied out of the store,
its misses go through the encoder, and its features are written straight into
the output. A call keeps no records of its own beyond one chunk, so the store's
byte budget bounds what the cache holds, however many texts one call has.

In memory, entries live in one process-wide store with a byte budget and
least-recently-used eviction (:func:`set_cache_limit`, default 2 GiB, or the
``SKBERT_CACHE_BYTES`` environment variable). A call never evicts entries that
it used itself: when its distinct windows outgrow the budget, the store keeps
those that fit, admits no more, and warns once, so that repeating the call
still hits for the part that fits instead of thrashing. On disk, each entry is
one file ``<key>.f32`` of raw float32 values, written atomically (temporary
file + rename) so that concurrent writers are safe; each file starts with a
CRC-32 of the rest, and a file that fails to read or verify is recomputed and
rewritten, never served. An entry served from memory that is
missing on disk is written there too.
"""

import collections
import hashlib
import os
import tempfile
import threading
import warnings
import zlib
from pathlib import Path

import numpy as np

from skbert._features import EXCLUDED

FORMAT = b"skbert-cache-v2"
# Each file starts with a CRC-32 of its values: it catches torn and damaged files (what a
# cache must survive) at a fifth of the cost of a cryptographic hash on 90 KB entries.
_CHECKSUM = np.dtype("<u4")
# Bookkeeping of one in-memory entry beyond its values: array object, key, links.
_ENTRY_OVERHEAD = 400
# Records held at once by one call, beyond the store: one chunk of distinct windows. Small,
# since fresh memory costs page faults (up to 2 ms per MB on a virtual machine).
CHUNK_BYTES = 8 * 1024**2


def window_keys(windows, model_fingerprint, dtype):
    """One hex key per window: (format, weights, dtype, token ids, token type ids).

    The special-token mask, which follows from the token ids, joins the key
    only where it excludes tokens from pooling (a prompt).
    """
    prefix = hashlib.blake2b(FORMAT + model_fingerprint.encode() + dtype.encode(), digest_size=16)
    types = windows.token_type_ids or [None] * len(windows)
    keys = []
    for ids, type_ids, special in zip(windows.input_ids, types, windows.special_mask):
        digest = prefix.copy()
        digest.update(np.asarray(ids, dtype=np.int64).tobytes())
        if type_ids is not None:
            digest.update(b"|" + np.asarray(type_ids, dtype=np.int8).tobytes())
        if special.max(initial=0) == EXCLUDED:
            digest.update(b"#" + special.tobytes())
        keys.append(digest.hexdigest())
    return keys


def _size(record):
    return record.nbytes + _ENTRY_OVERHEAD


class MemoryStore:
    """Thread-safe LRU mapping key -> record (a 1-D float32 array), bounded by bytes.

    Every use advances a clock (``tick``). :meth:`put` evicts the least
    recently used entries to make room, but only those last used at or before
    ``since``: a call passes the tick at its start, so it never evicts what it
    used itself.
    """

    def __init__(self, max_bytes):
        self.max_bytes = max_bytes
        self.n_bytes = 0
        self.tick = 0
        self._entries = collections.OrderedDict()  # key -> (record, tick of last use)
        self._lock = threading.Lock()

    def get(self, key, since=None):
        """The record of ``key`` or None (``since`` is for the stores' common signature)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self.tick += 1
            self._entries[key] = (entry[0], self.tick)
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key, record, since=None):
        """Store ``record``; return whether it was kept (False: no room, see the class)."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.n_bytes -= _size(old[0])
            self._evict(self.max_bytes - _size(record), since)
            if self.n_bytes + _size(record) > self.max_bytes:
                return False
            self.tick += 1
            self._entries[key] = (record, self.tick)
            self.n_bytes += _size(record)
            return True

    def _evict(self, max_bytes, since=None):
        while self.n_bytes > max_bytes and self._entries:
            key, (record, tick) = next(iter(self._entries.items()))
            if since is not None and tick > since:
                break
            del self._entries[key]
            self.n_bytes -= _size(record)

    def resize(self, max_bytes):
        with self._lock:
            self.max_bytes = max_bytes
            self._evict(max_bytes)

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
    """Records as checksummed files in ``directory``, with the memory store in front.

    Every record it serves is on disk afterwards: one found in memory but
    missing on disk is written then.
    """

    def __init__(self, directory):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._made = set()  # subfolders known to exist

    @property
    def tick(self):
        return MEMORY.tick

    def _path(self, key):
        return self.directory / key[:2] / f"{key}.f32"

    def get(self, key, since=None):
        path = self._path(key)
        record = MEMORY.get(key)
        if record is not None:
            if not path.exists():
                self._write(path, record)
            return record
        try:
            data = path.read_bytes()
            checksum = np.frombuffer(data, dtype=_CHECKSUM, count=1)[0]
            if zlib.crc32(memoryview(data)[_CHECKSUM.itemsize:]) != checksum:
                return None
            record = np.frombuffer(data, dtype=np.float32, offset=_CHECKSUM.itemsize)
        except (OSError, ValueError):
            return None  # missing or unreadable: the caller recomputes and rewrites it
        MEMORY.put(key, record, since)
        return record

    def put(self, key, record, since=None):
        """Store ``record`` on disk and, where it fits, in memory; it is always kept."""
        MEMORY.put(key, record, since)
        self._write(self._path(key), record)
        return True

    def _write(self, path, record):
        payload = memoryview(np.ascontiguousarray(record, dtype=np.float32)).cast("B")
        if path.parent not in self._made:
            path.parent.mkdir(exist_ok=True)
            self._made.add(path.parent)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(np.array(zlib.crc32(payload), dtype=_CHECKSUM).tobytes())
                file.write(payload)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise


def window_features(store, keys, lengths, layouts, compute, assemble, batch_size=1,
                    progress=None):
    """Features of every window, each distinct window served by ``store`` or computed once.

    Parameters
    ----------
    store : MemoryStore, DiskStore or None
        None computes every distinct window and stores nothing.
    keys : list of str
        One cache key per window (duplicates are computed once).
    lengths : ndarray of shape (n_windows,)
        Tokens per window: distinct windows go longest first, so that each
        chunk's forward batches pad little.
    layouts : list of Layout
        The records one window needs; each is one store entry.
    compute : callable (window indices, out) -> None
        Forward passes that write one row per index into ``out``, a records
        array per layout.
    assemble : callable ([records array per layout]) -> features (n, n_features)
    batch_size : int, default=1
        Windows per forward pass: chunks hold a multiple of it.
    progress : tqdm or None
        Advanced by the hits (``compute`` advances it for the misses).

    Returns
    -------
    ndarray of shape (n_windows, n_features), float32
    """
    first = {}
    inverse = np.fromiter((first.setdefault(key, len(first)) for key in keys), dtype=np.int64,
                          count=len(keys))
    distinct = list(first)
    window_of = np.unique(inverse, return_index=True)[1]  # the first window of each
    order = np.argsort(-np.asarray(lengths)[window_of], kind="stable")
    chunk = CHUNK_BYTES // (4 * sum(layout.width for layout in layouts))
    chunk = max(batch_size, chunk - chunk % batch_size)
    # One set of buffers for every chunk: fresh memory for each would cost page faults.
    buffers = [np.empty((min(chunk, len(order)), layout.width), dtype=np.float32)
               for layout in layouts]
    since = None if store is None else store.tick
    features, all_kept = None, True

    def entry(row, layout):
        return f"{distinct[row]}-{layout.tag}"

    for start in range(0, len(order), chunk):
        rows, hits = [], []
        for row in order[start:start + chunk]:
            found = [None] if store is None else [store.get(entry(row, layout), since)
                                                  for layout in layouts]
            if any(record is None for record in found):
                rows.append(row)
            else:
                hits.append((row, found))
        n_missing = len(rows)
        rows += [row for row, _ in hits]
        records = [buffer[:len(rows)] for buffer in buffers]
        if n_missing:  # misses first, in length order, straight into the records
            compute(window_of[rows[:n_missing]], [array[:n_missing] for array in records])
            if store is not None:
                for index, row in enumerate(rows[:n_missing]):
                    for layout, array in zip(layouts, records):
                        all_kept &= store.put(entry(row, layout), array[index].copy(), since)
        for index, (_, found) in enumerate(hits, start=n_missing):
            for array, record in zip(records, found):
                array[index] = record
        if progress is not None:
            progress.update(len(hits))
        values = assemble(records)
        if features is None:
            features = np.empty((len(distinct), values.shape[1]), dtype=np.float32)
        features[rows] = values
    if not all_kept:
        warnings.warn(
            f"skbert's in-memory forward-pass cache is full ({MEMORY.max_bytes / 2**20:,.1f} MiB):"
            " it keeps the texts that fit and encodes the others again on the next call. "
            "Raise its budget with skbert.set_cache_limit(n_bytes), or keep every entry on disk "
            "with cache='some/directory'.", RuntimeWarning, stacklevel=4)
    return features if len(distinct) == len(keys) else features[inverse]
