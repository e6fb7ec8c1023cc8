"""Conversions in threads: two export keys at once, and the logs of the converting thread only
hidden (issue 41, items 4 and 8); the private transformers arguments behind one function."""

import io
import logging
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest
import torch

from skbert import BertVectorizer, _compat
from skbert._encoder import _exports

openvino = pytest.importorskip("openvino")
pytest.importorskip("onnxruntime")

# How long a tracing call waits for a second one to come in: enough that, were they not
# serialized, the two threads (released together into their conversions) would be inside at
# once, so the test does not pass on luck.
OVERLAP_WAIT = 1.0


@pytest.fixture
def nothing_converted(tmp_path, monkeypatch):
    """An empty export directory and no graph compiled: every transform converts."""
    monkeypatch.setenv("SKBERT_EXPORT_DIR", str(tmp_path / "exports"))
    monkeypatch.setattr(_exports, "_graphs", {})


def most_tracing_at_once(monkeypatch):
    """Wrap both engines' tracing (OpenVINO's convert_model, torch.onnx.export): each call
    waits up to :data:`OVERLAP_WAIT` for another one to be inside. Returns a list whose one
    element becomes the most calls seen inside at once."""
    condition, inside, most = threading.Condition(), [0], [0]

    def wrap(trace):
        def traced(*args, **kwargs):
            with condition:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
                condition.notify_all()
                condition.wait_for(lambda: inside[0] > 1, timeout=OVERLAP_WAIT)
            try:
                return trace(*args, **kwargs)
            finally:
                with condition:
                    inside[0] -= 1

        return traced

    monkeypatch.setattr(openvino, "convert_model", wrap(openvino.convert_model))
    monkeypatch.setattr(torch.onnx, "export", wrap(torch.onnx.export))
    return most


@pytest.mark.parametrize("backends", [("openvino", "openvino"), ("onnx", "onnx"),
                                      ("openvino", "onnx")], ids="+".join)
def test_two_keys_convert_in_two_threads(tiny_model_dir, texts, monkeypatch, nothing_converted,
                                         backends):
    layers = [1, 2]  # two depths of one model: two export keys
    expected = [BertVectorizer(tiny_model_dir, layer=layer, cache=False).fit_transform(texts)
                for layer in layers]
    vectorizers = [BertVectorizer(tiny_model_dir, backend=backend, layer=layer,
                                  cache=False).fit() for backend, layer in zip(backends, layers)]
    most = most_tracing_at_once(monkeypatch)
    together, convert = threading.Barrier(2), _exports._convert

    def released_together(*args):
        together.wait(60)
        return convert(*args)

    monkeypatch.setattr(_exports, "_convert", released_together)
    results = {}

    def run(index):
        try:
            results[index] = vectorizers[index].transform(texts)
        except Exception as exc:  # shown by the assertion below, with the thread it came from
            results[index] = exc

    threads = [threading.Thread(target=run, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    for index in range(2):
        assert isinstance(results[index], np.ndarray), results[index]
        np.testing.assert_allclose(results[index], expected[index], rtol=0, atol=1e-5)
    assert most[0] == 1  # one tracing at a time in the process


def test_a_failed_torch_forward_is_not_blamed_on_the_engine(tiny_model_dir, texts, monkeypatch,
                                                            nothing_converted):
    vectorizer = BertVectorizer(tiny_model_dir, backend="onnx", cache=False).fit()

    def broken(**inputs):
        raise RuntimeError("the model itself fails")

    graph = _exports._module
    monkeypatch.setattr(_exports, "_module", lambda *args: broken)
    with pytest.raises(RuntimeError, match=r"^the model itself fails$"):
        vectorizer.transform(texts)
    monkeypatch.setattr(_exports, "_module", graph)

    def refuse(*args, **kwargs):
        raise RuntimeError("unsupported operation aten::frobnicate")

    monkeypatch.setattr(torch.onnx, "export", refuse)
    with pytest.raises(ValueError, match=r"backend='onnx' cannot convert BertModel") as caught:
        vectorizer.transform(texts)
    assert str(caught.value.__cause__) == "unsupported operation aten::frobnicate"


def logging_state():
    """Levels, handlers and filters of the loggers that a conversion quiets, and of their
    handlers: what the conversion must leave as it found it."""
    names = ["transformers", "transformers.modeling_utils", "nncf"]
    loggers = [logging.getLogger(name) for name in names]
    handlers = {handler for logger in loggers for handler in logger.handlers}
    handlers |= {logging.lastResort, *logging.getLogger().handlers}
    return ([(logger.level, logger.propagate, list(logger.handlers), list(logger.filters))
             for logger in loggers],
            {handler: (handler.level, list(handler.filters)) for handler in handlers})


def printed(monkeypatch, names):
    """What the stream handlers of loggers ``names`` print from now on, to one buffer: each
    holds the standard stream of when it was made, which pytest has since replaced."""
    buffer = io.StringIO()
    for name in names:
        for handler in logging.getLogger(name).handlers:
            # pytest 9.2 and later also attach their capturing handlers (stream handlers too)
            # to every logger that does not propagate: those are not what the library prints.
            if (isinstance(handler, logging.StreamHandler)
                    and not type(handler).__module__.startswith("_pytest")):
                monkeypatch.setattr(handler, "stream", buffer)
    return buffer


def test_a_conversion_logs_nothing_while_other_threads_do(tiny_model_dir, texts, monkeypatch,
                                                          nothing_converted):
    pytest.importorskip("nncf")  # its logger and handler are in place, as when int8 converts
    once = getattr(logging.Logger, "warning_once", None)  # transformers': once per process
    if hasattr(once, "cache_clear"):
        once.cache_clear()  # so that this conversion logs its loss_type message too
    vectorizer = BertVectorizer(tiny_model_dir, backend="openvino", cache=False).fit()
    convert, before = openvino.convert_model, logging_state()

    def log(who):  # on loggers of the libraries' modules, not on their top loggers
        logging.getLogger("transformers.modeling_utils").warning(f"{who} transformers warning")
        logging.getLogger("nncf.quantization").info(f"{who} nncf info")

    def noisy(*args, **kwargs):
        log("converting thread:")
        other = threading.Thread(target=log, args=("other thread:",))
        other.start()
        other.join(60)
        return convert(*args, **kwargs)

    monkeypatch.setattr(openvino, "convert_model", noisy)
    output = printed(monkeypatch, ["transformers", "nncf"])
    vectorizer.transform(texts)
    lines = output.getvalue().splitlines()
    assert len(lines) == 2, lines  # the other thread's, nothing of the conversion (loss_type)
    assert "other thread: transformers warning" in lines[0]
    assert "other thread: nncf info" in lines[1]
    assert logging_state() == before


def test_quieted_records_of_propagating_loggers_reach_no_handler(tiny_model_dir, texts,
                                                                 monkeypatch, nothing_converted,
                                                                 caplog):
    """Where transformers' records propagate to the root logger (pytest's caplog sits there),
    they are dropped at the root's handlers too."""
    monkeypatch.setattr(logging.getLogger("transformers"), "propagate", True)
    vectorizer = BertVectorizer(tiny_model_dir, backend="onnx", cache=False).fit()
    export = torch.onnx.export

    def noisy(*args, **kwargs):
        logging.getLogger("transformers.modeling_utils").warning("converting thread")
        return export(*args, **kwargs)

    monkeypatch.setattr(torch.onnx, "export", noisy)
    with caplog.at_level(logging.WARNING):
        vectorizer.transform(texts)
        logging.getLogger("transformers.modeling_utils").warning("after the conversion")
    # One record per message: pytest 9.2 and later also attach caplog's handler to the loggers
    # that did not propagate when the test began, so a record may reach it twice.
    assert [record.getMessage() for record in dict.fromkeys(caplog.records)
            if record.name.startswith("transformers")] == ["after the conversion"]


# A first conversion in a process of its own, every warning shown from the conversion on
# (as ``python -W always`` would): what a user's terminal gets.
FIRST_CONVERSION = """
import sys, warnings
from skbert import BertVectorizer

backend, dtype = sys.argv[2].split("-")
vectorizer = BertVectorizer(sys.argv[1], backend=backend, dtype=dtype, cache=False).fit()
warnings.simplefilter("always")
print("converting", file=sys.stderr, flush=True)
vectorizer.transform(["the cat sat on the mat", "a dog"])
"""


@pytest.mark.parametrize("ci", ["", "true"], ids=["no CI", "CI=true"])
@pytest.mark.parametrize("engine", ["openvino-float32", "openvino-int8", "onnx-float32"])
def test_a_first_conversion_prints_nothing(tiny_model_dir, tmp_path, monkeypatch, engine, ci):
    """Not the tracer's warnings (the check at every length answers them), not the
    deprecations that tracing meets, not a log record, not NNCF's progress bars of an int8
    calibration: nothing on either stream. With ``CI`` set transformers' loggers propagate
    to the root logger, where OpenVINO's conversion adds a handler of its own while it
    runs."""
    if engine.endswith("int8"):
        pytest.importorskip("nncf")
    monkeypatch.setenv("SKBERT_EXPORT_DIR", str(tmp_path / "exports"))
    monkeypatch.setenv("CI", ci)
    done = subprocess.run([sys.executable, "-c", FIRST_CONVERSION, tiny_model_dir, engine],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.split("converting\n", 1)[1] == "", done.stderr
    assert done.stdout == ""
    assert list((tmp_path / "exports").glob("*/manifest.json"))  # it did convert


def test_int8_progress_bars_show_with_verbose_or_in_other_threads(tiny_model_dir, texts,
                                                                  monkeypatch, nothing_converted,
                                                                  capsys):
    """A quiet calibration hides NNCF's bars in its own thread only, and puts NNCF's classes
    back afterwards; ``verbose=True`` shows them."""
    nncf = pytest.importorskip("nncf")
    from nncf.common.logging import track_progress

    classes, quantize = (track_progress.Progress, track_progress.WeightedProgress), nncf.quantize

    def bar_in_another_thread(*args, **kwargs):
        def bar():
            for _ in track_progress.track(range(2), description="another thread's bar"):
                pass

        other = threading.Thread(target=bar)
        other.start()
        other.join(60)
        return quantize(*args, **kwargs)

    monkeypatch.setattr(nncf, "quantize", bar_in_another_thread)
    shown = {}
    for verbose, layer in [(False, 1), (True, 2)]:  # two depths: two conversions
        BertVectorizer(tiny_model_dir, backend="openvino", dtype="int8", layer=layer,
                       cache=False, verbose=verbose).fit().transform(texts)
        shown[verbose] = capsys.readouterr().out
        assert (track_progress.Progress, track_progress.WeightedProgress) == classes
    assert "another thread's bar" in shown[False]
    assert "Statistics collection" not in shown[False]
    assert "Statistics collection" in shown[True]


TRACER_TEXT = ("Converting a tensor to a Python boolean might cause the trace to be incorrect. "
               "This means that the trace might not generalize to other inputs!")


def expected_kinds(who):
    """Warnings of the kinds that a conversion hides, from the modules that emit them."""
    warnings.warn(f"{who}: {TRACER_TEXT}", torch.jit.TracerWarning, stacklevel=1)
    warnings.warn_explicit(f"`is_gradient_checkpointing` is deprecated ({who})", FutureWarning,
                           "modeling_utils.py", 1, module="transformers.modeling_utils")


@pytest.mark.parametrize("backend", ["openvino", "onnx"])
def test_a_conversion_hides_its_expected_warnings_only(tiny_model_dir, texts, monkeypatch,
                                                       nothing_converted, backend):
    """The same warnings of another thread meanwhile are shown, and so is a warning of the
    converting thread that is not one of the expected ones; nothing stays in the filters."""
    vectorizer = BertVectorizer(tiny_model_dir, backend=backend, cache=False).fit()
    owner, name = (openvino, "convert_model") if backend == "openvino" else (torch.onnx, "export")
    trace = getattr(owner, name)

    def noisy(*args, **kwargs):
        expected_kinds("converting thread")
        warnings.warn("a new warning of the conversion", UserWarning, stacklevel=1)
        other = threading.Thread(target=expected_kinds, args=("other thread",))
        other.start()
        other.join(60)
        return trace(*args, **kwargs)

    monkeypatch.setattr(owner, name, noisy)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        before = list(warnings.filters)
        vectorizer.transform(texts)
        after = list(warnings.filters)
    assert sorted(str(warning.message)[:40] for warning in caught) == [
        "`is_gradient_checkpointing` is deprecate", "a new warning of the conversion",
        f"other thread: {TRACER_TEXT}"[:40]]
    assert after == before


def hub_cache(tmp_path, monkeypatch):
    """A hub cache holding config.json of the model "someone/tiny" at its main revision."""
    from huggingface_hub import constants

    snapshot = tmp_path / "hub" / "models--someone--tiny" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "hub" / "models--someone--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--someone--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return snapshot


@pytest.mark.parametrize("failure", [TypeError("unexpected keyword argument"),
                                     OSError("someone/tiny does not appear to have a file")])
def test_cached_model_file_falls_back_to_the_hub_cache(tmp_path, monkeypatch, failure):
    """Where transformers refuses (or ignores) its private arguments, huggingface_hub's public
    look-up of its cache answers, with None for a file that is not there."""
    import transformers.utils

    snapshot = hub_cache(tmp_path, monkeypatch)

    def changed(*args, **kwargs):
        raise failure

    monkeypatch.setattr(transformers.utils, "cached_file", changed)
    assert _compat.cached_model_file("someone/tiny", "config.json", None) == str(
        snapshot / "config.json")
    assert _compat.cached_model_file("someone/tiny", "model.safetensors", None) is None
    assert _compat.cached_model_file("someone/other", "config.json", None) is None


def test_cached_model_file_of_a_model_not_there_is_none(monkeypatch):
    """This transformers' answer (or the fallback's), offline, for a model it has not got."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert _compat.cached_model_file("someone/not-downloaded", "config.json", None) is None
