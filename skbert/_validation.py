"""Input validation shared by every skbert estimator, and warnings about it."""

import collections.abc
import numbers
import os
import sys
import warnings

import numpy as np


def warn_at_caller(message, category=UserWarning):
    """Warn at the user's line: the first frame outside skbert and scikit-learn (an
    estimator's fit runs inside sklearn's ``_fit_context`` wrapper), however deep the call."""
    packages = tuple(os.path.dirname(sys.modules[name].__file__) + os.sep
                     for name in ("skbert", "sklearn"))
    frame, stacklevel = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(packages):
        frame, stacklevel = frame.f_back, stacklevel + 1
    warnings.warn(message, category, stacklevel=stacklevel)


def _items(X, expected="raw text documents", widths=(2,)):
    """``X`` as a list, with pandas and polars objects and arrays taken apart row by row; and
    the pandas index (None for other input), for error messages. ``expected`` names what the
    caller takes, in the error for a polars LazyFrame; a 2-D array (or DataFrame) may have
    one column or one of ``widths``, its rows then tuples."""
    labels = X.index if hasattr(X, "iloc") else None
    if type(X).__module__.partition(".")[0] == "polars":  # known by name: never imported here
        if hasattr(X, "collect"):  # a LazyFrame: a query, not yet its rows
            raise ValueError(
                f"Iterable over {expected} expected, polars {type(X).__name__} object "
                "received: it holds no rows until it is computed. Call .collect() on it first."
            )
        # A DataFrame as a 2-D array of its columns (checked below); a Series as its values.
        X = np.array(X.rows(), dtype=object).reshape(X.shape) if hasattr(X, "rows") \
            else X.to_list()
    elif hasattr(X, "iloc") and getattr(X, "ndim", 1) == 2:  # DataFrame
        X = X.to_numpy(dtype=object)
    elif hasattr(X, "to_numpy"):  # Series
        X = X.to_numpy(dtype=object)
    if isinstance(X, np.ndarray):
        if X.ndim == 2 and X.shape[1] == 1:
            X = X[:, 0]
        elif X.ndim == 2 and X.shape[1] in widths:
            return [tuple(row) for row in X], labels
        elif X.ndim != 1:
            shapes = (f"(n, k), k from {min(widths)} to {max(widths)}," if len(widths) > 2
                      else " or ".join(f"(n, {width})" for width in widths))
            tuples = "text pairs" if widths == (2,) else "text tuples"
            raise ValueError(
                f"Expected texts as a 1-D array or {tuples} as an {shapes} array, "
                f"got an array of shape {X.shape}."
            )
    return list(X), labels


def _where(what, position, labels):
    """``"<what> at index 3"``, with the pandas index label where it is not the position."""
    label = None if labels is None else labels[position:position + 1].tolist()[0]  # builtin
    if label is None or label == position:
        return f"{what} at index {position}"
    return f"{what} at position {position} (index label {label!r})"


def _check_text(value, where):
    if not isinstance(value, str):
        kind = "NaN" if isinstance(value, numbers.Real) and value != value else type(value).__name__
        raise ValueError(f"{where} is {kind} ({value!r}); every text must be a str.")


def check_texts(X):
    """Validate raw text input, reading it once.

    Parameters
    ----------
    X : iterable of str, or of (str, str) pairs
        A list, tuple, 1-D array, pandas or polars Series (or one-column
        DataFrame) or any other iterable of str (a generator, a file's lines:
        read once); or text pairs as a sequence of 2-tuples, an (n, 2) array
        or a two-column pandas or polars DataFrame. Sets (no order) and
        mappings (their keys are not texts) are refused, and so is a polars
        LazyFrame (``.collect()`` it first).

    Returns
    -------
    texts : list of str or list of (str, str)
    """
    return _checked_rows(X, (2,))


def check_single_texts(X, who):
    """As :func:`check_texts`, with text pairs refused in a message that names ``who`` takes
    single texts."""
    texts = check_texts(X)
    if any(isinstance(text, tuple) for text in texts):
        raise ValueError(f"{who} takes single texts; text pairs are not supported.")
    return texts


def check_corpus_not_empty(n_documents, who):
    """Refuse a corpus of ``n_documents`` 0 at ``who`` (``"SimilaritySearch.fit"``): fitted on
    nothing, a search would fail only at its first query, with a ``k`` out of a range of 0."""
    if n_documents == 0:
        raise ValueError(f"{who} got an empty corpus: give at least one document.")


# (query, positive) pairs, triplets and tuples of more negatives, as fine-tuners take them.
TUPLE_WIDTHS = range(2, 66)


def check_text_tuples(X, widths):
    """Validate texts or tuples of texts (pairs, triplets), reading ``X`` once.

    As :func:`check_texts`, with tuples of any length in ``widths``, all of
    one length: a sequence of them, an array or a DataFrame with that many
    columns.

    Returns
    -------
    columns : list of lists of str
        One list per position of the tuples (one list for single texts).
    """
    rows = _checked_rows(X, widths)
    if not rows or isinstance(rows[0], str):
        return [rows]
    return [list(column) for column in zip(*rows)]


def _checked_rows(X, widths):
    """Texts, or text tuples of one of ``widths``, all of one length, checked."""
    items, labels = _checked_items(X, widths)
    if items and isinstance(items[0], (tuple, list)):
        rows = [_check_tuple(item, index, labels, widths) for index, item in enumerate(items)]
        lengths = [len(row) for row in rows]
        if len(set(lengths)) > 1:
            index = next(i for i, length in enumerate(lengths) if length != lengths[0])
            raise ValueError(f"{_where('Item', index, labels)} has {lengths[index]} texts where "
                             f"the first item has {lengths[0]}: every item must have as many.")
        return rows
    for index, item in enumerate(items):
        if not isinstance(item, str):
            _check_text(item, _where("Text", index, labels))
    return items


def _checked_items(X, widths):
    """:func:`_items` of ``X``, refusing a string, a set or a mapping first."""
    if isinstance(X, (str, bytes)):
        raise ValueError("Iterable over raw text documents expected, string object received.")
    unordered = (isinstance(X, collections.abc.Set)
                 and not isinstance(X, collections.abc.MappingView))  # a dict's views keep order
    if unordered or isinstance(X, collections.abc.Mapping):
        why = ("it has no order, so rows would not follow it" if unordered
               else "iterating over it gives its keys")
        raise ValueError(f"Iterable over raw text documents expected, {type(X).__name__} object "
                         f"received: {why}. Pass a list.")
    try:
        return _items(X, widths=widths)
    except TypeError:
        raise ValueError(
            f"Iterable over raw text documents expected, {type(X).__name__} object received."
        ) from None


def is_one_pass(X):
    """Whether iterating over ``X`` consumes it (a generator, a ``map``, a file object)."""
    return isinstance(X, collections.abc.Iterator)


_TUPLES = {2: "pair", 3: "triplet"}
_SIDES = ("first", "second", "third")


def _check_tuple(item, index, labels, widths):
    if not isinstance(item, (tuple, list)) or len(item) not in widths:
        what = "Text pair" if widths == (2,) else "Item"
        names = (f"tuple of {min(widths)} to {max(widths)} texts" if len(widths) > 2 else
                 " or ".join(f"({', '.join(['text'] * width)}) {_TUPLES[width]}"
                             for width in widths))
        raise ValueError(f"{_where(what, index, labels)} is {item!r}; every item must be a "
                         f"{names} when the first one is.")
    kind = _TUPLES.get(len(item), f"{len(item)}-tuple")
    for position, value in enumerate(item):
        side = _SIDES[position] if position < len(_SIDES) else f"{position + 1}th"
        _check_text(value, f"The {side} text of the {_where(kind, index, labels)}")
    return tuple(item)
