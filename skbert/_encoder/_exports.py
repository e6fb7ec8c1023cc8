"""The CPU engines' graphs: conversion, its check against torch, exports and compiled graphs.

An export is the encoder of one model cut after one layer, converted (and
quantized) for OpenVINO or ONNX Runtime, kept in :func:`export_dir` under a
key that names everything its outputs depend on, with a checksum of each file,
so that a second process or a clone loads it instead of converting again.
:class:`Records` keeps, beside the exports, the fingerprints of the models
converted, so that a process whose exports are stored needs no torch weights.
What is written there is written atomically with modes from the umask
(:mod:`skbert._encoder._files`): a directory shared by several users works for each; one
that cannot be written costs one warning, and the converted model runs from
memory.

Nothing here changes what other threads print or raise while converting
(standard output, warning filters, logger levels): the records that a
conversion logs and nobody needs, and the warnings that tracing emits and the
conversion check answers, are filtered for the converting thread only, and
conversions of one key wait for each other while every other engine runs on.
"""

import contextlib
import copy
import functools
import hashlib
import io
import json
import logging
import os
import re
import shutil
import threading
import warnings
from pathlib import Path

import numpy as np

from skbert import _compat
from skbert._encoder import _files, _loading

# Raise it when the files of an export or a record change: those of another version are
# not found, and converted again.
EXPORT_FORMAT = "skbert-export-v3"
_INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
# Compiled graphs kept in memory (least recently used first out): a grid over layers with
# cache=False compiles one per depth; an evicted one loads again from its export.
MAX_GRAPHS = 8


@functools.cache
def package_versions(*packages):
    """``{package: installed version}``."""
    from importlib.metadata import version

    return {package: version(package) for package in packages}


def export_dir():
    """``SKBERT_EXPORT_DIR``, or ``skbert/exports`` in the user cache directory."""
    configured = os.environ.get("SKBERT_EXPORT_DIR")
    if configured:
        return Path(os.path.expanduser(configured))
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "skbert" / "exports"


class Records:
    """Fingerprints of the models the CPU engines ran, one JSON file per set of model files
    (a digest of config.json and the weight files), so that a process whose exports are
    stored reads only config and tokenizer; the weights load on first use, checked against
    the recorded fingerprint. A record that is missing, damaged or not writable costs a
    load, never a result."""

    def __init__(self, folder):
        self.folder = folder

    def find(self, source, revision, dtype, device, stamp):
        files = _files_digest(source, revision, dtype)
        try:
            facts = json.loads((self.folder / f"{files}.json").read_text())
        except (OSError, ValueError, TypeError):
            return None
        if not (files and isinstance(facts, dict) and facts.get("files") == files
                and isinstance(facts.get("fingerprint"), str)
                and re.fullmatch("[0-9a-f]{32}", facts["fingerprint"])
                and isinstance(facts.get("has_pooler"), bool)):
            return None  # damaged or foreign: the model is loaded and the record written again
        fingerprint = facts["fingerprint"]

        def checked_model():
            model = _loading.load_model(source, revision, dtype)
            found = _loading.model_fingerprint(model)
            if found != fingerprint:  # saved over since, or a wrong record
                raise ValueError(f"The weights of {source!r} changed since they were "
                                 f"fingerprinted {fingerprint}: found {found}. Fit again to "
                                 "use the current model.")
            return model.to(device)

        return _loading.without_weights(source, revision, fingerprint, facts["has_pooler"],
                                        stamp, checked_model)

    def write(self, source, revision, dtype, loaded):
        """Record the fingerprint of the files as read now (a hub model: downloaded)."""
        files = _files_digest(source, revision, dtype)
        if files is None:
            return
        facts = {"files": files, "fingerprint": loaded.fingerprint,
                 "has_pooler": loaded.has_pooler}
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with _files.atomic_file(self.folder / f"{files}.json", text=True) as file:
                json.dump(facts, file)
        except OSError as exc:
            _cannot_write(exc, "the next process loads the model's weights again")


def _files_digest(source, revision, dtype):
    """A digest of what loading ``source`` in ``dtype`` reads into the model: config.json and
    the weight files (the safetensors ones where there are any, as transformers prefers
    them), with the record format and the versions of torch and transformers; None when
    they cannot be read."""
    folder = source if os.path.isdir(source) else _hub_folder(source, revision)
    try:
        names = sorted(os.listdir(folder)) if folder else []
        weights = ([name for name in names if name.endswith(".safetensors")]
                   or [name for name in names if name.endswith(".bin")])
        if "config.json" not in names or not weights:
            return None
        files = hashlib.sha256()  # the fastest of hashlib's where CPUs have SHA instructions
        files.update(json.dumps([EXPORT_FORMAT, dtype,
                                 package_versions("torch", "transformers")]).encode())
        for name in ["config.json", *weights, *(n for n in names if n.endswith(".index.json"))]:
            files.update(name.encode() + b"\0")
            with open(os.path.join(folder, name), "rb") as file:
                while block := file.read(1 << 20):
                    files.update(block)
    except OSError:
        return None
    return files.hexdigest()[:32]


def _hub_folder(source, revision):
    """The local snapshot folder of a hub model, resolved as transformers resolves it."""
    path = _compat.cached_model_file(source, "config.json", revision)
    return None if path is None else os.path.dirname(path)


_graphs = {}  # export key -> compiled graph, least recently used first
_converting = {}  # export key -> the lock of its conversion, while one runs
_registry = threading.Lock()  # guards the two dicts only: never held through a conversion
# The steps of a conversion that are not thread-safe, one at a time in the process, both
# engines' under one lock as they share torch's tracer: torch.onnx.export keeps its state in
# globals ("GLOBALS.in_onnx_export must be False" in a second thread), torch.jit's tracing
# under OpenVINO's convert_model a global module map ("Couldn't get TorchScript module by
# tracing"). NNCF's calibration is held too: its progress bars share rich's global console,
# and it is not documented as thread-safe (two ran at once here without error, without a
# terminal). Compiling and the check against torch run in parallel: OpenVINO's Core and ONNX
# Runtime's sessions are thread-safe.
_TRACING = threading.Lock()


def graph(engine, depth, states, pooler, verbose=False):
    """The compiled graph of ``engine``'s model cut after layer ``depth``: a callable from
    model inputs to ``({layer: hidden states}, pooler output or None)`` as torch tensors.

    Converted from a private copy of the torch model on first use and stored
    in :func:`export_dir`, keyed by everything that decides its outputs; loaded
    from there afterwards (without the torch model). Conversions of one key
    wait for each other; other keys, converting or converted, do not wait.
    Only with ``verbose`` does an int8 calibration show NNCF's progress bars.
    """
    key = digest(json.dumps([EXPORT_FORMAT, engine.loaded.fingerprint, engine.tag, depth,
                              list(states), pooler]))
    while True:
        with _registry:
            found = _graphs.get(key)
            if found is not None:
                _graphs[key] = _graphs.pop(key)  # the most recently used now
                return found
            lock = _converting.setdefault(key, threading.Lock())
        with lock:
            with _registry:
                if key in _graphs or _converting.get(key) is not lock:
                    continue  # another thread finished it meanwhile
            try:
                found = _Compiled(engine.backend, engine.dtype, _artifact(
                    key, engine, depth, states, pooler, verbose), states, pooler)
            finally:
                with _registry:
                    _converting.pop(key, None)
            with _registry:
                _graphs[key] = found
                while len(_graphs) > MAX_GRAPHS:
                    del _graphs[next(iter(_graphs))]
            return found


class _Compiled:
    """A compiled OpenVINO model or an ONNX Runtime session.

    Made from an export directory, or from the converted model in memory
    (an ``openvino.Model``, or the bytes of an ONNX file). OpenVINO runs one
    infer request per calling thread, whose outputs are returned without a
    copy: they are valid until the same thread's next call (the records of a
    batch are computed before the next batch runs). Copying the seven hidden
    states of a cache record out of every batch cost about 2% of a float32
    transform of 3,424 sentences. An ONNX Runtime session is called by one
    thread at a time, and its threads sleep between calls.
    """

    def __init__(self, backend, dtype, artifact, states, pooler):
        self.backend, self.states, self.pooler = backend, list(states), pooler
        self._lock, self._requests = threading.Lock(), threading.local()
        if backend == "openvino":
            import openvino

            hint = "bf16" if dtype == "bfloat16" else "f32"  # int8: f32 around the int8 ops
            config = {"INFERENCE_PRECISION_HINT": hint}
            if dtype == "int8":
                # The plugin keeps prepared kernels per input shape (up to 5,000): one int8
                # transform of 20,000 texts held 138 MB beyond its output with them, 91
                # without, at the same speed. (float32 held more without: 68 MB vs 54.)
                config["CPU_RUNTIME_CACHE_CAPACITY"] = "0"
            core = openvino.Core()
            model = core.read_model(artifact / "model.xml") if isinstance(artifact, Path) \
                else artifact
            self._model = core.compile_model(model, "CPU", config)
            self._names = {port.any_name for port in self._model.inputs}
        else:
            import onnxruntime

            model = str(artifact / "model.onnx") if isinstance(artifact, Path) else artifact
            options = onnxruntime.SessionOptions()
            # Its threads otherwise spin for work after each run, on the cores that the
            # records of the batch are computed on next: they took 1.0-2.4 s instead of
            # 0.7-0.9 over 3,424 sentences (benchmarks/README.md, 2026-12-02 (night)).
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            self._model = onnxruntime.InferenceSession(model, options,
                                                       providers=["CPUExecutionProvider"])
            self._names = {node.name for node in self._model.get_inputs()}

    def __call__(self, inputs):
        import torch

        feed = {name: inputs[name].numpy() for name in self._names}
        if self.backend == "openvino":
            request = getattr(self._requests, "request", None)
            if request is None:
                request = self._requests.request = self._model.create_infer_request()
            results = request.infer(feed, share_outputs=True)
            outputs = [results[index] for index in range(len(results))]
        else:
            with self._lock:
                outputs = self._model.run(None, feed)
        tensors = [torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32))
                   for out in outputs]
        hidden = dict(zip(self.states, tensors))
        return hidden, tensors[-1] if self.pooler else None


def _artifact(key, engine, depth, states, pooler, verbose):
    """The export ``key``: its verified directory, or the model converted now (and stored
    where it can be: a directory that cannot be written costs a warning, not the result)."""
    target = export_dir() / key
    if target.is_dir():
        problem = _verify(target)
        if problem is None:
            return target
        warnings.warn(f"skbert's export {str(target)!r} is damaged ({problem}): converting the "
                      "model again.", RuntimeWarning, stacklevel=7)
    converted = _convert(engine, depth, states, pooler, verbose)
    try:
        _store(target, engine.backend, converted)
    except OSError as exc:
        _cannot_write(exc, "converted models run from memory, and the next process converts "
                           "them again")
    return converted


_unwritable = set()  # (export directory, error) already warned of in this process


def _cannot_write(exc, consequence):
    """Warn, once per process, export directory and kind of error, that the export directory
    cannot be written (read-only, full, another user's): what it would have saved is lost,
    nothing computed is."""
    root = export_dir()
    if (root, type(exc), exc.errno) in _unwritable:
        return
    _unwritable.add((root, type(exc), exc.errno))
    warnings.warn(f"skbert cannot write to its export directory {str(root)!r} ({exc}): "
                  f"{consequence}. Set SKBERT_EXPORT_DIR to a writable directory to keep "
                  "them.", RuntimeWarning, stacklevel=3)


def _store(target, backend, converted):
    """Write a converted model and its manifest of checksums into ``target``, atomically.

    An export that another process stored meanwhile is kept when it verifies,
    replaced when it does not.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(2):
        with _files.staged_directory(target) as staged:
            if backend == "openvino":
                import openvino

                try:
                    openvino.save_model(converted, staged.path / "model.xml",
                                        compress_to_fp16=False)
                except RuntimeError as exc:  # OpenVINO's own type for a failed write
                    raise OSError(str(exc)) from exc
            else:
                (staged.path / "model.onnx").write_bytes(converted)
            manifest = {path.name: _file_digest(path) for path in staged.path.iterdir()}
            (staged.path / "manifest.json").write_text(json.dumps(manifest))
        if staged.placed or _verify(target) is None:
            return
        if attempt == 0:
            shutil.rmtree(target)  # damaged: ours replaces it (another user's: an OSError)


def _verify(directory):
    """What is wrong with an export directory, in words; None if nothing."""
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
        for name, expected in manifest.items():
            if _file_digest(directory / name) != expected:
                return f"{name} does not match its checksum"
    except (OSError, ValueError, AttributeError) as exc:
        return str(exc) or type(exc).__name__
    return None


# Tolerance of the conversion check on every hidden state, relative to the largest magnitude
# of the output (absolute below 1), as the documentation states it. Measured on
# all-MiniLM-L6-v2 (6 layers) at 512 tokens: OpenVINO 1.6e-5, ONNX Runtime 2.5e-5 (pooled
# features stay within 1e-6); at 7 tokens 5e-7. The error grows with depth and length:
# room for 24-layer models at their limit.
TOLERANCE = 1e-4


def _convert(engine, depth, states, pooler, verbose=False):
    """Convert (and quantize) a private copy of ``engine``'s model cut after ``depth``: an
    ``openvino.Model``, or the bytes of an ONNX file; NNCF's progress bars shown with
    ``verbose`` only.

    The float32 conversion is checked against torch first, on padded batches
    of every length up to the model's limit (the window any setting reads: a
    sliding-window mask or position buckets change with length), output by
    output: an architecture that an engine converts into something else is
    refused rather than served.
    """
    import torch

    from skbert._encoder._encoding import TOKENIZER_LOCK, shallow_view

    loaded, backend = engine.loaded, engine.backend
    model, tokenizer = loaded.model, loaded.tokenizer
    # A private copy: exporting traces the module, and a traced shared model was seen to give
    # other outputs afterwards.
    private = copy.deepcopy(model).float().cpu().eval()
    module = _module(shallow_view(private, depth), states, pooler)
    limit = int(_loading.length_limit(tokenizer, model.config))

    def inputs(rows, types=None):
        with TOKENIZER_LOCK:
            padded = tokenizer.pad({"input_ids": rows}, return_tensors="np")
        # In the order of the graph's arguments: the ONNX export passes them by position.
        names = [name for name in _INPUT_NAMES if name in tokenizer.model_input_names]
        padded["attention_mask"] = padded["attention_mask"].astype(np.int64)
        if "token_type_ids" in names:  # a text pair's second text is of type 1
            padded["token_type_ids"] = np.zeros_like(padded["input_ids"])
            for row, row_types in enumerate(types or []):
                padded["token_type_ids"][row, :len(row_types)] = row_types
        return {name: padded[name].astype(np.int64) for name in names}

    with TOKENIZER_LOCK:
        words = tokenizer(" ".join(["the cat sat on a mat near 42 doors"] * limit),
                          truncation=True, max_length=limit)["input_ids"]
        # A calibration text pair is encoded as a pair: int8 ranges of what a reranker reads.
        calibration = None if engine.calibration is None else [
            tokenizer(*((text,) if isinstance(text, str) else text), truncation=True,
                      max_length=limit, return_token_type_ids=True)
            for text in engine.calibration]

    def rows(lengths):  # the special tokens of both ends around the first text tokens
        return [words[:length - 1] + words[-1:] for length in lengths]

    samples = None if calibration is None else [
        inputs([encoded["input_ids"]], [encoded["token_type_ids"]]) for encoded in calibration]
    example = inputs(rows([8, 12]))
    checks = [inputs(rows([limit, limit // 2, min(limit, 130), 3])), inputs(rows([7]))]
    if samples is not None:
        import nncf  # noqa: F401 (before the quiet below: NNCF adds its log handler when imported)

    with torch.inference_mode(False), torch.no_grad(), _this_thread_quiet():
        # Outside the try below: torch failing on its own model is not the engine's failure.
        expected = [[output.numpy() for output in module(
            **{name: torch.as_tensor(values) for name, values in check.items()})]
            for check in checks]
        try:
            if backend == "openvino":
                return _convert_openvino(module, example, checks, expected, samples, verbose)
            return _convert_onnx(module, example, checks, expected)
        except (ImportError, OSError, MemoryError):
            raise
        except Exception as exc:  # the converters raise types of their own; kept as the cause
            raise ValueError(f"backend={backend!r} cannot convert {type(model).__name__} "
                             f"({type(exc).__name__}: {exc}); use backend='torch' for "
                             "it.") from exc


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


def _check(run, checks, expected):
    """Refuse a conversion whose float32 outputs are not torch's: every output of every
    check batch within :data:`TOLERANCE`, relative to the output's scale."""
    for check, wanted in zip(checks, expected):
        got = run(check)
        if len(got) != len(wanted):
            raise ValueError(f"it returns {len(got)} outputs where torch returns {len(wanted)}")
        for index, (new, old) in enumerate(zip(got, wanted)):
            error = np.abs(np.asarray(new) - old).max() / max(1.0, np.abs(old).max())
            if not error <= TOLERANCE:  # NaN fails too
                raise ValueError(f"its output {index} differs from torch's by {error:.3g} "
                                 f"(relative) on a padded batch of {old.shape[1]} tokens")


def _convert_openvino(module, example, checks, expected, samples, verbose):
    import openvino

    with _TRACING, _expected_warnings_hidden():
        converted = openvino.convert_model(module, example_input=example)
    compiled = openvino.Core().compile_model(converted, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})

    def run(check):
        results = compiled({port.any_name: check[port.any_name] for port in compiled.inputs})
        return [results[index] for index in range(len(results))]

    _check(run, checks, expected)
    if samples is None:
        return converted
    import nncf

    with _TRACING, contextlib.nullcontext() if verbose else _progress_hidden():
        return nncf.quantize(converted, nncf.Dataset(samples),
                             model_type=nncf.ModelType.TRANSFORMER, subset_size=len(samples))


# The rich Progress classes that NNCF's track() builds its bars from, by their names in NNCF's
# module (looked up there each time a bar is made).
_NNCF_PROGRESS = ("Progress", "WeightedProgress")


@contextlib.contextmanager
def _progress_hidden():
    """Hide the progress bars that NNCF draws in this thread ("Statistics collection",
    "Applying Smooth Quant", ...), the bars of other threads shown as before.

    NNCF offers no switch for them: ``nncf.set_log_level`` sets its logger's
    level, and its bars are rich displays on rich's global console, whose
    ``quiet`` would also silence what other threads print there (a
    ``RichHandler``'s log records). So the Progress classes of NNCF's bars are
    replaced, in NNCF's module only and until this exits, by subclasses that
    are built disabled in this thread (nothing drawn, no refresh thread). Held
    under :data:`_TRACING`, as every calibration here is: no other conversion
    replaces them meanwhile.
    """
    from nncf.common.logging import track_progress

    thread = threading.get_ident()
    replaced = {name: getattr(track_progress, name, None) for name in _NNCF_PROGRESS}
    replaced = {name: original for name, original in replaced.items()
                if isinstance(original, type)}
    for name, original in replaced.items():
        setattr(track_progress, name, _disabled_in(original, thread))
    try:
        yield
    finally:
        for name, original in replaced.items():
            setattr(track_progress, name, original)


def _disabled_in(progress_class, thread):
    """A subclass of the rich Progress class ``progress_class`` whose instances made in
    ``thread`` are disabled."""

    class Disabled(progress_class):
        def __init__(self, *args, **kwargs):
            if threading.get_ident() == thread:
                kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return Disabled


def _convert_onnx(module, example, checks, expected):
    import onnxruntime
    import torch

    names = list(example)
    buffer = io.BytesIO()
    with _TRACING, _expected_warnings_hidden():
        torch.onnx.export(module, tuple(torch.as_tensor(example[name]) for name in names),
                          buffer, input_names=names, dynamo=False,
                          dynamic_axes={name: {0: "batch", 1: "tokens"} for name in names})
    session = onnxruntime.InferenceSession(buffer.getvalue(),
                                           providers=["CPUExecutionProvider"])
    _check(lambda check: session.run(None, {node.name: check[node.name]
                                            for node in session.get_inputs()}),
           checks, expected)
    return buffer.getvalue()


class _ThisThread(logging.Filter):
    """Drops the records below ``level`` that one thread logs on logger ``name`` or its
    children."""

    def __init__(self, name, level):
        super().__init__(name)
        self.thread, self.level = threading.get_ident(), level

    def filter(self, record):
        # logging.Filter's own test says whether the record is of ``name`` or a child of it.
        return (record.thread != self.thread or record.levelno >= self.level
                or not super().filter(record))


# What a conversion logs and nobody needs: NNCF logs each step at INFO level; transformers
# warns, while the model is traced, of a loss_type that an encoder does not have.
_QUIET = {"nncf": logging.WARNING, "transformers": logging.ERROR}
_quieting = threading.Lock()  # our edits of handlers' filter lists, one at a time


@contextlib.contextmanager
def _this_thread_quiet():
    """Hide :data:`_QUIET` records for this thread only: filters rather than levels, so that
    other threads log as before. The warnings of tracing are :func:`_expected_warnings_hidden`'s.

    The filters sit on the handlers: Python consults a logger's filters for the records
    logged on it only, a handler's for every record it is given, those that children
    propagate included (transformers logs on one logger per module, some created while
    converting). They sit on the loggers of those names that exist too, so that a record
    logged there is dropped before it reaches any handler, one added meanwhile included:
    OpenVINO's conversion adds one to the root logger while it runs, which transformers'
    records reach where transformers propagates (it does when the environment sets ``CI``).
    A filter list is replaced, not changed in place: another thread filtering a record
    meanwhile goes on over the old list (a removal in place skips an element of a loop over
    it).
    """
    quiet = [_ThisThread(name, level) for name, level in _QUIET.items()]
    filterers = {handler: None for name in _QUIET for handler in _handlers_reached(name)}
    filterers.update({logger: None for name in _QUIET for logger in _loggers(name)})
    with _quieting:
        for filterer in filterers:
            filterer.filters = [*filterer.filters, *quiet]
    try:
        yield
    finally:
        with _quieting:
            for filterer in filterers:
                filterer.filters = [kept for kept in filterer.filters if kept not in quiet]


def _loggers(name):
    """The loggers created so far that are ``name`` or its children."""
    return [logger for logger_name, logger in logging.root.manager.loggerDict.copy().items()
            if isinstance(logger, logging.Logger) and f"{logger_name}.".startswith(f"{name}.")]


def _handlers_reached(name):
    """The handlers that the records of logger ``name`` and its children reach, as far as they
    are created: none is created here (NNCF, imported after, would keep a logger of the wrong
    class), and Python's last resort for records that reach none is one of them."""
    handlers = [] if logging.lastResort is None else [logging.lastResort]
    for logger in _loggers(name):
        while logger is not None:
            handlers.extend(logger.handlers)
            logger = logger.parent if logger.propagate else None
    return handlers


def _expected_warnings():
    """The warnings that tracing a model emits and that nobody needs to see, as (category,
    module, message) patterns, matched from the start of the module's name and of the text."""
    import torch

    return [
        # Each says that a Python value read from a tensor became a constant of the trace, which
        # may not generalize to other inputs: the check at every length and at two batch sizes
        # is what answers that, for any model, so the category is enough, whatever the module.
        (torch.jit.TracerWarning, None, ""),
        # Deprecated in transformers 5; torch.jit reads every property of the modules that it
        # traces (OpenVINO's conversion), the model's code does not use it.
        (FutureWarning, r"transformers\.", r"`is_gradient_checkpointing` is deprecated"),
        # The TorchScript tracers that the engines convert with, deprecated for torch.export:
        # no user can act on it, and a tracer removed fails every conversion and its tests.
        (DeprecationWarning, r"torch\.jit\.", r"`torch\.jit\.trace(_method)?` is "),
        (DeprecationWarning, None, r"You are using the legacy TorchScript-based ONNX export"),
        (DeprecationWarning, r"torch\.onnx\.",
         r"The feature will be removed\. Please remove usage of this function"),
        # The exported graph is wrong where indices are negative: its outputs would differ from
        # torch's in the check.
        (UserWarning, r"torch\.onnx\.", r"Exporting aten::index operator of advanced indexing"),
    ]


class _InThisThread:
    """The message pattern of a warning filter that matches in one thread only, until
    :meth:`close`: both of Python's warnings implementations call ``match`` of a filter's
    message, as of a compiled regex."""

    def __init__(self, pattern):
        self.pattern, self._regex = pattern, re.compile(pattern)
        self._thread = threading.get_ident()

    def match(self, text):
        return self._thread == threading.get_ident() and self._regex.match(text) is not None

    def close(self):
        self._thread = None


_filtering = threading.Lock()  # our edits of the warning filters, one at a time


@contextlib.contextmanager
def _expected_warnings_hidden():
    """Ignore :func:`_expected_warnings` in this thread only, the same warnings of other
    threads shown (or raised) as before.

    Python's warning filters are one list for the process (before 3.14), so the filters
    added here sit at its head while this runs, and match in this thread only: other threads
    pass over them. Not ``warnings.catch_warnings(record=True)`` around the conversion: it
    would take every thread's warnings meanwhile (to be shown again later, out of order and
    past their once-per-place registries), and as it is not thread-safe, one entered or left
    in another thread meanwhile could leave its recorder in place for good, every later
    warning of the process swallowed. Such a ``catch_warnings`` (it saves and restores the
    whole list) may keep the filters added here beyond the conversion: closed, they match
    nothing. The list is edited in place, not replaced: a filter that another thread adds
    meanwhile is kept.
    """
    added = [("ignore", _InThisThread(message), category,
              None if module is None else re.compile(module), 0)
             for category, module, message in _expected_warnings()]
    with _filtering:
        filters = warnings.filters
        filters[:0] = added
    try:
        yield
    finally:
        for entry in added:
            entry[1].close()
        with _filtering:
            # The list of now too, where a catch_warnings of another thread copied ours into it.
            for current in {id(filters): filters, id(warnings.filters): warnings.filters}.values():
                for entry in added:
                    with contextlib.suppress(ValueError):  # one step each: nothing else lost
                        current.remove(entry)


def digest(text):
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _file_digest(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()
