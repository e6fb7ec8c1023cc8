"""Words and meaning together on SciFact: BM25Vectorizer against bm25s, and fused first stages.

SciFact (BEIR): 5,183 title + abstract documents, 300 test queries, 809 judged
train queries; nDCG@10 on the test queries. Everything in one process on the
CPU, torch's default threads.

- ``bm25``: ``SimilaritySearch(BM25Vectorizer(...))`` against bm25s (its own
  tokenizer, numpy backend) with the same settings: the English Snowball
  stemmer (PyStemmer) and bm25s's "en" stop words (Lucene's 33), k1 1.5, b
  0.75, "lucene". nDCG@10 of both, the largest relative difference of the two
  score matrices (300 queries x 5,183 documents), and the time to index the
  corpus and return the top 10 of the 300 queries (texts in, 5 runs each,
  interleaved: the best and the medians); the index's bytes against a dense
  documents x terms float32 matrix. Then nDCG@10 of the other analyzer
  settings: scikit-learn's "english" stop words with and without the stemmer,
  neither, and the stemmer without stop words.
- ``fusion``: ``HybridSearch`` of that BM25 and the frozen all-MiniLM-L6-v2
  bi-encoder (mean pooling + l2, max_length 256): each alone, RRF (k 60, depth
  100, equal weights), then a grid of 9 BM25 weights (0.1 ... 0.9) x {convex
  with min-max scaling, convex with z-scores, RRF} scored by nDCG@10 on the
  train queries alone, the best applied to the test queries (every
  candidate's test score printed beside, for the record); with the rows the
  encoder forwarded in all (a hook on the shared model: the corpus once, each
  distinct query once).
- ``static``: the same with ``StaticVectorizer(teacher).fit(documents)`` in the
  bi-encoder's place (learned on the corpus), its weight chosen on the train
  queries (convex, 9 weights); the fitted search is pickled and searched again
  in a fresh process in which importing torch or transformers fails.
- Each part prints its costs: fit seconds, index bytes, milliseconds a query
  (300 queries in one call; the transformer's with its cache warm and cold).

Targets (issue 67): BM25 0.6863 within 0.001 and bm25s's scores within 1e-5
relative, "english" without stemmer 0.6663 within 0.001, index + queries no
slower than bm25s; RRF >= 0.716; convex chosen on train >= 0.73; the grid
forwards each document once; BM25 + static >= 0.69 without torch.

Needs ``pip install bm25s PyStemmer`` (the ``dev`` extra) and the shared data
(``../shared/data/scifact``). Run: ``python benchmarks/hybrid.py bm25 fusion
static``; figures in benchmarks/README.md.
"""

import argparse
import json
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from finetune_embeddings import cpu, model_path  # this folder is on sys.path

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact"
WEIGHTS = np.round(np.linspace(0.1, 0.9, 9), 2)  # BM25's weight; the other stage gets 1 - it
_DATA = {}


def data():
    if not _DATA:
        from skbert.datasets import load_beir

        _DATA.update(test=load_beir(DATA, "test"), train=load_beir(DATA, "train"))
    return _DATA["test"], _DATA["train"]


def lucene_stop_words():
    import bm25s

    return sorted(bm25s.stopwords.STOPWORDS_EN)


def bm25_search(**settings):
    from skbert import BM25Vectorizer, SimilaritySearch

    settings = {"stemmer": "english", "stop_words": lucene_stop_words(), **settings}
    return SimilaritySearch(BM25Vectorizer(**settings))


def ndcg(search, split="test"):
    from skbert.metrics import evaluate_retrieval

    test, train = data()
    judged = test if split == "test" else train
    return evaluate_retrieval(search, judged.queries, judged.qrels, test.doc_ids,
                              k_values=(10,))["ndcg@10"]


def query_ms(search, cold=False):
    """Milliseconds a test query, the 300 in one call; ``cold``: with skbert's cache emptied
    first (the transformer encodes every query; else the queries searched before are
    cached)."""
    from skbert import clear_cache

    test, _ = data()
    queries = list(test.queries.values())
    if cold:
        clear_cache()
    start = time.perf_counter()
    search.search(queries, k=10)
    return 1000 * (time.perf_counter() - start) / len(queries)


def part_bm25(report):
    import bm25s
    import Stemmer

    test, _ = data()
    documents, queries = test.documents, list(test.queries.values())
    stemmer = Stemmer.Stemmer("english")

    def theirs():
        retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
        retriever.index(bm25s.tokenize(documents, stopwords="en", stemmer=stemmer,
                                       show_progress=False), show_progress=False)
        tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False,
                                return_ids=False)
        return retriever, retriever.retrieve(tokens, k=10, show_progress=False)

    def ours():
        search = bm25_search().fit(documents)
        return search, search.search(queries, k=10)

    seconds, fitted = {"bm25s": [], "skbert": []}, {}
    for _ in range(5):
        for name, run in (("bm25s", theirs), ("skbert", ours)):
            start = time.perf_counter()
            fitted[name], _ = run()
            seconds[name].append(time.perf_counter() - start)
    retriever, search = fitted["bm25s"], fitted["skbert"]
    tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False,
                            return_ids=False)
    expected = np.stack([retriever.get_scores(query) for query in tokens])
    vectorizer = search.vectorizer_
    got = (vectorizer.transform_queries(queries) @ vectorizer.transform(documents).T).toarray()
    relative = np.abs(got - expected).max() / np.abs(expected).max()
    nonzero = expected != 0
    elementwise = float((np.abs(got - expected)[nonzero] / np.abs(expected[nonzero])).max())
    from skbert.metrics import ndcg_at_k

    run = {query: {test.doc_ids[j]: float(expected[i, j]) for j in
                   np.argsort(-expected[i], kind="stable")[:10]}
           for i, query in enumerate(test.queries)}
    rows = {"bm25s": {"ndcg@10": ndcg_at_k(test.qrels, run, k=10),
                      "index+query_s": min(seconds["bm25s"])},
            "skbert": {"ndcg@10": ndcg(search), "index+query_s": min(seconds["skbert"])}}
    dense_bytes = len(documents) * len(vectorizer.vocabulary_) * 4
    print(f"  {json.dumps(rows)}", flush=True)
    print(f"  largest |skbert - bm25s| / largest bm25s score: {relative:.2e}; elementwise "
          f"relative, over the {int(nonzero.sum())} nonzero scores: {elementwise:.2e}")
    ours, theirs = min(seconds["skbert"]), min(seconds["bm25s"])
    median = np.median(seconds["skbert"]) / np.median(seconds["bm25s"])
    print(f"  index + 300 queries, best of 5: skbert {ours:.2f} s, bm25s {theirs:.2f} s: "
          f"skbert / bm25s {ours / theirs:.2f} (medians: {median:.2f}; all runs: {seconds})")
    print(f"  index: {search.index_bytes_ / 2**20:.1f} MiB sparse, against "
          f"{dense_bytes / 2**20:.0f} MiB for a dense {len(documents)} x "
          f"{len(vectorizer.vocabulary_)} float32 matrix; {query_ms(search):.2f} ms a query")
    variants = {"english stop words, no stemmer": dict(stop_words="english", stemmer=None),
                "english stop words, stemmer": dict(stop_words="english"),
                "no stop words, no stemmer": dict(stop_words=None, stemmer=None),
                "no stop words, stemmer": dict(stop_words=None)}
    for name, settings in variants.items():
        rows[name] = {"ndcg@10": ndcg(bm25_search(**settings).fit(documents))}
        print(f"  {name}: nDCG@10 {rows[name]['ndcg@10']:.4f}", flush=True)
    report["bm25"] = {**rows, "max_relative_difference": float(relative),
                      "max_elementwise_relative_difference": elementwise,
                      "index_bytes": int(search.index_bytes_), "dense_bytes": dense_bytes}


def count_forward_rows():
    """Rows through all-MiniLM-L6-v2's forward from now on: a hook on the loaded model, which
    every BertVectorizer of that folder shares (clones included)."""
    from skbert import BertVectorizer

    counter = {"rows": 0}

    def hook(module, args, kwargs):
        counter["rows"] += kwargs["input_ids"].shape[0]

    BertVectorizer(model_path()).fit().model_.register_forward_pre_hook(hook, with_kwargs=True)
    return counter


def tuned(search, grid):
    """The grid's candidates scored by train nDCG@10 (set_params on the fitted search: no
    refit), the best applied; returns (best params, {candidate: train nDCG@10})."""
    from sklearn.model_selection import ParameterGrid

    scores = {}
    for params in ParameterGrid(grid):
        scores[json.dumps(params, default=float)] = ndcg(search.set_params(**params), "train")
    best = json.loads(max(scores, key=scores.get))
    search.set_params(**best)
    return best, scores


def weight_grid(fusions=("convex",)):
    """BM25's weight x each fusion; the convex one with both per-query scalings."""
    weights = [[float(w), float(1 - w)] for w in WEIGHTS]
    return [{"fusion": [fusion], "weights": weights,
             **({"normalization": ["minmax", "zscore"]} if fusion == "convex" else {})}
            for fusion in fusions]


def fused_rows(name, second):
    """BM25 and ``second`` (an unfitted SimilaritySearch) fitted apart (timed), alone and
    fused: the HybridSearch uses them as they are (FrozenEstimator)."""
    from sklearn.frozen import FrozenEstimator

    from skbert import HybridSearch

    test, _ = data()
    stages, rows = {}, {}
    for stage, search in (("bm25", bm25_search()), (name, second)):
        start = time.perf_counter()
        stages[stage] = search.fit(test.documents)
        fit_s = time.perf_counter() - start
        rows[stage] = {"ndcg@10": ndcg(search), "fit_s": fit_s,
                       "index_bytes": int(search.index_bytes_), "ms_a_query": query_ms(search)}
    hybrid = HybridSearch([(stage, FrozenEstimator(search)) for stage, search in stages.items()])
    hybrid.fit(test.documents)
    rows["rrf k60 depth100"] = {"ndcg@10": ndcg(hybrid.set_params(fusion="rrf")),
                                "ms_a_query": query_ms(hybrid)}
    print(f"  {json.dumps(rows)}", flush=True)
    return hybrid, rows


def part_fusion(report):
    from skbert import BertVectorizer, SimilaritySearch

    test, train = data()
    counter = count_forward_rows()
    dense = SimilaritySearch(BertVectorizer(model_path(), pooling="mean", norm="l2",
                                            max_length=256))
    hybrid, rows = fused_rows("dense", dense)
    start = time.perf_counter()
    best, scores = tuned(hybrid, weight_grid(("convex", "rrf")))
    grid_s = time.perf_counter() - start
    # For the record, not for the choice: every candidate's test score.
    test_scores = {candidate: ndcg(hybrid.set_params(**json.loads(candidate)))
                   for candidate in scores}
    hybrid.set_params(**best)
    print("  candidate: train / test nDCG@10\n" + "\n".join(
        f"    {candidate}: {scores[candidate]:.4f} / {test_scores[candidate]:.4f}"
        for candidate in scores), flush=True)
    rows["chosen on train"] = {"params": best, "train ndcg@10": scores[json.dumps(best)],
                               "ndcg@10": ndcg(hybrid), "ms_a_query": query_ms(hybrid)}
    distinct = len(set(test.queries.values()) | set(train.queries.values()))
    print(f"  grid of {len(scores)} on the {len(train.queries)} train queries: {grid_s:.0f} s; "
          f"chosen {best} (train {scores[json.dumps(best)]:.4f}): test nDCG@10 "
          f"{rows['chosen on train']['ndcg@10']:.4f}", flush=True)
    print(f"  rows through the encoder in all: {counter['rows']} (documents "
          f"{len(test.documents)} + distinct queries {distinct} = "
          f"{len(test.documents) + distinct})", flush=True)
    # Last: emptying the cache makes later searches encode their queries again.
    rows["chosen on train"]["ms_a_query_cold"] = query_ms(hybrid, cold=True)
    rows["dense"]["ms_a_query_cold"] = query_ms(hybrid.named_searches_.dense, cold=True)
    print(f"  a query, cold cache: dense {rows['dense']['ms_a_query_cold']:.2f} ms, fused "
          f"{rows['chosen on train']['ms_a_query_cold']:.2f} ms", flush=True)
    report["fusion"] = {**rows, "grid_s": grid_s, "grid": scores, "grid_test": test_scores,
                        "forward_rows": counter["rows"],
                        "documents_plus_distinct_queries": len(test.documents) + distinct}


TORCH_FREE = """
import json, pickle, sys, time
class NotInstalled:  # importing torch or transformers raises ImportError
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "transformers"):
            raise ImportError(f"No module named {name!r}")
sys.meta_path.insert(0, NotInstalled())
from skbert.datasets import load_beir
from skbert.metrics import evaluate_retrieval
search = pickle.load(open(sys.argv[1], "rb"))
test = load_beir(sys.argv[2], "test")
start = time.perf_counter()
score = evaluate_retrieval(search, test.queries, test.qrels, test.doc_ids, k_values=(10,))
seconds = time.perf_counter() - start
assert not any(name.partition(".")[0] in ("torch", "transformers") for name in sys.modules)
print(json.dumps({"ndcg@10": score["ndcg@10"], "ms_a_query": 1000 * seconds / len(test.queries)}))
"""


def part_static(report):
    from skbert import BertVectorizer, SimilaritySearch, StaticVectorizer

    teacher = BertVectorizer(model_path(), pooling="mean", norm="l2")
    hybrid, rows = fused_rows("static", SimilaritySearch(StaticVectorizer(teacher)))
    best, scores = tuned(hybrid, weight_grid())
    rows["chosen on train"] = {"params": best, "train ndcg@10": scores[json.dumps(best)],
                               "ndcg@10": ndcg(hybrid), "ms_a_query": query_ms(hybrid)}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "hybrid.pkl"
        path.write_bytes(pickle.dumps(hybrid))
        done = subprocess.run([sys.executable, "-c", TORCH_FREE, str(path), str(DATA)],
                              capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(done.stderr)
        rows["torch-free process"] = {**json.loads(done.stdout.strip().splitlines()[-1]),
                                      "pickle_bytes": path.stat().st_size}
    print(f"  chosen {best} (train {scores[json.dumps(best)]:.4f}): test nDCG@10 "
          f"{rows['chosen on train']['ndcg@10']:.4f}; torch-free process: "
          f"{json.dumps(rows['torch-free process'])}", flush=True)
    report["static"] = {**rows, "grid": scores}


PARTS = {"bm25": part_bm25, "fusion": part_fusion, "static": part_static}


def main():
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("DISABLE_TQDM", "1")  # bm25s's bars
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="+", choices=list(PARTS))
    parser.add_argument("--output", help="also write the report as JSON here")
    args = parser.parse_args()
    import torch

    report = {"cpu": cpu(), "torch_threads": torch.get_num_threads()}
    print(json.dumps(report), flush=True)
    for part in args.parts:
        print(f"## {part}", flush=True)
        start = time.perf_counter()
        PARTS[part](report)
        print(f"  ({time.perf_counter() - start:.0f} s)", flush=True)
    if args.output:
        Path(args.output).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
