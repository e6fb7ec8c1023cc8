"""Words in context: samples, their alignment to subword tokens, and their forward passes.

A *sample* is one word occurrence: ``(words, i)``, a pre-tokenized sentence
and the index of the target word (CoNLL / UD, flair, AllenNLP), or ``(text,
start, end)``, a str and a character span (WiC, spaCy spans, regex
matches). :func:`check_words` validates them, :func:`align` tokenizes each
distinct sentence once and maps each target to a window (the sentence, or a
window of it that holds the whole target) and the token positions of its
subwords there, and :func:`forward_words` runs each window needed once,
pooling the subwords of every target it holds with
:func:`skbert._features.word_parts` (a target's subwords read as a text of
their own: its first vector is the "cls" part, its last the "last" part, so
that the parts' assembly into features is the texts' own).
"""

import collections.abc
import copy
import functools
import hashlib
import json
import weakref
from dataclasses import dataclass
from numbers import Integral

import numpy as np

from skbert._encoding import (
    TOKENIZER_LOCK,
    Windows,
    _encodable,
    _template,
    run_batches,
    text_budget,
)
from skbert._features import word_parts
from skbert._validation import _items, _where

# subword_pooling -> the pooling of the target's subwords read as a sequence.
SUBWORD_POOLINGS = {"mean": "mean", "first": "cls", "last": "last", "first_last": "first_last",
                    "max": "max"}
_COLUMNS = {("words", "index"): "words", ("text", "start", "end"): "span"}


def check_words(X):
    """Validate word samples, all of one format: a list of ``(words, i)`` (``words`` as a
    tuple of str) or of ``(text, start, end)``, as given (so a checked list checks again).
    DataFrames (pandas or polars) with columns ``words, index`` or ``text, start, end`` are
    read row by row."""
    if isinstance(X, (str, bytes, dict, collections.abc.Set)):
        raise ValueError(f"Iterable over word samples expected, {type(X).__name__} object "
                         "received: pass a list of (words, i) or (text, start, end) samples.")
    rows, labels = _rows(X)
    samples, kind, sentences = [], None, {}
    for position, sample in enumerate(rows):
        where = _where("Sample", position, labels)
        checked, this = _check_sample(sample, where, sentences)
        if kind is not None and this != kind:
            raise ValueError(f"{where} is a {_NAMES[this]} sample, and the ones before are "
                             f"{_NAMES[kind]} samples: give all samples in one format.")
        kind = this
        samples.append(checked)
    return samples


def _rows(X):
    """The samples of ``X`` as a list, and the pandas index (None for other input)."""
    if hasattr(X, "collect"):  # a polars LazyFrame: refused, as check_texts refuses it
        return _items(X)
    columns = getattr(X, "columns", None)
    if columns is None:
        return list(X), None
    found = tuple(str(name) for name in columns)
    if found not in _COLUMNS:
        raise ValueError(f"A DataFrame of word samples has the columns 'words', 'index' or "
                         f"'text', 'start', 'end'; got {list(found)}.")
    if hasattr(X, "itertuples"):  # pandas
        return list(X.itertuples(index=False, name=None)), X.index
    return X.rows(), None  # polars


_NAMES = {"words": "(words, i)", "span": "(text, start, end)"}


def _check_sample(sample, where, sentences):
    """``(words tuple, i)`` or ``(text, start, end)``, and which of them, or an error.

    ``sentences`` maps the id of each words sequence checked so far to its tuple: the
    samples of one sentence usually share it, and its words are checked once.
    """
    sample = tuple(sample) if isinstance(sample, (list, tuple, np.ndarray)) else sample
    if not isinstance(sample, tuple) or len(sample) not in (2, 3):
        raise ValueError(f"{where} is {type(sample).__name__} ({sample!r}): a sample is "
                         "(words, i), a sentence's words and the target's index, or (text, "
                         "start, end), a text and the target's character span.")
    if len(sample) == 2:
        words, index = sample
        if id(words) in sentences:
            words = sentences[id(words)][1]
        else:
            sentences[id(words)] = (words, _checked_words(words, where))  # keeps ``words`` alive
            words = sentences[id(words)][1]
        if not _is_int(index) or not 0 <= index < len(words):
            raise ValueError(f"{where} has index {index!r}, which is no word of its "
                             f"{len(words)}: use 0 to {len(words) - 1}.")
        return (words, int(index)), "words"
    text, start, end = sample
    if not isinstance(text, str):
        raise ValueError(f"{where} has {type(text).__name__} ({text!r}) for its text: a str.")
    if not (_is_int(start) and _is_int(end) and 0 <= start < end <= len(text)):
        raise ValueError(f"{where} has the span ({start!r}, {end!r}), which is no non-empty "
                         f"span of its text of {len(text)} characters: 0 <= start < end <= "
                         f"{len(text)}.")
    if not text[start:end].strip():
        raise ValueError(f"{where} spans only whitespace ({text[start:end]!r}).")
    return (text, int(start), int(end)), "span"


def _checked_words(words, where):
    """``words`` as a tuple of str, or an error."""
    if isinstance(words, str) or not isinstance(words, (list, tuple, np.ndarray)):
        raise ValueError(f"{where} has {type(words).__name__} ({words!r}) for its words: "
                         "a list or tuple of str.")
    words = tuple(words)
    if not words:
        raise ValueError(f"{where} has an empty sentence: no word to take.")
    for number, word in enumerate(words):
        if not isinstance(word, str):
            raise ValueError(f"{where}: word {number} is {type(word).__name__} "
                             f"({word!r}); every word must be a str.")
    return words


def reads_words(estimator):
    """Whether ``estimator`` is a :class:`skbert.BertWordVectorizer`, whose samples are words."""
    from skbert._word_vectorizer import BertWordVectorizer

    return isinstance(estimator, BertWordVectorizer)


def _is_int(value):
    return isinstance(value, Integral) and not isinstance(value, bool)


@dataclass
class Alignment:
    """Where each target is: ``window`` (n_targets,) its window in ``windows``, ``spans``
    (n_targets, 2) the token positions of its subwords there (end exclusive)."""

    windows: Windows
    window: np.ndarray
    spans: np.ndarray


def align(tokenizer, samples, max_length):
    """Tokenize each distinct sentence of ``samples`` once and place every target in a window
    of at most ``max_length`` tokens: the whole sentence where it fits, else the window of
    the sentence's tokens centred on the target (moved to hold the sentence's start or end
    where it would pass them), which never cuts the target's subwords."""
    sentences = list(dict.fromkeys(sample[0] for sample in samples))
    with TOKENIZER_LOCK:
        if samples and len(samples[0]) == 2:  # (words, i)
            encoded = pretokenized(tokenizer)(
                [list(map(_encodable, words)) for words in sentences],
                is_split_into_words=True, add_special_tokens=False, verbose=False)
        else:
            encoded = tokenizer([_encodable(text) for text in sentences],
                                add_special_tokens=False, return_offsets_mapping=True,
                                verbose=False)
    number = {sentence: index for index, sentence in enumerate(sentences)}

    @functools.lru_cache(maxsize=1)  # the targets of a sentence come one after another
    def word_positions(sentence):
        positions = {}
        for position, word in enumerate(encoded.word_ids(sentence)):
            if word is not None:
                positions.setdefault(word, []).append(position)
        return positions

    prefix, suffix = _template(tokenizer)
    budget = text_budget(tokenizer, max_length)
    windows, window_of, input_ids, special = {}, [], [], []
    spans = np.empty((len(samples), 2), dtype=np.int64)
    for row, sample in enumerate(samples):
        sentence = number[sample[0]]
        ids = encoded["input_ids"][sentence]
        first, stop = _target_tokens(encoded, sentence, sample, row, word_positions)
        if stop - first > budget:
            raise ValueError(f"{_where('Sample', row, None)}: its target takes {stop - first} "
                             f"tokens, more than the {budget} text tokens of a window of "
                             f"max_length={max_length}.")
        start = 0 if len(ids) <= budget else min(max(0, (first + stop - budget) // 2),
                                                  len(ids) - budget)
        key = (sentence, start)
        if key not in windows:
            windows[key] = len(windows)
            piece = ids[start:start + budget]
            input_ids.append(prefix + piece + suffix)
            special.append([1] * len(prefix) + [0] * len(piece) + [1] * len(suffix))
        window_of.append(windows[key])
        spans[row] = (len(prefix) + first - start, len(prefix) + stop - start)
    return Alignment(Windows(input_ids, special, None, np.arange(len(input_ids))),
                     np.asarray(window_of, dtype=np.int64), spans)


_PRETOKENIZED = weakref.WeakKeyDictionary()  # tokenizer -> its copy for pre-tokenized words


def pretokenized(tokenizer):
    """The tokenizer for pre-tokenized words: ``tokenizer`` itself, or for a byte-level BPE
    one (RoBERTa, GPT-2 style) a copy whose pre-tokenizer puts the space before every word,
    as in running text ("Ġcat", not "c", "at"), which transformers' own advice for such
    tokenizers (``add_prefix_space=True``) does; the first word gets it too."""
    found = _PRETOKENIZED.get(tokenizer)
    if found is None:
        from tokenizers import Tokenizer

        spec = json.loads(tokenizer.backend_tokenizer.to_str())
        step = spec.get("pre_tokenizer") or {}
        steps = step.get("pretokenizers", [step]) if step.get("type") == "Sequence" else [step]
        changed = [part for part in steps
                   if part.get("type") == "ByteLevel" and not part.get("add_prefix_space")]
        found = tokenizer
        if changed:
            for part in changed:
                part["add_prefix_space"] = True
            found = copy.deepcopy(tokenizer)
            found._tokenizer = Tokenizer.from_str(json.dumps(spec))
            found.add_prefix_space = True
        _PRETOKENIZED[tokenizer] = found
    return found


def _target_tokens(encoded, sentence, sample, row, word_positions):
    """(first, stop) token positions of the target in its sentence's tokens;
    ``word_positions(sentence)`` maps a word index to its token positions."""
    if len(sample) == 2:
        words, index = sample
        positions = word_positions(sentence).get(index, ())
        what = f"its word {words[index]!r}"
    else:
        text, start, end = sample
        # Without its whitespace: byte-level tokenizers may count a token's leading space.
        offsets = [_trimmed(text, a, b) for a, b in encoded["offset_mapping"][sentence]]
        positions = [k for k, (a, b) in enumerate(offsets) if b > a and a < end and b > start]
        for k in positions:
            a, b = offsets[k]
            if a < start or b > end:
                raise ValueError(
                    f"{_where('Sample', row, None)}: the span ({start}, {end}) "
                    f"({text[start:end]!r}) cuts the token {text[a:b]!r} at "
                    f"({a}, {b}); give a span of whole tokens.")
        what = f"its span {text[start:end]!r}"
    if not positions:
        raise ValueError(f"{_where('Sample', row, None)}: {what} tokenizes to no subword, so "
                         "it has no vector.")
    return positions[0], positions[-1] + 1


def _trimmed(text, start, end):
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def target_keys(window_keys, alignment):
    """One cache key per target: its window's key and its token span."""
    return [hashlib.blake2b(f"{window_keys[window]}:{start}:{stop}".encode(),
                            digest_size=16).hexdigest()
            for window, (start, stop) in zip(alignment.window, alignment.spans)]


def forward_words(runner, tokenizer, alignment, targets, layouts, batch_size, progress, out):
    """Write the records of ``targets`` (indices of targets) into ``out`` (one array per
    layout, one row per target in that order), running each window they need once."""
    import torch

    needed = np.unique(alignment.window[targets])
    windows = alignment.windows.subset(needed)
    # Targets by window, as positions in ``windows``: batches give window positions.
    local = np.searchsorted(needed, alignment.window[targets])
    by_window = np.argsort(local, kind="stable")
    bounds = np.searchsorted(local[by_window], np.arange(len(needed) + 1))
    layers = sorted(set().union(*(layout.layers for layout in layouts)))

    def write(batch, inputs, special, hidden, pooler_output):
        rows = np.concatenate([by_window[bounds[w]:bounds[w + 1]] for w in batch])
        in_batch = np.empty(len(needed), dtype=np.int64)
        in_batch[batch] = np.arange(len(batch))
        spans = alignment.spans[targets[rows]]
        lengths = spans[:, 1] - spans[:, 0]
        # Every subword of the targets, target by target: (window in the batch, position).
        owner = np.repeat(np.arange(len(rows)), lengths)
        positions = np.arange(len(owner)) - np.repeat(np.cumsum(lengths) - lengths, lengths) \
            + np.repeat(spans[:, 0], lengths)
        device = inputs["attention_mask"].device
        where = (torch.from_numpy(in_batch[local[rows]][owner]).to(device),
                 torch.from_numpy(positions).to(device))
        states = {layer: hidden[layer][where] for layer in layers}
        owner = torch.from_numpy(owner).to(device)
        for layout, array in zip(layouts, out):
            records = torch.empty((len(rows), layout.width), device=device)
            array[rows] = word_parts(states, owner, len(rows), layout, records).cpu().numpy()
        if progress is not None:
            progress.update(len(rows))

    run_batches(runner, tokenizer, windows, layouts, batch_size, write)

