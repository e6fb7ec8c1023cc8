"""The forward-pass cache: one encoder pass per distinct window, reused by every setting.

An entry of a text's window is its *record* (:class:`skbert._encoder._features.Layout`):
one float32 row holding, for every layer, the [CLS] and final [SEP] vectors,
the masked mean and max with and without special tokens, the token counts, the
pooler output, and max pooling of the usual layer averages. That serves any
``layer``, ``layer_combine``, ``pooling``, ``include_special_tokens`` and
``norm`` without another forward pass, at ``(6 * n_layers + 2 * (n_layers + 1)
+ 1) * hidden * 4`` bytes a window (n_layers counting the embedding output):
about 91 KB for all-MiniLM-L6-v2 (7 x 384) and 329 KB for BERT-base (13 x 768).
A rarer multi-layer max gets a record of its own layout next to it. An entry of
a sentence's window is its token states (:mod:`skbert._words`), and so is one
of a vocabulary token alone, with the pooler output (:func:`token_features`:
33.8 KB for all-MiniLM-L6-v2, whose windows have three tokens). Entries are
named by :mod:`skbert._encoder._keys` and kept by :mod:`skbert._encoder._stores`.

:func:`window_entries` walks the distinct windows of one call, longest first,
in chunks of a few MB of entries: a chunk's hits are served by the store, its
misses go through the encoder, and the chunk is consumed before the next. A
call keeps no entries of its own beyond one chunk, so the store's byte budget
bounds what the cache holds, however many texts one call has.
"""

import os
import threading
import warnings

import numpy as np

from skbert._encoder._encoding import Rows, forward_states, parts_of_states
from skbert._encoder._features import Layout, assemble, n_features, parts_needed
from skbert._encoder._keys import entry_name, token_states_tag, window_keys
from skbert._encoder._stores import (
    MEMORY,
    DiskStore,
    check_cache,
    clear_cache,
    entry_bytes,
    set_cache_limit,
    store_for,
)

# What the estimators and the tests reach through this module, beside its own functions.
__all__ = ["MEMORY", "check_cache", "clear_cache", "set_cache_limit", "store_for",
           "token_features", "window_entries", "window_features", "window_keys"]

# Entries held at once by one call, beyond the store: one chunk of distinct windows (and
# their assembled features). Small, since fresh memory costs page faults (up to 2 ms per MB
# on a virtual machine) and is held at the encoder's peak: 8 MiB raised a cache=False
# transform's peak by ~15 MB over the bare encoder's.
CHUNK_BYTES = 2 * 1024**2


def chunk_length(n_values, batch_size):
    """Windows in a chunk whose first window's entries hold ``n_values`` values together:
    :data:`CHUNK_BYTES` of them, in whole forward batches (one at least)."""
    return batch_size * max(1, CHUNK_BYTES // (4 * batch_size * int(n_values)))


def window_entries(store, keys, tags, lengths, sizes, compute, consume, batch_size=1,
                   progress=None):
    """Hand the entries of every window to ``consume``, chunk by chunk, longest windows
    first: each served by ``store`` (a MemoryStore, a DiskStore or None) or computed.

    Window k has the distinct key ``keys[k]``, ``lengths[k]`` tokens and one entry
    per tag, ``sizes[k, t]`` float32 values long. ``compute(windows)`` runs their
    forward passes (``batch_size`` windows each) and returns each window's
    entries; a view (of the caller's buffer) is copied to be stored.
    ``consume(windows, entries, n_computed)`` reads a chunk's entries, the
    computed ones first; the others are the store's, not to be written.
    ``progress`` (tqdm or None) is advanced by the hits, by ``compute`` for the misses.
    """
    order = np.argsort(-np.asarray(lengths), kind="stable")
    since = None if store is None else store.tick
    start, all_kept = 0, True
    while start < len(order):
        rows = order[start:start + chunk_length(sizes[order[start]].sum(), batch_size)]
        start += len(rows)
        found = [_lookup(store, keys[row], tags, sizes[row], since) for row in rows]
        hit = np.array([entries is not None for entries in found], dtype=bool)
        rows = np.concatenate([rows[~hit], rows[hit]])  # misses first
        found = [entries for entries in found if entries is not None]
        n_computed = len(rows) - len(found)
        if n_computed:
            fresh = list(compute(rows[:n_computed]))
            for row, entries in zip(rows, fresh if store is not None else []):
                for tag, entry in zip(tags, entries):
                    # A view is copied: the caller writes the next chunk into its buffer.
                    entry = entry if entry.base is None else entry.copy()
                    all_kept &= store.put(entry_name(keys[row], tag), entry, since)
            found = fresh + found
        if progress is not None:
            progress.update(len(rows) - n_computed)
        consume(rows, found, n_computed)
    _report(store, all_kept)


def _lookup(store, key, tags, sizes, since):
    """The entries of one window in ``store``, or None where one is missing (or no store)."""
    if store is None:
        return None
    entries = [store.get(entry_name(key, tag), size, since) for tag, size in zip(tags, sizes)]
    return None if any(entry is None for entry in entries) else entries


def window_features(store, keys, lengths, layouts, compute, assemble, batch_size=1,
                    progress=None, reads=None):
    """Features (n_windows, n_features) of every window, from records of ``layouts``
    served by ``store`` or computed once per distinct key of ``keys`` (S32).

    ``compute(windows, out)`` writes each window's records into ``out``, one
    array per layout, and ``assemble(records)`` makes their features, reading
    only the columns ``reads`` (per layout, a list of slices; default: all).
    Only those columns of a stored record are copied for it: a warm transform
    of 3,424 sentences that reads one of a record's 59 vectors took 0.10 s
    against 0.18 with whole records copied (benchmarks/README.md,
    2026-12-05). The other arguments are those of :func:`window_entries`.
    """
    distinct, inverse = np.unique(keys, return_inverse=True)
    # The windows of each distinct key, as rows: row k lists the windows of key k.
    order = np.argsort(inverse.ravel(), kind="stable")
    groups = Rows(order, np.searchsorted(inverse.ravel()[order], np.arange(len(distinct) + 1)))
    window_of = order[groups.offsets[:-1]]  # the first window of each
    widths = [layout.width for layout in layouts]
    reads = [[slice(None)]] * len(layouts) if reads is None else reads
    # One set of buffers for every chunk: fresh memory for each would cost page faults.
    n_rows = min(chunk_length(sum(widths), batch_size), len(distinct))
    buffers = [np.empty((n_rows, width), dtype=np.float32) for width in widths]
    features = None

    def computed(rows):  # straight into the chunk's records
        records = [buffer[:len(rows)] for buffer in buffers]
        compute(window_of[rows], records)
        return list(zip(*records))

    def consume(rows, entries, n_computed):
        nonlocal features
        records = [buffer[:len(rows)] for buffer in buffers]
        for index, found in enumerate(entries[n_computed:], start=n_computed):
            for array, record, columns in zip(records, found, reads):
                for column in columns:
                    array[index, column] = record[column]
        values = assemble(records)
        if features is None:
            features = np.empty((len(keys), values.shape[1]), dtype=np.float32)
        targets = groups.take(rows)  # every window of these keys, duplicates included
        features[targets.values] = values if len(targets.values) == len(rows) else np.repeat(
            values, targets.lengths, axis=0)

    sizes = np.broadcast_to(widths, (len(distinct), len(widths)))
    window_entries(store, distinct, [layout.tag for layout in layouts],
                   np.asarray(lengths)[window_of], sizes, computed, consume, batch_size, progress)
    return features


# The share of the in-memory budget that the token states of one distillation may take: the
# rest stays for the texts the user cached.
TOKEN_SHARE = 0.5


def token_plan(store, n_windows, n_tokens, hidden_size, every, read):
    """Which token states a distillation keeps and where: ``(store or None, layers, pooler)``.

    ``every`` and ``read`` are ``(layers, pooler)``: every hidden state (and the
    pooler output where the model has one), which serves any later setting, and
    what this setting reads. A directory keeps every one; the in-memory store
    the first of the two whose entries, ``n_windows`` of ``n_tokens`` tokens,
    take at most :data:`TOKEN_SHARE` of its budget; else nothing is stored, and
    only what is read is computed.
    """
    if store is None:
        return (None, *read)
    if isinstance(store, DiskStore):
        return (store, *every)
    for layers, pooler in (every, read):
        n_values = (len(layers) * n_tokens + pooler) * hidden_size
        if n_windows * entry_bytes(n_values) <= TOKEN_SHARE * store.max_bytes:
            return store, layers, pooler
    return (None, *read)


def token_features(store, keys, windows, runner, tokenizer, extraction, n_layers, has_pooler,
                   batch_size, progress=None):
    """Features of ``extraction`` (not normalized) of every window of ``windows``, windows of
    one length and one special-token mask (vocabulary tokens alone,
    :func:`skbert._encoder._encoding.token_windows`), ``keys`` their cache keys.

    An entry holds a token's states (:func:`skbert._encoder._encoding.forward_states`):
    the hidden states at the window's few tokens, for every layer where they fit
    (:func:`token_plan`), so that any layer, layer combination and pooling is
    served from them, not only this setting (a text's record, 91 KB for
    all-MiniLM-L6-v2, takes 2.7 times as much as a token's states). Only the
    layers that ``extraction`` reads are copied out of a stored entry.
    """
    hidden_size = runner.config.hidden_size
    needed = parts_needed(extraction)
    layout = Layout.of(needed, hidden_size)
    read = (layout.layers, ("pooler",) in needed)
    distinct, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    n_tokens = int(windows.lengths[0]) if len(windows) else 0
    store, layers, pooler = token_plan(store, len(distinct), n_tokens, hidden_size,
                                       (list(range(n_layers)), has_pooler), read)
    span = n_tokens * hidden_size
    width = len(layers) * span + pooler * hidden_size
    # Where the columns read sit in an entry: each layer read, then the pooler output.
    sources = [slice(layers.index(layer) * span, (layers.index(layer) + 1) * span)
               for layer in read[0]] + [slice(width - hidden_size, width)] * read[1]
    special = np.asarray(windows.special_mask[0]) if len(windows) else None
    features = np.empty((len(distinct), n_features(extraction, hidden_size)), dtype=np.float32)

    def compute(rows):
        out = np.empty((len(rows), width), dtype=np.float32)
        forward_states(runner, tokenizer, windows.subset(first[rows]), layers, pooler, out,
                       batch_size, progress)
        return [[row] for row in out]

    def consume(rows, entries, n_computed):
        states = np.concatenate([np.stack([entry[source] for (entry,) in entries])
                                 for source in sources], axis=1)
        records = parts_of_states(states, special, read[0], read[1], layout)
        features[rows] = assemble(layout.parts(records), extraction)

    window_entries(store, distinct, [token_states_tag(layers, pooler, hidden_size)],
                   windows.lengths[first], np.full((len(distinct), 1), width), compute, consume,
                   batch_size, progress)
    return features[inverse.ravel()]


_WARNED = set()  # (directory, errno) pairs this process has warned about
_LOCK = threading.Lock()


def _first_time(store):
    """Whether this kind of write failure in this directory is new to the process: a grid
    search over a read-only directory warns once, not once per fit."""
    fault = (os.path.abspath(store.directory), store.write_error.errno)
    with _LOCK:
        new = fault not in _WARNED
        _WARNED.add(fault)
    return new


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
