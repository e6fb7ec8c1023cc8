"""Model and tokenizer loading, device and dtype resolution.

torch and transformers are imported inside the functions that need them, so
``import skbert`` stays light. Loaded models are shared within a process:
``GridSearchCV`` clones a vectorizer for every candidate, and each clone's
``fit`` gets the already loaded model instead of reading the weights again.
"""

import collections
import contextlib
import dataclasses
import functools
import hashlib
import importlib.util
import itertools
import json
import os
import reprlib
import threading
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path

DTYPES = ("float32", "float16", "bfloat16")


class LoadError(OSError):
    """A model or tokenizer that is missing, unreachable or corrupt."""


@dataclass(eq=False)
class LoadedModel:
    """A tokenizer and a model's config, fingerprints of model and tokenizer, what its
    sentence-transformers files say (:class:`SentenceConfig`), the :func:`folder_stamp` of
    the directory it came from (None for a hub id), and the model in eval mode on its
    device; or, where ``loader`` is given instead of the model, the model that ``loader()``
    returns on first use of :attr:`model`."""

    tokenizer: object
    config: object
    loaded_fingerprint: str  # of the weights as loaded; :attr:`fingerprint` is of them now
    tokenizer_fingerprint: str
    sentence: "SentenceConfig"
    has_pooler: bool
    stamp: tuple | None = None
    _model: object = None
    loader: object = None
    _model_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # The fingerprint of the weights in the state that :func:`weights_state` saw last.
    _fingerprint: str | None = field(default=None, repr=False)
    _state: tuple | None = field(default=None, repr=False)

    def __post_init__(self):
        if self._fingerprint is None:
            self._fingerprint = self.loaded_fingerprint
            self._state = None if self._model is None else weights_state(self._model)

    @classmethod
    def of(cls, model, tokenizer, sentence, stamp=None):
        """A loaded model, its fingerprints computed."""
        return cls(tokenizer, model.config, model_fingerprint(model),
                   tokenizer_fingerprint(tokenizer), sentence, _has_pooler(model), stamp, model)

    @property
    def model(self):
        with self._model_lock:
            if self._model is None:
                self._model = self.loader()  # checked against ``loaded_fingerprint``
                self._state = weights_state(self._model)
            return self._model

    @property
    def fingerprint(self):
        """The fingerprint of the weights as they are now.

        Taken anew when a parameter or buffer of the model was changed in place
        since it was taken (``weight.mul_(0.5)``, an optimizer step,
        ``load_state_dict``: torch's version counters) or replaced (a new
        ``Parameter``, ``.data`` assigned, a submodule swapped); cheap otherwise
        (1 ms for BERT-base). Writes that bypass torch's counters
        (``weight.data.mul_()``, through a numpy view) are not seen.
        """
        with self._model_lock:
            if self._model is not None:
                state = weights_state(self._model)
                if state != self._state:
                    self._fingerprint, self._state = model_fingerprint(self._model), state
            return self._fingerprint

    def changed(self):
        """Whether the weights differ from those loaded (changed in place since)."""
        return self.fingerprint != self.loaded_fingerprint

    def with_model(self, model):
        """A copy around another ``model``, fingerprinted anew."""
        return dataclasses.replace(self, config=model.config, has_pooler=_has_pooler(model),
                                   loaded_fingerprint=model_fingerprint(model), _model=model,
                                   loader=None, _model_lock=threading.Lock(),
                                   _fingerprint=None, _state=None)


def _has_pooler(model):
    return getattr(model, "pooler", None) is not None


# Alive models by (model, revision, dtype, device); the deque keeps the most recent
# ones alive between GridSearchCV candidates, whose fitted clones are dropped.
_shared = weakref.WeakValueDictionary()
_recent = collections.deque(maxlen=2)
_lock = threading.Lock()


def resolve_device(device):
    """``"auto"`` -> the best available device; otherwise check that ``device`` exists."""
    import torch

    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError:
        raise ValueError(f"device={device!r} is not a device: use 'auto', 'cpu', 'cuda', "
                         "'cuda:N' or 'mps'.") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but CUDA is not available; use 'auto' or 'cpu'.")
    if resolved.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device={device!r} but MPS is not available; use 'auto' or 'cpu'.")
    return resolved


def torch_dtype(name):
    import torch

    return getattr(torch, name)


# CPU features that run each half-precision type natively (torch's own probes).
_NATIVE_CPU = {"bfloat16": ("_is_avx512_bf16_supported", "_is_amx_tile_supported"),
               "float16": ("_is_avx512_fp16_supported", "_is_amx_fp16_supported")}


def check_dtype(dtype, device):
    """Refuse a dtype the device cannot compute in; warn when the CPU only emulates it.

    Without AVX512-BF16/FP16 or AMX, torch converts half precision to float32
    and back around every matmul: correct, but slower than plain float32
    (all-MiniLM-L6-v2 in bfloat16: 3.4x slower per text on an AVX2-only CPU).
    """
    import torch

    device = torch.device(device)
    if dtype == "bfloat16" and device.type == "cuda" and not torch.cuda.is_bf16_supported(
            including_emulation=False):
        raise ValueError(f"dtype='bfloat16' is not supported by {torch.cuda.get_device_name()}; "
                         "use 'float16' or 'float32'.")
    probes = [getattr(torch.cpu, name, None) for name in _NATIVE_CPU.get(dtype, ())]
    if device.type == "cpu" and probes and not any(probe is None or probe() for probe in probes):
        warnings.warn(f"This CPU has no native {dtype} arithmetic (AVX512 or AMX): torch "
                      f"emulates it, slower than float32. Use dtype='float32' on this CPU.",
                      RuntimeWarning, stacklevel=3)


def model_fingerprint(model):
    """A hash of what decides the model's outputs: its config (activation, norm epsilon,
    ...) and every parameter and buffer (names, dtypes, shapes and values)."""
    import torch

    config = {name: value for name, value in model.config.to_dict().items()
              if not name.startswith("_") and name not in ("transformers_version", "dtype")}
    digest = hashlib.blake2b(json.dumps(config, sort_keys=True, default=str).encode(),
                             digest_size=16)
    for name, tensor in sorted(model.state_dict().items()):
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}:{flat.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(flat.view(torch.uint8).numpy())
    return digest.hexdigest()


def length_limit(tokenizer, config):
    """The most tokens a window of the model may hold: its position embeddings, less those
    that RoBERTa-family models skip (their positions begin after the padding index: 514
    embeddings hold 512 tokens); the tokenizer's ``model_max_length`` for a model without
    them.

    ``model_max_length`` is the window a folder was saved with, the default of
    ``max_length=None``, not a limit: a cross-encoder saved at 128 tokens reads
    pairs of 320, as sentence-transformers reads it.
    """
    limit = getattr(config, "max_position_embeddings", None)
    if limit is None:
        return tokenizer.model_max_length
    if _positions_after_padding(config.model_type):
        limit -= config.pad_token_id + 1
    return limit


@functools.cache
def _positions_after_padding(model_type):
    """Whether ``model_type``'s transformers implementation numbers positions from
    ``pad_token_id + 1`` (its ``create_position_ids_from_input_ids``: RoBERTa, XLM-R,
    MPNet, CamemBERT, Longformer, ...).

    Read from the source of the module that defines the model class, not imported: a
    process that runs a stored export loads no modeling code.
    """
    from transformers.models.auto.configuration_auto import model_type_to_module_name
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    name = MODEL_MAPPING_NAMES.get(model_type)
    spec = importlib.util.find_spec(f"transformers.models.{model_type_to_module_name(model_type)}")
    if name is None or spec is None or spec.origin is None:
        return False
    for path in Path(spec.origin).parent.glob("modeling_*.py"):
        source = path.read_text(encoding="utf-8")
        if f"class {name}(" in source:
            return "create_position_ids_from_input_ids" in source
    return False


def weights_state(model):
    """What changes when a parameter or buffer of ``model`` is changed in place or replaced:
    each tensor's identity, storage and version counter."""
    from skbert._compat import tensor_version

    return tuple((id(tensor), tensor.data_ptr(), tensor_version(tensor))
                 for tensor in itertools.chain(model.parameters(), model.buffers()))


def tokenizer_fingerprint(tokenizer):
    """A hash of what decides the token ids: vocabulary, rules, special tokens and limits.

    A fast tokenizer serializes its whole pipeline (normalizer, pre-tokenizer,
    vocabulary, post-processor); a slow one is described by its vocabulary.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    rules = backend.to_str() if backend is not None else sorted(tokenizer.get_vocab().items())
    settings = {"class": type(tokenizer).__name__, "rules": rules,
                "model_max_length": tokenizer.model_max_length,
                "padding_side": tokenizer.padding_side,
                "truncation_side": tokenizer.truncation_side,
                "special_tokens": tokenizer.special_tokens_map}
    data = json.dumps(settings, sort_keys=True, default=str).encode()
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def folder_stamp(source):
    """(path, size, mtime) of the files of the directory ``source`` and of its subfolders
    (sentence-transformers modules); None for a hub id.

    Cheap (no file is read), and it changes when a model is saved into the
    folder again, so that the shared store loads it anew. Deeper files (a
    cache directory kept inside the folder) are not part of the model.
    """
    if not os.path.isdir(source):
        return None
    stamp, folders = [], [(source, "")]
    for folder, prefix in folders:
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):  # removed meanwhile: not part of it
                    if entry.is_dir() and not prefix:
                        folders.append((entry.path, entry.name + "/"))
                    elif entry.is_file():
                        info = entry.stat()
                        stamp.append((prefix + entry.name, info.st_size, info.st_mtime_ns))
    return tuple(sorted(stamp))


@contextlib.contextmanager
def quiet_transformers():
    """Hide transformers' own progress bars (loading, saving) for the duration."""
    from transformers.utils import logging

    enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            logging.enable_progress_bar()


def from_pretrained(source, revision, dtype):
    """Load a model (eval mode, on the CPU) and its tokenizer, with one clear error.

    Code that a model folder or hub repository ships never runs
    (``trust_remote_code=False``): an architecture that transformers does not
    implement is refused, without the question transformers would otherwise
    ask on standard input.
    """
    _check_source(source)
    tokenizer = _pretrained("AutoTokenizer", source, revision)
    return load_model(source, revision, dtype), tokenizer


def _check_source(source):
    """Refuse a path that is no model folder, and a folder that needs its own code."""
    is_dir = os.path.isdir(source)
    # A hub id is "name" or "owner/name"; anything else that is not a directory is a bad path.
    bad_path = os.path.isabs(source) or source.startswith((".", "~")) or source.count("/") > 1
    if not is_dir and bad_path:
        raise FileNotFoundError(f"Model directory {source!r} does not exist.")
    if is_dir and not os.path.isfile(os.path.join(source, "config.json")):
        raise OSError(f"{source!r} is not a model directory: it has no config.json (a "
                      "Hugging Face model directory holds config.json, the weights and the "
                      "tokenizer files, as save_pretrained writes them).")
    if is_dir:
        _refuse_remote_code(source)


def _pretrained(kind, source, revision, **kwargs):
    """``transformers.<kind>.from_pretrained(source)``, never running the source's code, with
    one clear error for a missing, unreachable or corrupt model."""
    import transformers
    from safetensors import SafetensorError

    try:
        with quiet_transformers():
            return getattr(transformers, kind).from_pretrained(
                source, revision=revision, trust_remote_code=False, **kwargs)
    except (OSError, ValueError, SafetensorError) as exc:  # missing, offline, corrupt
        if os.path.isdir(source):
            raise LoadError(f"Could not load the model directory {source!r}: {exc}") from exc
        where = f"model {source!r} (revision={revision!r})"
        if _offline_and_not_cached(source, revision):
            raise LoadError(
                f"Could not load the {where} offline: HF_HUB_OFFLINE is set and the Hugging "
                "Face cache holds no copy of it. Download it once with a connection (without "
                "HF_HUB_OFFLINE), or give the path of a local model directory.") from exc
        raise LoadError(f"Could not load the {where}: {exc}") from exc


def _offline_and_not_cached(source, revision):
    """Whether the hub model ``source`` cannot load because the hub is off and its config is
    not in the cache (transformers' own message speaks of a connection that failed)."""
    from huggingface_hub import constants, try_to_load_from_cache

    return constants.HF_HUB_OFFLINE and not isinstance(
        try_to_load_from_cache(source, "config.json", revision=revision), str)


def read_config(source, revision):
    """The ``config.json`` of the model ``source`` as a dict, with the errors of loading it:
    a path that is no model directory, a hub model that is missing, unreachable or (offline)
    not cached."""
    _check_source(source)
    config = _read_json(source, revision, "config.json")
    if config is None:  # a hub model whose config is out of reach: transformers says why
        config = _pretrained("AutoConfig", source, revision).to_dict()
    return config


def load_model(source, revision, dtype):
    """The model of ``source`` alone (eval mode, on the CPU), with one clear error.

    The encoder of a sequence-classification folder (a cross-encoder) is its
    task model's base, loaded as that model: its head's weights are expected
    there, where ``AutoModel`` would report them as unexpected.
    """
    config = _read_json(source, revision, "config.json") or {}
    heads = isinstance(config, dict) and any(
        str(name).endswith("ForSequenceClassification")
        for name in config.get("architectures") or [])
    kind = "AutoModelForSequenceClassification" if heads else "AutoModel"
    model = _pretrained(kind, source, revision, dtype=torch_dtype(dtype))
    return (model.base_model if heads else model).eval()


def _refuse_remote_code(source):
    """Refuse a model folder whose architecture exists only as code inside it."""
    from transformers import CONFIG_MAPPING

    try:
        config = _read_json(source, None, "config.json")
    except (OSError, ValueError) as exc:
        raise OSError(f"Could not read {os.path.join(source, 'config.json')!r}: {exc}") from exc
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if isinstance(config, dict) and config.get("auto_map") and model_type not in CONFIG_MAPPING:
        raise ValueError(
            f"{source!r} needs its own Python code to load: its config.json maps "
            f"{sorted(config['auto_map'])} to code in the folder for model_type "
            f"{model_type!r}, which transformers does not implement. skbert never runs code "
            "from a model folder (trust_remote_code=False); use a model whose architecture "
            "transformers implements."
        )


def load(source, revision, dtype, device, records=None):
    """The shared :class:`LoadedModel` for ``source`` on ``device``, loaded on first use.

    A directory whose files changed since it was loaded (a model saved into it
    again) is loaded anew. ``records``, when given, is asked first
    (``records.find(source, revision, dtype, device, stamp)``: a
    :class:`LoadedModel`, maybe without its weights yet, or None) and told of
    every model loaded here (``records.write(source, revision, dtype,
    loaded)``): :mod:`skbert._encoder._engines` keeps the fingerprints of the models it
    runs that way, so that a process whose exports are stored needs no torch
    model.
    """
    where = os.path.abspath(source) if os.path.isdir(source) else source
    key = (where, revision, dtype, str(device))
    with _lock:
        loaded = _shared.get(key)
        stamp = folder_stamp(source)
        # A model changed in place (through ``model_``) is not the folder's any more.
        if loaded is None or loaded.stamp != stamp or loaded.changed():
            check_dtype(dtype, device)
            loaded = records and records.find(source, revision, dtype, device, stamp)
            if not loaded:
                model, tokenizer = from_pretrained(source, revision, dtype)
                loaded = LoadedModel.of(model.to(device), tokenizer,
                                        sentence_config(source, revision), stamp)
                if records is not None:
                    records.write(source, revision, dtype, loaded)
            _shared[key] = loaded
        if loaded not in _recent:
            _recent.append(loaded)
        return loaded


def without_weights(source, revision, fingerprint, has_pooler, stamp, loader):
    """A :class:`LoadedModel` of the config and tokenizer of ``source`` whose model is
    ``loader()``, loaded on first use; ``fingerprint`` and ``has_pooler`` are taken as
    given (the caller recorded them)."""
    _check_source(source)
    tokenizer = _pretrained("AutoTokenizer", source, revision)
    return LoadedModel(tokenizer, _pretrained("AutoConfig", source, revision), fingerprint,
                       tokenizer_fingerprint(tokenizer), sentence_config(source, revision),
                       has_pooler, stamp, loader=loader)


def check_reference(loaded, fingerprint, tokenizer_fingerprint, source, revision, owner):
    """Refuse a model found again for a ``persist_weights=False`` pickle of ``owner`` whose
    weights or tokenizer are no longer those it was pickled with."""
    for what, expected, found in [("weights", fingerprint, loaded.fingerprint),
                                  ("tokenizer", tokenizer_fingerprint,
                                   loaded.tokenizer_fingerprint)]:
        if found != expected:
            raise ValueError(
                f"The {what} of {source!r} (revision={revision!r}) changed since this {owner} "
                f"was pickled with persist_weights=False: expected {what} fingerprint "
                f"{expected}, found {found}. Refit it on the current model, or pickle with "
                "persist_weights=True to carry weights and tokenizer."
            )


# The file of a sentence-transformers folder whose max_seq_length is its window.
SENTENCE_BERT_CONFIG = "sentence_bert_config.json"
# sentence-transformers pooling modes -> skbert pooling names.
_ST_POOLINGS = {"cls": "cls", "mean": "mean", "max": "max",
                "mean_sqrt_len_tokens": "mean_sqrt_len", "lasttoken": "last",
                ("mean", "max"): "mean_max"}
# Legacy pooling configs: one flag per mode, concatenated in this order.
_ST_POOLING_FLAGS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                     "pooling_mode_mean_tokens": "mean",
                     "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                     "pooling_mode_weightedmean_tokens": "weightedmean",
                     "pooling_mode_lasttoken": "lasttoken"}


@dataclass(frozen=True)
class SentenceConfig:
    """How a sentence-transformers folder says its encoder is used; empty for a plain model.

    ``pooling`` is a skbert pooling name (None: no Pooling module), ``problem``
    says why skbert cannot reproduce the folder's embedding, if it cannot (a
    Dense module, weighted-mean pooling, ...). ``max_seq_length`` is the value
    of ``sentence_bert_config.json`` as the file has it, unchecked (None: no
    such file or key): :func:`window_of_folder` checks it where it is used,
    so that a bad value stops only the estimators that read it.
    """

    pooling: str | None = None
    normalize: bool = False
    include_prompt: bool = True
    prompts: dict = field(default_factory=dict)
    default_prompt_name: str | None = None
    problem: str | None = None
    max_seq_length: object = None


def _read_json(source, revision, name):
    """A JSON file of the model folder or hub repository, or None when it has none."""
    if os.path.isdir(source):
        path = os.path.join(source, name)
        path = path if os.path.isfile(path) else None
    else:
        from skbert._compat import cached_model_file

        path = cached_model_file(source, name, revision)
    if path is None:
        return None
    with open(path, encoding="utf-8") as file:
        return json.load(file)


def sentence_config(source, revision=None):
    """Read the sentence-transformers files of ``source`` (modules.json and the rest).

    Returns an empty :class:`SentenceConfig` when ``source`` is not a
    sentence-transformers model.
    """
    settings = _read_json(source, revision, "config_sentence_transformers.json") or {}
    prompts = dict(settings.get("prompts") or {})
    default_prompt_name = settings.get("default_prompt_name")
    modules = _read_json(source, revision, "modules.json") or []
    pooling, normalize, include_prompt, problems = None, False, True, []
    for module in modules:
        kind = module.get("type", "").rsplit(".", 1)[-1]
        if kind == "Pooling":
            config = _read_json(source, revision, f"{module['path']}/config.json") or {}
            include_prompt = config.get("include_prompt", True)
            modes = config.get("pooling_mode") or tuple(
                mode for flag, mode in _ST_POOLING_FLAGS.items() if config.get(flag)) or "mean"
            modes = modes[0] if isinstance(modes, (list, tuple)) and len(modes) == 1 else modes
            pooling = _ST_POOLINGS.get(tuple(modes) if isinstance(modes, list) else modes)
            if pooling is None:
                problems.append(f"pooling {modes!r}")
            elif pooling == "cls" and not include_prompt:  # its "first token" follows the prompt
                problems.append("cls pooling with include_prompt: false")
        elif kind == "Normalize":
            normalize = True
        elif kind != "Transformer":
            problems.append(f"a {kind} module")
    problem = None
    if problems:
        problem = (f"its sentence-transformers pipeline has {' and '.join(problems)}, which "
                   "skbert does not compute")
    window = _read_json(source, revision, SENTENCE_BERT_CONFIG)
    # A file that is not an object is malformed: kept whole for window_of_folder to refuse.
    window = window.get("max_seq_length") if isinstance(window, dict) else window
    return SentenceConfig(pooling, normalize, include_prompt, prompts, default_prompt_name,
                          problem, window)


def window_of_folder(sentence, source, limit):
    """The window that the sentence-transformers folder ``source`` sets, as
    sentence-transformers reads it: its ``max_seq_length`` (``sentence``, a
    :class:`SentenceConfig`) capped at the model's ``limit`` of tokens; None when the folder
    sets none.

    The value comes from a file: anything but a positive int is an error that names the file
    and the value, rather than a window that silently differs from sentence-transformers'.
    """
    value = sentence.max_seq_length
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(
            f"{SENTENCE_BERT_CONFIG} of {source!r} has max_seq_length={reprlib.repr(value)}; "
            "expected a positive int (the tokens per window of the model, special tokens "
            "included). Pass max_length to choose the window yourself."
        )
    return min(value, int(limit))
