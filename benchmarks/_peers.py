"""sentence-transformers' own ONNX and OpenVINO backends, the peers of ``cpu_backends.py``
and ``rerank.py``.

Runs in the peer environment (``benchmarks/.peer-env``, built by ``peer_python()``
on first use: sentence-transformers' ``[onnx,openvino]`` extras need an older
transformers than skbert's), never imported by skbert; the benchmarks import
``PEER_ENV`` and ``run_peers`` from here, and the helpers every peer runner shares
(``venv_python``, ``run_job``, ``peak_rss_mb``). A JSON job with ``"pairs"`` is
``rerank.py``'s (see ``rerank``); any other is ``cpu_backends.py``'s: it reads
the model path, text sets, calibration sentences, batch size, threads and
repeats, and times on a writable copy of the model, in one process,
interleaved, the median of the repeats after one warm-up pass over each set:

- ``SentenceTransformer.encode`` in torch float32 (this process's baseline);
- ``backend="onnx"`` (exported on load);
- onnx-qint8: ``export_dynamic_quantized_onnx_model`` with the ``avx512_vnni``
  configuration where the CPU has AVX512-VNNI, ``avx512`` on AVX512 without
  it, ``avx2`` otherwise;
- ``backend="openvino"`` in OpenVINO's default precision (bf16 where the CPU
  has it natively), reported as it ran;
- openvino-qint8: ``export_static_quantized_openvino_model`` (its default
  configuration), calibrated on the local sentences of the job.

Writes a JSON result (versions, precisions, seconds, largest difference to
this process's torch float32) to the second argument.

Run (by the benchmarks): ``benchmarks/.peer-env/bin/python benchmarks/_peers.py JOB RESULT``
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEER_ENV = Path(__file__).resolve().parent / ".peer-env"
PEER_PINS = ["torch==2.13.0", "sentence-transformers[onnx,openvino]<6", "transformers<4.58",
             "huggingface-hub<1.0", "datasets<4.1"]


def venv_python(env, pins, check=None):
    """The python of the virtual environment ``env``, built with ``pip install pins`` the
    first time (its marker, ``built-with.json``, holds the pins it was built with).

    ``check``, Python code that fails unless the pinned packages import at their pinned
    versions, lets a folder without the marker (built by hand with the same pins) count as
    built: the marker is written and nothing is installed.
    """
    python = env / "bin" / "python"
    done = env / "built-with.json"
    if done.exists() and json.loads(done.read_text()) == pins:
        return python
    if check and python.exists() and not subprocess.run(
            [str(python), "-c", check], capture_output=True).returncode:
        done.write_text(json.dumps(pins))
        return python
    print(f"\nBuilding the peer environment {env} (once: about 2 GB, a few minutes)",
          flush=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *pins], check=True)
    done.write_text(json.dumps(pins))
    print(f"  built in {time.perf_counter() - start:.0f} s", flush=True)
    return python


def peer_python():
    """The peer environment's python, built with ``PEER_PINS`` the first time."""
    return venv_python(PEER_ENV, PEER_PINS)


class JobFailed(RuntimeError):
    """A job's script exited with an error; the message holds its log's last lines."""


def run_job(command, job, env=None):
    """The result (a dict) of ``command`` (a list: the python, the script, its options) run
    with ``JOB RESULT`` appended for ``job`` (a dict), both JSON files; :class:`JobFailed`
    with the log's last lines if it fails."""
    with tempfile.TemporaryDirectory() as directory:
        path, result, log = (Path(directory) / name for name in ("job.json", "result.json", "log"))
        path.write_text(json.dumps(job), encoding="utf-8")
        with open(log, "w") as output:
            status = subprocess.run([*map(str, command), str(path), str(result)],
                                    stdout=output, stderr=subprocess.STDOUT, env=env).returncode
        if status:
            raise JobFailed(f"{Path(command[1]).name} failed ({status}); its last lines:\n"
                            + "\n".join(log.read_text().splitlines()[-30:]))
        return json.loads(result.read_text(encoding="utf-8"))


def run_peers(job):
    """This script's result for ``job`` (a dict), run in the peer environment; exits with the
    log's last lines if it fails."""
    try:
        return run_job([peer_python(), __file__], job)
    except JobFailed as exc:
        sys.exit(str(exc))


def peak_rss_mb():
    """This process's peak resident memory in MiB: VmHWM, the high-water mark of the memory
    map made at its ``exec``. Not ``ru_maxrss``: Linux carries the parent's mark across fork
    and exec, so a child's would be at least its parent's size."""
    with open("/proc/self/status") as file:
        return next(int(line.split()[1]) for line in file if line.startswith("VmHWM:")) / 1024


def quantization_target():
    """ONNX Runtime's dynamic quantization configuration for this CPU."""
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    if "avx512_vnni" in flags:
        return "avx512_vnni"
    return "avx512" if "avx512f" in flags else "avx2"


def calibration_folder(sentences, folder):
    """A local data set (one JSON-lines file) that ``datasets.load_dataset(folder)`` reads."""
    folder.mkdir()
    with open(folder / "train.jsonl", "w", encoding="utf-8") as file:
        for sentence in sentences:
            file.write(json.dumps({"sentence": sentence}) + "\n")
    return str(folder)


def load_peers(model, folder, threads):
    """The five runners by name, each a ``SentenceTransformer``."""
    import onnxruntime
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.backend import (
        export_dynamic_quantized_onnx_model,
        export_static_quantized_openvino_model,
    )

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    ov_config = {"INFERENCE_NUM_THREADS": str(threads)}  # the rest as sentence-transformers sets it
    target = quantization_target()
    onnx = SentenceTransformer(model, device="cpu", backend="onnx",
                               model_kwargs={"session_options": options})
    export_dynamic_quantized_onnx_model(onnx, target, model)
    quantized, = Path(model).glob(f"onnx/model_*_{target}.onnx")  # qint8 or quint8 weights
    onnx_q8 = SentenceTransformer(model, device="cpu", backend="onnx", model_kwargs={
        "session_options": options, "file_name": f"onnx/{quantized.name}"})
    export_static_quantized_openvino_model(  # it quantizes the model it is given in place
        SentenceTransformer(model, device="cpu", backend="openvino"), None, model,
        dataset_name=folder, dataset_config_name="default", dataset_split="train",
        column_name="sentence")
    openvino = SentenceTransformer(model, device="cpu", backend="openvino",
                                   model_kwargs={"ov_config": ov_config})
    openvino_q8 = SentenceTransformer(model, device="cpu", backend="openvino", model_kwargs={
        "ov_config": ov_config, "file_name": "openvino/openvino_model_qint8_quantized.xml"})
    peers = {
        "sentence-transformers torch fp32": SentenceTransformer(model, device="cpu"),
        "sentence-transformers onnx": onnx,
        "sentence-transformers onnx-qint8": onnx_q8,
        "sentence-transformers openvino": openvino,
        "sentence-transformers openvino-qint8": openvino_q8,
    }
    return peers


def openvino_precisions(peers):
    """The precision each OpenVINO peer ran in (compiled on first use)."""
    hint = "INFERENCE_PRECISION_HINT"
    return {name: peer[0].auto_model.request.get_property(hint).get_type_name()
            for name, peer in peers.items() if "openvino" in name}


def time_peers(peers, texts, batch_size, repeats):
    """Median seconds of each peer on ``texts`` (interleaved), and its largest difference."""
    def encode(name):
        return peers[name].encode(texts, batch_size=batch_size, normalize_embeddings=True)

    outputs = {name: encode(name) for name in peers}  # warm-up: every shape once
    runs = {name: [] for name in peers}
    for _ in range(repeats):
        for name in peers:
            start = time.perf_counter()
            encode(name)
            runs[name].append(time.perf_counter() - start)
    reference = outputs["sentence-transformers torch fp32"]
    return {name: {"seconds": statistics.median(runs[name]), "runs": runs[name],
                   "max_abs_diff": float(abs(outputs[name] - reference).max())}
            for name in peers}, outputs


def spearman(outputs, pairs):
    """STS-B Spearman of each peer: the cosine of its (normalized) vectors of each pair's two
    rows of the set, against the gold scores."""
    from scipy.stats import spearmanr

    first, second = pairs["first"], pairs["second"]
    return {name: float(spearmanr((X[first] * X[second]).sum(axis=1), pairs["scores"]).statistic)
            for name, X in outputs.items()}


def rerank(job, work):
    """``rerank.py``'s peers: sentence-transformers' ``CrossEncoder`` on a writable copy of the
    job's folder in torch float32 and on its ``backend="onnx"`` and ``"openvino"`` (exported on
    load; OpenVINO in its default precision, reported as it ran), each scoring the job's
    (query, document) pairs in batches: one warm-up call on the first 64 pairs, then the best
    seconds of ``repeats`` calls, and the scores."""
    import onnxruntime
    from sentence_transformers import CrossEncoder

    model = str(shutil.copytree(job["model"], work / "model"))
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = job["threads"]
    ov_config = {"INFERENCE_NUM_THREADS": str(job["threads"])}
    runners = {
        "torch fp32": CrossEncoder(model, device="cpu"),
        "onnx": CrossEncoder(model, device="cpu", backend="onnx",
                             model_kwargs={"session_options": options}),
        "openvino": CrossEncoder(model, device="cpu", backend="openvino",
                                 model_kwargs={"ov_config": ov_config}),
    }
    pairs = [tuple(pair) for pair in job["pairs"]]
    rows = {}
    for name, runner in runners.items():
        runner.predict(pairs[:64], batch_size=job["batch_size"], show_progress_bar=False)
        runs = []
        for _ in range(job["repeats"]):
            start = time.perf_counter()
            scores = runner.predict(pairs, batch_size=job["batch_size"], show_progress_bar=False)
            runs.append(time.perf_counter() - start)
        rows[name] = {"seconds": min(runs), "runs": runs, "scores": [float(s) for s in scores]}
    hint = "INFERENCE_PRECISION_HINT"
    precision = runners["openvino"].model.request.get_property(hint).get_type_name()
    return {"runners": rows, "openvino_precision": precision}


def encode(job, work):
    """``cpu_backends.py``'s peers (see the module's docstring)."""
    model = shutil.copytree(job["model"], work / "model")  # the exports are written into it
    folder = calibration_folder(job["calibration"], work / "calibration")
    peers = load_peers(str(model), folder, job["threads"])
    sets, rho = {}, {}
    for name, texts in job["sets"].items():
        sets[name], outputs = time_peers(peers, texts, job["batch_size"], job["repeats"])
        if name == job["stsb"]["set"]:
            rho = spearman(outputs, job["stsb"])
    return {"openvino_precision": openvino_precisions(peers),
            "onnx_qint8_config": quantization_target(), "sets": sets, "stsb_spearman": rho}


def main():
    job = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        os.environ["HF_HOME"] = str(work / "hf")  # the calibration set's cache stays in here
        os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
        import openvino
        import sentence_transformers
        import torch
        import transformers

        torch.set_num_threads(job["threads"])
        found = (rerank if "pairs" in job else encode)(job, work)
        result = {
            "versions": {"sentence-transformers": sentence_transformers.__version__,
                         "transformers": transformers.__version__, "torch": torch.__version__,
                         "openvino": openvino.__version__,
                         "onnxruntime": __import__("onnxruntime").__version__,
                         "optimum-intel": _version("optimum-intel"),
                         "optimum-onnx": _version("optimum-onnx")},
            "threads": torch.get_num_threads(),
            **found,
        }
    Path(sys.argv[2]).write_text(json.dumps(result, indent=1), encoding="utf-8")


def _version(distribution):
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
