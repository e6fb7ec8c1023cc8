"""Where the forward-pass cache keeps its entries (1-D float32 arrays): memory and disk.

In memory, entries live in one process-wide store with a byte budget and
least-recently-used eviction (:func:`set_cache_limit`, or ``SKBERT_CACHE_BYTES``:
bytes, or a number and a unit, ``512MB``, ``1.5GB``, ``2GiB``; default 2 GiB;
read on first use, so that a bad value is an error there and not at import). A
call never evicts entries that it used itself: when its distinct windows outgrow
the budget, the store keeps those that fit, admits no more, and warns once, so
that repeating the call still hits for the part that fits instead of thrashing.
A budget of 0 turns the store off, silently: a call then stores nothing and
computes only what its setting reads (:func:`store_for`).

On disk, each entry is one file ``<key[:2]>/<key>.f32``: a CRC-32 of the key and
the values, then the raw float32 values, written atomically (:mod:`skbert._encoder._files`)
with the mode that the umask leaves of 0o666 (folders: 0o777), so that
concurrent writers, a team or a cluster's workers can share the directory. A
file that cannot be read, has the wrong length or fails its checksum is
recomputed and rewritten, never served. A write that fails (any ``OSError``)
leaves no temporary file and costs one warning, once per process, directory and
error. Temporary files of killed writers, over an hour old, are removed when a
process first opens the directory. An entry served from memory that is missing
on disk is written there too.
"""

import collections
import contextlib
import numbers
import os
import re
import threading
import time
import zlib
from fractions import Fraction
from pathlib import Path

import numpy as np

from skbert._encoder._files import TEMPORARY, atomic_file

# Each file starts with a CRC-32 of its key and values: it catches torn, damaged and misplaced
# files (what a cache must survive) at a fifth of the cost of a cryptographic hash on 90 KB.
_CHECKSUM = np.dtype("<u4")
# Bookkeeping of one in-memory entry beyond its values: array object, key, links.
_ENTRY_OVERHEAD = 400
DEFAULT_BYTES = 2 * 1024**3
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
    >>> from skbert._encoder._stores import parse_bytes
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


def _size(record):
    return record.nbytes + _ENTRY_OVERHEAD


def entry_bytes(n_values):
    """What an entry of ``n_values`` float32 values takes of the in-memory budget."""
    return 4 * int(n_values) + _ENTRY_OVERHEAD


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
    """Drop every entry of the in-memory forward-pass cache (directory caches are kept).

    Its byte budget (:func:`set_cache_limit`) stays as it is. A vectorizer
    with ``cache=True`` runs the encoder again at its next transform, which
    refills the cache.

    Examples
    --------
    >>> import skbert
    >>> skbert.clear_cache()
    """
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
    warning of :func:`skbert._encoder._cache.window_entries`, and never raise.
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


def store_for(cache):
    """The store of the ``cache`` parameter: the memory store (True), a DiskStore (a
    directory), or None: nothing is stored (False, or True under a budget of 0, where the
    memory store could keep nothing)."""
    if cache is False or (cache is True and not MEMORY.max_bytes):
        return None
    return MEMORY if cache is True else DiskStore(cache)
