"""CPU engines (OpenVINO, ONNX Runtime) against the torch backend, on tiny random models."""

import collections
import json
import pickle
import shutil
import subprocess
import sys
import weakref

import numpy as np
import pytest
import torch
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline

import skbert
from skbert import BertVectorizer, _engines, _loading
from skbert._loading import resolve_device
from tests.test_architectures import PAIRS, TEXTS, model_dir  # noqa: F401 (a fixture)

pytest.importorskip("openvino")
pytest.importorskip("onnxruntime")

ENGINES = ["openvino", "onnx"]


@pytest.fixture
def export_dir():
    """The session's private export directory (tests/conftest.py)."""
    return _engines.export_dir()


SETTINGS = [
    {},
    {"layer": [0, -1], "layer_combine": "concat", "pooling": "max"},
    {"layer": "all", "pooling": "mean_max", "include_special_tokens": False, "norm": "l2"},
    {"pooling": "cls"},
    {"pooling": "pooler"},
    {"pooling": "last", "layer": -2},
    {"truncation": "chunks", "max_length": 12, "stride": 2, "prompt": "query: "},
    {"truncation": "head_tail", "max_length": 10, "chunk_pooling": "max"},
    {"cache": False, "layer": 1, "pooling": "mean_sqrt_len"},  # a graph cut after layer 1
    {"cache": False, "layer": [0, 1]},
]


@pytest.mark.parametrize("backend", ENGINES)
@pytest.mark.parametrize("setting", SETTINGS, ids=lambda setting: json.dumps(setting))
def test_float32_equals_torch(tiny_model_dir, texts, backend, setting):
    expected = BertVectorizer(tiny_model_dir, **setting).fit_transform(texts)
    got = BertVectorizer(tiny_model_dir, backend=backend, **setting).fit_transform(texts)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("backend", ENGINES)
def test_pairs_and_a_directory_cache(tiny_model_dir, tmp_path, backend):
    expected = BertVectorizer(tiny_model_dir).fit_transform(PAIRS)
    vectorizer = BertVectorizer(tiny_model_dir, backend=backend, cache=str(tmp_path)).fit()
    np.testing.assert_allclose(vectorizer.transform(PAIRS), expected, rtol=0, atol=1e-5)
    skbert.clear_cache()  # from the directory now
    np.testing.assert_allclose(vectorizer.transform(PAIRS), expected, rtol=0, atol=1e-5)


# BERT, DistilBERT, RoBERTa, XLM-R and MPNet, as the issue asks, and ELECTRA, ALBERT, DeBERTa-v2,
# ModernBERT: every architecture of test_architectures.py.
ARCHS = ["bert", "distilbert", "roberta", "xlm-roberta", "mpnet", "electra", "albert",
         "deberta-v2", "modernbert"]


# What the engines cannot convert faithfully, found by the check on conversion: OpenVINO traces
# ModernBERT's sliding-window mask into NaN.
UNCONVERTIBLE = {("modernbert", "openvino")}


@pytest.mark.parametrize("backend", ENGINES)
@pytest.mark.parametrize("arch", ARCHS)
def test_every_architecture_equals_torch(model_dir, arch, backend):  # noqa: F811 (the fixture)
    if (arch, backend) in UNCONVERTIBLE:
        with pytest.raises(ValueError, match=rf"backend={backend!r} cannot convert "
                                             r"\w+Model \(ValueError: its output \d differs from "
                                             r"torch's by nan \(relative\)"):
            BertVectorizer(model_dir(arch), backend=backend).fit_transform(TEXTS)
        return
    for setting in [{"layer": [0, -1], "pooling": "mean_max"}, {"cache": False, "layer": 1}]:
        expected = BertVectorizer(model_dir(arch), **setting).fit_transform(TEXTS)
        got = BertVectorizer(model_dir(arch), backend=backend, **setting).fit_transform(TEXTS)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5, err_msg=str(setting))


def test_export_leaves_the_shared_model_as_it_was(tiny_model_dir, texts):
    torch_vectorizer = BertVectorizer(tiny_model_dir, layer="all", cache=False).fit()
    before = torch_vectorizer.transform(texts)
    for backend in ENGINES:
        BertVectorizer(tiny_model_dir, backend=backend, layer=[0, 2], cache=False,
                       pooling="max").fit_transform(texts)
    np.testing.assert_array_equal(torch_vectorizer.transform(texts), before)


def test_an_architecture_an_engine_cannot_convert_is_named(tiny_model_dir, texts, monkeypatch,
                                                           tmp_path):
    import openvino

    monkeypatch.setenv("SKBERT_EXPORT_DIR", str(tmp_path))  # nothing stored yet

    def refuse(*args, **kwargs):
        raise RuntimeError("unsupported operation aten::frobnicate")

    monkeypatch.setattr(openvino, "convert_model", refuse)
    monkeypatch.setattr(_engines, "_graphs", {})
    with pytest.raises(ValueError, match=r"backend='openvino' cannot convert BertModel "
                                         r"\(RuntimeError: unsupported operation "
                                         r"aten::frobnicate\); use backend='torch' for it"):
        BertVectorizer(tiny_model_dir, backend="openvino", layer=0,
                       cache=False).fit_transform(texts)


def test_openvino_bfloat16_is_close_to_float32(tiny_model_dir, texts):
    expected = BertVectorizer(tiny_model_dir, norm="l2").fit_transform(texts)
    got = BertVectorizer(tiny_model_dir, backend="openvino", dtype="bfloat16",
                         norm="l2").fit_transform(texts)  # exact where the CPU has no bf16
    np.testing.assert_allclose(got, expected, rtol=0, atol=0.05)


# --- int8 --------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ENGINES)
def test_int8_is_close_to_float32_and_the_same_every_time(tiny_model_dir, texts, backend):
    expected = BertVectorizer(tiny_model_dir, norm="l2").fit_transform(texts)
    first = BertVectorizer(tiny_model_dir, backend=backend, dtype="int8", norm="l2")
    got = first.fit_transform(texts)
    assert got.dtype == np.float32 and np.isfinite(got).all()
    assert (got * expected).sum(axis=1).min() > 0.9  # cosine to float32
    assert not np.allclose(got, expected, atol=1e-5)  # quantized, not float32 in disguise
    skbert.clear_cache()
    np.testing.assert_array_equal(BertVectorizer(tiny_model_dir, backend=backend, dtype="int8",
                                                 norm="l2").fit_transform(texts[::-1]),
                                  got[::-1])


def test_int8_calibration_is_in_the_key_and_the_state(tiny_model_dir, texts):
    default = BertVectorizer(tiny_model_dir, backend="openvino", dtype="int8").fit()
    assert default._calibration == _engines.default_calibration()
    assert len(default._calibration) == _engines.N_CALIBRATION
    own = BertVectorizer(tiny_model_dir, backend="openvino", dtype="int8", calibration="fit")
    own_features = own.fit_transform(texts)
    assert own._calibration == tuple(dict.fromkeys(texts))
    assert not np.allclose(own_features, default.transform(texts), atol=1e-6)
    listed = BertVectorizer(tiny_model_dir, backend="openvino", dtype="int8", calibration=texts)
    np.testing.assert_array_equal(listed.fit_transform(texts), own_features)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(own)).transform(texts), own_features)
    with pytest.raises(ValueError, match=r"Text at index 1 is int \(3\); every text must be"):
        BertVectorizer(tiny_model_dir, backend="openvino", dtype="int8",
                       calibration=["a", 3]).fit()
    with pytest.raises(ValueError, match=r"calibration='fit' calibrates int8 on the texts given "
                                         r"to fit: pass them"):
        BertVectorizer(tiny_model_dir, backend="openvino", dtype="int8",
                       calibration="fit").fit()


def test_int8_grid_search_forwards_each_text_once(tiny_model_dir, texts, monkeypatch):
    from sklearn.linear_model import LogisticRegression

    rows, call = [], _engines._Compiled.__call__

    def counted(self, inputs):
        rows.append(len(inputs["input_ids"]))
        return call(self, inputs)

    monkeypatch.setattr(_engines._Compiled, "__call__", counted)
    skbert.clear_cache()
    pipe = Pipeline([("bert", BertVectorizer(tiny_model_dir, backend="onnx", dtype="int8")),
                     ("clf", LogisticRegression(max_iter=200))])
    grid = {"bert__pooling": ["mean", "max", "cls"], "bert__layer": [-1, 0, [0, -1]]}
    GridSearchCV(pipe, grid, cv=2).fit(texts, [0, 1] * 4)
    assert sum(rows) == len(set(texts))


# --- export directory --------------------------------------------------------------------------

def test_a_stored_export_is_loaded_not_converted(tiny_model_dir, texts, monkeypatch):
    expected = BertVectorizer(tiny_model_dir, backend="openvino").fit_transform(texts)
    monkeypatch.setattr(_engines, "_graphs", {})  # as a new process has it

    def no_conversion(*args):
        raise AssertionError("converted again")

    monkeypatch.setattr(_engines, "_convert", no_conversion)
    skbert.clear_cache()
    np.testing.assert_array_equal(
        BertVectorizer(tiny_model_dir, backend="openvino").fit_transform(texts), expected)


def as_in_a_new_process(monkeypatch):
    """No model loaded, no graph compiled: what a new process starts with."""
    monkeypatch.setattr(_loading, "_shared", weakref.WeakValueDictionary())
    monkeypatch.setattr(_loading, "_recent", collections.deque(maxlen=2))
    monkeypatch.setattr(_engines, "_graphs", {})


def test_another_process_loads_the_export_not_the_torch_model(tiny_model_dir, texts, export_dir,
                                                               monkeypatch):
    as_in_a_new_process(monkeypatch)  # so that this fit records the model's fingerprint
    expected = BertVectorizer(tiny_model_dir, backend="onnx").fit_transform(texts)
    script = ("import sys, numpy as np; from skbert import BertVectorizer, _engines\n"
              "_engines._convert = None  # any conversion would fail\n"
              f"vectorizer = BertVectorizer({tiny_model_dir!r}, backend='onnx')\n"
              f"np.save(sys.argv[1], vectorizer.fit_transform({texts!r}))\n"
              "bert = 'transformers.models.bert.modeling_bert'  # BertModel's code\n"
              "assert bert not in sys.modules\n"
              "assert type(vectorizer.model_).__name__ == 'BertModel' and bert in sys.modules")
    out = export_dir.parent / "other-process.npy"
    done = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    np.testing.assert_allclose(np.load(out), expected, rtol=0, atol=1e-6)


@pytest.fixture
def only_record(tmp_path, monkeypatch):
    """The record of the one model fitted in an export directory of the test's own."""
    monkeypatch.setenv("SKBERT_EXPORT_DIR", str(tmp_path / "exports"))

    def record():
        (found,) = (tmp_path / "exports" / "models").glob("*.json")
        return found

    return record


def test_a_damaged_record_of_the_model_is_written_again(tiny_model_dir, texts, only_record,
                                                        monkeypatch):
    as_in_a_new_process(monkeypatch)
    expected = BertVectorizer(tiny_model_dir, backend="onnx").fit_transform(texts)
    record = only_record()
    facts = json.loads(record.read_text())
    for damaged in ["{", json.dumps({**facts, "files": "0" * 32}),
                    json.dumps({**facts, "fingerprint": 3})]:
        record.write_text(damaged)
        as_in_a_new_process(monkeypatch)
        vectorizer = BertVectorizer(tiny_model_dir, backend="onnx").fit()
        assert vectorizer._loaded._model is not None  # loaded, since the record said nothing
        np.testing.assert_array_equal(vectorizer.transform(texts), expected)
        assert json.loads(record.read_text()) == facts


def test_a_record_that_names_other_weights_is_found_out(tiny_model_dir, texts, only_record,
                                                        monkeypatch):
    as_in_a_new_process(monkeypatch)
    BertVectorizer(tiny_model_dir, backend="onnx").fit_transform(texts)
    record = only_record()
    record.write_text(json.dumps({**json.loads(record.read_text()), "fingerprint": "0" * 32}))
    as_in_a_new_process(monkeypatch)
    vectorizer = BertVectorizer(tiny_model_dir, backend="onnx").fit()  # no export for "0" * 32
    with pytest.raises(ValueError, match=r"The weights of '.*' changed since they were "
                                         r"fingerprinted 0{32}: found [0-9a-f]{32}\. Fit again"):
        vectorizer.transform(texts)


def test_weights_saved_over_the_folder_are_not_taken_for_the_recorded_ones(
        tiny_model_dir, texts, tmp_path, monkeypatch):
    folder = shutil.copytree(tiny_model_dir, tmp_path / "model")
    as_in_a_new_process(monkeypatch)
    before = BertVectorizer(str(folder), backend="onnx").fit()
    model, _ = _loading.from_pretrained(str(folder), None, "float32")
    with torch.no_grad():
        model.encoder.layer[0].output.dense.weight.mul_(2.0)
    model.save_pretrained(folder)
    as_in_a_new_process(monkeypatch)
    after = BertVectorizer(str(folder), backend="onnx").fit()
    torch_after = BertVectorizer(str(folder)).fit()
    assert after._fingerprint == torch_after._fingerprint != before._fingerprint
    np.testing.assert_allclose(after.transform(texts), torch_after.transform(texts), rtol=0,
                               atol=1e-5)


def test_a_damaged_export_is_rebuilt(tiny_model_dir, texts, tmp_path, monkeypatch):
    monkeypatch.setenv("SKBERT_EXPORT_DIR", str(tmp_path))
    monkeypatch.setattr(_engines, "_graphs", {})
    setting = {"backend": "openvino", "layer": 1, "cache": False}
    expected = BertVectorizer(tiny_model_dir, **setting).fit_transform(texts)
    (weights,) = tmp_path.glob("*/model.bin")
    weights.write_bytes(b"\0" * weights.stat().st_size)
    monkeypatch.setattr(_engines, "_graphs", {})
    with pytest.warns(RuntimeWarning, match=r"skbert's export '.*' is damaged \(model\.bin does "
                                            r"not match its checksum\): converting the model"):
        got = BertVectorizer(tiny_model_dir, **setting).fit_transform(texts)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("persist_weights", [True, False])
def test_pickles_find_or_rebuild_the_engine(tiny_model_dir, texts, persist_weights):
    vectorizer = BertVectorizer(tiny_model_dir, backend="openvino",
                                persist_weights=persist_weights).fit()
    expected = vectorizer.transform(texts)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(vectorizer)).transform(texts),
                                  expected)


# --- what no engine runs -----------------------------------------------------------------------

@pytest.mark.parametrize("params, message", [
    ({"dtype": "int8"}, r"dtype='int8' quantizes with a CPU engine: use backend='openvino'"),
    ({"backend": "openvino", "dtype": "float16"},
     r"dtype='float16' is not computed by backend='openvino', which offers 'float32', "
     r"'bfloat16', 'int8'"),
    ({"backend": "onnx", "dtype": "bfloat16"},
     r"dtype='bfloat16' is not computed by backend='onnx', which offers 'float32', 'int8'"),
    ({"backend": "tensorrt"}, r"The 'backend' parameter of BertVectorizer must be a str among"),
])
def test_settings_no_engine_runs_are_refused(tiny_model_dir, params, message):
    with pytest.raises(ValueError, match=message):
        BertVectorizer(tiny_model_dir, **params).fit()


def test_a_gpu_device_needs_torch():
    import torch

    with pytest.raises(ValueError, match=r"backend='onnx' runs on the CPU, and device resolves "
                                         r"to 'cuda': use backend='torch' there"):
        _engines.check_backend("onnx", "float32", torch.device("cuda"))
    assert BertVectorizer(backend="openvino")._device() == resolve_device("cpu")  # "auto"


def test_a_missing_engine_names_the_install(tiny_model_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino raises ImportError
    with pytest.raises(ImportError, match=r"backend='openvino' needs openvino: pip install "
                                          r"'skbert\[openvino\]'"):
        BertVectorizer(tiny_model_dir, backend="openvino").fit()


def test_command_line_backend(tiny_model_dir, tmp_path, texts):
    from skbert import _cli

    (tmp_path / "in.txt").write_text("\n".join(text for text in texts if text) + "\n")
    for backend in ["torch", "onnx"]:
        assert _cli.main(["embed", str(tmp_path / "in.txt"), "-o", str(tmp_path / f"{backend}.npy"),
                          "--model", tiny_model_dir, "--backend", backend]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "onnx.npy"), np.load(tmp_path / "torch.npy"),
                               rtol=0, atol=1e-5)
