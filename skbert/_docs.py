"""Docstring parts that several estimators share, formatted into each of their docstrings.

As scipy's ``doccer`` does: a docstring names a shared part ``%(name)s`` and
:func:`shared` fills it in, so that ``help()`` and the API reference show
every parameter in full where it applies, written in one place.
"""

# The adapters' parameters of every estimator with freeze="lora".
LORA = """lora_rank : int, default=8
        Rank r of each adapter (``freeze="lora"``): ``W + (alpha / r) B A``
        with ``B`` of shape (out, r) and ``A`` (r, in).
    lora_alpha : float, default=16
        LoRA's scaling numerator alpha.
    lora_dropout : float, default=0.1
        Dropout on the adapters' input during training."""

# BertClassifier and BertRegressor (skbert._classification._classifier): the parameters up
# to and after the classifier's class_weight, and the fitted attributes both have.
FINETUNER = {
    "training": """model : str or path-like, default="bert-base-uncased"
        Hugging Face hub id or local directory of a BERT-family encoder. The
        encoder trains as a private copy: a model shared with other estimators
        of the process (e.g. :class:`skbert.BertVectorizer`) never changes.
    layer : int, default=-1
        Hidden state the head reads: 0 is the embedding output, -1 the last
        layer, negative indices count from the end.
    pooling : {"mean", "cls", "max", "mean_sqrt_len", "mean_max", "pooler", "last"}, \
default="mean"
        How the tokens of ``layer`` become the head's input, as in
        :class:`skbert.BertVectorizer` (special tokens included). "mean" is
        the default, as there: a sentence encoder's [CLS] vector is often
        untrained (all-MiniLM-L6-v2 on TREC, 8 questions per class, the
        head trained on it: 0.29 accuracy with "cls", 0.62 with "mean"), and
        fine-tuning teaches either to summarize the text.
    freeze : None, "none", "embeddings", int, "all" or "lora", default=None
        What does not train: None (or "none") trains everything, "embeddings"
        freezes the embedding layer, an int k the embeddings and the bottom k
        layers (fewer than ``layer`` reads: a freeze under which nothing read
        trains is refused at fit; "all" is that, done cheaply), and
        "all" the whole encoder, so that only the head trains, on the features
        of a :class:`skbert.BertVectorizer` of the same ``layer``,
        ``pooling`` and ``dtype``: from its cache, so extra epochs cost little
        and a grid over the head's settings encodes each text once. Frozen
        parts run in eval mode (no dropout). "lora" freezes the encoder's
        weights and trains low-rank adapters (LoRA, with peft: ``pip install
        'skbert[peft]'``) on the query and value projections of every
        attention layer with the head; the encoder stays shared with other
        estimators and unchanged, and ``model_`` holds the adapters merged
        into those projections, so that inference costs what the encoder
        alone costs.
    """ + LORA + """
    epochs : int or "auto", default="auto"
        Passes over the training texts; with ``early_stopping``, the most.
        "auto" is 3, or more for a small training set, so that training
        takes at least 50 optimizer steps (48 texts in batches of 16: 17
        epochs). With all-MiniLM-L6-v2 and 8 texts per class, test accuracy
        on SST-2 / TREC rose from 0.593 / 0.472 after 3 epochs to 0.641 /
        0.634 after 50 steps (frozen features and a logistic regression:
        0.603 / 0.514; 3 and 2 draws of the texts).
    learning_rate : float or "auto", default="auto"
        Peak learning rate of AdamW for the encoder's weights that train (the
        adapters with ``freeze="lora"``). "auto" is 5e-5, as in BERT's
        recipe, and 2e-3 for LoRA: its adapters start from zero and need
        larger steps (all-MiniLM-L6-v2 on 800 TREC questions, 3 epochs:
        LoRA's validation accuracy 0.755 at 5e-5, 0.860 at 5e-4, 0.880 at
        2e-3, 0.860 at 5e-3; full fine-tuning's best was 5e-5;
        ``benchmarks/finetune.py``).
    head_learning_rate : float or "auto", default="auto"
        Peak learning rate of AdamW for the head. "auto" is 1e-2 for a head
        that starts from scratch: it learns much faster than the pretrained
        encoder may change (1e-2 is also SetFit's default); with
        ``freeze="all"`` it is the only rate that matters. A classifier's
        head that starts from a linear probe (``linear_probe=True``) trains
        at ``learning_rate``'s value: it no longer starts at random.
    batch_size : int, default=16
        Texts per optimization step (and per forward pass when encoding).
        At the defaults a ``BertClassifier`` fit of all-MiniLM-L6-v2 peaked
        at 1.1-1.4 GB resident, the whole process with its libraries and the
        model (16 to 128 labelled sentences, or 1,000 GoEmotions comments
        with 28 labels), and at 3.1 GB on all 43,410 GoEmotions training
        comments (2 CPU cores, ``benchmarks/few_labels.py``).
    weight_decay : float, default=0.01
        AdamW's decoupled weight decay, on weight matrices only (not on biases
        and LayerNorm weights).
    warmup : float, default=0.1
        Share of the optimization steps over which the learning rate rises
        linearly from 0; it then falls linearly to 0 at the last step.
    max_length : int or None, default=None
        Tokens per text, special tokens included, at most what the model's
        position embeddings hold. None is the tokenizer's ``model_max_length``,
        or a sentence-transformers folder's ``max_seq_length``.
    truncation : {"head", "tail", "head_tail"}, default="head"
        Which tokens of a longer text are kept, as in
        :class:`skbert.BertVectorizer`. Each text is one training example of
        one window, so "chunks" is not available. Text pairs are truncated
        longest-first from the end ("head").
    early_stopping : bool, default=False
        Whether to hold out ``validation_fraction`` of the training texts
        (stratified by class for a classifier), stop when the validation
        score (accuracy for a classifier, R^2 for a regressor) has not
        improved for ``n_iter_no_change`` epochs and return to the best
        epoch's weights.
    validation_fraction : float, default=0.1
        Share of the training texts held out when ``early_stopping`` is True.
    n_iter_no_change : int, default=2
        Epochs without improvement of the validation score before stopping.
    max_epochs : int, default="deprecated"
        The former name of ``epochs``: set, it is used with a FutureWarning;
        it goes in the next release.
    warmup_ratio : float, default="deprecated"
        The former name of ``warmup``, likewise.""",
    "running": """random_state : int, RandomState instance or None, default=None
        Seeds the head's initialization, dropout, shuffling and the
        validation split. An int gives the same model on every fit (on the
        CPU; GPU kernels may differ in the last bits). The global torch random
        state is left as it was. Seeded training holds a process-wide lock
        (dropout draws from torch's global random state): fits in threads
        train one at a time, and each gives what it gives alone.
    device : {"auto", "cpu", "cuda", "cuda:N", "mps"}, default="auto"
        Where training and inference run; resolved at fit and predict time.
    dtype : {"float32", "float16", "bfloat16", "int8"}, default="float32"
        Compute precision. With ``freeze="all"`` the frozen encoder computes
        in it as :class:`skbert.BertVectorizer` does (weights in ``dtype``;
        "int8" with ``backend="openvino"``). Otherwise "float16" and
        "bfloat16" train in mixed precision (autocast; float16 with loss
        scaling on CUDA), meant for GPUs; the weights stay float32, and so
        does inference.
    backend : {"torch", "openvino", "onnx"}, default="torch"
        The engine of a frozen encoder (``freeze="all"``), as for
        :class:`skbert.BertVectorizer`: OpenVINO (float32, bfloat16 or
        int8) or ONNX Runtime on the CPU, where the head then trains in
        float32 on their features. Training the encoder needs "torch".
    calibration : None, "fit" or list of str, default=None
        The texts that calibrate ``dtype="int8"``, as for
        :class:`skbert.BertVectorizer` ("fit": the first 300 distinct
        training texts); pickles keep the texts used.
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
        most.""",
    "fitted": """model_ : transformers.PreTrainedModel
        The encoder that computes :meth:`transform`'s features, in eval mode:
        with ``freeze="all"`` the shared one; with ``"lora"`` the shared
        weights with the adapters merged into their projections; otherwise
        the fine-tuned private copy.
    tokenizer_ : transformers.PreTrainedTokenizerBase
        Its tokenizer.
    n_layers_ : int
        Number of hidden states, the embedding output included (layers + 1).
    n_iter_ : int
        Epochs run.
    learning_rate_, head_learning_rate_ : float
        The peak rates of the encoder and the head ("auto" resolved).
    loss_curve_ : list of float
        Mean training loss of each epoch (of a regressor: on standardized
        targets).
    validation_scores_ : list of float or None
        Validation score (accuracy, or R^2 for a regressor) after each epoch;
        None without early stopping.
    best_validation_score_ : float or None
        The best of ``validation_scores_``; None without early stopping.""",
}


def shared(parts):
    """A class decorator that formats ``parts`` into the class's docstring (which
    ``python -OO`` removes)."""

    def format_docstring(cls):
        if cls.__doc__:
            cls.__doc__ %= parts
        return cls

    return format_docstring
