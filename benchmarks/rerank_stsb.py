"""A cross-encoder where one learns: STS-B, BertReranker against sentence-transformers' trainer.

all-MiniLM-L6-v2 (a BertModel: both sides give it a fresh head on the pooler
output), the CPU, torch's default threads, everything in one process. Training
pairs: STS-B train (5,749 pairs), relevance = score / 5; scoring: Spearman
of the predicted relevance against the gold scores of the 1,379 test pairs
(sentence-transformers' CrossEncoderCorrelationEvaluator reports the same).

- ``compare``: binary cross-entropy, batch 16, learning rate 2e-5, 10%
  warm-up, max_length 128, ``--epochs`` (1; 4 is sentence-transformers' own
  STS-B cross-encoder recipe), for each of ``--seeds``:
  ``BertReranker(loss="bce").fit`` (timed: the load, tokenizing and training)
  and ``CrossEncoderTrainer`` with ``BinaryCrossEntropyLoss`` (``trainer.train()``
  timed; both AdamW, linear warm-up and decay, no weight decay, gradients
  clipped to 1, dropout on). With ``--ablate``, a third fit a seed: skbert with
  the trainer's batches (random, not grouped by length). A row a seed, then
  each side's mean and standard deviation; beside them the frozen
  bi-encoder (mean pooling + l2, cosine) and the cost per pair of each.
  Target: skbert's mean within 0.01 of sentence-transformers', fit no slower.
- ``rates``: learning_rate="auto"'s table for BertReranker, measured as issue
  57 measured LoRA's: the first 1,000 train pairs, 1 epoch, batch 16, bce,
  seeds 0-2; the head alone (``freeze="all"``) over ``head_learning_rate``
  and LoRA over ``learning_rate``; Spearman on the 1,500 dev pairs (the test
  pairs stay out of the choice).

Needs ``pip install datasets accelerate`` (sentence-transformers' trainer)
beside the ``dev`` extra. Run: ``python benchmarks/rerank_stsb.py compare
--seeds 0 1 2 --ablate``, ``python benchmarks/rerank_stsb.py compare --epochs 4``,
``python benchmarks/rerank_stsb.py rates``. Figures: benchmarks/README.md.
"""

import argparse
import contextlib
import functools
import json
import time
from pathlib import Path

import numpy as np
from finetune_embeddings import cpu, fit_timed, model_path  # this folder is on sys.path
from rerank import st_fit

MAX_LENGTH = 128
BATCH = 16
RATES = {"all": (2e-5, 1e-3, 1e-2, 3e-2), "lora": (2e-5, 5e-4, 2e-3, 5e-3)}
N_RATE_PAIRS = 1000


LIMIT = None  # --limit: pairs of each split, to check that the script runs


def stsb(split):
    from skbert.datasets import load_stsb

    pairs, scores = load_stsb(split, return_X_y=True)
    return [tuple(pair) for pair in pairs][:LIMIT], (np.asarray(scores) / 5.0)[:LIMIT]


def spearman(predict, pairs, gold):
    from scipy.stats import spearmanr

    start = time.perf_counter()
    predicted = np.asarray(predict(pairs), dtype=np.float64)
    return float(spearmanr(predicted, gold).statistic), time.perf_counter() - start


def reranker(seed, epochs=1, **params):
    from skbert import BertReranker

    return BertReranker(model_path(), loss="bce", epochs=epochs, batch_size=BATCH,
                        warmup=0.1, max_length=MAX_LENGTH, random_state=seed, **params)


@contextlib.contextmanager
def random_batches():
    """skbert's training with the trainer's batches: shuffled, not grouped by length (an
    ablation through a private function of skbert's training loop)."""
    from skbert._train import _training

    original = _training.shuffled_batches
    _training.shuffled_batches = lambda indices, lengths, *args, **kwargs: original(
        indices, None, *args, **kwargs)
    try:
        yield
    finally:
        _training.shuffled_batches = original


def part_compare(args, report):
    from skbert import BertVectorizer, PairSimilarity

    train, train_y = stsb("train")
    test, test_y = stsb("test")
    frozen = PairSimilarity(BertVectorizer(model_path(), pooling="mean", norm="l2")).fit(test)
    start = time.perf_counter()
    bi_encoder = frozen.score(test, test_y)
    bi_seconds = time.perf_counter() - start
    print(f"  frozen bi-encoder: Spearman {bi_encoder:.4f}, {bi_seconds:.1f} s for "
          f"{len(test)} test pairs", flush=True)
    runs = {}
    for seed in args.seeds:
        run = {}
        fitted, seconds = fit_timed(reranker(seed, args.epochs, learning_rate=2e-5), train,
                                    train_y)
        run["skbert"] = (*spearman(fitted.predict, test, test_y), seconds)
        if args.save and seed == args.seeds[0]:
            print(f"  saved to {fitted.save_cross_encoder(args.save)}", flush=True)
        print(f"  seed {seed} skbert: {run['skbert']}", flush=True)
        model, seconds = st_fit(train, train_y, seed, max_length=MAX_LENGTH,
                                epochs=args.epochs)
        predict = functools.partial(model.predict, batch_size=64, show_progress_bar=False)
        run["sentence-transformers"] = (*spearman(predict, test, test_y), seconds)
        print(f"  seed {seed} sentence-transformers: {run['sentence-transformers']}",
              flush=True)
        if args.ablate:
            with random_batches():
                fitted, seconds = fit_timed(reranker(seed, args.epochs, learning_rate=2e-5),
                                            train, train_y)
            run["skbert, random batches"] = (*spearman(fitted.predict, test, test_y), seconds)
            print(f"  seed {seed} skbert, random batches: {run['skbert, random batches']}",
                  flush=True)
        runs[seed] = run
    sides = list(runs[args.seeds[0]])
    print(f"| seed | {' | '.join(f'{side} Spearman | fit s' for side in sides)} |")
    print("|---|" + "---|---|" * len(sides))
    for seed, run in runs.items():
        print(f"| {seed} | " + " | ".join(f"{run[side][0]:.4f} | {run[side][2]:.0f}"
                                          for side in sides) + " |")
    means = {side: np.mean([run[side][0] for run in runs.values()]) for side in sides}
    if len(runs) > 1:
        print("| mean ± sd | " + " | ".join(
            f"{means[side]:.4f} ± {np.std([run[side][0] for run in runs.values()], ddof=1):.4f}"
            f" | {np.mean([run[side][2] for run in runs.values()]):.0f}" for side in sides)
              + " |")
    fits = [run["skbert"][2] / run["sentence-transformers"][2] for run in runs.values()]
    difference = means["skbert"] - means["sentence-transformers"]
    print(f"  skbert - sentence-transformers: {difference:+.4f} (target within 0.01); fit time "
          f"ratio {np.mean(fits):.2f}x (target <= 1)")
    per_pair = np.mean([run["skbert"][1] for run in runs.values()]) / len(test)
    print(f"  cost at inference: cross-encoder {1e3 * per_pair:.2f} ms a pair (one forward of "
          f"both texts); bi-encoder {1e3 * bi_seconds / len(test):.2f} ms a pair (two texts, "
          "cached once encoded)", flush=True)
    report["compare"] = {"epochs": args.epochs, "bi_encoder": bi_encoder,
                         "bi_encoder_s": bi_seconds, "n_test": len(test),
                         "runs": {str(seed): {side: dict(zip(("spearman", "predict_s", "fit_s"),
                                                            values))
                                              for side, values in run.items()}
                                  for seed, run in runs.items()}}


def part_rates(args, report):
    train, train_y = stsb("train")
    dev, dev_y = stsb("dev")
    train, train_y = train[:N_RATE_PAIRS], train_y[:N_RATE_PAIRS]
    rows = {}
    print("| freeze | rate | " + " | ".join(f"seed {seed}" for seed in args.seeds)
          + " | mean |\n|---|---|" + "---|" * (len(args.seeds) + 1), flush=True)
    for freeze, rates in RATES.items():
        for rate in rates:
            name = "head_learning_rate" if freeze == "all" else "learning_rate"
            scores = []
            for seed in args.seeds:
                fitted = reranker(seed, freeze=freeze, **{name: rate}).fit(train, train_y)
                scores.append(spearman(fitted.predict, dev, dev_y)[0])
            rows[f"{freeze} {name}={rate}"] = scores
            print(f"| {freeze} | {name}={rate:g} | "
                  + " | ".join(f"{score:.4f}" for score in scores)
                  + f" | {np.mean(scores):.4f} |", flush=True)
    report["rates"] = rows


PARTS = {"compare": part_compare, "rates": part_rates}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="+", choices=list(PARTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--ablate", action="store_true",
                        help="compare: also skbert with random (not length-grouped) batches")
    parser.add_argument("--save", type=Path,
                        help="compare: save the first seed's skbert reranker to this new folder")
    parser.add_argument("--limit", type=int, help="pairs of each split (a smoke run)")
    args = parser.parse_args()
    global LIMIT
    LIMIT = args.limit
    import sentence_transformers
    import torch
    import transformers

    import skbert

    report = {"cpu": cpu(), "torch_threads": torch.get_num_threads(),
              "versions": {"skbert": skbert.__version__, "torch": torch.__version__,
                           "transformers": transformers.__version__,
                           "sentence-transformers": sentence_transformers.__version__}}
    print(json.dumps(report, indent=1), flush=True)
    for part in args.parts:
        start = time.perf_counter()
        print(f"## {part}", flush=True)
        PARTS[part](args, report)
        print(f"  {part}: {time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
