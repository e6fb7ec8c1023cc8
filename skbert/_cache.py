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
:func:`window_entries` does the same for entries of a size of their own, read
where they are: the token states of a sentence that
:class:`skbert.BertWordVectorizer` keeps (:mod:`skbert._words`).

In memory, entries live in one process-wide store with a byte budget and
least-recently-used eviction (:func:`set_cache_limit`, or the
``SKBERT_CACHE_BYTES`` environment variable: bytes, or a number and a unit,
``512MB``, ``1.5GB``, ``2GiB``; default 2 GiB; read when the cache is first
used, so that a bad value is an error there and not at import). A call never
evicts entries that it used itself: when its distinct windows outgrow the
budget, the store keeps those that fit, admits no more, and warns once, so
that repeating the call still hits for the part that fits instead of
thrashing. A budget of 0 turns the store off, silently.

On disk, each entry is one file ``<key[:2]>/<key>.f32``: a CRC-32 of the key
and the values, then the raw float32 values. It is written atomically
(temporary file + rename: :mod:`skbert._files`), so concurrent writers are
safe, with the mode that the process's umask leaves of 0o666 (folders: of
0o777), so that a team or a cluster's workers can share the directory. A file that cannot be read
(missing, a directory in its place, no permission), has the wrong length or
fails its checksum (damaged, or another key's) is recomputed and rewritten,
never served. A write that fails (a full disk, a read-only mount,
any ``OSError``) leaves no temporary file; the call still returns its
features, and warns (once per process, directory and error), naming the
directory and the error. Temporary files of killed writers, over an hour old,
are removed when a process first opens the directory. An entry served from
memory that is missing on disk is written there too.
"""

import collections
import contextlib
import hashlib
import numbers
import os
import re
import threading
import time
import warnings
import zlib
from fractions import Fraction
from pathlib import Path

import numpy as np

from skbert._encoding import Rows
from skbert._features import EXCLUDED
from skbert._files import TEMPORARY, atomic_file

# The format joins every key, so entries of another format are misses, never misread.
FORMAT = b"skbert-cache-v3"
# Each file starts with a CRC-32 of its key and values: it catches torn, damaged and misplaced
# files (what a cache must survive) at a fifth of the cost of a cryptographic hash on 90 KB.
_CHECKSUM = np.dtype("<u4")
# Bookkeeping of one in-memory entry beyond its values: array object, key, links.
_ENTRY_OVERHEAD = 400
# Records held at once by one call, beyond the store: one chunk of distinct windows (and
# their assembled features). Small, since fresh memory costs page faults (up to 2 ms per MB
# on a virtual machine) and is held at the encoder's peak: 8 MiB raised a cache=False
# transform's peak by ~15 MB over the bare encoder's.
CHUNK_BYTES = 2 * 1024**2
DEFAULT_BYTES = 2 * 1024**3
# Windows keyed at once by window_keys.
KEY_BLOCK = 4096
# A temporary file this old belongs to a killed writer: a write takes milliseconds.
STALE_SECONDS = 3600
_UNITS = {"": 1, "b": 1, **{f"{prefix}b": 1000**power for power, prefix in enumerate("kmgt", 1)},
          **{f"{prefix}ib": 1024**power for power, prefix in enumerate("kmgt", 1)}}
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?) *([a-z]*)", re.IGNORECASE)


def parse_bytes(text, name="SKBERT_CACHE_BYTES"):
    """The byte count that ``text`` says: ``"2147483648"``, ``"512MB"``, ``"1.5 GB"``, ``"2GiB"``.

    KB, MB, GB and TB are powers of 1000, KiB, MiB, GiB and TiB powers of
    1024 (case-insensitive, a space allowed before the unit); a number without
    a unit is whole bytes. ``name`` is the setting named by the ValueError.

    Examples
    --------
    >>> from skbert._cache import parse_bytes
    >>> parse_bytes("512MB"), parse_bytes("2GiB"), parse_bytes("1.5 gb")
    (512000000, 2147483648, 1500000000)
    """
    match = _SIZE.fullmatch(text.strip())
    unit = match and _UNITS.get(match[2].lower())
    if not unit or (unit == 1 and "." in match[1]):
        raise ValueError(
            f"{name}={text!r} is not a byte count: give whole bytes (2147483648) or a number "
            "and a unit (512MB, 1.5GB, 2GiB; KB, MB, GB, TB are powers of 1000, KiB, MiB, GiB, "
            "TiB powers of 1024)."
        )
    return int(Fraction(match[1]) * unit)


def _budget_from_environment():
    text = os.environ.get("SKBERT_CACHE_BYTES", "")
    return parse_bytes(text) if text.strip() else DEFAULT_BYTES


def window_keys(windows, model_fingerprint, engine_tag):
    """One key per window (format, model, engine, token ids, token type ids), as an array of
    32 hex digits (``S32``: 32 bytes a window, where a list of str takes 90).

    ``model_fingerprint`` names weights and config, ``engine_tag`` what computes
    with them (:attr:`skbert._engines.Engine.tag`: backend, dtype, library
    versions, calibration).

    The special-token mask, which follows from the token ids, joins the key
    only where it excludes tokens from pooling (a prompt).
    """
    prefix = hashlib.blake2b(FORMAT + model_fingerprint.encode() + engine_tag.encode(),
                             digest_size=16)
    types, special = windows.token_type_ids, windows.special_mask
    keys = np.empty(len(windows), dtype="S32")
    # In blocks of windows: temporaries of a whole call's size (int64 ids, Python ints of
    # every offset) raised the peak memory of a transform of 60,000 texts by 10 to 20 MB.
    for first in range(0, len(windows), KEY_BLOCK):
        block = windows.input_ids[first:first + KEY_BLOCK]  # the bytes keys have always hashed
        ids = block.values.astype(np.int64)
        bounds = block.offsets.tolist()
        excluded = (special[first:first + KEY_BLOCK].count(EXCLUDED) > 0).tolist()
        for index, start, stop in zip(range(first, first + len(block)), bounds, bounds[1:]):
            digest = prefix.copy()
            digest.update(ids[start:stop])
            if types is not None:
                digest.update(b"|" + types[index].tobytes())
            if excluded[index - first]:
                digest.update(b"#" + special[index].tobytes())
            keys[index] = digest.hexdigest()
    return keys


def _size(record):
    return record.nbytes + _ENTRY_OVERHEAD


class MemoryStore:
    """Thread-safe LRU mapping key -> record (a 1-D float32 array), bounded by bytes.

    Every use advances a clock (``tick``). :meth:`put` evicts the least
    recently used entries to make room, but only those last used at or before
    ``since``: a call passes the tick at its start, so it never evicts what it
    used itself. ``max_bytes=None`` is ``SKBERT_CACHE_BYTES`` (default 2 GiB),
    read on first use.
    """

    def __init__(self, max_bytes=None):
        self._max_bytes = max_bytes
        self.n_bytes = 0
        self.tick = 0
        self._entries = collections.OrderedDict()  # key -> (record, tick of last use)
        self._lock = threading.Lock()

    @property
    def max_bytes(self):
        # Read late: a bad SKBERT_CACHE_BYTES must not make ``import skbert`` fail.
        if self._max_bytes is None:
            self._max_bytes = _budget_from_environment()
        return self._max_bytes

    def get(self, key, width=None, since=None):
        """The record of ``key`` or None (``width`` and ``since``: the stores' common signature)."""
        if not self.max_bytes:
            return None
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
            self._max_bytes = max_bytes
            self._evict(max_bytes)

    def clear(self):
        with self._lock:
            self._entries.clear()
            self.n_bytes = 0

    def __len__(self):
        return len(self._entries)


MEMORY = MemoryStore()


def set_cache_limit(max_bytes):
    """Set the in-memory forward-pass cache's byte budget; return the previous one.

    Least recently used entries are evicted to fit. ``0`` turns in-memory
    caching off, without warnings (features are computed as usual, and a
    directory cache still works). The budget starts at the
    ``SKBERT_CACHE_BYTES`` environment variable, bytes or a number and a unit
    (``512MB``, ``1.5GB``, ``2GiB``: KB to TB are powers of 1000, KiB to TiB
    of 1024), or 2 GiB; a value that is neither is a ValueError here or at the
    first cached transform.

    Parameters
    ----------
    max_bytes : int
        The new budget in bytes, 0 or more.

    Returns
    -------
    previous : int
        The budget before the call.

    Examples
    --------
    >>> import skbert
    >>> previous = skbert.set_cache_limit(512 * 1024**2)
    >>> _ = skbert.set_cache_limit(previous)
    """
    if (isinstance(max_bytes, bool) or not isinstance(max_bytes, numbers.Real)
            or not max_bytes >= 0 or int(max_bytes) != max_bytes):
        raise ValueError(
            f"max_bytes must be a whole number of bytes, 0 or more (0 turns the in-memory cache "
            f"off). Got {max_bytes!r} instead."
        )
    previous = MEMORY.max_bytes
    MEMORY.resize(int(max_bytes))
    return previous


def clear_cache():
    """Drop every entry of the in-memory forward-pass cache (directory caches are kept)."""
    MEMORY.clear()


def _directory(cache):
    """``cache`` as a Path with ``~`` expanded; ValueError for a value that is no directory path."""
    if not isinstance(cache, (str, os.PathLike)) or not os.fspath(cache):
        raise ValueError(
            "The 'cache' parameter must be True, False or the path of a directory. "
            f"Got {cache!r} instead."
        )
    return Path(os.path.expanduser(os.fsdecode(cache)))


def check_cache(cache):
    """Check the ``cache`` parameter at fit; create a cache directory where none is yet.

    A value that is not True, False or a non-empty path, or a path that is an
    existing file, is a ValueError. A directory that cannot be created is an
    OSError naming it: asked for at fit, a disk cache that could never hold
    an entry is a setting to fix, whereas at transform a directory that went
    missing or read-only only costs its entries (see :class:`DiskStore`).
    """
    if cache is True or cache is False:
        return
    directory = _directory(cache)
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise ValueError(
            "The 'cache' parameter must be True, False or the path of a directory. "
            f"Got {cache!r} instead, which exists and is not a directory."
        )
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OSError(
            f"The cache directory {os.fspath(directory)!r} cannot be created ({error}). Give "
            "a directory that this process can write, or cache=True for the in-memory cache."
        ) from error


_SWEPT = set()  # directories whose stale temporary files this process has removed
_LOCK = threading.Lock()


def _remove_stale_temporaries(directory):
    """Remove temporary files of writers killed over an hour ago, once per process and folder."""
    if directory in _SWEPT:
        return
    _SWEPT.add(directory)
    cutoff = time.time() - STALE_SECONDS
    # Another process may remove or write the same files: every failure is simply skipped.
    with contextlib.suppress(OSError), os.scandir(directory) as folders:
        for folder in folders:
            if not folder.is_dir(follow_symlinks=False):
                continue
            with contextlib.suppress(OSError), os.scandir(folder.path) as files:
                for file in files:
                    with contextlib.suppress(OSError):
                        if (file.name.startswith(TEMPORARY)
                                and file.stat(follow_symlinks=False).st_mtime < cutoff):
                            os.unlink(file.path)


def _checksum(key, payload):
    """The CRC-32 of ``key`` then ``payload``: a file copied onto another key's name fails it."""
    return zlib.crc32(payload, zlib.crc32(key.encode())).to_bytes(_CHECKSUM.itemsize, "little")


class DiskStore:
    """Records as checksummed files in ``directory``, with the memory store in front.

    Every record it serves is on disk afterwards: one found in memory but
    missing on disk is written then. A store serves one call: writes that fail
    are counted (``n_failed``, the first error in ``write_error``) for the one
    warning of :func:`window_features`, and never raise.
    """

    def __init__(self, directory):
        self.directory = _directory(directory)
        self.n_failed, self.write_error = 0, None
        self._made = set()  # subfolders known to exist
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            self.write_error = error
            return
        _remove_stale_temporaries(os.path.abspath(self.directory))

    @property
    def tick(self):
        return MEMORY.tick

    def _path(self, key):
        return self.directory / key[:2] / f"{key}.f32"

    def get(self, key, width, since=None):
        """The record of ``key``, ``width`` values long, or None: to recompute and put."""
        path = self._path(key)
        record = MEMORY.get(key)
        if record is not None:
            if not os.path.exists(path):
                self._write(path, key, record)
            return record
        try:
            data = path.read_bytes()
        except OSError:  # missing, a directory in its place, no permission
            return None
        header = _CHECKSUM.itemsize
        if (len(data) != header + width * 4
                or _checksum(key, memoryview(data)[header:]) != data[:header]):
            return None
        record = np.frombuffer(data, dtype=np.float32, offset=header)
        MEMORY.put(key, record, since)
        return record

    def put(self, key, record, since=None):
        """Store ``record`` in memory where it fits, and on disk where it can be written."""
        MEMORY.put(key, record, since)
        self._write(self._path(key), key, record)
        return True

    def _write(self, path, key, record):
        payload = memoryview(np.ascontiguousarray(record, dtype=np.float32)).cast("B")
        try:
            if path.parent not in self._made:
                path.parent.mkdir(exist_ok=True)
                self._made.add(path.parent)
            with atomic_file(path) as file:
                file.write(_checksum(key, payload))
                file.write(payload)
        except OSError as error:
            self._failed(error)

    def _failed(self, error):
        self.n_failed += 1
        if self.write_error is None:
            self.write_error = error


_WARNED = set()  # (directory, errno) pairs this process has warned about


def _first_time(store):
    """Whether this kind of write failure in this directory is new to the process: a grid
    search over a read-only directory warns once, not once per fit."""
    fault = (os.path.abspath(store.directory), store.write_error.errno)
    with _LOCK:
        new = fault not in _WARNED
        _WARNED.add(fault)
    return new


def window_features(store, keys, lengths, layouts, compute, assemble, batch_size=1,
                    progress=None):
    """Features of every window, each distinct window served by ``store`` or computed once.

    Parameters
    ----------
    store : MemoryStore, DiskStore or None
        None computes every distinct window and stores nothing. A DiskStore's
        failed writes make one warning at the end of the call.
    keys : ndarray of shape (n_windows,), dtype S32
        One cache key per window (:func:`window_keys`; duplicates are computed once).
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
    distinct, inverse = np.unique(keys, return_inverse=True)
    # The windows of each distinct key, as rows: row k lists the windows of key k.
    order = np.argsort(inverse.ravel(), kind="stable")
    groups = Rows(order, np.searchsorted(inverse.ravel()[order], np.arange(len(distinct) + 1)))
    window_of = order[groups.offsets[:-1]]  # the first window of each
    order = np.argsort(-np.asarray(lengths)[window_of], kind="stable")
    chunk = CHUNK_BYTES // (4 * sum(layout.width for layout in layouts))
    chunk = max(batch_size, chunk - chunk % batch_size)
    # One set of buffers for every chunk: fresh memory for each would cost page faults.
    buffers = [np.empty((min(chunk, len(order)), layout.width), dtype=np.float32)
               for layout in layouts]
    since = None if store is None else store.tick
    features, all_kept = None, True

    def entry(row, layout):
        return f"{distinct[row].decode()}-{layout.tag}"

    for start in range(0, len(order), chunk):
        rows, hits = [], []
        for row in order[start:start + chunk]:
            found = [None] if store is None else [store.get(entry(row, layout), layout.width,
                                                            since) for layout in layouts]
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
            features = np.empty((len(keys), values.shape[1]), dtype=np.float32)
        targets = groups.take(rows)  # every window of these keys, duplicates included
        features[targets.values] = values if len(targets.values) == len(rows) else np.repeat(
            values, targets.lengths, axis=0)
    _report(store, all_kept)
    return features


def window_entries(store, keys, sizes, compute, consume, batch_size=1, progress=None):
    """Hand every window's entry, of a size of its own, to ``consume``: served by ``store``
    or computed, chunk by chunk, largest first.

    Where :func:`window_features` copies records of one layout into a chunk's
    array, these entries (the token states of a sentence, :mod:`skbert._words`)
    are read where they are: a hit costs a lookup. A call holds no entries
    beyond the store's and one chunk's misses.

    Parameters
    ----------
    store : MemoryStore, DiskStore or None
        As for :func:`window_features`.
    keys : list of str
        One distinct key per window.
    sizes : ndarray of shape (n_windows,)
        Float32 values in each window's entry.
    compute : callable (window indices, entries) -> None
        Forward passes that fill ``entries``, one new 1-D array per index.
    consume : callable (window indices, entries) -> None
        Reads the entries of those windows (they are the store's: not to be
        written).
    batch_size : int, default=1
        Windows per forward pass: chunks hold a multiple of it.
    progress : tqdm or None
        Advanced by the hits (``compute`` advances it for the misses).
    """
    order = np.argsort(-np.asarray(sizes), kind="stable")
    since = None if store is None else store.tick
    start, all_kept = 0, True
    while start < len(order):
        n_batches = max(1, CHUNK_BYTES // (4 * batch_size * int(sizes[order[start]])))
        rows = order[start:start + n_batches * batch_size]
        start += len(rows)
        entries = [None if store is None else store.get(keys[row], sizes[row], since)
                   for row in rows]
        missing = [index for index, entry in enumerate(entries) if entry is None]
        if missing:
            fresh = [np.empty(sizes[rows[index]], dtype=np.float32) for index in missing]
            compute(rows[missing], fresh)
            for index, entry in zip(missing, fresh):
                entries[index] = entry
                if store is not None:
                    all_kept &= store.put(keys[rows[index]], entry, since)
        if progress is not None:
            progress.update(len(rows) - len(missing))
        consume(rows, entries)
    _report(store, all_kept)


def _report(store, all_kept):
    """The warnings at the end of a call: a full memory store, a directory not written."""
    if not all_kept and MEMORY.max_bytes:  # a budget of 0 is the store turned off
        warnings.warn(
            f"skbert's in-memory forward-pass cache is full ({MEMORY.max_bytes / 2**20:,.1f} MiB):"
            " it keeps the texts that fit and encodes the others again on the next call. "
            "Raise its budget with skbert.set_cache_limit(n_bytes), or keep every entry on disk "
            "with cache='some/directory'.", RuntimeWarning, stacklevel=5)
    if isinstance(store, DiskStore) and store.write_error is not None and _first_time(store):
        warnings.warn(
            f"skbert's cache directory {os.fspath(store.directory)!r} cannot be written "
            f"({store.write_error}); entries this call could not write: {store.n_failed:,}. "
            "They are encoded again where the in-memory cache does not hold them; the features "
            "are computed all the same. This process says it once per directory and error.",
            RuntimeWarning, stacklevel=5)
