"""Input validation shared by every skbert estimator."""

import numbers

import numpy as np


def _items(X):
    """``X`` as a list, with pandas objects and arrays taken apart row by row."""
    if hasattr(X, "iloc") and getattr(X, "ndim", 1) == 2:  # DataFrame
        X = X.to_numpy(dtype=object)
    elif hasattr(X, "to_numpy"):  # Series
        X = X.to_numpy(dtype=object)
    if isinstance(X, np.ndarray):
        if X.ndim == 2 and X.shape[1] == 1:
            X = X[:, 0]
        elif X.ndim == 2 and X.shape[1] == 2:
            return [tuple(row) for row in X]
        elif X.ndim != 1:
            raise ValueError(
                "Expected texts as a 1-D array or text pairs as an (n, 2) array, "
                f"got an array of shape {X.shape}."
            )
    return list(X)


def _check_text(value, where):
    if not isinstance(value, str):
        kind = "NaN" if isinstance(value, numbers.Real) and value != value else type(value).__name__
        raise ValueError(f"{where} is {kind} ({value!r}); every text must be a str.")


def check_texts(X):
    """Validate raw text input.

    Parameters
    ----------
    X : iterable of str, or of (str, str) pairs
        A list, tuple, 1-D array or pandas Series of str; or text pairs as a
        sequence of 2-tuples, an (n, 2) array or a two-column DataFrame.

    Returns
    -------
    texts : list of str or list of (str, str)
    """
    if isinstance(X, (str, bytes)):
        raise ValueError("Iterable over raw text documents expected, string object received.")
    try:
        items = _items(X)
    except TypeError:
        raise ValueError(
            f"Iterable over raw text documents expected, {type(X).__name__} object received."
        ) from None
    if items and isinstance(items[0], (tuple, list)):
        return [_check_pair(item, index) for index, item in enumerate(items)]
    for index, item in enumerate(items):
        _check_text(item, f"Text at index {index}")
    return items


def _check_pair(item, index):
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        raise ValueError(
            f"Text pair at index {index} is {item!r}; every item must be a (text, text) pair "
            "when the first one is."
        )
    for side, value in zip(("first", "second"), item):
        _check_text(value, f"The {side} text of the pair at index {index}")
    return tuple(item)
