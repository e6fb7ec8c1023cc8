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
- ``tuning`` (issue 72, item 17): on three corpora (below), BM25, the
  bi-encoder, and ``HybridSearch`` over both with equal weights (RRF k 60,
  convex min-max, convex z-scores) at depth 50, 100 and 200, nDCG@10 on the
  test queries; then ``fusion``'s 27 candidates (and a larger grid of 54:
  RRF also at rrf_k 10, 30, 100) chosen on random subsets of 10, 25, 50, 100,
  200 tuning queries (5 draws each, ``numpy.random.default_rng([size,
  draw])``; the first best in grid order, as GridSearchCV) and on all of
  them, each choice scored on the test queries against the untuned settings
  at depth 100. Per-query nDCG@10 of every candidate is computed once, so a
  draw costs no search.
- ``exact`` (item 18): ``HybridSearch(depth=None)``, which scores every
  document in both stages (BM25: the query's ``transform_queries`` row times
  the document's; the bi-encoder: the dot product of unit vectors) and
  normalizes each stage's scores over the whole corpus, against depth 100
  (a document outside a stage's top 100 takes that stage's lowest score
  there); each depth's BM25 weight (9) x min-max / z-scores chosen on the
  tuning queries, scored on the test queries, with a paired bootstrap of
  the gain; then SciFact's 300 test queries in one call (7 interleaved
  rounds, medians, the encoder's cache warm) at both depths' choices.
- Corpora of ``tuning`` and ``exact`` (``--corpora``): SciFact (tuning: the
  809 train queries; test: the 300); the bundled sample
  ``examples/data/scifact_sample`` (600 abstracts; 200 train claims, 80
  test); STS-B as duplicate retrieval (``stsb_task``: the 2,776 distinct
  sentence2 of the dev and test pairs are the corpus; a query is a distinct
  sentence1 of a pair scored >= 4.0 whose text is not itself a corpus
  sentence, relevant (1) the sentence2 of each such pair: 541 queries,
  shuffled with numpy seed 0 and halved: 270 tuning, 271 test).
- Each part prints its costs: fit seconds, index bytes, milliseconds a query
  (300 queries in one call; the transformer's with its cache warm and cold).

Targets (issue 67): BM25 0.6863 within 0.001 and bm25s's scores within 1e-5
relative, "english" without stemmer 0.6663 within 0.001, index + queries no
slower than bm25s; RRF >= 0.716; convex chosen on train >= 0.73; the grid
forwards each document once; BM25 + static >= 0.69 without torch.

Measured for issue 72 (2026-12-07, HybridSearch of 8ab0a67, timings provisional: a shared
machine). ``tuning``, test nDCG@10 with equal weights, SciFact / sample / STS-B (mean): RRF k
60 0.7171 / 0.9035 / 0.9427 (0.8544), convex min-max 0.7282 / 0.9398 / 0.9462 (0.8714),
convex z-scores 0.7301 / 0.9469 / 0.9522 (0.8764), all at depth 100 (depth 50 and 200: no
better on the mean). Tuned on 10, 25, 50, 100, 200 SciFact train queries: 0.7028, 0.7070,
0.7274, 0.7206, 0.7220 (means of 5 draws; all 809: 0.7301), beating RRF in 0, 1, 5, 4, 4
draws of 5 and convex z-scores in none (on the sample none either; on STS-B, where the
bi-encoder is the stronger stage, all from 10 queries). Re-run after issue 72's fusion fixes:
the same figures. ``exact`` (the prototype then, HybridSearch(depth=None) now: the same
nDCG@10), tuned, SciFact test: depth 100 0.7301, depth None 0.7331 (+0.00305; 25 queries
better, 8 worse; bootstrap 95% [-0.005, +0.011]); the sample +0.016, STS-B +0.003. Query
time, cache warm, idle Zen 4: depth None 1.37x depth 100's (0.684 vs 0.498 ms a query).

Needs ``pip install bm25s PyStemmer`` (the ``dev`` extra) and the shared data
(``../shared/data/scifact``, ``../shared/data/stsb``). Run: ``python
benchmarks/hybrid.py bm25 fusion static``, and ``python benchmarks/hybrid.py
tuning exact --cache DIR`` (the bi-encoder's forward passes kept in DIR, so
that a re-run encodes nothing); figures in benchmarks/README.md.
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
    from skbert import SimilaritySearch

    test, train = data()
    counter = count_forward_rows()
    dense = SimilaritySearch(dense_vectorizer())
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


# Issue 72, items 17 and 18: how many judged queries tuning needs; exact convex fusion.

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "data" / "scifact_sample"
STSB = DATA.parent / "stsb"
TASKS = ["scifact", "sample", "stsb"]  # --corpora picks some
SIZES = (10, 25, 50, 100, 200)  # tuning queries drawn, N_DRAWS times each
N_DRAWS = 5
RRF_KS = (60, 10, 30, 100)  # the larger grid's RRF offsets (60 alone in the 27)
DEPTHS = (50, 100, 200)
UNTUNED = {"RRF k 60": {"fusion": "rrf"},
           "convex min-max": {"fusion": "convex", "normalization": "minmax"},
           "convex z-scores": {"fusion": "convex", "normalization": "zscore"}}
OPTIONS = {"cache": True}  # the encoder's cache; --cache DIR keeps it on disk for re-runs
_TASKS = {}


def dense_vectorizer():
    from skbert import BertVectorizer

    return BertVectorizer(model_path(), pooling="mean", norm="l2", max_length=256,
                          cache=OPTIONS["cache"])


def stsb_task():
    """STS-B as duplicate retrieval: the corpus is the distinct sentence2 of the dev and test
    pairs (file order, dev first); a query is a distinct sentence1 of a pair scored >= 4.0
    whose text is not itself a corpus sentence, relevant (1) the sentence2 of each such pair;
    the queries shuffled (numpy seed 0) and halved, tuning half first."""
    import csv

    pairs = []
    for split in ("dev", "test"):
        with open(STSB / f"{split}.tsv", newline="", encoding="utf-8") as file:
            pairs += [(row["sentence1"], row["sentence2"], float(row["score"])) for row in
                      csv.DictReader(file, delimiter="\t", quoting=csv.QUOTE_NONE)]
    documents = list(dict.fromkeys(second for _, second, _ in pairs))
    doc_id = {text: f"d{i}" for i, text in enumerate(documents)}
    relevant = {}
    for first, second, score in pairs:
        if score >= 4.0 and first not in doc_id:
            relevant.setdefault(first, {})[doc_id[second]] = 1
    texts = list(relevant)
    order = np.random.default_rng(0).permutation(len(texts))

    def split(positions):
        positions = sorted(positions)
        return ({f"q{i}": texts[i] for i in positions},
                {f"q{i}": relevant[texts[i]] for i in positions})

    half = len(texts) // 2
    return {"documents": documents, "doc_ids": list(doc_id.values()),
            "tune": split(order[:half]), "test": split(order[half:])}


def task(name):
    """A corpus, its tuning and test queries ((queries, qrels) each) and its stages, fitted
    once a process: BM25, the bi-encoder, and HybridSearch over both (FrozenEstimator)."""
    if name not in _TASKS:
        from sklearn.frozen import FrozenEstimator
        from sklearn.utils import Bunch

        from skbert import HybridSearch, SimilaritySearch
        from skbert.datasets import load_beir

        if name == "stsb":
            item = Bunch(**stsb_task())
        else:
            test, train = (data() if name == "scifact" else
                           (load_beir(SAMPLE, "test"), load_beir(SAMPLE, "train")))
            item = Bunch(documents=test.documents, doc_ids=test.doc_ids,
                         tune=(train.queries, train.qrels), test=(test.queries, test.qrels))
        start = time.perf_counter()
        item.bm25 = bm25_search().fit(item.documents)
        item.dense = SimilaritySearch(dense_vectorizer()).fit(item.documents)
        item.hybrid = HybridSearch([("bm25", FrozenEstimator(item.bm25)),
                                    ("dense", FrozenEstimator(item.dense))]).fit(item.documents)
        print(f"  {name}: {len(item.documents)} documents, {len(item.tune[1])} tuning and "
              f"{len(item.test[1])} test queries; stages fitted in "
              f"{time.perf_counter() - start:.0f} s", flush=True)
        _TASKS[name] = item
    return _TASKS[name]


def judged_texts(item, split):
    """The texts of ``split``'s judged queries ("tune" or "test"), in qrels order."""
    queries, qrels = item[split]
    return [queries[query] for query in qrels]


def query_ndcg(item, split, ranking):
    """nDCG@10 of each judged query of ``split``, from ``(scores, indices)`` of its texts in
    qrels order, as evaluate_retrieval scores them (its ndcg@10 is their mean)."""
    from skbert.metrics import ndcg_at_k

    qrels = item[split][1]
    return np.array([ndcg_at_k({query: qrels[query]}, {query: {
        item.doc_ids[j]: float(score) for score, j in zip(scores, indices)}}, k=10)
        for query, scores, indices in zip(qrels, *ranking)])


def searched_ndcg(item, split, search):
    return query_ndcg(item, split, search.search(judged_texts(item, split), k=10))


def hybrid_grid():
    """(label, HybridSearch parameters): the 27 of ``fusion``'s grid first (9 BM25 weights x
    convex min-max, convex z-scores, RRF k 60), then RRF at the other RRF_KS."""
    kinds = [("convex", "minmax", 60), ("convex", "zscore", 60)]
    kinds += [("rrf", "minmax", rrf_k) for rrf_k in RRF_KS]
    return [(f"convex {normalization} {w:.1f}" if fusion == "convex" else f"RRF k{rrf_k} {w:.1f}",
             {"fusion": fusion, "normalization": normalization, "rrf_k": rrf_k,
              "weights": [float(w), float(1 - w)]})
            for fusion, normalization, rrf_k in kinds for w in WEIGHTS]


def drawn_choices(tune, test, untuned, n_candidates):
    """Tuning on random subsets of the tuning queries: for each size (and all of them), the
    candidate with the best mean of ``tune`` (candidates x queries) over N_DRAWS draws (the
    first best in grid order, as GridSearchCV), among the first ``n_candidates``; its test
    mean, and in how many draws it beat each untuned test mean."""
    n_tune, rows = tune.shape[1], {}
    for size in [size for size in SIZES if size < n_tune] + [n_tune]:
        chosen = [int(np.argmax(tune[:n_candidates, np.random.default_rng([size, draw]).choice(
            n_tune, size, replace=False)].mean(axis=1)))
            for draw in range(N_DRAWS if size < n_tune else 1)]
        scores = test[chosen].mean(axis=1)
        rows[size] = {"chosen": chosen, "test": scores.tolist(), "mean": float(scores.mean()),
                      "std": float(scores.std(ddof=1)) if len(scores) > 1 else 0.0,
                      "beats": {name: int((scores > value).sum())
                                for name, value in untuned.items()}}
    return rows


def part_tuning(report):
    """Item 17: the untuned settings on each corpus, and tuning on subsets."""
    grid = hybrid_grid()
    labels = [label for label, _ in grid]
    results = {}
    for name in TASKS:
        item = task(name)
        hybrid, start = item.hybrid, time.perf_counter()
        rows = {stage: searched_ndcg(item, "test", search).mean()
                for stage, search in (("BM25", item.bm25), ("bi-encoder", item.dense))}
        for depth in DEPTHS:
            for label, params in UNTUNED.items():
                hybrid.set_params(**{"weights": None, "depth": depth, "normalization": "minmax",
                                     "rrf_k": 60, **params})
                rows[f"{label}, depth {depth}"] = searched_ndcg(item, "test", hybrid).mean()
        check = ndcg(hybrid, "test") if name == "scifact" else None
        hybrid.set_params(depth=100)
        scores = {split: np.stack([searched_ndcg(item, split, hybrid.set_params(**params))
                                   for _, params in grid]) for split in ("tune", "test")}
        untuned = {label: rows[f"{label}, depth 100"] for label in UNTUNED}
        draws = {n: drawn_choices(scores["tune"], scores["test"], untuned, n)
                 for n in (27, len(grid))}
        for n, chosen in draws.items():
            rows[f"tuned on all tuning queries ({n} candidates)"] = \
                chosen[scores["tune"].shape[1]]["mean"]
        results[name] = {"rows": rows, "labels": labels, "draws": draws,
                         "grid": {label: [float(scores["tune"][i].mean()),
                                          float(scores["test"][i].mean())]
                                  for i, label in enumerate(labels)},
                         "seconds": time.perf_counter() - start}
        if check is not None:  # the per-query means are evaluate_retrieval's figure
            assert abs(check - rows["convex z-scores, depth 200"]) < 1e-12, check
        print(f"  {name}: {results[name]['seconds']:.0f} s", flush=True)
        for n, chosen in draws.items():
            print(f"  {name}, tuned on subsets ({n} candidates): size: test nDCG@10 mean +- std "
                  f"[min, max]; draws beating " + ", ".join(untuned) + " (depth 100)")
            for size, row in chosen.items():
                print(f"    {size}: {row['mean']:.4f} +- {row['std']:.4f} [{min(row['test']):.4f}"
                      f", {max(row['test']):.4f}]; " + ", ".join(
                          f"{row['beats'][label]}/{len(row['test'])}" for label in untuned)
                      + "; chosen " + ", ".join(labels[i] for i in row["chosen"]), flush=True)
    print("\n  | setting, equal weights | " + " | ".join(TASKS) + " | mean |\n  |---"
          + "|---" * (len(TASKS) + 1) + "|")
    for label in results[TASKS[0]]["rows"]:
        values = [results[name]["rows"][label] for name in TASKS]
        print(f"  | {label} | " + " | ".join(f"{value:.4f}" for value in values)
              + f" | {np.mean(values):.4f} |")
    report["tuning"] = results


def convex_grid():
    return [(normalization, [float(w), float(1 - w)])
            for normalization in ("minmax", "zscore") for w in WEIGHTS]


def interleaved(runs, repeats):
    """Seconds of each run (name: callable), ``repeats`` rounds of all in turn."""
    seconds = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - start)
    return seconds


def part_exact(report):
    """Item 18: ``HybridSearch(depth=None)`` (every document scored in both stages, each
    stage's scores normalized over the whole corpus) against depth 100, each with its BM25
    weight and normalization chosen on the tuning queries; on SciFact, their query time."""
    from scipy.stats import binomtest

    results = {}
    for name in TASKS:
        item, start = task(name), time.perf_counter()
        rows = {}
        for depth in (100, None):
            grid = {}
            for normalization, weights in convex_grid():
                item.hybrid.set_params(fusion="convex", depth=depth, weights=weights,
                                       normalization=normalization)
                grid[f"{normalization} {weights[0]:.1f}"] = [
                    searched_ndcg(item, split, item.hybrid) for split in ("tune", "test")]
            best = max(grid, key=lambda label: grid[label][0].mean())  # the first best
            rows[f"depth {depth}"] = {
                "chosen": best, "tune": float(grid[best][0].mean()),
                "test": float(grid[best][1].mean()), "test_per_query": grid[best][1].tolist(),
                "grid": {label: [float(tune.mean()), float(test.mean())]
                         for label, (tune, test) in grid.items()}}
        gain = (np.array(rows["depth None"]["test_per_query"])
                - np.array(rows["depth 100"]["test_per_query"]))
        # The gain's 95% interval over test queries drawn again (paired bootstrap).
        means = gain[np.random.default_rng(0).integers(0, len(gain), (2000, len(gain)))]
        better, worse = int((gain > 0).sum()), int((gain < 0).sum())
        rows["gain"] = {"mean": float(gain.mean()), "better": better, "worse": worse,
                        "sign_test_p": binomtest(better, better + worse).pvalue
                        if better + worse else 1.0,
                        "interval": np.percentile(means.mean(axis=1), [2.5, 97.5]).tolist()}
        rows["seconds"] = time.perf_counter() - start
        results[name] = rows
        print(f"  {name} ({rows['seconds']:.0f} s): " + "; ".join(
            f"depth {depth}: chosen {rows[f'depth {depth}']['chosen']} (tune "
            f"{rows[f'depth {depth}']['tune']:.4f}), test {rows[f'depth {depth}']['test']:.4f}"
            for depth in (100, None))
            + f"; gain {gain.mean():+.5f}, 95% [{rows['gain']['interval'][0]:+.4f}, "
            f"{rows['gain']['interval'][1]:+.4f}], {better} queries better, {worse} worse "
            f"(sign test p {rows['gain']['sign_test_p']:.3f})", flush=True)
    print("\n  | convex fusion | " + " | ".join(TASKS) + " | mean |\n  |---"
          + "|---" * (len(TASKS) + 1) + "|")
    for depth in (100, None):
        for setting in ("tuned", "minmax 0.5", "zscore 0.5"):
            values = [results[name][f"depth {depth}"]["test"] if setting == "tuned" else
                      results[name][f"depth {depth}"]["grid"][setting][1] for name in TASKS]
            print(f"  | depth {depth}, {setting} | " + " | ".join(f"{v:.4f}" for v in values)
                  + f" | {np.mean(values):.4f} |")
    if "scifact" in results:
        results["seconds"] = exact_seconds(results["scifact"])
    report["exact"] = results


def exact_seconds(rows, repeats=7):
    """SciFact's 300 test queries in one call at each depth's choice on the train queries,
    ``repeats`` interleaved rounds (the encoder's cache warm: queries read, not encoded);
    then the queries encoded cold, for scale."""
    item = task("scifact")
    texts = judged_texts(item, "test")
    runs = {}
    for depth in (100, None):
        normalization, weight = rows[f"depth {depth}"]["chosen"].split()
        params = {"fusion": "convex", "depth": depth, "normalization": normalization,
                  "weights": [float(weight), 1 - float(weight)]}
        runs[f"depth {depth}"] = (lambda params=params:
                                  item.hybrid.set_params(**params).search(texts, k=10))
    seconds = interleaved(runs, repeats)
    cold = dense_vectorizer().set_params(cache=False).fit()
    seconds["queries encoded, no cache"] = interleaved({"": lambda: cold.transform(texts)},
                                                       3)[""]
    base = np.median(seconds["depth 100"])
    for name, values in seconds.items():
        print(f"  {name}: median {1000 * np.median(values) / len(texts):.3f} ms a query, "
              f"{np.median(values) / base:.2f}x depth 100's (runs: "
              + ", ".join(f"{value:.3f}" for value in values) + " s)", flush=True)
    return seconds


PARTS = {"bm25": part_bm25, "fusion": part_fusion, "static": part_static,
         "tuning": part_tuning, "exact": part_exact}


def main():
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("DISABLE_TQDM", "1")  # bm25s's bars
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="+", choices=list(PARTS))
    parser.add_argument("--output", help="also write the report as JSON here")
    parser.add_argument("--cache", help="a directory for the encoder's cache (BertVectorizer's "
                        "cache=), so that a re-run encodes nothing again (fusion's count of "
                        "forwarded rows then leaves out what DIR holds); default: in memory")
    parser.add_argument("--corpora", nargs="+", choices=TASKS, default=list(TASKS),
                        help="the corpora of the tuning and exact parts")
    args = parser.parse_args()
    if args.cache:
        OPTIONS["cache"] = args.cache
    TASKS[:] = args.corpora
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
