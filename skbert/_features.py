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

    @property
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
    def selection(self):
        """(averages, layers) float32 array: which stacked layers each average sums."""
        selection = np.zeros((len(self.averages), len(self.layers)), dtype=np.float32)
        for row, members in enumerate(self.averages):
            selection[row, [self.layers.index(layer) for layer in members]] = 1.0
        return selection

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

    def parts(self, records, keys=None):
        """``{part key: view}`` of ``records`` (n, width) for ``keys`` (default: all)."""
        return {key: records[:, self.slices[key]] for key in (self.keys if keys is None else keys)
                if key in self.slices}


def _masked_max(values, mask, empty=0.0):
    """Max over the tokens in ``mask`` (batch, tokens) of ``values`` (n, batch, tokens, dim).

    Rows with an empty mask pool to ``empty``. The token positions that every row
    keeps (in length-sorted batches, all but a few) are reduced on a view,
    without masking; only the others are copied and masked. Adding -inf is
    several times faster than a broadcast ``masked_fill_``.
    """
    import torch

    everyone = mask.all(dim=0)
    kept = everyone.nonzero().flatten()
    start, stop = (int(kept[0]), int(kept[-1]) + 1) if len(kept) else (0, 0)
    if stop - start != len(kept):  # not one run: mask them all
        start = stop = 0
    pooled = values[:, :, start:stop].amax(dim=2) if stop > start else None
    ragged = mask.any(dim=0)
    ragged[start:stop] = False
    if ragged.any():
        columns = ragged.nonzero().flatten()
        part = values.index_select(2, columns) + torch.where(
            mask[:, columns], 0.0, float("-inf"))[None, :, :, None]
        part = part.amax(dim=2)
        pooled = part if pooled is None else torch.maximum(pooled, part)
    if pooled is None:
        return values.new_full((values.shape[0], values.shape[1], values.shape[3]), empty)
    return pooled.masked_fill_(~mask.any(dim=1)[None, :, None], empty)


def compute_parts(hidden_states, attention_mask, special_mask, pooler_output, layout, out=None):
    """The records of one batch: every part of ``layout``, in a handful of tensor operations.

    The layers read are stacked once, layer-major, and the sums of the layer
    averages that max pooling reads are written below them by one matmul with
    a 0/1 selection matrix. Then each kind of part is one operation over all
    layers at once: [CLS] and final [SEP] by indexing, masked means as one
    batched matmul for both masks, and masked maxima of layers and averages
    together as one reduction per mask (:func:`_masked_max`). When every
    window's special tokens are its first and last token (single texts), the
    max over all tokens is the max over the text tokens and those two: one
    reduction less. The vectors reach the record in one ``cat``.

    Parameters
    ----------
    hidden_states : indexable by layer -> tensor (batch, tokens, dim)
        Needs only the layers that ``layout`` reads.
    attention_mask, special_mask : tensors (batch, tokens)
        1 for real tokens (right padded); 1 for special tokens ([CLS], [SEP]).
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
    masks = {True: attention_mask.bool()}
    masks[False] = masks[True] & ~special_mask.bool()
    batch, n_tokens = attention_mask.shape
    rows = torch.arange(batch, device=device)
    last = masks[True].sum(dim=1) - 1
    specials = masks[True] & ~masks[False]
    ends_only = bool(((specials.sum(dim=1) == 2) & specials[:, 0] & specials[rows, last]).all())
    n_layers, n_averages = len(layout.layers), len(layout.averages)
    blocks = layout.blocks
    # (layers + averages, batch, tokens, dim): the layers read, then the sums of the averages.
    stacked = torch.empty((n_layers + n_averages, batch, n_tokens, layout.hidden_size),
                          device=device)
    states = stacked[:n_layers]
    if n_layers:
        torch.stack([hidden_states[layer].float() for layer in layout.layers], out=states)
    if n_averages:
        selection = torch.from_numpy(layout.selection).to(device)
        torch.mm(selection, states.reshape(n_layers, -1), out=stacked[n_layers:].view(
            n_averages, -1))

    def masks_of(kind):
        return sorted((special for block, special in blocks if block == kind), reverse=True)

    vectors = {}  # block -> tensor (members, batch, dim)
    if specials := masks_of("mean"):
        weights = torch.stack([masks[special] for special in specials], dim=1).float()
        means = torch.matmul(weights[None], states) / (
            weights.sum(dim=2).clamp(min=1.0)[None, :, :, None])
        vectors.update({("mean", special): means[:, :, index]
                        for index, special in enumerate(specials)})
    if specials := sorted(set(masks_of("max")) | set(masks_of("max_of_mean")), reverse=True):
        # The max of the averages is the max of the sums, divided after: fewer values.
        first = 0 if masks_of("max") else n_layers
        maxima = _maxima(stacked[first:], masks, specials, rows, last, ends_only)
        sizes = torch.from_numpy(layout.selection).to(device).sum(dim=1)[:, None, None]
        for special, values in maxima.items():
            vectors["max", special] = values[:n_layers - first]
            vectors["max_of_mean", special] = values[n_layers - first:] / sizes
    for kind, special in blocks:
        if kind == "cls":
            vectors[kind, special] = states[:, :, 0]
        elif kind == "last":
            vectors[kind, special] = states[:, rows, last]
        elif kind == "pooler":
            vectors[kind, special] = pooler_output.float()[None]

    out = torch.empty(batch, layout.width, device=device) if out is None else out
    parts = [(vectors[block] if rows is None else vectors[block][rows]).transpose(0, 1)
             for block, rows in blocks.items() if block[0] != "count"]
    n_vectors = sum(part.shape[1] for part in parts)
    width = n_vectors * layout.hidden_size
    if parts:
        torch.cat(parts, dim=1, out=out[:, :width].view(batch, n_vectors, layout.hidden_size))
    counts = masks_of("count")
    if counts:  # last in the record, in mask order False, True
        out[:, width:] = torch.stack([masks[special].sum(dim=1, dtype=torch.float32)
                                      for special in sorted(counts)], dim=1)
    return out


def _maxima(values, masks, specials, rows, last, ends_only):
    """``{special: masked max over tokens}`` of ``values`` (n, batch, tokens, dim).

    With special tokens at the ends only (single texts), row ``i``'s text
    tokens are positions 1 to ``last[i] - 1``: the positions every row has as
    text are one slice, reduced as it is, and the few that only the longer
    rows have are masked; the max over all tokens adds the two ends.
    """
    import torch

    if not ends_only:
        return {special: _masked_max(values, masks[special]) for special in specials}
    shortest, longest = (int(value) for value in torch.aminmax(last))
    text = values[:, :, 1:shortest].amax(dim=2) if shortest > 1 else values.new_full(
        (values.shape[0], values.shape[1], values.shape[3]), float("-inf"))
    if longest > shortest:
        positions = torch.arange(shortest, longest, device=last.device)
        ragged = values[:, :, shortest:longest] + torch.where(
            positions < last[:, None], 0.0, float("-inf"))[None, :, :, None]
        text = torch.maximum(text, ragged.amax(dim=2))
    maxima = {}
    if True in specials:
        maxima[True] = torch.maximum(torch.maximum(text, values[:, :, 0]), values[:, rows, last])
    if False in specials:  # windows without text tokens ([CLS] [SEP]) pool to zeros
        maxima[False] = text if shortest > 1 else text.masked_fill_((last < 2)[None, :, None], 0.0)
    return maxima


def _merge(vectors, how):
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
        return _merge([parts[name, layer] for layer in layers], combine)
    if name == "mean":
        return _merge([parts["mean", layer, special] for layer in layers], combine)
    if name == "mean_sqrt_len":
        counts = parts["count", special]
        return _pool(parts, extraction, "mean") * np.sqrt(counts)[:, None]
    if name == "max":
        if not extraction.merges_max:
            return _merge([parts["max", layer, special] for layer in layers], combine)
        maxima = parts["max_of_mean", extraction.averaged, special]
        return maxima * len(layers) if combine == "sum" else maxima
    if name == "mean_max":
        return np.concatenate(
            [_pool(parts, extraction, "mean"), _pool(parts, extraction, "max")], axis=1
        )
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
    if len(starts) == len(owner):
        return vectors
    if how == "max":
        return np.maximum.reduceat(vectors, starts, axis=0)
    weights = np.ones(len(owner)) if how == "mean" else np.maximum(n_text_tokens, 1)
    totals = np.add.reduceat(vectors * weights[:, None], starts, axis=0)
    return (totals / np.add.reduceat(weights, starts)[:, None]).astype(np.float32)
