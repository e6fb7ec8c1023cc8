"""Words in context: samples, their alignment to subword tokens, and their forward passes.

A *sample* is one word occurrence: ``(words, i)``, a pre-tokenized sentence
and the index of the target word (CoNLL / UD, flair, AllenNLP), or ``(text,
start, end)``, a str and a character span (WiC, spaCy spans, regex
matches). :func:`check_words` validates them, :func:`align` tokenizes each
distinct sentence once and maps each target to a window (the sentence, or a
window of it that holds the whole target) and the token positions of its
subwords there, and :func:`features` runs each window needed once and pools
the subwords of every target it holds (:func:`pool`).

What the cache keeps of a window is its token states: the hidden states of
every layer at every token (a 25-token sentence of all-MiniLM-L6-v2: 7 x 25 x
384 floats, 269 KB), less than a record per word would take (a word is one
or two subwords) and good for any target in the sentence, any layer,
``layer_combine`` and ``subword_pooling``.
"""

import collections.abc
import copy
import json
import operator
import weakref
from dataclasses import dataclass
from numbers import Integral

import numpy as np

from skbert._encoder import _cache, _keys
from skbert._encoder._encoding import (
    TOKENIZE_SLICE,
    TOKENIZER_LOCK,
    Windows,
    _encodable,
    _template,
    run_batches,
    text_budget,
)
from skbert._encoder._features import merge_layers
from skbert._validation import _items, _where, warn_at_caller

SUBWORD_POOLINGS = ("mean", "first", "last", "first_last", "max")
_COLUMNS = (("words", "index"), ("text", "start", "end"))  # of a DataFrame, in sample order


class Samples(list):
    """Checked samples: a list, with the pandas index they came with (``labels``, or None)
    for errors found later (in :func:`align`)."""

    labels = None


def check_words(X):
    """Validate word samples, all of one format: :class:`Samples` of ``(words, i)``
    (``words`` as a tuple of str) or of ``(text, start, end)``, as given (so a checked list
    checks again). DataFrames (pandas or polars) with columns ``words, index`` or ``text,
    start, end``, in any order and among others, are read row by row.

    A list whose samples are the very objects that the last call checked and returned
    as they were (tuples of a tuple of str and an int, or of a str and two ints: nothing
    in them can change) is that call's result again, while that result lives: held by
    whoever checked it, or by an estimator's alignment memo (see :func:`align`).
    """
    global _LAST
    if isinstance(X, (str, bytes, dict, collections.abc.Set)):
        raise ValueError(f"Iterable over word samples expected, {type(X).__name__} object "
                         "received: pass a list of (words, i) or (text, start, end) samples.")
    last = _LAST()
    if (type(X) is list and last is not None and len(X) == len(last)
            and all(map(operator.is_, X, last))):
        return last
    rows, labels = _rows(X)
    samples, kind, sentences = Samples(), None, {}
    samples.labels = labels
    for position, sample in enumerate(rows):
        try:
            checked, this = _check_sample(sample, sentences)
            if kind is not None and this != kind:
                raise ValueError(f" is a {_NAMES[this]} sample, and the ones before are "
                                 f"{_NAMES[kind]} samples: give all samples in one format.")
        except ValueError as error:  # named here, so that valid samples build no name
            raise ValueError(f"{_where('Sample', position, labels)}{error}") from None
        kind = this
        samples.append(checked)
    if type(X) is list and all(map(operator.is_, X, samples)):
        _LAST = weakref.ref(samples)
    return samples


# The last checked list whose samples were returned as they came (dead to begin with); a weak
# reference, which keeps nothing alive.
_LAST = weakref.ref(Samples())


def _rows(X):
    """The samples of ``X`` as a list, and the pandas index (None for other input)."""
    if hasattr(X, "collect"):  # a polars LazyFrame: refused, as check_texts refuses it
        return _items(X, "word samples")
    columns = getattr(X, "columns", None)
    if columns is None:
        return list(X), None
    found = {str(name): name for name in columns}
    matched = [names for names in _COLUMNS if set(names) <= found.keys()]
    if len(matched) != 1:
        raise ValueError(
            f"A DataFrame of word samples has the columns 'words', 'index' or 'text', 'start', "
            f"'end'; got {list(found)}" + (", which hold both: keep one set." if matched else
                                           ". Other columns (a label) are left out."))
    return frame_rows(X, [found[name] for name in matched[0]])


def frame_rows(X, columns=None):
    """The rows of a pandas or polars DataFrame (of ``columns`` only, in their order, where
    given) as a list of tuples, and the pandas index (None for polars)."""
    if hasattr(X, "itertuples"):  # pandas
        X = X if columns is None else X[columns]
        return list(X.itertuples(index=False, name=None)), X.index
    return (X if columns is None else X.select(columns)).rows(), None


_NAMES = {"words": "(words, i)", "span": "(text, start, end)"}


def _check_sample(sample, sentences):
    """``(words tuple, i)`` or ``(text, start, end)``, and which of them, or a ValueError
    whose message follows the sample's name.

    ``sentences`` maps the id of each words sequence checked so far to its tuple: the
    samples of one sentence usually share it, and its words are checked once.
    """
    if type(sample) is not tuple:
        if isinstance(sample, dict):  # a polars struct: the fields of a word-sample DataFrame
            sample = next((tuple(sample[name] for name in names) for names in _COLUMNS
                           if set(names) == sample.keys()), sample)
        sample = tuple(sample) if isinstance(sample, (list, tuple, np.ndarray)) else sample
    if not isinstance(sample, tuple) or len(sample) not in (2, 3):
        raise ValueError(f" is {type(sample).__name__} ({sample!r}): a sample is (words, i), a "
                         "sentence's words and the target's index, or (text, start, end), a "
                         "text and the target's character span.")
    if len(sample) == 2:
        words, index = sample
        known = sentences.get(id(words))
        if known is None:
            known = sentences[id(words)] = (words, _checked_words(words))  # keeps words alive
        words = known[1]
        if not _is_int(index) or not 0 <= index < len(words):
            raise ValueError(f" has index {index!r}, which is no word of its {len(words)}: use "
                             f"0 to {len(words) - 1}.")
        return (sample if words is sample[0] and type(index) is int
                else (words, int(index))), "words"
    text, start, end = sample
    if not isinstance(text, str):
        raise ValueError(f" has {type(text).__name__} ({text!r}) for its text: a str.")
    if not (_is_int(start) and _is_int(end) and 0 <= start < end <= len(text)):
        raise ValueError(f" has the span ({start!r}, {end!r}), which is no non-empty span of "
                         f"its text of {len(text)} characters: 0 <= start < end <= "
                         f"{len(text)}.")
    if not text[start:end].strip():
        raise ValueError(f" spans only whitespace ({text[start:end]!r}).")
    return (sample if type(start) is int and type(end) is int
            else (text, int(start), int(end))), "span"


def _checked_words(words):
    """``words`` as a tuple of str, or an error."""
    if isinstance(words, str) or not isinstance(words, (list, tuple, np.ndarray)):
        raise ValueError(f" has {type(words).__name__} ({words!r}) for its words: a list or "
                         "tuple of str.")
    words = tuple(words)
    if not words:
        raise ValueError(" has an empty sentence: no word to take.")
    for number, word in enumerate(words):
        if not isinstance(word, str):
            raise ValueError(f": word {number} is {type(word).__name__} ({word!r}); every word "
                             "must be a str.")
    return words


def reads_words(estimator):
    """Whether the samples of ``estimator`` are words: it says so with a class attribute
    ``_reads_words = True`` (:class:`skbert.BertWordVectorizer`), or it is a Pipeline whose
    first step does."""
    from sklearn.pipeline import Pipeline

    if isinstance(estimator, Pipeline):
        return bool(estimator.steps) and reads_words(estimator.steps[0][1])
    return getattr(estimator, "_reads_words", False) is True


def _is_int(value):
    return type(value) is int or (isinstance(value, Integral) and not isinstance(value, bool))


@dataclass
class Alignment:
    """Where each target is: ``window`` (n_targets,) its window in ``windows``, ``spans``
    (n_targets, 2) the token positions of its subwords there (end exclusive); ``truncated``
    the warning about targets longer than a window (None: there are none)."""

    windows: Windows
    window: np.ndarray
    spans: np.ndarray
    truncated: str | None = None


# owner -> its last (tokenizer, samples, max_length, alignment); weak: it goes with the owner.
_ALIGNED = weakref.WeakKeyDictionary()


def align(tokenizer, samples, max_length, owner=None, warn=True):
    """Tokenize each distinct sentence of ``samples`` once and place every target in a window
    of at most ``max_length`` tokens: the whole sentence where it fits, else the window of
    the sentence's tokens centred on the target (moved to hold the sentence's start or end
    where it would pass them), which never cuts the target's subwords.

    A target longer than a window by itself (a long URL) keeps its first subwords, as
    many as fit, and the call warns once (``warn``) with how many were cut: the one
    rule of :class:`skbert.BertWordVectorizer` and :class:`skbert.BertWordClassifier`.

    With an ``owner`` (the estimator that aligns, where it caches), its last
    alignment is kept while it lives, and returned again for the same
    tokenizer, equal samples and ``max_length``: a grid over settings, or a
    layer probe, transforms the same samples many times.
    """
    last = _ALIGNED.pop(owner, None) if owner is not None else None
    if last is not None and last[0] is tokenizer and last[2] == max_length and last[1] == samples:
        alignment = last[3]
    else:
        alignment = _align(tokenizer, samples, max_length)
    if owner is not None:
        _ALIGNED[owner] = (tokenizer, samples, max_length, alignment)
    if warn and alignment.truncated is not None:
        warn_at_caller(alignment.truncated)
    return alignment


def _align(tokenizer, samples, max_length):
    sentences = list(dict.fromkeys(sample[0] for sample in samples))
    number = {sentence: index for index, sentence in enumerate(sentences)}
    sentence = np.fromiter((number[sample[0]] for sample in samples), dtype=np.int64,
                           count=len(samples))
    labels = getattr(samples, "labels", None)

    def name(row):
        return _where("Sample", row, labels)

    by_sentence = np.argsort(sentence, kind="stable")
    bounds = np.searchsorted(sentence[by_sentence], np.arange(0, len(sentences) + TOKENIZE_SLICE,
                                                              TOKENIZE_SLICE))
    locate = _word_tokens if len(samples[0]) == 2 else _span_tokens
    ids, first, stop = [], np.empty(len(samples), np.int64), np.empty(len(samples), np.int64)
    for begin, low, high in zip(range(0, len(sentences), TOKENIZE_SLICE), bounds, bounds[1:]):
        # A slice at a time: its encodings are dropped once read (see TOKENIZE_SLICE).
        part = sentences[begin:begin + TOKENIZE_SLICE]
        encodings = _encodings(tokenizer, part, locate is _word_tokens)
        ids += [np.asarray(encoding.ids, dtype=np.int32) for encoding in encodings]
        rows = by_sentence[low:high]
        first[rows], stop[rows] = locate(encodings, part, [samples[row] for row in rows],
                                         sentence[rows] - begin,
                                         lambda k, rows=rows: name(rows[k]))

    budget = text_budget(tokenizer, max_length)
    too_long = np.flatnonzero(stop - first > budget)
    truncated = None
    if len(too_long):
        row = too_long[0]
        truncated = (f"{len(too_long)} target word(s) take more than the {budget} text tokens "
                     f"of a window of max_length={max_length} (the first is the "
                     f"{_where('sample', row, labels)}, of {stop[row] - first[row]} tokens) "
                     f"and are read from their first {budget} subwords.")
        # The first subword, which a token-classification head reads, is always kept.
        stop = np.minimum(stop, first + budget)
    n_tokens = np.array([len(row) for row in ids], dtype=np.int64)[sentence]
    start = np.where(n_tokens <= budget, 0,
                     np.clip((first + stop - budget) // 2, 0, np.maximum(n_tokens - budget, 0)))
    # One window per (sentence, start): ``where`` is the first target of each.
    _, where, window = np.unique(sentence * (int(n_tokens.max()) + 1) + start,
                                 return_index=True, return_inverse=True)
    prefix, suffix = _template(tokenizer)
    input_ids, special = [], []
    for row in where:
        piece = ids[sentence[row]][start[row]:start[row] + budget]
        input_ids.append(np.concatenate([prefix, piece, suffix]))
        mask = np.ones(len(input_ids[-1]), dtype=np.int8)
        mask[len(prefix):len(prefix) + len(piece)] = 0
        special.append(mask)
    spans = np.stack([first - start, stop - start], axis=1) + len(prefix)
    return Alignment(Windows(input_ids, special, None, np.arange(len(input_ids))),
                     window.ravel(), spans, truncated)


def _encodings(tokenizer, sentences, split_into_words):
    """The tokenizers library's encodings of ``sentences`` (without special tokens)."""
    with TOKENIZER_LOCK:
        if split_into_words:
            return pretokenized(tokenizer)(
                [list(map(_encodable, words)) for words in sentences],
                is_split_into_words=True, add_special_tokens=False, verbose=False).encodings
        return tokenizer([_encodable(text) for text in sentences], add_special_tokens=False,
                         return_offsets_mapping=True, verbose=False).encodings


def _word_tokens(encodings, sentences, samples, sentence, name):
    """(first, stop) token positions of each ``(words, i)`` target in its sentence's tokens
    (``encodings[sentence[k]]`` of ``sentences[sentence[k]]``); ``name(k)`` names sample k
    in errors."""
    # Every sentence's words, numbered in one run: word i of sentence k is offset[k] + i.
    counts = np.array([len(encoding.ids) for encoding in encodings], dtype=np.int64)
    offset = np.cumsum([0, *map(len, sentences)])
    word = np.fromiter((-1 if word is None else word for encoding in encodings
                        for word in encoding.word_ids), dtype=np.int64, count=counts.sum())
    position = np.arange(len(word)) - np.repeat(np.cumsum(counts) - counts, counts)
    owned = word >= 0
    numbered = (np.repeat(offset[:-1], counts) + word)[owned]
    first = np.full(offset[-1], np.iinfo(np.int64).max)
    stop = np.zeros(offset[-1], dtype=np.int64)
    np.minimum.at(first, numbered, position[owned])
    np.maximum.at(stop, numbered, position[owned] + 1)
    target = offset[sentence] + np.array([sample[1] for sample in samples], dtype=np.int64)
    missing = np.flatnonzero(stop[target] == 0)
    if len(missing):
        words, index = samples[missing[0]]
        raise ValueError(f"{name(missing[0])}: its word "
                         f"{words[index]!r} tokenizes to no subword, so it has no vector.")
    return first[target], stop[target]


def _span_tokens(encodings, sentences, samples, sentence, name):
    """(first, stop) token positions of each ``(text, start, end)`` target: the tokens its
    span overlaps, which it must cover whole."""
    first = np.empty(len(samples), dtype=np.int64)
    stop = np.empty(len(samples), dtype=np.int64)
    trimmed = {}  # sentence -> its tokens' offsets, read once for all its targets
    for k, (text, start, end) in enumerate(samples):
        if sentence[k] not in trimmed:
            # Without whitespace: byte-level tokenizers may count a token's leading space.
            trimmed[sentence[k]] = [_trimmed(text, a, b)
                                    for a, b in encodings[sentence[k]].offsets]
        offsets = trimmed[sentence[k]]
        positions = [i for i, (a, b) in enumerate(offsets) if b > a and a < end and b > start]
        if not positions:
            raise ValueError(f"{name(k)}: its span "
                             f"{text[start:end]!r} tokenizes to no subword, so it has no "
                             "vector.")
        for i in (positions[0], positions[-1]):
            a, b = offsets[i]
            if a < start or b > end:
                raise ValueError(
                    f"{name(k)}: the span ({start}, {end}) "
                    f"({text[start:end]!r}) cuts the token {text[a:b]!r} at ({a}, {b}); "
                    "give a span of whole tokens.")
        first[k], stop[k] = positions[0], positions[-1] + 1
    return first, stop


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
            found = copy.deepcopy(tokenizer)  # its backend too: the original is left as it is
            found.backend_tokenizer.pre_tokenizer = Tokenizer.from_str(
                json.dumps(spec)).pre_tokenizer
            found.add_prefix_space = True
        _PRETOKENIZED[tokenizer] = found
    return found


def _trimmed(text, start, end):
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def features(runner, tokenizer, alignment, keys, store, stored, setting, width, batch_size,
             progress):
    """One row of ``width`` features per target of ``alignment``, each distinct window run
    once at most.

    ``keys`` are the windows' cache keys; ``store`` (None: nothing stored) serves
    and keeps each window's entry, the token states of the hidden-state layers
    ``stored`` at all its tokens. ``setting`` is ``(layers, layer_combine,
    subword_pooling)``, its layers as positions in ``stored``.
    """
    rows_of, combine, pooling = setting
    windows, hidden_size = alignment.windows, runner.config.hidden_size
    first = {}  # windows of equal tokens are one entry
    entry_of = np.fromiter((first.setdefault(key, len(first)) for key in keys), dtype=np.int64,
                           count=len(keys))
    distinct = np.unique(entry_of, return_index=True)[1]  # the first window of each entry
    target_entry = entry_of[alignment.window]
    by_entry = np.argsort(target_entry, kind="stable")
    bounds = np.searchsorted(target_entry[by_entry], np.arange(len(distinct) + 1))
    out = np.empty((len(alignment.window), width), dtype=np.float32)

    def compute(entries):
        return [[array] for array in forward_windows(
            runner, tokenizer, windows.subset(distinct[entries]), stored, batch_size, progress)]

    def consume(entries, found, n_computed):
        targets = np.concatenate([by_entry[bounds[k]:bounds[k + 1]] for k in entries])
        states = [array.reshape(len(stored), -1, hidden_size) for (array,) in found]
        owner = np.repeat(np.arange(len(entries)), bounds[entries + 1] - bounds[entries])
        out[targets] = pool(states, owner, alignment.spans[targets], rows_of, combine, pooling)

    sizes = len(stored) * hidden_size * windows.lengths[distinct]
    _cache.window_entries(store, list(first), [_keys.states_tag(stored, hidden_size)],
                          windows.lengths[distinct], sizes[:, None], compute, consume,
                          batch_size, progress)
    return out


def forward_windows(runner, tokenizer, windows, layers, batch_size, progress):
    """The hidden states of ``layers`` at every token of each window of ``windows``: one new
    1-D float32 array per window, (layers, tokens, hidden) in C order."""
    arrays = [np.empty(len(layers) * n_tokens * runner.config.hidden_size, dtype=np.float32)
              for n_tokens in windows.lengths]

    def write(batch, inputs, special, hidden, pooler_output):
        for index, layer in enumerate(layers):
            states = hidden[layer].float().cpu().numpy()
            for row, window in enumerate(batch):
                array = arrays[window].reshape(len(layers), -1, states.shape[2])
                array[index] = states[row, :array.shape[1]]
        if progress is not None:
            progress.update(len(batch))

    run_batches(runner, tokenizer, windows, set(layers), False, batch_size, write)
    return arrays


def pool(states, owner, spans, layers, combine, pooling):
    """The features of targets from the token states of their windows.

    ``states[k]`` is an array (layers, tokens, hidden) of window k, ``owner``
    (n_targets,) the window of each target, ``spans`` (n_targets, 2) its
    subwords there; ``layers`` are rows of the states, whose vectors are
    merged per subword by ``combine`` before the subwords are pooled by
    ``pooling`` (a subword_pooling).
    """
    lengths = np.array([state.shape[1] for state in states])
    subwords, starts, counts = subword_rows(lengths, owner, spans)
    tokens = merge_layers([np.concatenate([state[layer] for state in states])[subwords]
                           for layer in layers], combine)
    return pool_subwords(tokens, starts, counts, pooling)


def subword_rows(lengths, owner, spans):
    """Where the targets' subwords are among the tokens of windows laid end to end.

    ``lengths`` are the windows' tokens, ``owner`` and ``spans`` as for
    :func:`pool`. Returns ``subwords``, the rows of every target's subwords
    in target order, and each target's ``starts`` (its first subword's
    position in ``subwords``) and ``counts``.
    """
    counts = spans[:, 1] - spans[:, 0]
    starts = np.cumsum(counts) - counts
    subwords = np.arange(counts.sum()) + np.repeat(
        (np.cumsum(lengths) - lengths)[owner] + spans[:, 0] - starts, counts)
    return subwords, starts, counts


def pool_subwords(tokens, starts, counts, pooling):
    """Pool each target's subword vectors, rows ``starts[k]`` to ``starts[k] + counts[k]``
    of ``tokens``, by ``pooling`` (a subword_pooling).

    ``tokens`` is a numpy array (encoding) or a torch tensor (training, which
    differentiates through it): the one pooling of both.
    """
    numpy = isinstance(tokens, np.ndarray)
    if pooling in ("mean", "max"):
        # Subword k of every target that has one, at once: words have a subword or a few,
        # and over segments that short this beats numpy's reduceat (UD EWT test: all of
        # pool 18 ms, reduceat alone 43 ms).
        pooled = tokens[starts]
        if numpy:
            combine_with = np.add if pooling == "mean" else np.maximum
        else:
            import torch

            combine_with = torch.add if pooling == "mean" else torch.maximum
        for k in range(1, counts.max()):
            longer = np.flatnonzero(counts > k)
            pooled[longer] = combine_with(pooled[longer], tokens[starts[longer] + k])
        if pooling == "max":
            return pooled
        divisors = counts[:, None].astype(np.float32)
        return pooled / (divisors if numpy else torch.from_numpy(divisors).to(pooled.device))
    last = starts + counts - 1
    ends = {"first": [starts], "last": [last], "first_last": [starts, last]}[pooling]
    if numpy:
        return np.concatenate([tokens[end] for end in ends], axis=1)
    import torch

    return torch.cat([tokens[end] for end in ends], dim=1)
