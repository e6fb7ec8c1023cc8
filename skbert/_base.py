"""What the estimators that own a BERT encoder share: parameters and checks against the model.

:class:`skbert.BertVectorizer`, :class:`skbert.BertClassifier` and
:class:`skbert.BertRegressor` load an encoder in ``fit`` (``model_``,
``tokenizer_``, ``n_layers_``) and read one layer x pooling setting from it, so
they validate ``model``, ``pooling``, ``max_length``, ``device`` and ``dtype``
alike, check ``layer`` and ``max_length`` against the loaded model alike, and
take text input.
"""

import copy
import os
from numbers import Integral

import numpy as np

from skbert import _loading
from skbert._compat import Interval, StrOptions
from skbert._encoding import text_budget

POOLING_NAMES = ("mean", "cls", "max", "mean_sqrt_len", "mean_max", "pooler", "last")


class EncoderMixin:
    """Mixin for estimators that encode text with a loaded BERT-family encoder."""

    # The parameters every such estimator has; each adds ``layer``, ``truncation`` and its own.
    _parameter_constraints: dict = {
        "model": [str, os.PathLike],
        "pooling": [StrOptions(set(POOLING_NAMES))],
        "max_length": [Interval(Integral, 2, None, closed="left"), None],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "device": [str],
        "dtype": [StrOptions(set(_loading.DTYPES))],
        "revision": [str, None],
        "verbose": ["verbose"],
    }

    def _checked_layers(self, layers, accepted, pooling):
        """``layers`` as non-negative indices into the hidden states, checked against the model.

        ``accepted`` tells what ``layer`` may be, for the error message. With
        ``pooling="pooler"`` the layers must be the last one alone.
        """
        n_states = self.n_layers_
        if not layers or not all(isinstance(i, Integral) and -n_states <= i < n_states
                                 for i in layers):
            raise ValueError(
                f"layer={self.layer!r} is out of range for {os.fspath(self.model)!r}, which has "
                f"{n_states} hidden states: {accepted}."
            )
        layers = tuple(int(i) % n_states for i in layers)
        if pooling == "pooler":
            if not self._has_pooler:
                raise ValueError(
                    f"pooling='pooler' needs a model with a pooler layer; "
                    f"{os.fspath(self.model)!r} has none. Use 'cls' for its [CLS] vector."
                )
            if layers != (n_states - 1,):
                raise ValueError(
                    f"pooling='pooler' reads the last layer only, got layer={self.layer!r}; "
                    "use layer=-1."
                )
        return layers

    def _window_length(self):
        """Tokens per window: ``max_length``, checked against the model's limit."""
        limit = min(self.tokenizer_.model_max_length,
                    getattr(self._config, "max_position_embeddings", np.inf))
        max_length = int(limit) if self.max_length is None else self.max_length
        if max_length > limit:
            raise ValueError(
                f"max_length={self.max_length!r} exceeds the model's limit of {int(limit)} tokens."
            )
        budget = text_budget(self.tokenizer_, max_length)
        if budget < 1:
            raise ValueError(f"max_length={max_length!r} leaves no room for text next to the "
                             f"special tokens: use at least {max_length - budget + 1}.")
        return max_length

    @property
    def _config(self):
        """The encoder's transformers config."""
        return self.model_.config

    @property
    def _has_pooler(self):
        return getattr(self.model_, "pooler", None) is not None

    def _model_on(self, device):
        """``model_`` on ``device``: a copy when the device changed (``model_`` may be shared)."""
        if next(self.model_.parameters()).device != device:
            self.model_ = copy.deepcopy(self.model_).to(device)
        return self.model_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = False
        return tags
