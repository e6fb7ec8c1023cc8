"""Layer selection and pooling, split so that one forward pass can serve many settings.

A forward pass is summarized into *parts*: small pooled statistics keyed by
what they are, e.g. ``("mean", 3, True)`` is layer 3's mean over all tokens,
special tokens included. :func:`parts_needed` says which parts one extraction
setting reads, :func:`compute_parts` computes parts from hidden states (on the
model's device), and :func:`assemble` turns parts into features. The uncached
path computes just the parts its setting needs; the cache stores
:func:`parts_for_cache` so that any later setting is served without another
forward pass. Both go through :func:`assemble`, so they agree to the bit.

Token vectors are merged across layers *before* pooling (``layer_combine``
defines one token vector). For every pooling but max this equals merging the
per-layer pooled vectors, which is what the parts store; max of a mean or sum
of several layers is not decomposable and has its own part,
``("max_of_mean", layers, special)`` (max of a sum is ``len(layers)`` times it).
"""

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


def compute_parts(hidden_states, attention_mask, special_mask, pooler_output, keys):
    """Compute the parts named by ``keys`` for one batch.

    Parameters
    ----------
    hidden_states : indexable by layer -> tensor (batch, tokens, dim)
        Needs only the layers that ``keys`` read.
    attention_mask, special_mask : tensors (batch, tokens)
        1 for real tokens; 1 for special tokens ([CLS], [SEP]).
    pooler_output : tensor (batch, dim) or None
    keys : iterable of part keys

    Returns
    -------
    dict mapping each key to a float32 tensor of shape (batch, dim), or (batch,)
    for counts.
    """
    from skbert import pooling  # imports torch, so not at module level

    masks = {True: attention_mask.bool()}
    masks[False] = masks[True] & ~special_mask.bool()
    floats, sums = {}, {}

    def layer(index):  # each layer cast to float32 once per batch
        if index not in floats:
            floats[index] = hidden_states[index].float()
        return floats[index]

    def layer_sum(layers):  # sums of layer runs, reusing the run one layer shorter
        if layers not in sums:
            sums[layers] = layer(layers[0]) if len(layers) == 1 else (
                layer_sum(layers[1:]) + layer(layers[0]))
        return sums[layers]

    parts = {}
    for key in sorted(keys, key=lambda key: len(key[1]) if key[0] == "max_of_mean" else 0):
        kind = key[0]
        if kind == "pooler":
            parts[key] = pooler_output.float()
        elif kind == "count":
            parts[key] = pooling.token_counts(masks[key[1]])
        elif kind == "max_of_mean":
            merged = layer_sum(key[1]) / len(key[1])
            parts[key] = pooling.max_pooling(merged, masks[key[2]])
        else:
            mask = masks[key[2]] if len(key) == 3 else masks[True]
            parts[key] = pooling.POOLINGS[kind](layer(key[1]), mask)
    return parts


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
