"""The encoders a batch runs through: torch, OpenVINO and ONNX Runtime, behind one interface.

:func:`load` picks the engine once, at ``fit``: an :class:`Engine` holds the
loaded model (:class:`skbert._encoder._loading.LoadedModel`), the backend, the dtype
and the calibration texts, says what the cache key must say of it
(:attr:`Engine.tag`) and gives, for a device, the runner that
:func:`skbert._encoder._encoding.forward_parts` calls: ``runner.encoder(depth, read,
pooler)`` is a callable from model inputs to ``({layer: hidden states},
pooler output or None)`` for the encoder cut after layer ``depth``, and
``runner.torch_threads()`` the context that the torch work around the batches
runs in (one thread beside a CPU engine). Nothing before (tokenization, the
cache) or after (:func:`skbert._encoder._features.compute_parts`) knows which backend
runs.

The CPU engines run graphs converted from a private copy of the torch model,
once per export key, and stored for other processes and clones
(:mod:`skbert._encoder._exports`); a process whose exports are stored does not even load
the torch weights.

Precision: ``"float32"`` is pinned to f32 (OpenVINO's CPU plugin otherwise
computes in bf16 where the CPU has it); ``"bfloat16"`` is OpenVINO's bf16
hint; ``"int8"`` is OpenVINO with NNCF's static quantization, calibrated on
``calibration`` texts. ONNX Runtime runs float32 only: its dynamic int8 gives
a text features that depend on the other texts of its batch, and no
batch-independent int8 graph of it was faster than its float32 one
(benchmarks/onnx_int8_modes.py).
"""

import contextlib
import copy
import functools
import importlib.util
import json
from dataclasses import dataclass, field

from skbert._encoder import _exports, _loading
from skbert._encoder._onednn import onednn_linears
from skbert._threads import one_openmp_thread

BACKENDS = ("torch", "openvino", "onnx")
# What each CPU engine computes in; torch keeps its own list (skbert._encoder._loading.DTYPES).
ENGINE_DTYPES = {"openvino": ("float32", "bfloat16", "int8"), "onnx": ("float32",)}
_EXTRAS = {"openvino": ("openvino", "nncf"), "onnx": ("onnxruntime", "onnx")}
# Calibration texts for int8 at most: NNCF's own default subset size.
N_CALIBRATION = 300


def versions(backend):
    """The versions of the packages that compute ``backend``'s features: torch and
    transformers for every backend (the CPU engines convert from them), the engine's own."""
    return _exports.package_versions("torch", "transformers", *_EXTRAS.get(backend, ()))


def check_backend(backend, dtype, device):
    """Refuse a backend x dtype x device that no engine runs; find the engine's packages."""
    if backend == "torch":
        if dtype == "int8":
            raise ValueError("dtype='int8' quantizes with a CPU engine: use backend='openvino' "
                             "(static int8, calibrated).")
        return
    if device.type != "cpu":
        raise ValueError(f"backend={backend!r} runs on the CPU, and device resolves to "
                         f"{str(device)!r}: use backend='torch' there.")
    if backend == "onnx" and dtype == "int8":
        raise ValueError(
            "dtype='int8' is not offered with backend='onnx': ONNX Runtime's dynamic int8 "
            "gives a text features that depend on the other texts of its batch, and its "
            "batch-independent (static) int8 runs slower than its float32. Use "
            "backend='openvino' with dtype='int8' (static, calibrated ranges), or "
            "backend='onnx' with dtype='float32'.")
    if dtype not in ENGINE_DTYPES[backend]:
        raise ValueError(f"dtype={dtype!r} is not computed by backend={backend!r}, which offers "
                         f"{', '.join(map(repr, ENGINE_DTYPES[backend]))}.")
    for package in _EXTRAS[backend]:  # found, not imported: NNCF alone takes 0.5 s
        if importlib.util.find_spec(package) is None:
            raise ImportError(f"backend={backend!r} needs {package}: pip install "
                              f"'skbert[{backend}]'")


def resolve_device(backend, device):
    """Where ``backend`` runs for the ``device`` parameter: the CPU engines run on the CPU
    (``"auto"`` resolves there), torch where :func:`skbert._encoder._loading.resolve_device`
    says."""
    return _loading.resolve_device("cpu" if backend != "torch" and device == "auto" else device)


def torch_dtype(backend, dtype):
    """The precision of the torch model: the CPU engines convert it from float32."""
    return dtype if backend == "torch" else "float32"


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
    or the user's list (text pairs calibrate as pairs, as a cross-encoder reads them)."""
    if calibration is None:
        return default_calibration()
    from skbert._validation import check_texts

    texts = fit_texts if calibration == "fit" else check_texts(calibration)
    texts = tuple(dict.fromkeys(texts))[:N_CALIBRATION]
    if not texts:
        raise ValueError(f"calibration={calibration!r} gives no text to calibrate int8 on.")
    return texts


def load(source, revision, device, backend, dtype, calibration=None, fit_texts=None):
    """The :class:`Engine` for ``backend`` x ``dtype`` running the model ``source``.

    ``calibration`` is the parameter (None, "fit" or texts; ``fit_texts`` are
    those of "fit"), read for ``dtype="int8"`` only. A CPU engine's torch
    weights are loaded only when they are needed (to convert, or when the
    model is read), if :class:`_Records` knows their fingerprint.
    """
    check_backend(backend, dtype, device)
    texts = calibration_texts(calibration, fit_texts) if dtype == "int8" else None
    records = None if backend == "torch" else _exports.Records(_exports.export_dir() / "models")
    loaded = _loading.load(source, revision, torch_dtype(backend, dtype), device, records)
    return Engine(loaded, backend, dtype, texts)


@dataclass(frozen=True, eq=False)
class Engine:
    """A loaded model run by ``backend`` in ``dtype``, calibrated on ``calibration`` (int8).

    :attr:`settings` is what a pickle keeps: ``Engine(loaded, **settings)`` brings it back.
    """

    loaded: object
    backend: str
    dtype: str
    calibration: tuple | None = None
    # (str(device), fingerprint) -> the torch model that runs there
    _moved: dict = field(default_factory=dict, repr=False)

    @property
    def settings(self):
        """backend, dtype and calibration texts, as builtins."""
        return {"backend": self.backend, "dtype": self.dtype,
                "calibration": None if self.calibration is None else list(self.calibration)}

    @property
    def model(self):
        return self.loaded.model

    def with_model(self, model):
        """This engine around another torch model (its fingerprint computed anew)."""
        return Engine(self.loaded.with_model(model), self.backend, self.dtype, self.calibration)

    @functools.cached_property
    def tag(self):
        """What a cache key says of the engine besides the model fingerprint: backend,
        dtype, the versions of the packages that compute, and for int8 the calibration
        texts and the tokenizer that made their ids. Equal tags, equal features."""
        parts = [self.backend, self.dtype, versions(self.backend)]
        if self.calibration is not None:
            parts += [self.loaded.tokenizer_fingerprint,
                      _exports.digest(json.dumps(self.calibration))]
        return _exports.digest(json.dumps(parts, sort_keys=True))

    def runner(self, device, verbose=False):
        """What :func:`skbert._encoder._encoding.forward_parts` calls on ``device``; a CPU
        engine's int8 calibration shows its progress with ``verbose`` only."""
        if self.backend != "torch":
            check_backend(self.backend, self.dtype, device)
            return _CompiledRunner(self, verbose)
        return TorchRunner(self._model_on(device))

    def _model_on(self, device):
        """The torch model that runs on ``device``: a copy there where ``loaded.model`` is
        elsewhere (it is shared), on a CPU with AVX-512 with its float32 Linear layers on
        oneDNN (:func:`onednn_linears`)."""
        import torch

        key = (str(device), self.loaded.fingerprint)  # a copy of weights changed since is stale
        if key not in self._moved:
            for stale in [moved for moved in self._moved if moved[1] != key[1]]:
                del self._moved[stale]
            model = self.loaded.model
            if next(model.parameters()).device != device:
                model = copy.deepcopy(model).to(device)
            on_avx512 = torch.backends.cpu.get_cpu_capability().startswith("AVX512")
            self._moved[key] = onednn_linears(model) if device.type == "cpu" and on_avx512 \
                else model
        return self._moved[key]


class TorchRunner:
    """A torch model as a runner: its own device, its layers run only as deep as read."""

    def __init__(self, model):
        self.model, self.config = model, model.config
        self.device = next(model.parameters()).device

    def encoder(self, depth, read, pooler):
        """``inputs -> (hidden states by layer, pooler output)`` of the model run only as deep
        as ``depth``, with the inner hidden states requested only when ``read`` needs them."""
        from skbert._encoder._encoding import shallow_view

        view = shallow_view(self.model, depth)
        top = depth if view is not self.model else self.config.num_hidden_layers  # where it ends
        inner = bool(set(read) - {top})

        def encode(inputs):
            outputs = view(**inputs, output_hidden_states=inner)
            hidden = outputs.hidden_states if inner else {top: outputs.last_hidden_state}
            return hidden, getattr(outputs, "pooler_output", None) if pooler else None

        return encode

    def torch_threads(self):
        """The thread limit of the torch work around the batches: none, torch runs them."""
        return contextlib.nullcontext()


class _CompiledRunner:
    """A CPU engine as a runner: one compiled graph per cut, on the CPU."""

    def __init__(self, engine, verbose=False):
        import torch

        self.engine, self.config, self.device = engine, engine.loaded.config, torch.device("cpu")
        self.verbose = verbose

    def encoder(self, depth, read, pooler):
        return _exports.graph(self.engine, depth, sorted(set(read) | {depth}), pooler,
                              self.verbose)

    def torch_threads(self):
        """The torch work around the batches (inputs, records) in one thread, so that torch's
        threads do not spin on the cores the engine runs on next (:func:`one_openmp_thread`)."""
        return one_openmp_thread()


