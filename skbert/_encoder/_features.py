"""Layer selection and pooling, split so that one forward pass can serve many settings.

A forward pass is summarized into *parts*: small pooled statistics keyed by
what they are, e.g. ``("mean", 3, True)`` is layer 3's mean over all tokens,
special tokens included. :func:`parts_needed` says which parts one extraction
setting reads, :func:`compute_parts` computes parts from hidden states (on the
model's device) into one float32 *record* per window laid out by a
:class:`Layout`, and :func:`assemble` turns parts into features. The uncached
path computes just the parts its setting needs; the cache stores the record
of :func:`parts_for_cache` so that any later setting is served without another
forward pass. Both compute with the same operations and go through
:func:`assemble`, so they agree to float32 rounding (tested within 1e-6).

Token vectors are merged across layers *before* pooling (``layer_combine``
defines one token vector). For every pooling but max this equals merging the
per-layer pooled vectors, which is what the parts store; max of a mean or sum
of several layers is not decomposable and has its own part,
``("max_of_mean", layers, special)`` (max of a sum is ``len(layers)`` times it).
"""

import functools
import hashlib
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Extraction:
    """One extraction setting, with layers resolved to non-negative indices."""

    layers: tuple
    combine: str
    pooling: str
    special: bool

    @property
    def averaged(self):
        """The layers as a sorted tuple: the key of their average, whose order does not matter."""
        return tuple(sorted(self.layers))

    @property
    def merges_max(self):
        """Whether max pooling runs over a mean or sum of several layers."""
        return len(self.layers) > 1 and self.combine != "concat"


def parts_needed(extraction):
    """The set of part keys that :func:`assemble` reads for ``extraction``."""
    layers, special = extraction.layers, extraction.special
    name = extraction.pooling
    if name == "pooler":
        return {("pooler",)}
    keys = set()
    if name in ("cls", "last"):
        keys |= {(name, layer) for layer in layers}
    if name in ("mean", "mean_sqrt_len", "mean_max"):
        keys |= {("mean", layer, special) for layer in layers}
    if name == "mean_sqrt_len":
        keys.add(("count", special))
    if name in ("max", "mean_max"):
        if extraction.merges_max:
            keys.add(("max_of_mean", extraction.averaged, special))
        else:
            keys |= {("max", layer, special) for layer in layers}
    return keys


def parts_for_cache(n_layers, has_pooler):
    """Every per-layer part, plus max pooling of the usual layer averages.

    The usual averages are the last k layers for every k >= 2 and first+last
    (``[0, -1]`` and ``[1, -1]``); other multi-layer max settings add their own
    part on first use.
    """
    keys = {("count", special) for special in (True, False)}
    if has_pooler:
        keys.add(("pooler",))
    last = n_layers - 1
    averages = [tuple(range(first, n_layers)) for first in range(last - 1, -1, -1)]
    averages += [(0, last), (1, last)]
    for special in (True, False):
        for layer in range(n_layers):
            keys |= {("cls", layer), ("last", layer)}
            keys |= {("mean", layer, special), ("max", layer, special)}
        keys |= {("max_of_mean", layers, special) for layers in averages if len(layers) > 1}
    return keys


def layers_read(keys):
    """The set of hidden-state layers that computing ``keys`` needs."""
    layers = set()
    for key in keys:
        if key[0] == "max_of_mean":
            layers.update(key[1])
        elif key[0] not in ("count", "pooler"):
            layers.add(key[1])
    return layers


# Record order of the kinds: token counts last, so that the vectors form one run.
_KINDS = ("cls", "last", "mean", "max", "max_of_mean", "pooler", "count")


def _block(key):
    """(kind, special) of a part key: the parts of one block are computed together."""
    kind = key[0]
    if kind in ("mean", "max", "max_of_mean"):
        return kind, key[2]
    return kind, key[1] if kind == "count" else None


def _member(key):
    """What tells the parts of one block apart: a layer, a tuple of layers, or nothing."""
    kind = key[0]
    if kind in ("count", "pooler"):
        return ()
    return key[1] if kind == "max_of_mean" else (key[1],)


@dataclass(frozen=True)
class Layout:
    """Where each part lives in a window's *record*: one float32 row of ``width`` values.

    Parts are grouped into blocks of one kind and mask (e.g. the means of every
    layer over all tokens), each block a run of ``hidden_size``-wide vectors in
    member order; a token count takes one value. Build one with :meth:`of`.
    """

    keys: tuple
    hidden_size: int

    @classmethod
    def of(cls, keys, hidden_size):
        """The layout of ``keys`` (any iterable of part keys) in canonical order."""
        order = sorted(set(keys), key=lambda key: (_KINDS.index(key[0]), repr(_block(key)[1]),
                                                   _member(key)))
        return cls(tuple(order), hidden_size)

    @functools.cached_property
    def slices(self):
        """Part key -> column of the record: a slice, or an int for a token count."""
        slices, start = {}, 0
        for key in self.keys:
            if key[0] == "count":
                slices[key], start = start, start + 1
            else:
                slices[key] = slice(start, start + self.hidden_size)
                start += self.hidden_size
        return slices

    @functools.cached_property
    def width(self):
        return sum(1 if key[0] == "count" else self.hidden_size for key in self.keys)

    @functools.cached_property
    def layers(self):
        """The hidden-state layers the parts read, in order: the rows of the stacked states."""
        return sorted(layers_read(self.keys))

    @functools.cached_property
    def averages(self):
        """The layer tuples whose average is max-pooled, in order."""
        return sorted({key[1] for key in self.keys if key[0] == "max_of_mean"})

    @functools.cached_property
    def sums(self):
        """How each average's sum is added up, one ``(row, base, layers)`` per average in
        order of size: stacked row ``row`` (the layers, then the averages) is stacked row
        ``base`` plus the stacked rows ``layers``, one after another.

        A sum adds its layers from the deepest down, and starts from the sum of
        its deeper layers where that is an average too (the last k layers from
        the last k - 1): every sum of the same layers is the same float32
        value, however many averages the layout has, in one addition per row
        for the usual averages.
        """
        row = {(layer,): index for index, layer in enumerate(self.layers)}
        row.update({members: len(self.layers) + index
                    for index, members in enumerate(self.averages)})
        plan = []
        for members in sorted(self.averages, key=len):
            deepest = tuple(sorted(members, reverse=True))
            start = next(size for size in range(len(deepest) - 1, 0, -1)
                         if tuple(sorted(deepest[:size])) in row or size == 1)
            plan.append((row[members], row[tuple(sorted(deepest[:start]))],
                         [row[(layer,)] for layer in deepest[start:]]))
        return plan

    @functools.cached_property
    def blocks(self):
        """``{(kind, special): rows}`` in record order.

        ``rows`` are the block's members as rows of what it is computed from
        (the stacked layers, or the averages), or None when it takes all of
        them in order or has no members (token counts, pooler).
        """
        members = {}
        for key in self.keys:
            members.setdefault(_block(key), []).append(key)
        blocks = {}
        for (kind, special), keys in members.items():
            sources = self.averages if kind == "max_of_mean" else self.layers
            rows = [sources.index(key[1]) for key in keys] if _member(keys[0]) else None
            blocks[kind, special] = None if rows == list(range(len(sources))) else rows
        return blocks

    @functools.cached_property
    def tag(self):
        """A short hash of the layout, which tells records of different layouts apart."""
        text = repr((self.keys, self.hidden_size)).encode()
        return hashlib.blake2b(text, digest_size=6).hexdigest()

    def columns(self, keys):
        """The columns of the record that the parts ``keys`` hold, as slices in record
        order, adjacent ones merged."""
        spans = sorted((column, column + 1) if isinstance(column, int) else
                       (column.start, column.stop)
                       for key, column in self.slices.items() if key in keys)
        merged = []
        for start, stop in spans:
            if merged and merged[-1][1] == start:
                merged[-1][1] = stop
            else:
                merged.append([start, stop])
        return [slice(start, stop) for start, stop in merged]

    def parts(self, records, keys=None):
        """``{part key: view}`` of ``records`` (n, width) for ``keys`` (default: all)."""
        return {key: records[:, self.slices[key]] for key in (self.keys if keys is None else keys)
                if key in self.slices}


# Special-token mask value of the tokens that the encoder reads and pooling skips (a prompt
# that the model's pooling config excludes); 1 marks special tokens, 0 text tokens.
EXCLUDED = 2

# Bytes of one row of token vectors (one layer, or one sum of layers) that one step of
# compute_parts reads: long windows go through in tiles of tokens, and each row of a tile is
# reduced as soon as it is read or summed, while it is in the CPU's cache. A tile of all the
# rows stacked (16 MiB, a copy of every layer) took 0.84-0.87 s over the 3,424 sentences
# of benchmarks/cpu_backends.py where this takes 0.72-0.79 (benchmarks/README.md,
# 2026-12-02 (late night)).
TILE_BYTES = 2 * 1024**2


def compute_parts(hidden_states, attention_mask, special_mask, pooler_output, layout, out=None):
    """The records of one batch: every part of ``layout``, row by row of a tile of tokens.

    The rows are the layers read and the sums of the layer averages that max
    pooling reads (:attr:`Layout.sums`: each by one addition for the usual
    averages, from the sum before it). Tile by tile of tokens, each row is
    reduced while it is in the cache: masked sums for the means of a layer as
    one matmul for both masks and masked maxima (:func:`_tile_span`,
    :func:`_tile_max`; :func:`_tile_rows` makes the rows); [CLS] and final
    [SEP] are gathered once. When every window's special tokens are its first
    and last token (single texts), the max over all tokens is the max over the
    text tokens and those two. The vectors reach the record in one ``cat``.

    Parameters
    ----------
    hidden_states : indexable by layer -> tensor (batch, tokens, dim)
        Needs only the layers that ``layout`` reads. Never written to.
    attention_mask, special_mask : tensors (batch, tokens)
        1 for real tokens (right padded); 1 for special tokens ([CLS], [SEP]),
        :data:`EXCLUDED` for tokens that no pooling reads (an excluded prompt).
    pooler_output : tensor (batch, dim) or None
    layout : Layout
    out : float32 tensor of shape (batch, layout.width), optional
        Where to write the records (e.g. a view of a numpy array).

    Returns
    -------
    float32 tensor of shape (batch, layout.width), on the hidden states' device.
    """
    import torch

    device = attention_mask.device
    attended = attention_mask.bool()
    masks = {True: attended & (special_mask != EXCLUDED), False: attended & (special_mask == 0)}
    batch, n_tokens = attention_mask.shape
    dim = layout.hidden_size
    rows = torch.arange(batch, device=device)
    last = attended.sum(dim=1) - 1
    specials = masks[True] & ~masks[False]
    # (and no token that pooling skips: an excluded prompt)
    ends_only = bool(((specials.sum(dim=1) == 2) & specials[:, 0] & specials[rows, last]).all()
                     and not bool((attended & (special_mask == EXCLUDED)).any()))
    n_layers, n_averages = len(layout.layers), len(layout.averages)
    n_rows = n_layers + n_averages
    blocks = layout.blocks

    def masks_of(*kinds):
        return sorted({special for kind, special in blocks if kind in kinds}, reverse=True)

    mean_masks, max_masks = masks_of("mean"), masks_of("max", "max_of_mean")
    weights = torch.stack([masks[special] for special in mean_masks], dim=1).float() \
        if mean_masks else None
    sums = torch.zeros((n_layers, batch, len(mean_masks), dim), device=device)
    first = 0 if masks_of("max") else n_layers  # the first row whose max is read
    reduced = ([False] if ends_only else max_masks) if max_masks else []
    # [CLS] and final [SEP] of every row: gathered from the layers, and added up as the sums
    # are (the same float32 additions, element by element).
    ends = torch.empty((2, n_rows, batch, dim), device=device)
    if n_layers:
        torch.stack([hidden_states[layer][:, 0].float() for layer in layout.layers],
                    out=ends[0, :n_layers])
        torch.stack([hidden_states[layer][rows, last].float() for layer in layout.layers],
                    out=ends[1, :n_layers])
    for row, base, layers in layout.sums:
        torch.add(ends[:, base], ends[:, layers[0]], out=ends[:, row])
        for layer in layers[1:]:
            ends[:, row] += ends[:, layer]
    maxima = {}
    tile = min(n_tokens, max(1, TILE_BYTES // max(1, batch * dim * 4)))
    for start in range(0, n_tokens if n_layers else 0, tile):
        stop = min(n_tokens, start + tile)
        spans = {special: _tile_span(masks[special], start, stop, last, ends_only)
                 for special in reduced}
        pooled = {special: {} for special in reduced}  # special -> {row: (batch, dim)}
        for row, values in _tile_rows(hidden_states, layout, start, stop):
            if row < n_layers and mean_masks:
                sums[row].baddbmm_(weights[:, :, start:stop], values)
            if row >= first:
                for special, span in spans.items():
                    pooled[special][row] = _tile_max(values, span)
        for special, values in pooled.items():
            values = torch.stack([values[row] for row in range(first, n_rows)])
            maxima[special] = torch.maximum(maxima[special], values) if special in maxima \
                else values

    vectors = {}  # block -> tensor (members, batch, dim)
    for index, special in enumerate(mean_masks):
        vectors["mean", special] = sums[:, :, index] / weights[:, index].sum(dim=1).clamp(
            min=1.0)[None, :, None]
    if ends_only and True in max_masks:  # all tokens: the text tokens and the two ends
        maxima[True] = torch.maximum(maxima[False], ends[:, first:].amax(dim=0))
    sizes = torch.tensor([float(len(members)) for members in layout.averages],
                         device=device)[:, None, None]
    for special in max_masks:  # a window without such tokens pools to zeros
        values, empty = maxima[special], ~masks[special].any(dim=1)
        if bool(empty.any()):
            values = values.masked_fill(empty[None, :, None], 0.0)
        vectors["max", special] = values[:n_layers - first]
        # The max of the averages is the max of the sums, divided after: fewer values.
        vectors["max_of_mean", special] = values[n_layers - first:] / sizes
    vectors["cls", None], vectors["last", None] = ends[0, :n_layers], ends[1, :n_layers]
    if pooler_output is not None:
        vectors["pooler", None] = pooler_output.float()[None]

    out = torch.empty(batch, layout.width, device=device) if out is None else out
    parts = [(vectors[block] if members is None else vectors[block][members]).transpose(0, 1)
             for block, members in blocks.items() if block[0] != "count"]
    n_vectors = sum(part.shape[1] for part in parts)
    width = n_vectors * dim
    if parts:
        torch.cat(parts, dim=1, out=out[:, :width].view(batch, n_vectors, dim))
    counts = masks_of("count")
    if counts:  # last in the record, in mask order False, True
        out[:, width:] = torch.stack([masks[special].sum(dim=1, dtype=torch.float32)
                                      for special in sorted(counts)], dim=1)
    return out


def _tile_rows(hidden_states, layout, start, stop):
    """The rows of the tokens ``start:stop``, in order: ``(row, values)`` for the layers read,
    then for the sums of the averages (:attr:`Layout.sums`), values float32 (batch, tokens,
    dim), valid until the next row. A sum's memory is reused once no later sum starts
    from it (the usual averages: one buffer, each sum written over the one before)."""
    import torch

    n_layers = len(layout.layers)
    tiles, free = {}, []
    for row, layer in enumerate(layout.layers):
        tiles[row] = hidden_states[layer][:, start:stop].float()
        yield row, tiles[row]
    for index, (row, base, layers) in enumerate(layout.sums):
        later = {base for _, base, _ in layout.sums[index + 1:]}
        if base >= n_layers and base not in later:  # written over in place
            total = tiles.pop(base)
            total += tiles[layers[0]]
        else:
            total = torch.add(tiles[base], tiles[layers[0]],
                              out=free.pop() if free else None)
        for layer in layers[1:]:
            total += tiles[layer]
        yield row, total
        if row in later:
            tiles[row] = total
        else:
            free.append(total)


def _tile_span(mask, start, stop, last, ends_only):
    """Which tokens of ``start:stop`` :func:`_tile_max` reduces for one mask: ``(lo, mid, hi,
    bias)``, columns of the tile: ``lo:mid`` kept by every window, and for ``mid:hi`` 0 or
    -inf per window and column (batch, columns, 1) to add before the max (None where every
    window keeps them all). With ``ends_only`` the text tokens of window i are positions 1
    to last[i] - 1: in a batch of similar lengths, most columns need no bias."""
    import torch

    if ends_only:
        lo, hi = max(1, start), min(int(last.max()), stop)
        mid = max(lo, min(int(last.min()), hi))
        kept = torch.arange(mid, max(mid, hi), device=last.device)[None] < last[:, None]
    else:
        lo, mid, hi = start, start, stop
        kept = mask[:, start:stop]
    if bool(kept.all()):
        mid, bias = max(mid, hi), None
    else:
        bias = torch.where(kept, 0.0, float("-inf"))[:, :, None]
    return lo - start, mid - start, hi - start, bias


def _tile_max(values, span):
    """The max of one row of a tile (batch, tokens, dim) over the tokens of ``span``
    (:func:`_tile_span`): -inf where a window has none there."""
    import torch

    lo, mid, hi, bias = span
    maxima = [values[:, lo:mid].amax(dim=1)] if mid > lo else []
    if bias is not None:
        maxima.append((values[:, mid:hi] + bias).amax(dim=1))
    if not maxima:
        return torch.full((values.shape[0], values.shape[2]), float("-inf"),
                          device=values.device)
    return maxima[0] if len(maxima) == 1 else torch.maximum(*maxima)


def merge_layers(vectors, how):
    """Vectors of several layers (arrays of one shape) merged: concatenated, summed or
    averaged, in float32."""
    if how == "concat":
        return np.concatenate(vectors, axis=1)
    if len(vectors) == 1:
        return vectors[0]
    total = vectors[0] + vectors[1]  # accumulated in place: one output-sized array
    for vector in vectors[2:]:
        total += vector
    return total / len(vectors) if how == "mean" else total


def _pool(parts, extraction, name):
    layers, special, combine = extraction.layers, extraction.special, extraction.combine
    if name in ("cls", "last"):
        return merge_layers([parts[name, layer] for layer in layers], combine)
    if name == "mean":
        return merge_layers([parts["mean", layer, special] for layer in layers], combine)
    if name == "mean_sqrt_len":
        counts = parts["count", special]
        return _pool(parts, extraction, "mean") * np.sqrt(counts)[:, None]
    if name == "max":
        if not extraction.merges_max:
            return merge_layers([parts["max", layer, special] for layer in layers], combine)
        maxima = parts["max_of_mean", extraction.averaged, special]
        return maxima * len(layers) if combine == "sum" else maxima
    if name == "mean_max":
        return np.concatenate([_pool(parts, extraction, half) for half in ("mean", "max")],
                              axis=1)
    return parts["pooler",]


def assemble(parts, extraction):
    """Features for ``extraction`` from parts (numpy arrays with one row per sequence)."""
    return np.ascontiguousarray(_pool(parts, extraction, extraction.pooling), dtype=np.float32)


def n_features(extraction, hidden_size):
    """Width of the features that :func:`assemble` returns."""
    width = hidden_size
    if extraction.combine == "concat" and extraction.pooling != "pooler":
        width *= len(extraction.layers)
    return 2 * width if extraction.pooling == "mean_max" else width


def merge_windows(vectors, owner, n_text_tokens, how):
    """Merge the window vectors of each text into one row per text.

    Parameters
    ----------
    vectors : ndarray of shape (n_windows, dim)
    owner : ndarray of shape (n_windows,)
        The text of each window, non-decreasing (a text's windows are consecutive).
    n_text_tokens : ndarray of shape (n_windows,)
        Tokens of text (special tokens excluded) in each window: the weights of "weighted".
    how : {"mean", "max", "weighted"}
        Plain mean, element-wise max, or mean weighted by ``n_text_tokens``.
    """
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    if how == "max":
        return np.maximum.reduceat(vectors, starts, axis=0)
    weights = np.ones(len(owner)) if how == "mean" else np.maximum(n_text_tokens, 1)
    totals = np.add.reduceat(vectors * weights[:, None], starts, axis=0)
    return (totals / np.add.reduceat(weights, starts)[:, None]).astype(np.float32)
