"""The fine-tuning loop of skbert's estimators that train their encoder.

A linear head (dropout, then one linear layer) reads one pooled vector per
text (:func:`pooled`), or per word from the token vectors of its sentence
(:func:`token_states`, pooled as :mod:`skbert._words` pools). ``freeze``
names the parts of the encoder that do not train (:func:`frozen_modules`).
:func:`train` runs epochs of shuffled batches through the encoder and the
head, one AdamW step per batch on a linear warm-up and decay schedule
(:func:`optimizer_step`); with early stopping it scores the head on held-out
rows after each epoch and returns to the weights of the best epoch
(:class:`EarlyStopping`). The loop knows nothing of texts or estimators: the
caller gives it the loss of a batch of rows and the score of the head on the
held-out rows.

:func:`fit_network` is the one skeleton every fine-tuner trains through: the
trainable encoder prepared (a private copy with ``freeze``'s modules frozen,
LoRA adapters beside the shared weights, or the shared encoder frozen
whole), the head, the optimizer, the loop, the adapters merged; it returns a
:class:`Trained` record and assigns nothing, so that an estimator sets its
fitted state once, after everything succeeded. Seeded training holds one
process-wide lock (:func:`seeded`): torch's dropout draws from the global
random state, so fits in threads run one at a time and give what they give
alone.
"""

import contextlib
import copy
import threading
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

from skbert._compat import Interval, StrOptions
from skbert._encoder import _loading

# ``freeze`` in every fine-tuner ("none" is None; FineTunedVectorizer refuses "all" at fit).
FREEZE_CONSTRAINT = [None, StrOptions({"none", "embeddings", "all", "lora"}),
                     Interval(Integral, 0, None, closed="left")]

_OR_ALL = " or 'all'"


def resolved_freeze(freeze):
    """``freeze`` as the training reads it: "none" is None."""
    return None if freeze == "none" else freeze


# learning_rate="auto" and head_learning_rate="auto": the one table of peak rates, measured for each
# fine-tuner (the figures are in its docstring). A row maps what trains (the encoder, whole or in
# part; LoRA's adapters; freeze="all": the head alone) to (the encoder's rate, a fresh head's rate);
# a head's rate of None trains the head at the encoder's rate.
AUTO_RATES = {
    "BertClassifier": {"encoder": (5e-5, 1e-2), "lora": (2e-3, 1e-2), "all": (5e-5, 1e-2)},
    "FineTunedVectorizer": {"encoder": (2e-5, None), "lora": (5e-4, None)},
    "FineTunedVectorizer supcon": {"encoder": (1e-4, None), "lora": (5e-4, None)},
    "BertWordClassifier": {"encoder": (1e-4, None), "lora": (2e-3, None), "all": (1e-4, 1e-2)},
    "BertReranker": {"encoder": (2e-5, None), "lora": (2e-3, None), "all": (2e-5, 1e-2)},
}

RATE_CONSTRAINT = [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})]


def resolved_rates(estimator, learning_rate, head_learning_rate="auto", freeze=None,
                   fresh_head=True):
    """``(learning_rate, head_learning_rate)`` of a fit, each "auto" resolved by
    ``AUTO_RATES[estimator]`` for ``freeze`` (resolved). A given ``head_learning_rate``
    wins; "auto" for a pretrained head (``fresh_head=False``) is the encoder's rate: it is
    no longer a random start."""
    regime = freeze if freeze in ("lora", "all") else "encoder"
    rate, head_rate = AUTO_RATES[estimator][regime]
    rate = rate if learning_rate == "auto" else learning_rate
    if head_learning_rate != "auto":
        return rate, head_learning_rate
    return rate, rate if head_rate is None or not fresh_head else head_rate


def auto_epochs(epochs, n_rows, batch_size, least_epochs, least_steps):
    """``epochs`` as a fit runs it: "auto" is ``least_epochs`` passes over ``n_rows`` in
    batches of ``batch_size``, or more for a small training set, so that training takes at
    least ``least_steps`` optimizer steps."""
    if epochs != "auto":
        return epochs
    return max(least_epochs, -(-least_steps // -(-n_rows // batch_size)))


EPOCHS_CONSTRAINT = [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})]


# Seeded training sets torch's global random state, which dropout draws from: one at a time.
_TRAINING = threading.RLock()


def derive_seed(random_state):
    """The int seed of a fit, drawn from ``random_state`` as scikit-learn's estimators draw."""
    from sklearn.utils import check_random_state

    return int(check_random_state(random_state).randint(np.iinfo(np.int32).max))


def check_freeze(encoder, freeze, layers, name, *, allow_all=True, reads_pooler=False):
    """Refuse a ``freeze`` under which nothing that ``layers`` read trains, before training.

    ``freeze`` is resolved ("none" is None); ``layers`` are the non-negative
    hidden-state indices the estimator reads (0 is the embedding output),
    ``reads_pooler`` whether it reads the pooler above them (which no int
    freezes), and ``allow_all`` whether the estimator takes "all" (a head
    alone on the frozen encoder). ``name`` is the model's id or path, for the
    message.
    """
    if freeze in (None, "all"):
        return
    deepest, n_layers = max(layers), encoder.config.num_hidden_layers
    n_frozen = 0 if freeze in ("embeddings", "lora") else freeze
    if deepest <= n_frozen and not (reads_pooler and n_frozen <= n_layers):
        kind = ("adapts the attention of the encoder's layers" if freeze == "lora" else
                f"freezes the embeddings and the bottom {n_frozen} layers ({name!r} has "
                f"{n_layers})")
        ints = (f"an int from 0 to {deepest - 1}, 'embeddings', " if deepest > 1
                else "'embeddings', " if deepest == 1 else "")
        raise ValueError(
            f"freeze={freeze!r} {kind}, and the estimator reads hidden state(s) "
            f"{list(layers)} of {name!r} (0 is the embedding output): nothing that is read "
            f"would train. Use {ints}{'' if deepest == 0 else repr('lora') + ' or '}None"
            + (", or 'all' to train the head alone on the frozen encoder." if allow_all
               else "."))
    if freeze != "lora":
        frozen_modules(encoder, freeze, allow_all)  # the model's structure, checked


def frozen_modules(encoder, freeze, allow_all=True):
    """The modules that ``freeze`` names: embeddings and the bottom k layers, or all.

    ``freeze`` is checked against the layers by :func:`check_freeze`;
    ``allow_all`` says whether the estimator takes "all", for the error message.
    """
    import torch

    if freeze is None:
        return []
    if freeze == "all":
        return [encoder]
    n_layers = encoder.config.num_hidden_layers
    n_frozen = 0 if freeze == "embeddings" else freeze
    layers = next((module for module in encoder.modules()
                   if isinstance(module, torch.nn.ModuleList) and len(module) == n_layers),
                  None)
    embeddings = getattr(encoder, "embeddings", None)
    if layers is None or embeddings is None:
        raise ValueError(
            f"freeze={freeze!r} needs the embeddings and the list of layers of the "
            f"model, and {type(encoder).__name__} does not expose them as BERT does; "
            f"use freeze=None, 'lora'{_OR_ALL if allow_all else ''}."
        )
    return [embeddings, *layers[:n_frozen]]


def _frozen_whole(encoder, frozen):
    """Whether ``frozen`` is the whole encoder, which may then be shared with other estimators."""
    return any(module is encoder for module in frozen)


def unfreeze(encoder, frozen):
    """Let every parameter of ``encoder`` train but those of the ``frozen`` modules.

    Returns the parameters that train, ``{name: parameter}``. Sets
    ``requires_grad``, so ``encoder`` must be a private copy, unless it is
    frozen whole: then nothing trains and nothing is written.
    """
    if _frozen_whole(encoder, frozen):
        return {}
    encoder.requires_grad_(True)
    for module in frozen:
        module.requires_grad_(False)
    return {name: parameter for name, parameter in encoder.named_parameters()
            if parameter.requires_grad}


def linear_head(config, n_inputs, n_outputs, device, initial=None):
    """Dropout, then a linear layer initialized as BERT initializes its own heads, or to
    ``initial`` (``(weight, bias)`` arrays: a pretrained head)."""
    import torch

    head = torch.nn.Sequential(
        torch.nn.Dropout(_head_dropout(config)),
        torch.nn.Linear(n_inputs, n_outputs),
    ).to(device)
    torch.nn.init.normal_(head[1].weight, std=config.initializer_range)
    torch.nn.init.zeros_(head[1].bias)
    if initial is not None:
        with torch.no_grad():
            for tensor, values in zip((head[1].weight, head[1].bias), initial):
                tensor.copy_(torch.as_tensor(values))
    return head


def _head_dropout(config):
    """The dropout the model's own classification head would use: BERT's hidden dropout,
    DistilBERT's ``seq_classif_dropout``, ModernBERT's ``classifier_dropout``; else 0.1."""
    for name in ("hidden_dropout_prob", "seq_classif_dropout", "classifier_dropout"):
        value = getattr(config, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return 0.1


def token_states(encoder, inputs, layers, combine):
    """Run ``encoder`` on ``inputs``: its outputs, and the token vectors of the hidden-state
    ``layers`` merged by ``combine`` (batch, tokens, width), differentiable."""
    from skbert import pooling

    last = encoder.config.num_hidden_layers
    outputs = encoder(**inputs, output_hidden_states=set(layers) != {last})
    return outputs, pooling.combine_layers(
        [outputs.last_hidden_state if layer == last else outputs.hidden_states[layer]
         for layer in layers], combine)


def pooled(encoder, inputs, special_mask, extraction):
    """The pooled vectors of one batch of encoder ``inputs`` for ``extraction``, differentiable.

    The training twin of encoding with :func:`skbert._encoder._encoding.forward_parts`
    and :func:`skbert._encoder._features.assemble` (which pool the same tokens with the
    same operations, tested equal): token vectors of the layers merged by the
    extraction's combine (:func:`token_states`), then pooled over the tokens
    that its mask keeps (``special_mask`` as :func:`skbert._encoder._encoding.tokenize`
    makes it).
    """
    from skbert import pooling
    from skbert._encoder._features import EXCLUDED

    outputs, merged = token_states(encoder, inputs, extraction.layers, extraction.combine)
    if extraction.pooling == "pooler":
        return outputs.pooler_output.float()
    attended = inputs["attention_mask"].bool()
    if extraction.pooling in ("cls", "last"):  # a position, whatever the mask
        return pooling.POOLINGS[extraction.pooling](merged, attended)
    mask = attended & ((special_mask != EXCLUDED) if extraction.special else (special_mask == 0))
    return pooling.POOLINGS[extraction.pooling](merged, mask)


def head_arrays(head):
    """The head's linear layer as float64 numpy arrays ``(weight, bias)``."""
    linear = head[1]
    return (linear.weight.detach().cpu().double().numpy(),
            linear.bias.detach().cpu().double().numpy())


@dataclass
class Network:
    """The encoder and the head on top, with what of the encoder trains.

    ``frozen`` holds the encoder's modules that do not train (the encoder
    itself when it is frozen whole, possibly shared with other estimators),
    ``trainable`` the encoder's parameters that do, by name.
    """

    encoder: object
    head: object
    frozen: list
    trainable: dict

    def train(self):
        """Training mode, but for the frozen modules: they are a fixed function, no dropout."""
        # A wholly frozen encoder is never switched to training mode, not even for a moment:
        # other estimators may be running the same shared model.
        self.encoder.train(not _frozen_whole(self.encoder, self.frozen))
        for module in self.frozen:
            module.eval()
        self.head.train()

    def weights(self):
        """A copy of the weights that train, to go back to with :meth:`restore`."""
        return {name: tensor.detach().clone() for name, tensor
                in [*self.trainable.items(), *self.head.state_dict().items()]}

    def restore(self, weights):
        """Copy ``weights`` from :meth:`weights` back into the encoder and the head."""
        import torch

        with torch.no_grad():
            for name, parameter in self.trainable.items():
                parameter.copy_(weights[name])
        self.head.load_state_dict({name: weights[name] for name in self.head.state_dict()})


def random_state(device):
    """torch's random state now (CPU, and ``device`` if CUDA), for :func:`seeded` to replay."""
    import torch

    return (torch.get_rng_state(),
            torch.cuda.get_rng_state(device) if device.type == "cuda" else None)


@contextlib.contextmanager
def seeded(seed, device):
    """Run under torch's random state seeded by ``seed`` (an int), or replaying a state of
    :func:`random_state` (the same dropout again, as gradient caching needs).

    The global state is restored on exit, so that fitting leaves the user's
    random streams alone; the process-wide training lock is held meanwhile, so
    that another thread's seeded fit cannot draw from the same state.
    """
    import torch

    cuda = [] if device.type != "cuda" else [
        torch.cuda.current_device() if device.index is None else device.index]
    with _TRAINING, torch.random.fork_rng(devices=cuda):
        if isinstance(seed, Integral):
            torch.manual_seed(seed)
        else:
            torch.set_rng_state(seed[0])
            if seed[1] is not None:
                torch.cuda.set_rng_state(seed[1], device)
        yield


def optimizer_step(network, n_steps, *, learning_rate, head_learning_rate, weight_decay,
                   warmup, device, dtype, max_grad_norm=None):
    """A function that takes one AdamW step on a loss and returns the loss as a float.

    The encoder's trainable parameters and the head's have their own peak
    learning rates, which rise linearly from 0 over ``warmup`` (a fraction) of the
    ``n_steps`` steps and then fall linearly to 0 at the last one. float16 on
    CUDA scales the loss, so that small gradients do not underflow. With
    ``max_grad_norm`` the gradients are clipped to that total norm first, as
    transformers' Trainer does (its default: 1.0).
    """
    import torch
    from transformers import get_linear_schedule_with_warmup

    rated = [(list(network.trainable.values()), learning_rate),
             (list(network.head.parameters()), head_learning_rate)]
    # Biases and LayerNorm weights are not decayed, as in BERT's recipe.
    groups = [{"params": [p for p in parameters if (p.ndim >= 2) == decay], "lr": rate,
               "weight_decay": weight_decay if decay else 0.0}
              for parameters, rate in rated for decay in (True, False)]
    # Fused: one kernel for all parameters (as transformers' Trainer defaults to); the
    # per-tensor loop took as long as the backward pass of all-MiniLM-L6-v2 on a CPU.
    optimizer = torch.optim.AdamW([group for group in groups if group["params"]],
                                  fused=device.type in ("cpu", "cuda"))
    scheduler = get_linear_schedule_with_warmup(optimizer, round(warmup * n_steps),
                                                n_steps)
    scaler = torch.amp.GradScaler(device.type,
                                  enabled=dtype == "float16" and device.type == "cuda")

    parameters = [p for group in groups for p in group["params"]]

    def step(loss):
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        if max_grad_norm is not None:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        return loss.item()

    return step


def autocast(device, dtype):
    """Mixed precision in ``dtype`` on ``device``; off for float32."""
    import torch

    return torch.autocast(device.type, dtype=_loading.torch_dtype(dtype),
                          enabled=dtype != "float32")


def shuffled_batches(indices, lengths, batch_size, rng, group=8):
    """Random batches of ``indices``; with ``lengths``, batches of similar lengths.

    Shuffled indices are cut into groups of ``group`` batches and sorted by
    length within each group, so batches pad less (about 1.15 times the real
    tokens instead of 1.75 on TREC questions) and still mix the data set; the
    order of the batches is then shuffled.
    """
    order = rng.permutation(indices)
    if lengths is None:
        return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
    batches = []
    for start in range(0, len(order), group * batch_size):
        members = order[start:start + group * batch_size]
        members = members[np.argsort(-lengths[members], kind="stable")]
        batches += [members[i:i + batch_size] for i in range(0, len(members), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def run_epoch(network, batches, batch_loss, step, progress):
    """One optimizer step per batch; returns the mean loss over the epoch's rows."""
    total, seen = 0.0, 0
    for rows in batches:
        total += step(batch_loss(network, rows)) * len(rows)
        seen += len(rows)
        progress.update(1)
        progress.set_postfix(loss=f"{total / seen:.4f}")
    return total / seen


class EarlyStopping:
    """Early stopping's bookkeeping: a validation score per epoch and the best epoch's weights.

    Parameters
    ----------
    validation_score : callable
        ``validation_score(network)``: the score of the network (its head in
        eval mode) on the held-out rows; higher is better.
    n_iter_no_change : int
        Epochs without a better score before stopping.
    """

    def __init__(self, validation_score, n_iter_no_change):
        self.validation_score = validation_score
        self.n_iter_no_change = n_iter_no_change
        self.scores, self.best_score, self.best_weights = [], None, None
        self._n_worse = 0

    def should_stop(self, network):
        """Score ``network`` after an epoch, keep its weights if best; whether to stop now."""
        network.head.eval()
        score = self.validation_score(network)
        self.scores.append(score)
        if self.best_weights is None or score > self.best_score:
            self.best_score, self.best_weights, self._n_worse = score, network.weights(), 0
        else:
            self._n_worse += 1
        return self._n_worse >= self.n_iter_no_change


def train(network, batch_loss, step, rows, *, lengths, batch_size, max_epochs, rng,
          early_stopping=None, verbose=False, batches=None):
    """Train ``network`` for at most ``max_epochs`` passes over ``rows``.

    Parameters
    ----------
    network : Network
        What trains; set to training mode at the start of every epoch.
    batch_loss : callable
        ``batch_loss(network, rows)``: the loss tensor of a batch of rows.
    step : callable
        One optimizer step on a loss, from :func:`optimizer_step`.
    rows : ndarray of int
        The training rows.
    lengths : ndarray of int or None
        Tokens per row, to batch rows of similar lengths together; None for
        plain random batches (e.g. on features encoded once: nothing to pad).
    batch_size : int
        Rows per step.
    max_epochs : int
        Passes over ``rows``.
    rng : numpy.random.RandomState
        Draws the batches.
    early_stopping : EarlyStopping or None
        Scores the network after every epoch and stops training when it
        says so; the network ends with the weights of the best epoch.
    verbose : bool or int
        Show a progress bar per epoch with the running loss.
    batches : callable or None
        ``batches(rows, rng)``: an epoch's batches, to draw them otherwise than
        :func:`shuffled_batches` does (which ``lengths`` and ``batch_size``
        are for).

    Returns
    -------
    loss_curve : list of float
        Mean training loss of each epoch run.
    """
    from skbert._progress import progress_bar

    loss_curve = []
    for epoch in range(max_epochs):
        network.train()
        epoch_batches = (shuffled_batches(rows, lengths, batch_size, rng) if batches is None
                         else batches(rows, rng))
        with progress_bar(verbose, total=len(epoch_batches),
                          desc=f"epoch {epoch + 1}/{max_epochs}", unit="batch") as progress:
            loss_curve.append(run_epoch(network, epoch_batches, batch_loss, step, progress))
            if early_stopping is None:
                continue
            stop = early_stopping.should_stop(network)
            progress.set_postfix(loss=f"{loss_curve[-1]:.4f}",
                                 validation_score=f"{early_stopping.scores[-1]:.4f}")
        if stop:
            break
    if early_stopping is not None:  # back to the epoch with the best validation score
        network.restore(early_stopping.best_weights)
    return loss_curve


@dataclass(frozen=True)
class Recipe:
    """How a fine-tuner trains: what of the encoder is frozen, its adapters, the optimizer.

    ``freeze`` is resolved ("none" is None); ``lora`` is ``(rank, alpha,
    dropout)``; rates and ``warmup`` are as :func:`optimizer_step` takes them.
    """

    freeze: object
    epochs: int
    batch_size: int
    learning_rate: float
    head_learning_rate: float
    warmup: float
    weight_decay: float
    lora: tuple
    max_grad_norm: object = None


@dataclass(frozen=True)
class Trained:
    """What :func:`fit_network` trained, for the estimator to assign as its fitted state.

    ``model`` is the encoder inference runs (the adapters merged into a tree
    sharing the base weights, the tuned private copy, or the base itself when
    frozen whole), ``head`` the head's ``(weight, bias)`` float64 arrays (None
    without a head), ``lora_factors`` the adapters of ``freeze="lora"``,
    ``rates`` the recipe's ``(learning_rate, head_learning_rate)``.
    """

    model: object
    head: object
    loss_curve: list
    rates: tuple
    lora_factors: object = None
    validation_scores: object = None
    best_validation_score: object = None


def fit_network(base, recipe, batch_loss, rows, *, name, seed, device, dtype, n_inputs=None,
                n_outputs=None, head=None, lengths=None, batches=None, n_steps=None,
                validation_score=None, n_iter_no_change=None, merge_into=None, verbose=False):
    """Train ``base`` (with a linear head of ``n_inputs`` to ``n_outputs``, if given) by
    ``recipe``: the one training skeleton of skbert's fine-tuners.

    ``base`` is never written: a private copy on ``device`` trains, LoRA's
    adapters train beside its weights, or (``freeze="all"``) it is the fixed
    function under the head, which starts from ``head`` (``(weight, bias)`` arrays, a
    pretrained head) where given. ``batch_loss(network, rows)``, ``rows``,
    ``lengths`` and ``batches`` are :func:`train`'s, the epochs and batch
    size the recipe's (``n_steps``: the steps of the schedule, when
    ``batches`` draws other than ``batch_size`` rows a step); with
    ``validation_score`` early stopping returns to the best epoch. LoRA's
    adapters are merged into ``merge_into`` (default: ``base``), the model
    inference runs, sharing its weights. Initialization (adapters, head) and
    dropout are seeded by ``seed`` under the training lock; torch's global
    random state is left as it was. Returns a :class:`Trained`; an exception
    leaves nothing behind.
    """
    import torch

    from skbert._train import _lora

    freeze = recipe.freeze
    if n_steps is None:
        n_steps = recipe.epochs * -(-len(rows) // recipe.batch_size)
    with seeded(seed, device):
        if freeze == "lora":
            encoder, trainable = _lora.adapted(base, name, *recipe.lora)
            frozen = []
        else:
            encoder = base if freeze == "all" else copy.deepcopy(base).to(device)
            frozen = frozen_modules(encoder, freeze)
            trainable = unfreeze(encoder, frozen)
        head = (torch.nn.Identity() if n_outputs is None
                else linear_head(encoder.config, n_inputs, n_outputs, device, head))
        network = Network(encoder, head, frozen, trainable)
        step = optimizer_step(
            network, n_steps, learning_rate=recipe.learning_rate,
            head_learning_rate=recipe.head_learning_rate, weight_decay=recipe.weight_decay,
            warmup=recipe.warmup, device=device, dtype=dtype,
            max_grad_norm=recipe.max_grad_norm)
        early_stopping = (None if validation_score is None
                          else EarlyStopping(validation_score, n_iter_no_change))
        loss_curve = train(network, batch_loss, step, rows, lengths=lengths,
                           batch_size=recipe.batch_size, max_epochs=recipe.epochs,
                           rng=np.random.RandomState(seed), early_stopping=early_stopping,
                           verbose=verbose, batches=batches)
        encoder.eval()
        factors = None
        if freeze == "lora":  # merged: inference costs what the base encoder costs
            factors = _lora.factors(encoder)
            model = _lora.merged(base if merge_into is None else merge_into, factors)
        else:
            model = encoder if freeze == "all" else encoder.requires_grad_(False)
    return Trained(model, None if n_outputs is None else head_arrays(head), loss_curve,
                   (recipe.learning_rate, recipe.head_learning_rate), factors,
                   None if early_stopping is None else early_stopping.scores,
                   None if early_stopping is None else early_stopping.best_score)
