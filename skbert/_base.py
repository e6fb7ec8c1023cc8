"""What the estimators that own a BERT encoder share: parameters and checks against the model.

:class:`skbert.BertVectorizer`, :class:`skbert.BertClassifier` and
:class:`skbert.BertRegressor` load an encoder in ``fit`` (``model_``,
``tokenizer_``, ``n_layers_``) and read one layer x pooling setting from it, so
they validate ``model``, ``pooling``, ``max_length``, ``device`` and ``dtype``
alike, check ``layer`` and ``max_length`` against the loaded model alike, and
take text input.
"""

import dataclasses
import os
from numbers import Integral

import numpy as np
from sklearn.preprocessing import normalize
from sklearn.utils.validation import check_is_fitted

from skbert import _compat
from skbert._compat import Interval, StrOptions, _fit_context
from skbert._encoder import _cache, _engines, _loading, _persistence
from skbert._encoder._encoding import text_budget
from skbert._progress import progress_bar

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
        """Tokens per window: ``max_length``, checked against the model's limit, or (None)
        :meth:`_default_window`."""
        limit = _loading.length_limit(self.tokenizer_, self._config)
        if self.max_length is None:
            max_length = self._default_window(limit)
            named = f"max_length=None (a window of {max_length} tokens from the model)"
        else:
            max_length = self.max_length
            named = f"max_length={max_length!r}"
        if max_length > limit:
            raise ValueError(
                f"max_length={self.max_length!r} exceeds the model's limit of {int(limit)} tokens."
            )
        budget = text_budget(self.tokenizer_, max_length)
        if budget < 1:
            raise ValueError(f"{named} leaves no room for text next to the "
                             f"special tokens: use at least {max_length - budget + 1}.")
        return max_length

    def _default_window(self, limit):
        """Tokens per window when ``max_length`` is None: the tokenizer's
        ``model_max_length`` within the model's ``limit``."""
        return int(min(self.tokenizer_.model_max_length, limit))

    @property
    def _config(self):
        """The encoder's transformers config."""
        return self.model_.config

    @property
    def _has_pooler(self):
        return getattr(self.model_, "pooler", None) is not None

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = False
        return tags


# Read at fit only: transform refuses to run after one of them changed (see BertVectorizer).
FIT_PARAMETERS = ("model", "revision", "backend", "dtype", "calibration")


class FeaturesMixin(EncoderMixin):
    """What :class:`skbert.BertVectorizer` and :class:`skbert.BertWordVectorizer` share: the
    engine that ``fit`` loads (:mod:`skbert._encoder._engines`), the parameters that only ``fit``
    reads, the layers, the cached forward passes, and pickles of either weights or a
    reference."""

    _parameter_constraints: dict = {
        **EncoderMixin._parameter_constraints,
        "layer": [Integral, list, tuple, StrOptions({"all"})],
        "layer_combine": [StrOptions({"mean", "sum", "concat"})],
        "dtype": [StrOptions({*_loading.DTYPES, "int8"})],
        "backend": [StrOptions(set(_engines.BACKENDS))],
        "calibration": [None, StrOptions({"fit"}), list, tuple],
        "cache": [bool, str, os.PathLike],  # not numpy bools: the code tests `is False`
        "persist_weights": ["boolean"],
    }

    def _layers(self, pooling):
        """``layer`` ("all", an index or a list of them) as indices, checked against the
        model."""
        n_states = self.n_layers_
        layers = list(range(n_states)) if self.layer == "all" else self.layer
        layers = [layers] if isinstance(layers, Integral) else list(layers)
        accepted = (
            f"use indices from {-n_states} to {n_states - 1} (0 is the embedding output), "
            "a list of them, or 'all'"
        )
        return self._checked_layers(layers, accepted, pooling)

    def _fit_engine(self, calibration_texts=None):
        """Load the engine of the fit parameters (``calibration="fit"`` calibrates int8 on
        ``calibration_texts``) and remember those parameters."""
        _cache.check_cache(self.cache)
        self._fit_params = self._fit_parameters()
        self._use(_engines.load(os.fspath(self.model), self.revision, self._device(),
                                self.backend, self.dtype, self.calibration, calibration_texts))
        self._sentence = self._loaded.sentence  # what the folder says: pooling_, norm_, prompt_

    def _use(self, engine):
        self._engine, self.tokenizer_ = engine, engine.loaded.tokenizer

    @property
    def n_layers_(self):
        """Hidden states of the model in use, the embedding output included (layers + 1)."""
        if "_engine" not in self.__dict__:
            raise AttributeError("n_layers_")  # not fitted
        return self._config.num_hidden_layers + 1

    @property
    def _loaded(self):
        return self._engine.loaded

    @property
    def model_(self):
        """The encoder; with a CPU engine, loaded on first use (see the class docstring).

        Assigning another model fingerprints it anew: cache entries and
        exports of the old one are not used for it.
        """
        if "_engine" not in self.__dict__:
            raise AttributeError("model_")  # not fitted
        return self._engine.model

    @model_.setter
    def model_(self, model):
        self._engine = self._engine.with_model(model)

    @property
    def _config(self):
        return self._loaded.config

    @property
    def _has_pooler(self):
        return self._loaded.has_pooler

    def _fit_parameters(self):
        """The parameters of :data:`FIT_PARAMETERS` as they are now (``model`` as a str)."""
        return {name: os.fspath(self.model) if name == "model" else getattr(self, name)
                for name in FIT_PARAMETERS}

    def _check_fit_parameters(self):
        """Refuse a parameter that fit resolves when it was set to another value since."""
        for name, value in self._fit_parameters().items():
            fitted = self._fit_params[name]
            if value != fitted:
                raise ValueError(
                    f"{name} was set to {value!r} after fit, which loaded {name}={fitted!r}: "
                    f"{', '.join(FIT_PARAMETERS)} take effect at fit. Fit again to use it."
                )

    def _default_window(self, limit):
        """Tokens per window when ``max_length`` is None: the ``max_seq_length`` of a
        sentence-transformers folder (capped at the model's ``limit``, as
        sentence-transformers reads it), whatever ``pooling`` and ``norm`` are, or the
        tokenizer's ``model_max_length`` within ``limit``."""
        window = _loading.window_of_folder(self._sentence, os.fspath(self.model), limit)
        return super()._default_window(limit) if window is None else window

    def _device(self):
        """Where inference runs, resolved now (never written back)."""
        return _engines.resolve_device(self.backend, self.device)

    def _store(self):
        """Where ``cache`` keeps forward passes: the in-memory store, a directory, or None
        (:func:`skbert._encoder._stores.store_for`)."""
        return _cache.store_for(self.cache)

    def _window_keys(self, windows):
        """The cache keys of ``windows``, and a progress bar over the distinct ones."""
        keys = _cache.window_keys(windows, self._loaded.fingerprint, self._engine.tag)
        return keys, progress_bar(self.verbose, total=len(np.unique(keys)),
                                  desc=type(self).__name__, unit="window")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = []
        tags.target_tags.required = False
        return tags

    def __getstate__(self):
        state = dict(super().__getstate__())  # a copy: it may be the live __dict__
        if "_engine" in state:
            engine = state.pop("_engine")
            tokenizer = state.pop("tokenizer_")
            state["_engine"] = engine.settings
            if self.persist_weights:
                state["_files"] = _persistence.dump_model(engine.model, tokenizer)
            else:
                state["_reference"] = self._reference()
            # Builtins only, so that skops needs to trust no type beyond the estimator's.
            state["_sentence"] = dataclasses.asdict(state["_sentence"])
        return state

    def __setstate__(self, state):
        files = state.pop("_files", None)
        reference = state.pop("_reference", None)
        settings = state.pop("_engine", None)
        if "_sentence" in state:
            state["_sentence"] = _loading.SentenceConfig(**state["_sentence"])
        super().__setstate__(state)
        if files is not None:
            model, tokenizer = _persistence.load_model(files, _engines.torch_dtype(
                settings["backend"], settings["dtype"]))
            # Recomputed rather than trusted: cache keys must describe the weights in hand.
            loaded = _loading.LoadedModel.of(model, tokenizer, self._sentence)
            self._use(_engines.Engine(loaded, **settings))
        elif reference is not None:
            self._load_reference(reference, settings)

    def _load_reference(self, reference, settings):
        """Find the weights and tokenizer of a ``persist_weights=False`` pickle again, and
        check both against their fingerprints."""
        device = _engines.resolve_device(settings["backend"], self.device)
        self._use(_engines.load(self._fit_params["model"], reference["revision"], device,
                                **settings))
        self._check_reference(reference, type(self).__name__)

    def _reference(self):
        """What a ``persist_weights=False`` pickle keeps of the model instead of its weights:
        the revision that loaded (the hub's commit, where it says one) and the fingerprints
        of weights and tokenizer."""
        loaded = self._loaded
        return {"revision": (getattr(loaded.config, "_commit_hash", None)
                             or self._fit_params["revision"]),
                "fingerprint": loaded.fingerprint,
                "tokenizer_fingerprint": loaded.tokenizer_fingerprint}

    def _check_reference(self, reference, owner):
        """Refuse a model found again for ``reference`` (:meth:`_reference`) whose weights or
        tokenizer are not those that ``owner``, the estimator's name, was pickled with."""
        _loading.check_reference(self._loaded, reference["fingerprint"],
                                 reference["tokenizer_fingerprint"], self._fit_params["model"],
                                 reference["revision"], owner)

    # The path both vectorizers share. Each supplies ``_check_input`` (its input as a list of
    # samples), ``_width`` (its features out, checked against the model), ``_features`` (of
    # checked samples, before normalization) and, where they are not its samples, ``_texts_of``.
    _reads_words = False

    def _fit(self, samples):
        """Load the engine (int8 with ``calibration="fit"`` calibrated on the texts of
        ``samples``: checked input, or None) and check the setting against the model."""
        texts = None if samples is None else self._texts_of(samples)
        if self.dtype == "int8" and self.calibration == "fit" and not texts:
            raise ValueError(
                "calibration='fit' calibrates int8 on the "
                f"{'sentences' if self._reads_words else 'texts'} given to fit: pass them, or "
                "give calibration=None or a list of texts.")
        self._fit_engine(texts)
        self._folder_setting("norm")
        self._width()
        self._window_length()
        return self

    def _texts_of(self, samples):
        return samples

    @_fit_context(prefer_skip_nested_validation=True)
    def _fit_transform(self, X):
        """``fit``, then encode ``X``, reading it once."""
        samples = self._check_input(X)
        return self.fit(samples)._transform(samples)

    def _transform_input(self, X):
        """Encode ``X``, checked, with the parameters of fit."""
        check_is_fitted(self)
        self._check_fit_parameters()
        return self._transform(self._check_input(X))

    def _transform_for(self, owner, X, checked=None):
        """Encode ``X`` (or ``checked``, its samples where it was read already) as the output
        of ``owner``, a transformer that embeds with this vectorizer
        (:class:`skbert.FineTunedVectorizer`).

        ``owner``'s own ``set_output`` wins: then the features go out as an array,
        which its output wrapper puts in that container, with ``X``'s index.
        Without one, the container is this vectorizer's (its ``set_output``, else
        scikit-learn's ``transform_output``), under ``owner``'s feature names and
        with ``X``'s index, as the owner's wrapper would make it.
        """
        samples = X if checked is None else checked
        if _compat.sets_own_output(owner):
            return self._transform_input(samples)
        output = self.transform(samples)
        if hasattr(output, "columns"):  # a new pandas or polars DataFrame
            output.columns = list(owner.get_feature_names_out())
            if hasattr(output, "iloc") and hasattr(X, "iloc"):  # pandas, from pandas input
                output.index = X.index
        return output

    def _transform(self, samples):
        """Features of checked ``samples``, as many as ``_width`` says, normalized."""
        width = self._width()
        if not samples:
            return np.empty((0, width), dtype=np.float32)
        features = self._features(samples, self._engine.runner(self._device(), self.verbose))
        if width < features.shape[1]:
            features = np.ascontiguousarray(features[:, :width])
        norm = self._folder_setting("norm")
        return normalize(features, norm=norm, copy=False) if norm else features

    def _folder_setting(self, name):
        """``name`` ("pooling" or "norm") in use: the parameter, or what "auto" resolves to
        from the sentence-transformers folder of the model."""
        value, sentence = getattr(self, name), self._sentence
        if value != "auto":
            return value
        if sentence.problem:
            raise ValueError(
                f"{name}='auto' cannot reproduce the embedding of {os.fspath(self.model)!r}: "
                f"{sentence.problem}. Choose pooling and norm explicitly to use its encoder as "
                "it is."
            )
        if name == "pooling":
            return sentence.pooling or "mean"
        return "l2" if sentence.normalize else None

    @property
    def _n_features_out(self):
        return self._width()
