"""Tokenization into windows, length-sorted batching and forward passes.

A *window* is one encoder input: token ids with their special-token mask (and
token type ids for text pairs). Every text gives at least one window; the
window -> text map says how to merge them back. Forward passes run over the
windows sorted by length, so each batch pads only to its own longest window,
and results are written back in input order.
"""

import collections.abc
import functools
import itertools
import threading
import warnings
from dataclasses import dataclass

import numpy as np

from skbert._compat import install_output_hooks, with_children
from skbert._encoder._features import EXCLUDED, compute_parts, layers_read
from skbert._encoder._loading import length_limit


class Rows(collections.abc.Sequence):
    """Rows of token values of varying lengths, stored flat: row ``i`` is
    ``values[offsets[i]:offsets[i + 1]]``, a view (written in place where it is changed).

    One array of values and one of offsets instead of a small array per row:
    a call over many texts holds a few bytes a token, in two allocations.
    """

    def __init__(self, values, offsets):
        self.values, self.offsets = values, offsets

    @classmethod
    def of(cls, rows, dtype):
        """``rows`` (any sequences of ints, or a ``Rows``) as flat ``dtype`` rows."""
        if isinstance(rows, Rows):
            return rows if rows.values.dtype == dtype else cls(rows.values.astype(dtype),
                                                               rows.offsets)
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if len(rows) and isinstance(rows[0], np.ndarray):
            return cls(np.concatenate(rows).astype(dtype, copy=False), offsets)
        values = np.fromiter(itertools.chain.from_iterable(rows), dtype=dtype,
                             count=int(offsets[-1]))
        return cls(values, offsets)

    @classmethod
    def concatenate(cls, parts):
        """The rows of ``parts`` one after another."""
        offsets = [parts[0].offsets[:1]]
        for part in parts:
            offsets.append(part.offsets[1:] - part.offsets[0] + offsets[-1][-1])
        return cls(np.concatenate([part.values[part.offsets[0]:part.offsets[-1]]
                                   for part in parts]), np.concatenate(offsets))

    def __len__(self):
        return len(self.offsets) - 1

    def __getitem__(self, index):
        """Row ``index`` (a view), or for a slice of step 1 the rows in it (views of the
        values)."""
        rows = range(len(self))[index]  # IndexError out of range; negative from the end
        if isinstance(index, slice):
            if rows.step != 1:
                raise ValueError("Rows take slices of step 1; use take() for others.")
            offsets = self.offsets[rows.start:max(rows.start, rows.stop) + 1]
            return Rows(self.values[offsets[0]:offsets[-1]], offsets - offsets[0])
        return self.values[self.offsets[rows]:self.offsets[rows + 1]]

    def __iter__(self):
        bounds = self.offsets.tolist()
        return (self.values[start:stop] for start, stop in zip(bounds, bounds[1:]))

    @property
    def lengths(self):
        return np.diff(self.offsets)

    def _positions(self, indices):
        """The flat positions of the rows at ``indices``, one after another, and their lengths."""
        lengths = self.lengths[indices]
        starts = self.offsets[:-1][indices]
        within = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        return np.repeat(starts, lengths) + within, lengths

    def take(self, indices):
        """The rows at ``indices``, copied into rows of their own."""
        positions, lengths = self._positions(np.asarray(indices, dtype=np.int64))
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return Rows(self.values[positions], offsets)

    def padded(self, indices, value, width=None):
        """The rows at ``indices`` as one int64 array, right-padded with ``value`` to their
        longest row, or to ``width`` (at least that long)."""
        positions, lengths = self._positions(np.asarray(indices, dtype=np.int64))
        width = int(lengths.max(initial=0)) if width is None else width
        padded = np.full((len(lengths), width), value, dtype=np.int64)
        padded[np.arange(padded.shape[1]) < lengths[:, None]] = self.values[positions]
        return padded

    def count(self, value):
        """How many of each row's values equal ``value``."""
        totals = np.zeros(len(self.values) + 1, dtype=np.int64)
        np.cumsum(self.values == value, out=totals[1:])
        return totals[self.offsets[1:]] - totals[self.offsets[:-1]]


@dataclass
class Windows:
    """Tokenized encoder inputs: one row per window, in text order.

    ``input_ids``, ``special_mask`` and ``token_type_ids`` (or None) are
    :class:`Rows` (int32, int8, int8), whatever row sequences they are given
    as; ``owner`` is the text of each window.
    """

    input_ids: Rows
    special_mask: Rows
    token_type_ids: Rows | None
    owner: np.ndarray

    def __post_init__(self):
        self.input_ids = Rows.of(self.input_ids, np.int32)
        self.special_mask = Rows.of(self.special_mask, np.int8)
        if self.token_type_ids is not None:
            self.token_type_ids = Rows.of(self.token_type_ids, np.int8)

    def __len__(self):
        return len(self.input_ids)

    def _rows(self):
        return self.input_ids, self.special_mask, self.token_type_ids

    @classmethod
    def concatenate(cls, parts):
        """One ``Windows`` holding the rows of ``parts`` in order (owners as they are)."""
        rows = [None if parts[0]._rows()[k] is None
                else Rows.concatenate([part._rows()[k] for part in parts]) for k in range(3)]
        return cls(*rows, np.concatenate([part.owner for part in parts]))

    def subset(self, indices):
        """The windows at ``indices`` (owners kept)."""
        return Windows(*(None if rows is None else rows.take(indices) for rows in self._rows()),
                       self.owner[indices])

    @property
    def n_text_tokens(self):
        """Tokens per window that are not special tokens."""
        return self.special_mask.count(0)

    @functools.cached_property
    def lengths(self):
        return self.input_ids.lengths


def tokenize(tokenizer, texts, max_length, truncation="head", stride=0, prompt="",
             pool_prompt=True):
    """Encoder windows of ``texts`` (str, or (str, str) pairs) of at most ``max_length`` tokens.

    "head" keeps the first tokens and "chunks" cuts the whole text into windows
    overlapping by ``stride`` tokens, both with the tokenizer's own truncation
    and overflow; "tail" keeps the last tokens and "head_tail" a quarter of the
    text budget from the head and the rest from the tail. Text pairs are
    always truncated "head"-style, longest sequence first. Lone surrogates,
    which no tokenizer can encode, are replaced by U+FFFD first.

    ``prompt`` is put before every text (the first text of a pair) as a
    string, as sentence-transformers does, and its tokens open every window of
    a text, whatever the truncation. With ``pool_prompt=False`` the special
    tokens before the text and the prompt's tokens are marked
    :data:`EXCLUDED` in the special-token mask: the encoder reads them, pooling
    does not.
    """
    texts = [tuple(map(_encodable, text)) if isinstance(text, tuple) else _encodable(text)
             for text in texts]
    prompt = _encodable(prompt)
    slices = []
    for start in range(0, max(len(texts), 1), TOKENIZE_SLICE):  # no texts: one empty call
        with TOKENIZER_LOCK:
            windows = _tokenize(tokenizer, texts[start:start + TOKENIZE_SLICE], max_length,
                                truncation, stride, prompt)
        windows.owner += start
        slices.append(windows)
    windows = Windows.concatenate(slices)
    if prompt and not pool_prompt:
        _exclude_prompt(tokenizer, windows, prompt)
    return windows


# Fast tokenizers reconfigure their Rust core (truncation, padding) on every call, which
# fails ("Already borrowed") when two threads call one tokenizer at once.
TOKENIZER_LOCK = threading.Lock()

# Texts per tokenizer call. The tokenizer's per-text results (tokens, offsets, masks) are
# much larger than the compact windows kept from them: tokenizing 10,000 sentences in one
# call raises peak memory by ~40 MB, in slices by ~3 MB.
TOKENIZE_SLICE = 1024

def _encodable(text):
    """``text`` with lone surrogates (not valid Unicode, unencodable) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def _tokenize(tokenizer, texts, max_length, truncation, stride, prompt):
    common = dict(max_length=max_length, return_special_tokens_mask=True,
                  return_attention_mask=False, verbose=False)
    if texts and isinstance(texts[0], tuple):
        if truncation != "head":
            raise ValueError(
                f"truncation={truncation!r} applies to single texts; text pairs are truncated "
                "longest-first from the end (truncation='head')."
            )
        first, second = zip(*texts)
        encoded = tokenizer([prompt + text for text in first], list(second),
                            truncation="longest_first", **common)
    elif truncation == "head":
        encoded = tokenizer([prompt + text for text in texts], truncation=True, **common)
    elif truncation == "chunks" and not prompt:
        encoded = tokenizer(list(texts), truncation=True, stride=stride,
                            return_overflowing_tokens=True, **common)
        return Windows(encoded["input_ids"], encoded["special_tokens_mask"], None,
                       np.asarray(encoded["overflow_to_sample_mapping"]))
    else:
        return _cut_windows(tokenizer, texts, max_length, truncation, stride, prompt)
    return Windows(encoded["input_ids"], encoded["special_tokens_mask"],
                   encoded.get("token_type_ids"), np.arange(len(texts)))


def text_budget(tokenizer, max_length):
    """Text tokens per window: ``max_length`` less the special tokens of a single text."""
    return max_length - tokenizer.num_special_tokens_to_add(pair=False)


def _template(tokenizer):
    """The special tokens around one text (e.g. [CLS] ... [SEP]), read off the tokenizer."""
    probe = tokenizer("a", return_special_tokens_mask=True)
    ids, special = probe["input_ids"], probe["special_tokens_mask"]
    n_prefix, n_suffix = special.index(0), special[::-1].index(0)
    return ids[:n_prefix], ids[len(ids) - n_suffix:]


def _common_prefix(tokens, prompt_ids):
    """How many of the first ``tokens`` are the prompt's own tokens."""
    n = 0
    while n < min(len(tokens), len(prompt_ids)) and tokens[n] == prompt_ids[n]:
        n += 1
    return n


def _cut_windows(tokenizer, texts, max_length, truncation, stride, prompt):
    """Windows cut from each text's tokens by hand: "tail", "head_tail", and prompted "chunks".

    ``prompt + text`` is tokenized as one string (the tokens at the boundary are
    the ones "head" gets); the leading tokens that are the prompt's own open
    every window of the text, and the text tokens fill the rest of the budget.
    """
    prefix, suffix = _template(tokenizer)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"] if prompt else []
    budget = text_budget(tokenizer, max_length)
    input_ids, masks, owner = [], [], []
    joined = tokenizer([prompt + text for text in texts], add_special_tokens=False,
                       verbose=False)["input_ids"]
    for index, tokens in enumerate(joined):
        lead = tokens[:_common_prefix(tokens, prompt_ids)]
        tokens, room = tokens[len(lead):], budget - len(lead)
        if truncation == "chunks":
            step = room - stride
            pieces = [tokens[start:start + room] for start in
                      range(0, max(len(tokens) - stride, 1), step)]
        elif len(tokens) > room:
            n_head = room // 4 if truncation == "head_tail" else 0
            pieces = [tokens[:n_head] + tokens[len(tokens) - (room - n_head):]]
        else:
            pieces = [tokens]
        for piece in pieces:
            input_ids.append(prefix + lead + piece + suffix)
            masks.append([1] * len(prefix) + [0] * (len(lead) + len(piece)) + [1] * len(suffix))
            owner.append(index)
    return Windows(input_ids, masks, None, np.asarray(owner, dtype=np.int64))


def token_windows(tokenizer, token_ids, prompt="", pool_prompt=True):
    """One window per id of ``token_ids``: the token alone as a text, between the special
    tokens of a single text and after the prompt's tokens (as :func:`tokenize` puts them).

    How static embeddings are distilled: each vocabulary token through the
    encoder by its id, so that a word piece ("##ing") is the piece, not the
    tokens of its spelling.
    """
    prefix, suffix = _template(tokenizer)
    lead = prefix + (tokenizer(prompt, add_special_tokens=False)["input_ids"] if prompt else [])
    token_ids = np.asarray(token_ids, dtype=np.int32)
    width = len(lead) + 1 + len(suffix)
    input_ids = np.empty((len(token_ids), width), dtype=np.int32)
    input_ids[:, :len(lead)], input_ids[:, len(lead)] = lead, token_ids
    input_ids[:, len(lead) + 1:] = suffix
    mask = [1] * len(prefix) + [0] * (len(lead) - len(prefix) + 1) + [1] * len(suffix)
    if prompt and not pool_prompt:
        mask[:len(lead)] = [EXCLUDED] * len(lead)
    special = np.tile(np.asarray(mask, dtype=np.int8), len(token_ids))
    offsets = np.arange(0, input_ids.size + 1, width)
    return Windows(Rows(input_ids.ravel(), offsets), Rows(special, offsets), None,
                   np.arange(len(token_ids)))


def _exclude_prompt(tokenizer, windows, prompt):
    """Mark the special tokens before the text and the prompt's tokens :data:`EXCLUDED`.

    As sentence-transformers does for a Pooling module with ``include_prompt:
    false`` (INSTRUCTOR-style models): these tokens steer the encoder, and the
    pooled vector is of the text.
    """
    n_prefix = len(_template(tokenizer)[0])
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    for ids, special in zip(windows.input_ids, windows.special_mask):
        special[:n_prefix + _common_prefix(ids[n_prefix:].tolist(), prompt_ids)] = EXCLUDED


# Upper bound on padded tokens per forward pass: long windows go in smaller batches, so a
# large batch_size stays safe for memory (32 windows of 512 tokens fit).
MAX_BATCH_TOKENS = 16384


def length_sorted_batches(lengths, batch_size, max_tokens=MAX_BATCH_TOKENS):
    """Index arrays of windows sorted longest first (so memory peaks early).

    Each batch holds at most ``batch_size`` windows and, padded to its longest
    window, at most ``max_tokens`` tokens (but always at least one window).
    """
    order = np.argsort(-np.asarray(lengths), kind="stable")
    batches, start = [], 0
    while start < len(order):
        size = min(batch_size, max(1, max_tokens // max(int(lengths[order[start]]), 1)))
        batches.append(order[start:start + size])
        start += size
    return batches


def padded_length(length, limit):
    """The width of a batch whose longest window has ``length`` tokens: ``length`` up to
    32, then rounded up to a multiple of a 32nd of the power of two at or above it (34,
    36, ..., 64, 68, ..., 512: at most 6% more tokens), and never beyond ``limit``, the
    model's longest window.

    oneDNN (torch's oneDNN Linear layers, OpenVINO's CPU plugin) builds and keeps
    kernels for each input shape it runs, about 1 MB a Linear shape, so the widths of a
    process's batches bound that memory: at most 96 widths up to 512 tokens, against one
    per length. SciFact's 5,183 abstracts ran in 148 batch shapes and run in 35, for 1.7%
    more tokens; 60,000 SST-2 sentences (13 tokens on average) in 55 and 44, for 0.2%
    more (``benchmarks/memory.py --shapes``).
    """
    step = max(1, (1 << (length - 1).bit_length()) // 32)
    return max(length, min(-(-length // step) * step, limit))


def _model_inputs(tokenizer, windows, batch, device, limit=None):
    """The encoder's inputs for the windows ``batch`` and their special-token mask, padded
    to the batch's longest window, or with ``limit`` (the model's longest window) to its
    :func:`padded_length`."""
    import torch

    width = None
    if limit is not None:
        width = padded_length(int(windows.lengths[batch].max(initial=1)), limit)

    def tensor(rows, value):
        return torch.from_numpy(rows.padded(batch, value, width)).to(device)

    input_ids = tensor(windows.input_ids, tokenizer.pad_token_id)
    lengths = torch.from_numpy(windows.lengths[batch]).to(device)
    positions = torch.arange(input_ids.shape[1], device=device)
    inputs = {"input_ids": input_ids, "attention_mask": (positions < lengths[:, None]).long()}
    if "token_type_ids" in tokenizer.model_input_names:
        inputs["token_type_ids"] = (torch.zeros_like(input_ids) if windows.token_type_ids is None
                                    else tensor(windows.token_type_ids, 0))
    return inputs, tensor(windows.special_mask, 1)


def forward_parts(runner, tokenizer, windows, layouts, batch_size, progress=None, out=None):
    """Run the encoder over ``windows``; return one records array per layout.

    Each array has one row per window, in order, and ``layout.width`` float32
    columns (see :class:`skbert._encoder._features.Layout`); ``out`` gives arrays of
    that shape to write into instead of new ones. ``runner`` is what an
    :class:`skbert._encoder._engines.Engine` runs on one device (torch, OpenVINO or ONNX
    Runtime): ``runner.encoder(depth, read, pooler)`` runs the encoder cut
    after the deepest layer that ``layouts`` read, and returns the hidden
    states of the layers read only. Records are computed on the runner's device
    and each batch crosses to the CPU once, into arrays allocated up front.
    """
    import torch

    records = out or [np.empty((len(windows), layout.width), dtype=np.float32)
                      for layout in layouts]

    def write(batch, inputs, special, hidden, pooler_output):
        rows = _as_slice(batch)
        for layout, array in zip(layouts, records):
            target = None
            if rows is not None and runner.device.type == "cpu":  # straight into the rows
                target = torch.from_numpy(array[rows])
            computed = compute_parts(hidden, inputs["attention_mask"], special, pooler_output,
                                     layout, target)
            if target is None:
                array[batch] = computed.cpu().numpy()
        if progress is not None:
            progress.update(len(batch))

    keys = set().union(*(layout.keys for layout in layouts))
    run_batches(runner, tokenizer, windows, layers_read(keys), ("pooler",) in keys, batch_size,
                write)
    return records


def forward_states(runner, tokenizer, windows, layers, pooler, out, batch_size, progress=None):
    """Run the encoder over ``windows`` of one length ``n``, writing into row k of ``out``
    the token states of window k: the hidden states of ``layers`` at its ``n`` tokens
    (layers, tokens, hidden in C order), then with ``pooler`` the pooler output.

    What :func:`skbert._encoder._cache.token_features` keeps of a vocabulary token alone:
    a few tokens per layer, from which :func:`parts_of_states` gives any setting's parts.
    """
    n_tokens = int(windows.lengths[0])
    span = n_tokens * runner.config.hidden_size

    def write(batch, inputs, special, hidden, pooler_output):
        for index, layer in enumerate(layers):
            states = hidden[layer][:, :n_tokens].float().cpu().numpy()
            out[batch, index * span:(index + 1) * span] = states.reshape(len(batch), span)
        if pooler:
            out[batch, len(layers) * span:] = pooler_output.float().cpu().numpy()
        if progress is not None:
            progress.update(len(batch))

    run_batches(runner, tokenizer, windows, set(layers), pooler, batch_size, write)


def parts_of_states(states, special_mask, layers, pooler, layout):
    """The records of ``layout`` (an array (n, layout.width)) from token states laid out as
    :func:`forward_states` writes them, for windows of one special-token mask
    (``special_mask``, one row): :func:`skbert._encoder._features.compute_parts` over the
    hidden states of ``layers`` (only those that ``layout`` reads are read), as a forward
    pass would give them."""
    import torch

    n_windows, n_tokens = len(states), len(special_mask)
    hidden_size = layout.hidden_size
    span = n_tokens * hidden_size
    hidden = {layer: torch.from_numpy(states[:, index * span:(index + 1) * span]).view(
        n_windows, n_tokens, hidden_size) for index, layer in enumerate(layers)
        if layer in layout.layers}
    pooler_output = torch.from_numpy(states[:, len(layers) * span:]) if pooler else None
    special = torch.from_numpy(np.broadcast_to(special_mask, (n_windows, n_tokens)).copy())
    with torch.inference_mode():
        return compute_parts(hidden, torch.ones(n_windows, n_tokens, dtype=torch.long),
                             special, pooler_output, layout).numpy()


def run_batches(runner, tokenizer, windows, read, pooler, batch_size, write):
    """Encode ``windows`` in length-sorted batches and hand each to ``write(batch, inputs,
    special_mask, hidden_states, pooler_output)``, ``batch`` the window indices.

    Only the encoder layers up to the deepest of ``read`` (hidden-state
    indices) run, and only their hidden states (and with ``pooler`` the pooler
    output) leave it. A batch that runs out of GPU memory is split in two and
    retried, down to single windows, with a warning.
    """
    import torch

    # At least one layer: some encoders (DeBERTa-v2) return nothing from an empty layer list.
    deepest = runner.config.num_hidden_layers if pooler or not read else max(1, *read)
    encode = runner.encoder(deepest, read, pooler)

    limit = length_limit(tokenizer, runner.config)
    with torch.inference_mode(), runner.torch_threads():
        for batch in length_sorted_batches(windows.lengths, batch_size):
            pending = [batch]  # a batch, or the halves of one that ran out of memory
            while pending:
                batch = pending.pop()
                inputs, special = _model_inputs(tokenizer, windows, batch, runner.device, limit)
                try:
                    hidden, pooler_output = encode(inputs)
                except torch.cuda.OutOfMemoryError:
                    if len(batch) == 1:
                        raise
                    del inputs, special
                    torch.cuda.empty_cache()
                    warnings.warn(f"Out of GPU memory on a batch of {len(batch)} windows: "
                                  "retrying it in two halves. A smaller batch_size avoids the "
                                  "retries.", RuntimeWarning, stacklevel=4)
                    pending += [batch[len(batch) // 2:], batch[:len(batch) // 2]]
                    continue
                write(batch, inputs, special, hidden, pooler_output)


def _as_slice(indices):
    """``indices`` as a slice when they are consecutive and ascending, else None."""
    start, stop = int(indices[0]), int(indices[-1]) + 1
    return slice(start, stop) if stop - start == len(indices) and (
        np.diff(indices) == 1).all() else None


# Where BERT-family models in transformers keep their list of layers when nothing runs after
# it (no final norm), so that a model cut there returns the hidden states of the full one.
_LAYER_LISTS = (("encoder", "layer"), ("transformer", "layer"))


def shallow_view(model, n_layers):
    """A view of ``model`` that runs only its first ``n_layers`` layers, sharing every weight.

    The view is a shallow copy whose encoder holds the first layers of the
    model's own layer list: nothing is copied, and the shared model is left as
    it is (other threads and estimators may be using it). ``model`` itself is
    returned when every layer is needed, or when its architecture keeps its
    layers elsewhere (ALBERT shares one layer group, ModernBERT normalizes
    after its last layer).
    """
    import torch

    for owner_name, list_name in _LAYER_LISTS:
        owner = getattr(model, owner_name, None)
        layers = getattr(owner, list_name, None)
        if (isinstance(layers, torch.nn.ModuleList)
                and len(layers) == model.config.num_hidden_layers):
            break
    else:
        return model
    if n_layers >= len(layers):
        return model
    install_output_hooks(model)  # before the copy, which would otherwise install its own
    view_owner = with_children(owner, {list_name: layers[:n_layers]})
    view = None if view_owner is None else with_children(model, {owner_name: view_owner})
    return model if view is None else view
