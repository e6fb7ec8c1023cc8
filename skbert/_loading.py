"""Model and tokenizer loading, device and dtype resolution.

torch and transformers are imported inside the functions that need them, so
``import skbert`` stays light. Loaded models are shared within a process:
``GridSearchCV`` clones a vectorizer for every candidate, and each clone's
``fit`` gets the already loaded model instead of reading the weights again.
"""

import collections
import contextlib
import hashlib
import json
import os
import threading
import warnings
import weakref
from dataclasses import dataclass, field

DTYPES = ("float32", "float16", "bfloat16")


@dataclass(eq=False)
class LoadedModel:
    """A model in eval mode on its device, its tokenizer, a fingerprint of its weights, and
    what its sentence-transformers files say (:class:`SentenceConfig`)."""

    model: object
    tokenizer: object
    fingerprint: str
    sentence: "SentenceConfig"


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


def weights_fingerprint(model):
    """A hash of every parameter and buffer: names, dtypes, shapes and values."""
    import torch

    digest = hashlib.blake2b(digest_size=16)
    for name, tensor in sorted(model.state_dict().items()):
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}:{flat.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(flat.view(torch.uint8).numpy())
    return digest.hexdigest()


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
    """Load a model (eval mode, on the CPU) and its tokenizer, with one clear error."""
    from transformers import AutoModel, AutoTokenizer

    is_dir = os.path.isdir(source)
    # A hub id is "name" or "owner/name"; anything else that is not a directory is a bad path.
    bad_path = os.path.isabs(source) or source.startswith((".", "~")) or source.count("/") > 1
    if not is_dir and bad_path:
        raise FileNotFoundError(f"Model directory {source!r} does not exist.")
    if is_dir and not os.path.isfile(os.path.join(source, "config.json")):
        raise OSError(f"{source!r} is not a model directory: it has no config.json (a "
                      "Hugging Face model directory holds config.json, the weights and the "
                      "tokenizer files, as save_pretrained writes them).")
    from safetensors import SafetensorError

    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(source, revision=revision)
            model = AutoModel.from_pretrained(source, revision=revision, dtype=torch_dtype(dtype))
    except (OSError, ValueError, SafetensorError) as exc:  # missing, offline, corrupt
        where = (f"model directory {source!r}" if is_dir
                 else f"model {source!r} (revision={revision!r})")
        raise OSError(f"Could not load the {where}: {exc}") from exc
    return model.eval(), tokenizer


def load(source, revision, dtype, device):
    """The shared :class:`LoadedModel` for ``source`` on ``device``, loaded on first use."""
    where = os.path.abspath(source) if os.path.isdir(source) else source
    key = (where, revision, dtype, str(device))
    with _lock:
        loaded = _shared.get(key)
        if loaded is None:
            check_dtype(dtype, device)
            model, tokenizer = from_pretrained(source, revision, dtype)
            fingerprint = weights_fingerprint(model)
            loaded = LoadedModel(model.to(device), tokenizer, fingerprint,
                                 sentence_config(source, revision))
            _shared[key] = loaded
        if loaded not in _recent:
            _recent.append(loaded)
        return loaded


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
    Dense module, weighted-mean pooling, ...).
    """

    pooling: str | None = None
    normalize: bool = False
    include_prompt: bool = True
    prompts: dict = field(default_factory=dict)
    default_prompt_name: str | None = None
    problem: str | None = None


def _read_json(source, revision, name):
    """A JSON file of the model folder or hub repository, or None when it has none."""
    if os.path.isdir(source):
        path = os.path.join(source, name)
        path = path if os.path.isfile(path) else None
    else:
        from transformers.utils import cached_file

        path = cached_file(source, name, revision=revision,
                           _raise_exceptions_for_missing_entries=False,
                           _raise_exceptions_for_connection_errors=False)
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
    return SentenceConfig(pooling, normalize, include_prompt, prompts, default_prompt_name,
                          problem)
