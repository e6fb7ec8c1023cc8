"""CPU inference engines: OpenVINO and ONNX Runtime run the encoder instead of torch.

An engine is how a batch of windows becomes hidden states; everything before
(tokenization, the cache) and after (:func:`skbert._features.compute_parts`)
is the same for every backend. :func:`graph` gives a callable for one
encoder cut (the layers up to the deepest one read) that returns the hidden
states asked for, converted once from a private copy of the torch model and
kept in an export directory, so that a second process or a clone loads it
instead of converting again.

Precision: ``"float32"`` is pinned to f32 (OpenVINO's CPU plugin otherwise
computes in bf16 where the CPU has it); ``"bfloat16"`` is OpenVINO's bf16
hint; ``"int8"`` quantizes weights and activations: static quantization with
NNCF for OpenVINO (calibrated on ``calibration`` texts), dynamic quantization
for ONNX Runtime (int8 weights, activations quantized per batch: no
calibration).
"""

import contextlib
import copy
import hashlib
import importlib.util
import io
import json
import logging
import os
import shutil
import tempfile
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BACKENDS = ("torch", "openvino", "onnx")
# What each engine computes in; torch keeps its own list (skbert._loading.DTYPES).
ENGINE_DTYPES = {"openvino": ("float32", "bfloat16", "int8"), "onnx": ("float32", "int8")}
_EXTRAS = {"openvino": ("openvino", "nncf"), "onnx": ("onnxruntime", "onnx")}
# Raise it when the files of an export change: exports of another version are rebuilt.
EXPORT_FORMAT = "skbert-export-v2"
# Calibration texts for int8 at most: NNCF's own default subset size.
N_CALIBRATION = 300
_INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")

_graphs = {}  # export key -> compiled graph, shared by every estimator of the process
_lock = threading.Lock()


def check_backend(backend, dtype, device):
    """Refuse a backend x dtype x device that no engine runs; import the engine's package."""
    if backend == "torch":
        if dtype == "int8":
            raise ValueError("dtype='int8' quantizes with a CPU engine: use backend='openvino' "
                             "(static int8, calibrated) or backend='onnx' (dynamic int8).")
        return
    if device.type != "cpu":
        raise ValueError(f"backend={backend!r} runs on the CPU, and device resolves to "
                         f"{str(device)!r}: use backend='torch' there.")
    if dtype not in ENGINE_DTYPES[backend]:
        raise ValueError(f"dtype={dtype!r} is not computed by backend={backend!r}, which offers "
                         f"{', '.join(map(repr, ENGINE_DTYPES[backend]))}.")
    for package in _EXTRAS[backend]:  # found, not imported: NNCF alone takes 0.5 s
        if importlib.util.find_spec(package) is None:
            raise ImportError(f"backend={backend!r} needs {package}: pip install "
                              f"'skbert[{backend}]'")


def default_calibration():
    """The bundled calibration texts: 150 STS-B train sentences and 150 TREC train questions.

    Fixed, so that every fold of a grid search, every clone and every process
    gets the same int8 model (and shares its cache entries). Neither set
    overlaps the test splits that skbert's benchmarks score.
    """
    from skbert.datasets import load_stsb, load_trec

    sentences = [text for pair in load_stsb(return_X_y=True)[0] for text in pair]
    questions = load_trec(return_X_y=True)[0]
    half = N_CALIBRATION // 2
    return tuple(dict.fromkeys(sentences))[:half] + tuple(dict.fromkeys(questions))[:half]


def calibration_texts(calibration, fit_texts):
    """The texts that calibrate int8: the bundled set, the first distinct texts of ``fit``,
    or the user's list (a text pair calibrates as its first text)."""
    if calibration is None:
        return default_calibration()
    from skbert._validation import check_texts

    texts = fit_texts if calibration == "fit" else check_texts(calibration)
    texts = [text[0] if isinstance(text, tuple) else text for text in texts]
    texts = tuple(dict.fromkeys(texts))[:N_CALIBRATION]
    if not texts:
        raise ValueError(f"calibration={calibration!r} gives no text to calibrate int8 on.")
    return texts


def tag(backend, dtype, calibration):
    """What the cache key says of the engine: equal tags, equal features."""
    if backend == "torch":
        return dtype  # the keys of a torch model are what they always were
    digest = "" if calibration is None else _digest(json.dumps(calibration)) + "/"
    return f"{backend}/{dtype}/{digest}{_engine_version(backend)}"


def export_dir():
    """``SKBERT_EXPORT_DIR``, or ``skbert/exports`` in the user cache directory."""
    configured = os.environ.get("SKBERT_EXPORT_DIR")
    if configured:
        return Path(os.path.expanduser(configured))
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "skbert" / "exports"


def model_records():
    """Where :func:`skbert._loading.load` records the fingerprints of the models that the
    engines run, so that a process whose exports are stored does not load the torch model."""
    return export_dir() / "models"


@dataclass(frozen=True)
class Engine:
    """A CPU engine running one :class:`skbert._loading.LoadedModel`: ``engine(depth, states,
    pooler)`` is its :func:`graph` cut after layer ``depth``."""

    loaded: object
    backend: str
    dtype: str
    calibration: tuple | None

    @property
    def config(self):
        return self.loaded.config

    def __call__(self, depth, states, pooler):
        return graph(self.loaded, self.backend, self.dtype, self.calibration, depth, states,
                     pooler)


def graph(loaded, backend, dtype, calibration, depth, states, pooler):
    """The compiled graph of the model of ``loaded`` cut after layer ``depth``: a callable from
    numpy inputs to ``({layer: hidden states}, pooler output or None)`` as torch tensors.

    Converted from a private copy of the torch model on first use and stored in
    :func:`export_dir`, keyed by the weights fingerprint; loaded from there afterwards
    (without the torch model).
    """
    key = _digest(json.dumps([EXPORT_FORMAT, loaded.fingerprint, backend, dtype, depth,
                              list(states), pooler, calibration, _engine_version(backend)]))
    with _lock:
        found = _graphs.get(key)
        if found is None:
            files = _export(key, loaded, backend, dtype, calibration, depth, states, pooler)
            found = _graphs[key] = _Compiled(backend, dtype, files, states, pooler)
        return found


class _Compiled:
    """A compiled OpenVINO model or an ONNX Runtime session, called by one thread at a time."""

    def __init__(self, backend, dtype, directory, states, pooler):
        self.backend, self.states, self.pooler = backend, list(states), pooler
        self._lock = threading.Lock()
        if backend == "openvino":
            import openvino

            hint = "bf16" if dtype == "bfloat16" else "f32"  # int8: f32 around the int8 ops
            core = openvino.Core()
            self._model = core.compile_model(core.read_model(directory / "model.xml"), "CPU",
                                             {"INFERENCE_PRECISION_HINT": hint})
            self._names = {port.any_name for port in self._model.inputs}
        else:
            import onnxruntime

            self._model = onnxruntime.InferenceSession(str(directory / "model.onnx"),
                                                       providers=["CPUExecutionProvider"])
            self._names = {node.name for node in self._model.get_inputs()}

    def __call__(self, inputs):
        import torch

        feed = {name: inputs[name].numpy() for name in self._names}
        with self._lock:
            if self.backend == "openvino":
                results = self._model(feed)
                outputs = [np.array(results[index]) for index in range(len(results))]
            else:
                outputs = self._model.run(None, feed)
        tensors = [torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32))
                   for out in outputs]
        hidden = dict(zip(self.states, tensors))
        return hidden, tensors[-1] if self.pooler else None


def _module(model, states, pooler):
    """The torch module that the engines convert: the model inputs by name in, the hidden
    states of ``states`` (and the pooler output) out, as a tuple."""
    import torch

    class Graph(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            outputs = self.model(input_ids=input_ids, attention_mask=attention_mask,
                                 output_hidden_states=True, **extra)
            chosen = [outputs.hidden_states[layer] for layer in states]
            if pooler:
                chosen.append(outputs.pooler_output)
            return tuple(chosen)

    return Graph().eval()


def _export(key, loaded, backend, dtype, calibration, depth, states, pooler):
    """The directory of the export ``key``: found and verified, or converted and stored."""
    root = export_dir()
    target = root / key
    if target.is_dir():
        problem = _verify(target)
        if problem is None:
            return target
        warnings.warn(f"skbert's export {str(target)!r} is damaged ({problem}): converting the "
                      "model again.", RuntimeWarning, stacklevel=6)
        shutil.rmtree(target, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    try:
        _convert(staging, loaded.model, loaded.tokenizer, backend, dtype, calibration, depth,
                 states, pooler)
        manifest = {path.name: _file_digest(path) for path in staging.iterdir()}
        (staging / "manifest.json").write_text(json.dumps(manifest))
        try:
            os.replace(staging, target)
        except OSError:  # another process stored it meanwhile: theirs is as good
            if _verify(target) is not None:
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _verify(directory):
    """What is wrong with an export directory, in words; None if nothing."""
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
        for name, digest in manifest.items():
            if _file_digest(directory / name) != digest:
                return f"{name} does not match its checksum"
    except (OSError, ValueError, AttributeError) as exc:
        return str(exc) or type(exc).__name__
    return None


def _convert(directory, model, tokenizer, backend, dtype, calibration, depth, states, pooler):
    """Convert (and quantize) a private copy of ``model`` cut after ``depth`` into ``directory``.

    The float32 conversion is checked against torch on a padded batch of
    texts of several lengths first: an architecture that an engine converts
    into something else (NaN from a traced sliding-window mask, say) is
    refused rather than served.
    """
    import torch

    from skbert._encoding import shallow_view

    # A private copy: exporting traces the module, and a traced shared model was seen to give
    # other outputs afterwards.
    private = copy.deepcopy(model).float().cpu().eval()
    module = _module(shallow_view(private, depth), states, pooler)
    limit = min(tokenizer.model_max_length,
                getattr(model.config, "max_position_embeddings", tokenizer.model_max_length))

    def inputs(texts, max_length=limit):
        encoded = tokenizer(texts, padding=True, truncation=True, max_length=max_length,
                            return_tensors="np")
        # In the order of the graph's arguments: the ONNX export passes them by position.
        return {name: encoded[name] for name in _INPUT_NAMES if name in encoded}

    example = inputs(["a first example", "and a somewhat longer second example"])
    check = inputs(_CHECK_TEXTS, min(limit, 64))
    # int8: OpenVINO calibrates on these; ONNX Runtime quantizes dynamically (None).
    samples = None if calibration is None else [inputs([text]) for text in calibration]
    quantize = dtype == "int8"
    try:
        # Tracing reads every attribute of the model: transformers warns of a loss_type it
        # does not know (an encoder has none) and the tracer of data-dependent branches.
        with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings(), \
                _quiet("transformers", logging.ERROR):
            warnings.simplefilter("ignore")
            expected = [output.numpy() for output in module(
                **{name: torch.as_tensor(values) for name, values in check.items()})]
            if backend == "openvino":
                _convert_openvino(directory, module, example, check, expected, samples)
            else:
                _convert_onnx(directory, module, example, check, expected, quantize)
    except ImportError:
        raise
    except Exception as exc:  # the converters raise types of their own
        raise ValueError(f"backend={backend!r} cannot convert {type(model).__name__} "
                         f"({type(exc).__name__}: {exc}); use backend='torch' for it.") from exc


# Texts of several lengths, padded together: the converted graph must agree with torch on them.
_CHECK_TEXTS = ["a", "the cat sat on the mat", " ".join(["a long sentence of many words"] * 10)]


def _check(got, expected):
    """Refuse a conversion whose float32 outputs are not torch's (relative to their scale)."""
    for index, (new, old) in enumerate(zip(got, expected)):
        error = np.abs(np.asarray(new) - old).max() / max(1.0, np.abs(old).max())
        if not error <= 1e-4:  # NaN fails too
            raise ValueError(f"its output {index} differs from torch's by {error:.3g} (relative) "
                             "on a padded batch")


def _convert_openvino(directory, module, example, check, expected, samples):
    import openvino

    converted = openvino.convert_model(module, example_input=example)
    compiled = openvino.Core().compile_model(converted, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    results = compiled({port.any_name: check[port.any_name] for port in compiled.inputs})
    _check([results[index] for index in range(len(expected))], expected)
    if samples is not None:
        import nncf

        # NNCF draws progress bars (rich, on standard output) and logs each step at INFO level.
        with _quiet("nncf"), contextlib.redirect_stdout(io.StringIO()):
            converted = nncf.quantize(converted, nncf.Dataset(samples),
                                      model_type=nncf.ModelType.TRANSFORMER,
                                      subset_size=len(samples))
    openvino.save_model(converted, directory / "model.xml", compress_to_fp16=False)


def _convert_onnx(directory, module, example, check, expected, quantize):
    import onnxruntime
    import torch

    names = list(example)
    path = directory / ("fp32.onnx" if quantize else "model.onnx")
    with contextlib.redirect_stdout(None):
        torch.onnx.export(module, tuple(torch.as_tensor(example[name]) for name in names), path,
                          input_names=names, dynamo=False,
                          dynamic_axes={name: {0: "batch", 1: "tokens"} for name in names})
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    _check(session.run(None, {node.name: check[node.name] for node in session.get_inputs()}),
           expected)
    if quantize:  # int8 weights; activations quantized per batch from their own range
        from onnxruntime.quantization import QuantType, quantize_dynamic

        advice = _NoPreprocessingAdvice()
        logging.getLogger().addFilter(advice)
        try:
            quantize_dynamic(path, directory / "model.onnx", weight_type=QuantType.QInt8)
        finally:
            logging.getLogger().removeFilter(advice)
        path.unlink()


@contextlib.contextmanager
def _quiet(name, level=logging.WARNING):
    """Only records of ``level`` and above from the logger ``name``, for the duration."""
    logger = logging.getLogger(name)
    previous = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(previous)


class _NoPreprocessingAdvice(logging.Filter):
    """ONNX Runtime's quantizer advises, on the root logger, a shape-inference pass that
    dynamic quantization of these graphs does not need."""

    def filter(self, record):
        return "pre-processing before quantization" not in record.getMessage()


def _engine_version(backend):
    from importlib.metadata import version

    return "torch" if backend == "torch" else version(_EXTRAS[backend][0])


def _digest(text):
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _file_digest(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()
