"""BertReranker against sentence-transformers' CrossEncoder trainer on SciFact (issue 59).

all-MiniLM-L6-v2 (a BertModel: both sides give it a fresh head on the pooler
output), the CPU, torch's default threads, everything in one process. Shared
by the parts, computed once: the SciFact corpus (5,183 title + " " + abstract
documents), its 300 test queries and 919 train (query, positive) pairs; the
first stage ``SimilaritySearch(BertVectorizer(model, pooling="mean",
norm="l2"))`` over the corpus, whose top 20 of each test query are the
candidates every reranker reorders (its own nDCG@10 is the "bi-encoder" row);
``mine_negatives`` on the train pairs with 4 negatives from first-stage
ranks 3-30 (top sampling, no judged positive). Scoring: test nDCG@10 of each
query's 20 candidates in the reranker's order (documents outside the top 20
are not in the run), pairs in batches of 64 on every side, one warm-up on 64
pairs, skbert's cache emptied before each timed call.

- ``compare``: binary cross-entropy on the same labelled pairs (each
  4-negative tuple's (query, positive, 1) and (query, negative, 0), as
  ``loss="bce"`` expands tuples), 1 epoch, batch 16, learning rate 2e-5, 10%
  warm-up, max_length 320, seed 0 (``--seeds`` runs the pair of fits for each
  seed given: the mined data stay the same): ``BertReranker.fit`` (timed: the
  model's load, tokenizing and training) and sentence-transformers'
  ``CrossEncoderTrainer`` with ``BinaryCrossEntropyLoss`` (``trainer.train()``
  timed; both AdamW, linear warm-up and decay, no weight decay, gradients
  clipped to 1). A row per seed as its fits end, then the mean and standard
  deviation of each side. Targets: skbert within 0.01 nDCG@10 of
  sentence-transformers, its fit no slower. The first seed's models serve
  ``engines`` and ``folders``.
- ``firststage``: ``FineTunedVectorizer(loss="in_batch")`` (1 epoch, batch 32,
  2e-5, max_length 256) on the 919 pairs and on the 4-negative tuples, each as
  the first stage over the whole corpus; beside it the 0.6679 of
  ``finetune_embeddings.py scifact`` (pairs, same recipe).
- ``engines``: compare's bce reranker (trained here if compare did not run),
  saved with ``save_cross_encoder`` and read back with ``fit()`` on torch
  float32, on OpenVINO bfloat16 and on OpenVINO int8 (calibrated on the first 300 distinct candidate
  pairs of the train queries' top 20); best of two timed rerankings of the
  test candidates (300 x 20 pairs). Targets: int8 >= 2x faster, nDCG@10
  within 0.005. Beside them sentence-transformers' ``CrossEncoder`` on the
  folder in torch float32 and with ``backend="onnx"`` and ``"openvino"``
  (OpenVINO's default precision, printed), timed the same way by ``_peers.py``
  in ``benchmarks/.peer-env`` (built on first use: its optimum extras need an
  older transformers than skbert's), with the largest difference of its torch
  scores to skbert's. ``--reranker FOLDER`` reads that cross-encoder folder
  instead (read at max_length 320 whatever window it was saved with), and
  ``--no-peers`` leaves sentence-transformers' rows out, ``--readers float32
  int8`` skbert's bfloat16 row, and ``--queries N`` keeps the first N test
  queries (N x 20 pairs; nDCG@10 over those).
- ``folders``: the reranker's ``save_cross_encoder`` folder read by
  ``sentence_transformers.CrossEncoder``, and a folder written by
  sentence-transformers' ``CrossEncoder.save`` (compare's model, or a fresh
  one) read by ``BertReranker(folder).fit()``: largest difference of the two
  sides' scores of 200 test candidate pairs (target 1e-4).

Needs ``pip install datasets accelerate`` (sentence-transformers' trainer)
beside the ``dev`` extra, and the shared data (``../shared/data/scifact``).
Run: ``python benchmarks/rerank.py compare firststage engines folders
[--seeds 0 1 2]``; each part runs alone too. ``--smoke`` runs the selected parts on 20 test
queries, 40 train pairs and 600 documents (the judged ones of both, then the
corpus in order), with rerankers at max_length 128, to check the script runs
(its setup alone took 77 s on 2 busy cores; each part adds minutes).

Timings on 2 cores of an AMD EPYC (AVX-512; figures in benchmarks/README.md): setup 206-228 s,
compare 3,000-3,433 s a seed (each fit 19-24 minutes), folders 43 s, engines 888 s without
sentence-transformers' rows and 2,959 s with them and bfloat16 (the peer environment built
beforehand), firststage 1,487 s. (Issue 59's loss x negatives x epochs table was dropped: on
data where no trainer learns it measures noise.)
"""

import argparse
import functools
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from _peers import PEER_ENV, run_peers  # this folder is on sys.path
from finetune_embeddings import cpu, fit_timed, model_path

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact"
SEED = 0
SEEDS = (SEED,)  # compare's training seeds (--seeds)
TOP = 20  # first-stage candidates of each test query that the rerankers reorder
NEGATIVES = (4,)
MAX_LENGTH = 320  # rerankers' tokens per pair (128 with --smoke)
SCORE_BATCH = 64
N_CALIBRATION = 300
SMOKE = dict(test=20, train=40, corpus=600)
FINETUNED_REFERENCE = 0.6679  # finetune_embeddings.py scifact, skbert full, 919 pairs

RERANKER = None  # --reranker: the cross-encoder folder engines reads, instead of compare's
PEERS = True  # --no-peers: engines without sentence-transformers' rows
READERS = ("float32", "bfloat16", "int8")  # --readers: engines' skbert rows
QUERIES = None  # --queries: the first this many test queries only
_SETUP = {}  # the data, the first stage, its candidates and the mined tuples
_TRAINED = {}  # compare's models: "skbert" (BertReranker), "st" (CrossEncoder)


def load_data(smoke=False):
    """SciFact: the corpus, the test queries with their qrels and the train (query, positive
    document) pairs (finetune_embeddings.train_pairs' construction); with ``smoke``, the
    SMOKE subset, its corpus holding every document the kept queries judge."""
    from sklearn.utils import Bunch

    from skbert.datasets import load_beir

    test, train = load_beir(DATA, "test"), load_beir(DATA, "train")
    query_ids = list(test.queries)[:QUERIES]
    judged = [(query, doc) for query, docs in train.qrels.items()
              for doc, relevance in docs.items() if relevance > 0]
    rows = range(len(test.doc_ids))
    if smoke:
        query_ids, judged = query_ids[:SMOKE["test"]], judged[:SMOKE["train"]]
        keep = {doc for query in query_ids for doc in test.qrels[query]} | {
            doc for _, doc in judged}
        needed = [i for i in rows if test.doc_ids[i] in keep]
        rest = [i for i in rows if test.doc_ids[i] not in keep]
        rows = sorted(needed + rest[:max(0, SMOKE["corpus"] - len(needed))])
    text = dict(zip(test.doc_ids, test.documents))
    return Bunch(doc_ids=[test.doc_ids[i] for i in rows],
                 documents=[test.documents[i] for i in rows],
                 query_ids=query_ids, queries=[test.queries[query] for query in query_ids],
                 qrels={query: test.qrels[query] for query in query_ids},
                 train_queries=[train.queries[query] for query, _ in judged],
                 train_positives=[text[doc] for _, doc in judged])


def ndcg(scores, indices, data):
    """Test nDCG@10 of each query's corpus rows ``indices`` ranked by ``scores``."""
    from skbert.metrics import ndcg_at_k

    run = {query: {data.doc_ids[j]: float(score) for score, j in zip(row_scores, row)}
           for query, row_scores, row in zip(data.query_ids, scores, indices)}
    return ndcg_at_k(data.qrels, run, k=10)


def setup(smoke=False):
    """The shared state, computed on the first call (``smoke`` is read then)."""
    if _SETUP:
        return _SETUP
    from skbert import BertVectorizer, SimilaritySearch

    start = time.perf_counter()
    data = load_data(smoke)
    search = SimilaritySearch(BertVectorizer(model_path(), pooling="mean", norm="l2"))
    search.fit(data.documents)
    scores, candidates = search.search(data.queries, k=TOP)
    tuples = {n: search.mine_negatives(data.train_queries, data.train_positives,
                                       n_negatives=n, range_min=3, range_max=30,
                                       random_state=SEED) for n in NEGATIVES}
    _SETUP.update(data=data, search=search, candidates=candidates, tuples=tuples,
                  pairs=[(query, data.documents[j]) for query, row in zip(data.queries,
                                                                          candidates)
                         for j in row],
                  bi_encoder=ndcg(scores, candidates, data))
    print(f"setup: {len(data.documents):,} documents, {len(data.queries)} test queries, "
          f"{len(data.train_queries)} train pairs; bi-encoder nDCG@10 "
          f"{_SETUP['bi_encoder']:.4f} (full run expected about 0.6451); mined tuples: "
          + ", ".join(f"{len(tuples[n])} with {n} negatives" for n in NEGATIVES)
          + f"; {time.perf_counter() - start:.0f} s", flush=True)
    return _SETUP


def rerank(predict, repeats=1):
    """nDCG@10 of the test candidates reordered by ``predict``'s scores of their (query,
    document) pairs, the best seconds of ``repeats`` timed calls, and the scores."""
    from skbert import clear_cache

    state = setup()
    pairs, candidates = state["pairs"], state["candidates"]
    predict(pairs[:64])  # warm-up
    best = np.inf
    for _ in range(repeats):
        clear_cache()  # a fit() reranker caches its features: each call computes them
        start = time.perf_counter()
        scores = np.asarray(predict(pairs), dtype=np.float64)
        best = min(best, time.perf_counter() - start)
    return ndcg(scores.reshape(candidates.shape), candidates, state["data"]), best, scores


def skbert_predict(reranker):
    return reranker.set_params(batch_size=SCORE_BATCH).predict


def st_predict(model):
    return lambda pairs: model.predict(pairs, batch_size=SCORE_BATCH, show_progress_bar=False)


def reranker(loss="bce", epochs=1, seed=SEED):
    from skbert import BertReranker

    return BertReranker(model_path(), loss=loss, epochs=epochs, batch_size=16,
                        learning_rate=2e-5, warmup=0.1, max_length=MAX_LENGTH,
                        random_state=seed)


def labelled_pairs():
    """The 4-negative tuples as labelled pairs, in the order ``loss="bce"`` expands them."""
    pairs, labels = [], []
    for query, *documents in setup()["tuples"][4]:
        pairs += [(query, document) for document in documents]
        labels += [1.0] + [0.0] * (len(documents) - 1)
    return pairs, labels


def st_fit(pairs, labels, seed=SEED, *, max_length=None, epochs=1):
    """sentence-transformers' CrossEncoderTrainer on the labelled pairs (relevance in [0, 1]):
    the model and the seconds of ``trainer.train()``; ``max_length`` None is MAX_LENGTH."""
    import torch
    from datasets import Dataset
    from sentence_transformers.cross_encoder import (
        CrossEncoder,
        CrossEncoderTrainer,
        CrossEncoderTrainingArguments,
    )
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    torch.manual_seed(seed)  # the fresh head is drawn here, before the trainer seeds
    model = CrossEncoder(model_path(), num_labels=1, max_length=max_length or MAX_LENGTH,
                         device="cpu")
    data = Dataset.from_dict({"query": [query for query, _ in pairs],
                              "document": [document for _, document in pairs],
                              "label": list(labels)})
    with tempfile.TemporaryDirectory() as output:
        args = CrossEncoderTrainingArguments(
            output_dir=output, num_train_epochs=epochs, per_device_train_batch_size=16,
            learning_rate=2e-5, warmup_ratio=0.1, weight_decay=0.0, seed=seed,
            save_strategy="no", logging_strategy="no", report_to="none",
            dataloader_drop_last=False, use_cpu=True, disable_tqdm=True)
        trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=data,
                                      loss=BinaryCrossEntropyLoss(model))
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
    return model.eval(), seconds


def bce_reranker():
    """compare's skbert reranker, or the same recipe trained now."""
    if "skbert" not in _TRAINED:
        _TRAINED["skbert"] = fit_timed(reranker("bce"), *labelled_pairs())[0]
    return _TRAINED["skbert"]


def markdown(header, rows):
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header), flush=True)
    for row in rows:
        print("| " + " | ".join(row) + " |", flush=True)


def part_compare(report):
    pairs, labels = labelled_pairs()
    bi_encoder = setup()["bi_encoder"]
    runs = {}
    for seed in SEEDS:
        skbert, skbert_fit = fit_timed(reranker("bce", seed=seed), pairs, labels)
        print(f"  seed {seed}: skbert fit {skbert_fit:.0f} s on {len(pairs)} pairs", flush=True)
        st, st_fit_s = st_fit(pairs, labels, seed)
        print(f"  seed {seed}: sentence-transformers fit {st_fit_s:.0f} s", flush=True)
        ours, ours_s, _ = rerank(skbert_predict(skbert))
        theirs, theirs_s, _ = rerank(st_predict(st))
        _TRAINED.setdefault("skbert", skbert)
        _TRAINED.setdefault("st", st)
        runs[seed] = {"skbert": {"ndcg@10": ours, "fit_s": skbert_fit, "rerank_s": ours_s},
                      "sentence-transformers": {"ndcg@10": theirs, "fit_s": st_fit_s,
                                                "rerank_s": theirs_s}}
        print(f"  seed {seed}: nDCG@10 {ours:.4f} vs {theirs:.4f} ({ours - theirs:+.4f}), fit "
              f"{skbert_fit / st_fit_s:.2f}x, rerank {ours_s:.1f} s vs {theirs_s:.1f} s",
              flush=True)
    rows = [["bi-encoder alone", f"{bi_encoder:.4f}", f"{bi_encoder:.4f}", "", "", "", ""]]
    for seed, run in runs.items():
        ours, theirs = run["skbert"], run["sentence-transformers"]
        rows.append([f"seed {seed}", f"{ours['ndcg@10']:.4f}", f"{theirs['ndcg@10']:.4f}",
                     f"{ours['ndcg@10'] - theirs['ndcg@10']:+.4f}", f"{ours['fit_s']:.0f}",
                     f"{theirs['fit_s']:.0f}", f"{ours['fit_s'] / theirs['fit_s']:.2f}x"])
    if len(runs) > 1:
        ours, theirs = ([run[side]["ndcg@10"] for run in runs.values()]
                        for side in ("skbert", "sentence-transformers"))
        fits = [run["skbert"]["fit_s"] / run["sentence-transformers"]["fit_s"]
                for run in runs.values()]
        rows.append([f"mean ± sd of {len(runs)} seeds",
                     f"{np.mean(ours):.4f} ± {np.std(ours, ddof=1):.4f}",
                     f"{np.mean(theirs):.4f} ± {np.std(theirs, ddof=1):.4f}",
                     f"{np.mean(ours) - np.mean(theirs):+.4f}", "", "", f"{np.mean(fits):.2f}x"])
    markdown(["", "skbert nDCG@10", "ST nDCG@10", "skbert - ST", "skbert fit s", "ST fit s",
              "fit skbert / ST"], rows)
    print("  targets: nDCG@10 within 0.01 of ST, fit seconds ratio <= 1", flush=True)
    report["compare"] = {"n_pairs": len(pairs), "bi_encoder": bi_encoder,
                         "seeds": {str(seed): run for seed, run in runs.items()}}


def part_firststage(report):
    from skbert import BertVectorizer, FineTunedVectorizer, SimilaritySearch

    state = setup()
    data = state["data"]
    rows = {"frozen": {"ndcg@10": state["bi_encoder"]}}
    trained_on = {"pairs": list(zip(data.train_queries, data.train_positives)),
                  "4-negative tuples": state["tuples"][4]}
    for name, X in trained_on.items():
        tuned = FineTunedVectorizer(
            BertVectorizer(model_path(), pooling="mean", norm="l2", max_length=256),
            loss="in_batch", epochs=1, batch_size=32, learning_rate=2e-5, random_state=SEED)
        tuned, seconds = fit_timed(tuned, X)
        search = SimilaritySearch(vectorizer=tuned).fit(data.documents)
        rows[name] = {"ndcg@10": ndcg(*search.search(data.queries, k=10), data),
                      "fit_s": seconds}
        print(f"  first stage tuned on {name}: {json.dumps(rows[name])}", flush=True)
    markdown(["first stage", "nDCG@10", "fit s", "earlier run"], [
        ["frozen", f"{state['bi_encoder']:.4f}", "", "0.6451"],
        *([f"in_batch on {name}", f"{row['ndcg@10']:.4f}", f"{row['fit_s']:.0f}",
           f"{FINETUNED_REFERENCE:.4f}" if name == "pairs" else ""]
          for name, row in rows.items() if name != "frozen")])
    report["firststage"] = rows


def calibration_pairs():
    """The first N_CALIBRATION distinct (query, document) pairs of the train queries'
    first-stage top TOP: what the reranker reads, none of them a test pair."""
    state = setup()
    data = state["data"]
    queries = list(dict.fromkeys(data.train_queries))[:N_CALIBRATION // TOP + 1]
    top = state["search"].search(queries, k=TOP)[1]
    pairs = dict.fromkeys((query, data.documents[j]) for query, row in zip(queries, top)
                          for j in row)
    return list(pairs)[:N_CALIBRATION]


def part_engines(report):
    import torch

    from skbert import BertReranker

    pairs, candidates = setup()["pairs"], setup()["candidates"]
    rows, scores = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = RERANKER or bce_reranker().save_cross_encoder(Path(tmp) / "reranker")
        read = functools.partial(BertReranker, folder, max_length=MAX_LENGTH)
        readers = {"skbert torch float32": read(),
                   "skbert openvino bfloat16": read(backend="openvino", dtype="bfloat16"),
                   "skbert openvino int8": read(backend="openvino", dtype="int8",
                                                calibration=calibration_pairs())}
        for name, estimator in readers.items():
            if name.split()[-1] not in READERS:
                continue
            score, seconds, scores[name] = rerank(skbert_predict(estimator.fit()), repeats=2)
            rows[name] = {"ndcg@10": score, "rerank_s": seconds}
            print(f"  {name}: {json.dumps(rows[name])}", flush=True)
        if PEERS:
            print(f"  sentence-transformers' CrossEncoder in {PEER_ENV.name}", flush=True)
            found = run_peers({"model": str(folder), "pairs": [list(pair) for pair in pairs],
                               "batch_size": SCORE_BATCH, "threads": torch.get_num_threads(),
                               "repeats": 2})
    if PEERS:
        peer_rows(found, rows, scores, candidates)
    base = rows["skbert torch float32"]
    markdown(["engine", "nDCG@10", "- torch fp32", "rerank s", "torch fp32 s / this"], [
        [name, f"{row['ndcg@10']:.4f}", f"{row['ndcg@10'] - base['ndcg@10']:+.4f}",
         f"{row['rerank_s']:.1f}", f"{base['rerank_s'] / row['rerank_s']:.2f}x"]
        for name, row in rows.items()])
    print("  targets: skbert openvino int8 >= 2x, nDCG@10 within 0.005", flush=True)
    report["engines"] = {"n_pairs": len(pairs), "reranker": str(RERANKER or "compare's bce"),
                         **({"peer_versions": found["versions"],
                             "peer_openvino_precision": found["openvino_precision"]}
                            if PEERS else {}), **rows}


def peer_rows(found, rows, scores, candidates):
    """sentence-transformers' rows of ``engines`` into ``rows``, and how far its torch
    scores lie from skbert's."""
    print("  " + ", ".join(f"{key} {value}" for key, value in found["versions"].items())
          + f"; OpenVINO ran in {found['openvino_precision']}", flush=True)
    for name, row in found["runners"].items():
        rows[f"sentence-transformers {name}"] = {
            "ndcg@10": ndcg(np.reshape(row["scores"], candidates.shape), candidates,
                            setup()["data"]), "rerank_s": row["seconds"]}
    difference = np.abs(np.subtract(found["runners"]["torch fp32"]["scores"],
                                    scores["skbert torch float32"]))
    print(f"  largest |sentence-transformers torch fp32 - skbert torch fp32| score: "
          f"{difference.max():.2e}", flush=True)


def part_folders(report):
    import torch
    from sentence_transformers import CrossEncoder

    from skbert import BertReranker

    pairs = setup()["pairs"][:200]
    ours = bce_reranker()
    if "st" in _TRAINED:
        theirs = _TRAINED["st"]
    else:
        torch.manual_seed(SEED)
        theirs = CrossEncoder(model_path(), num_labels=1, max_length=MAX_LENGTH, device="cpu")
    with tempfile.TemporaryDirectory() as tmp:
        folder = ours.save_cross_encoder(Path(tmp) / "skbert")
        read = st_predict(CrossEncoder(str(folder), device="cpu"))(pairs)
        skbert_to_st = float(np.abs(read - skbert_predict(ours)(pairs)).max())
        theirs.save(str(Path(tmp) / "st"))
        read = skbert_predict(BertReranker(Path(tmp) / "st").fit())(pairs)
        st_to_skbert = float(np.abs(read - st_predict(theirs)(pairs)).max())
    markdown(["round trip (200 test pairs)", "largest |difference| (target 1e-4)"], [
        ["save_cross_encoder -> sentence_transformers.CrossEncoder", f"{skbert_to_st:.2e}"],
        [f"CrossEncoder.save ({'compare' if 'st' in _TRAINED else 'fresh'}) -> "
         "BertReranker.fit()", f"{st_to_skbert:.2e}"]])
    report["folders"] = {"skbert_to_sentence_transformers": skbert_to_st,
                         "sentence_transformers_to_skbert": st_to_skbert}


PARTS = {"compare": part_compare, "firststage": part_firststage,
         "engines": part_engines, "folders": part_folders}


def main():
    global MAX_LENGTH, SEEDS, RERANKER, PEERS, READERS, QUERIES
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="+", choices=list(PARTS))
    parser.add_argument("--smoke", action="store_true",
                        help="a small subset, to check that the script runs")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS),
                        help="compare's training seeds (default: 0)")
    parser.add_argument("--output", type=Path, help="also write the report as JSON here")
    parser.add_argument("--reranker", type=Path,
                        help="engines: read this cross-encoder folder instead of training one")
    parser.add_argument("--readers", nargs="+", choices=READERS, default=list(READERS),
                        help="engines: skbert's rows (torch float32 is the baseline)")
    parser.add_argument("--no-peers", action="store_true",
                        help="engines: without sentence-transformers' rows")
    parser.add_argument("--queries", type=int,
                        help="the first this many test queries only (a shorter engines run)")
    args = parser.parse_args()
    RERANKER, PEERS, READERS = args.reranker, not args.no_peers, tuple(args.readers)
    QUERIES = args.queries
    import sentence_transformers
    import torch
    import transformers

    import skbert

    if args.smoke:
        MAX_LENGTH = 128
    SEEDS = tuple(args.seeds)
    report = {"cpu": cpu(), "torch_threads": torch.get_num_threads(), "smoke": args.smoke,
              "versions": {"skbert": skbert.__version__, "torch": torch.__version__,
                           "transformers": transformers.__version__,
                           "sentence-transformers": sentence_transformers.__version__}}
    print(json.dumps(report, indent=1), flush=True)
    setup(args.smoke)
    for part in args.parts:
        start = time.perf_counter()
        print(f"## {part}", flush=True)
        PARTS[part](report)
        report[f"{part}_wall_seconds"] = time.perf_counter() - start
        print(f"  {part}: {report[f'{part}_wall_seconds']:.0f} s", flush=True)
    if args.output:
        args.output.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
