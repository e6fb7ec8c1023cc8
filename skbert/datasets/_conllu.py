"""Words in context from CoNLL-U files, read with the ``conllu`` package.

A CoNLL-U file (https://universaldependencies.org/format.html) holds sentences
separated by blank lines, ``#`` comments (``# sent_id = ...``) and one line per
word with 10 tab-separated fields (ID, FORM, LEMMA, UPOS, XPOS, FEATS, HEAD,
DEPREL, DEPS, MISC). Multi-word token lines (ID ``3-4``) and empty nodes (ID
``8.1``) are not words of the sentence and are skipped.
"""

import gzip
import io
import os

import numpy as np

# The labels a word can be read with, by conllu's name of their field: the field's
# CoNLL-U name and its place among the 10, for errors.
LABEL_FIELDS = {"upos": ("UPOS", "4th"), "deprel": ("DEPREL", "8th")}


def _conllu():
    try:
        import conllu
        from conllu.exceptions import ParseException
    except ImportError as error:  # a core dependency, missing only from a broken install
        raise ImportError(
            "Reading CoNLL-U files needs the conllu package: pip install conllu"
        ) from error
    return conllu, ParseException


def _read_text(path_or_file):
    """The text of a path (``.gz`` decompressed) or of an open file, and its name."""
    if hasattr(path_or_file, "read"):
        text = path_or_file.read()
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return text, str(getattr(path_or_file, "name", "<file>"))
    if not isinstance(path_or_file, (str, os.PathLike)):
        raise TypeError(
            "read_conllu expects a path or an open file; "
            f"got {type(path_or_file).__name__} object {path_or_file!r}."
        )
    path = os.fspath(path_or_file)
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as file:
        return file.read(), str(path)


def _token_line_numbers(text):
    """The line numbers (from 1) of the token lines of each sentence, in conllu's reading.

    conllu (``parse_sentences`` and ``parse_token_and_metadata``) splits sentences at
    lines that are blank once stripped and makes a token of every other line that does
    not start with ``#`` once stripped, in order; this mirrors it to name lines in errors.
    """
    sentences, current = [], None
    for number, line in enumerate(io.StringIO(text), start=1):
        stripped = line.strip()
        if not stripped:
            if current is not None:
                sentences.append(current)
                current = None
            continue
        if current is None:
            current = []
        if not stripped.startswith("#"):
            current.append(number)
    if current is not None:
        sentences.append(current)
    return sentences


def _parse_error(text, name, n_parsed, error):
    """The ValueError for conllu's ParseException, naming the line conllu rejects."""
    conllu, ParseException = _conllu()
    lines = text.split("\n")
    block = _token_line_numbers(text)[n_parsed]
    for number in block:
        try:
            conllu.parse(lines[number - 1])
        except ParseException as line_error:
            return ValueError(
                f"Malformed CoNLL-U in {name}, line {number}: {line_error} "
                f"(the line: {lines[number - 1].rstrip()!r})"
            )
    first = block[0] if block else "?"
    return ValueError(f"Malformed CoNLL-U in {name}, sentence from line {first}: {error}")


def _read_sentences(path_or_file, name=None, label="upos"):
    """``(sent_id, words, labels)`` for each sentence with at least one word, in file order.

    ``label`` is a key of ``LABEL_FIELDS``; a DEPREL is cut to its universal relation
    (``nmod:poss`` -> ``nmod``). ``name`` names the file in errors, in place of its path
    or its ``name`` attribute.
    """
    conllu, ParseException = _conllu()
    text, file_name = _read_text(path_or_file)
    name = repr(file_name if name is None else name)
    line_numbers = _token_line_numbers(text)
    sentences = []
    parsed = iter(conllu.parse_incr(io.StringIO(text)))
    index = 0
    while True:
        try:
            tokens = next(parsed)
        except StopIteration:
            break
        except ParseException as error:
            raise _parse_error(text, name, index, error) from error
        words, tags = [], []
        for token, number in zip(tokens, line_numbers[index], strict=True):
            missing = [field for field in ("id", "form", label) if field not in token]
            if missing or token["id"] is None:
                field, place = LABEL_FIELDS[label]
                raise ValueError(
                    f"Malformed CoNLL-U in {name}, line {number}: a word line needs ID, FORM "
                    f"and {field} (the 1st, 2nd and {place} of the 10 tab-separated fields); "
                    f"got {len(token)} field(s) with ID {token.get('id')!r}."
                )
            if isinstance(token["id"], int):  # not a multi-word token (3-4) or empty node (8.1)
                words.append(token["form"])
                tag = token[label]
                if label == "deprel":  # conllu keeps DEPREL as written: a str, "_" included
                    tag = tag.partition(":")[0]
                tags.append(tag)
        if words:
            sentences.append((tokens.metadata.get("sent_id"), tuple(words), tuple(tags)))
        index += 1
    return sentences


def _word_samples(sentences):
    """``(samples, labels, groups, sent_ids)`` from ``_read_sentences``' output."""
    samples = [(words, i) for _, words, _ in sentences for i in range(len(words))]
    labels = np.array([tag for _, _, tags in sentences for tag in tags], dtype=object)
    lengths = [len(words) for _, words, _ in sentences]
    groups = np.repeat(np.arange(len(sentences), dtype=np.int64), lengths)
    sent_ids = np.array([sent_id for sent_id, _, _ in sentences], dtype=object)
    return samples, labels, groups, sent_ids


def read_conllu(path_or_file, *, label="upos"):
    """Read the words of a CoNLL-U file as words in context, with their labels.

    Parameters
    ----------
    path_or_file : str, path-like or file object
        A CoNLL-U file (UTF-8; a path ending in ``.gz`` is decompressed), or a
        file opened in text or binary mode.
    label : {"upos", "deprel"}, default="upos"
        The label of each word: its UPOS tag (the 4th field), or its universal
        dependency relation (the 8th field, DEPREL, with a language-specific
        subtype after ``":"`` left out: ``nmod:poss`` is read as ``nmod``).

    Returns
    -------
    samples : list of tuple of (tuple of str, int)
        One ``(words, i)`` per word occurrence, in file order: ``words`` holds
        the FORM of every word of the sentence (multi-word token lines such as
        ``3-4`` and empty nodes such as ``8.1`` left out), ``i`` the index of
        the target word in it.
    labels : ndarray of str (object dtype), shape (n_samples,)
        The label of each word, as written but for the DEPREL subtype (``"_"``
        where the file has none).
    groups : ndarray of int64, shape (n_samples,)
        The sentence of each word, numbered from 0 in file order (sentences
        without words are left out): pass it as ``groups`` to ``GroupKFold``
        so that a sentence stays in one fold.
    sent_ids : ndarray of str (object dtype), shape (n_sentences,)
        The ``# sent_id`` of each sentence (None where it has none), so that
        ``sent_ids[groups]`` gives the sent_id of each word.

    Raises
    ------
    ValueError
        If ``label`` is not one of the accepted values, the file is not valid
        CoNLL-U as ``conllu`` reads it, or a word line lacks ID, FORM or the
        field of ``label``; the message names the file and the line.
    """
    if not isinstance(label, str) or label not in LABEL_FIELDS:
        raise ValueError(
            f"The 'label' parameter of read_conllu must be one of {list(LABEL_FIELDS)}; "
            f"got {label!r}."
        )
    return _word_samples(_read_sentences(path_or_file, label=label))
