"""Cache keys: the name of each entry of the forward-pass cache (:mod:`skbert._encoder._cache`).

A window's key hashes the model's fingerprint, the engine and the window's token
ids and token type ids, which already reflect ``max_length``, ``truncation`` and
``stride``: a setting that changes what the encoder reads changes the key, one
that does not (a short text under any truncation) is served from the same entry.
An entry's name is the key and a tag of what it holds: a text's record
(:attr:`skbert._encoder._features.Layout.tag`) or a sentence's token states (:func:`states_tag`).
"""

import hashlib

import numpy as np

from skbert._encoder._features import EXCLUDED

# The format joins every key, so entries of another format are misses, never misread.
FORMAT = b"skbert-cache-v3"
# Windows keyed at once by window_keys.
KEY_BLOCK = 4096


def window_keys(windows, model_fingerprint, engine_tag):
    """One key per window (format, model, engine, token ids, token type ids), as an array of
    32 hex digits (``S32``: 32 bytes a window, where a list of str takes 90).

    ``model_fingerprint`` names weights and config, ``engine_tag`` what computes
    with them (:attr:`skbert._encoder._engines.Engine.tag`: backend, dtype, library
    versions, calibration).

    The special-token mask, which follows from the token ids, joins the key
    only where it excludes tokens from pooling (a prompt).
    """
    prefix = hashlib.blake2b(FORMAT + model_fingerprint.encode() + engine_tag.encode(),
                             digest_size=16)
    types, special = windows.token_type_ids, windows.special_mask
    keys = np.empty(len(windows), dtype="S32")
    # In blocks of windows: temporaries of a whole call's size (int64 ids, Python ints of
    # every offset) raised the peak memory of a transform of 60,000 texts by 10 to 20 MB.
    for first in range(0, len(windows), KEY_BLOCK):
        block = windows.input_ids[first:first + KEY_BLOCK]  # the bytes keys have always hashed
        ids = block.values.astype(np.int64)
        bounds = block.offsets.tolist()
        excluded = (special[first:first + KEY_BLOCK].count(EXCLUDED) > 0).tolist()
        for index, start, stop in zip(range(first, first + len(block)), bounds, bounds[1:]):
            digest = prefix.copy()
            digest.update(ids[start:stop])
            if types is not None:
                digest.update(b"|" + types[index].tobytes())
            if excluded[index - first]:
                digest.update(b"#" + special[index].tobytes())
            keys[index] = digest.hexdigest()
    return keys


def states_tag(layers, hidden_size):
    """The tag of the token states of ``layers`` (hidden-state indices), ``hidden_size``
    wide: entries of other layers have other names."""
    text = repr(("tokens", tuple(layers), hidden_size)).encode()
    return hashlib.blake2b(text, digest_size=6).hexdigest()


def token_states_tag(layers, pooler, hidden_size):
    """The tag of a vocabulary token's states (:func:`skbert._encoder._cache.token_features`):
    ``layers`` at every token of its window, then with ``pooler`` the pooler output. Not the
    tag of a sentence's token states (:func:`states_tag`), whose window may be the same."""
    text = repr(("token states", tuple(layers), bool(pooler), hidden_size)).encode()
    return hashlib.blake2b(text, digest_size=6).hexdigest()


def entry_name(key, tag):
    """The name of the entry tagged ``tag`` of the window whose key is ``key`` (bytes)."""
    return f"{key.decode()}-{tag}"
