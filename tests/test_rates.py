"""learning_rate="auto" and head_learning_rate="auto": one measured table for every fine-tuner."""

import numpy as np
import pytest

from skbert import (
    BertClassifier,
    BertRegressor,
    BertReranker,
    BertVectorizer,
    BertWordClassifier,
    FineTunedVectorizer,
)
from skbert._train import _training
from skbert.metrics import ndcg_at_k

TEXTS = ["the cat sat", "a dog ran", "the river is long", "a big red house"]
PAIRS = [("the cat sat", "a cat sat on the mat"), ("what river", "the river is long")]
WORDS = [(("the", "cat", "sat"), i) for i in range(3)] + [(("a", "dog", "ran"), i)
                                                          for i in range(3)]
# Separable (query, positive, negatives...) tuples: each positive repeats its query's words.
TUPLES = [("the cat sat", "the cat sat on the mat", "a long river", "what is the time"),
          ("red house", "a red house", "people run fast", "the film was awful"),
          ("what river", "the long river", "a good movie", "the small blue car"),
          ("a dog ran", "a dog ran fast", "a big red house", "what is the time"),
          ("the film", "the film was good", "a cat sat", "a long river"),
          ("blue car", "the small blue car", "a dog ran fast", "the film was awful")]


def _training_ndcg(reranker):
    """nDCG@10 of the training tuples' documents in the reranker's order (positive first)."""
    qrels, run = {}, {}
    for number, (query, *documents) in enumerate(TUPLES):
        scores = reranker.predict([(query, document) for document in documents])
        qrels[str(number)] = {"0": 1}
        run[str(number)] = {str(i): float(score) for i, score in enumerate(scores)}
    return ndcg_at_k(qrels, run, k=10)


@pytest.mark.parametrize("estimator, fit_args, row", [
    (BertClassifier, (TEXTS, [0, 1, 0, 1]), "BertClassifier"),
    (BertRegressor, (TEXTS, [0.1, 0.9, 0.3, 0.7]), "BertClassifier"),
    (BertWordClassifier, (WORDS, ["DET", "NOUN", "VERB"] * 2), "BertWordClassifier"),
    (BertReranker, (TUPLES,), "BertReranker"),
])
@pytest.mark.parametrize("freeze", ["none", "lora", "all"])
def test_fitted_rates_come_from_the_one_table(tiny_model_dir, estimator, fit_args, row, freeze):
    fitted = estimator(tiny_model_dir, freeze=freeze, epochs=1, random_state=0).fit(*fit_args)
    rate, head_rate = _training.AUTO_RATES[row]["encoder" if freeze == "none" else freeze]
    assert fitted.learning_rate_ == rate
    assert fitted.head_learning_rate_ == (rate if head_rate is None else head_rate)
    # Set rates are used as they are.
    fitted = estimator(tiny_model_dir, freeze=freeze, epochs=1, learning_rate=3e-4,
                       head_learning_rate=7e-3, random_state=0).fit(*fit_args)
    assert (fitted.learning_rate_, fitted.head_learning_rate_) == (3e-4, 7e-3)


@pytest.mark.parametrize("freeze", ["none", "lora"])
def test_fine_tuned_vectorizer_rate_comes_from_the_table(tiny_model_dir, freeze):
    tuned = FineTunedVectorizer(BertVectorizer(tiny_model_dir), freeze=freeze, epochs=1,
                                random_state=0).fit(PAIRS)
    regime = "encoder" if freeze == "none" else freeze
    assert tuned.learning_rate_ == _training.AUTO_RATES["FineTunedVectorizer"][regime][0]


def test_a_fresh_reranker_head_alone_learns_at_the_defaults(minilm_dir):
    # At the encoder's 2e-5 a fresh head stayed at its random start (issue 66: the loss at
    # log 4, the ranking the initial one's). The tiny random model's pooler outputs are too
    # alike to separate; all-MiniLM-L6-v2's are not, and are encoded once (cached).
    params = dict(freeze="all", epochs=10, batch_size=4, random_state=0)  # listwise
    start = BertReranker(minilm_dir, head_learning_rate=1e-12, **params).fit(TUPLES)
    auto = BertReranker(minilm_dir, **params).fit(TUPLES)
    assert auto.head_learning_rate_ == 1e-2
    assert auto.loss_curve_[-1] < start.loss_curve_[-1] - 0.1
    assert _training_ndcg(start) < 0.9
    assert _training_ndcg(auto) == pytest.approx(1.0)


def test_a_pretrained_head_trains_at_the_encoders_rate(tiny_model_dir, tmp_path):
    folder = BertReranker(tiny_model_dir, freeze="all", epochs=1, random_state=0).fit(
        TUPLES).save_cross_encoder(tmp_path / "reranker")
    tuned = BertReranker(folder, freeze="all", epochs=1, random_state=0).fit(TUPLES)
    assert tuned.head_learning_rate_ == tuned.learning_rate_ == 2e-5
    assert BertReranker(folder).fit().learning_rate_ is None


def test_resolved_rates():
    assert _training.resolved_rates("BertReranker", "auto", "auto", "all") == (2e-5, 1e-2)
    assert _training.resolved_rates("BertReranker", 1e-3, "auto", None) == (1e-3, 1e-3)
    assert _training.resolved_rates("BertReranker", "auto", "auto", "all",
                                    fresh_head=False) == (2e-5, 2e-5)
    assert _training.resolved_rates("BertClassifier", "auto", "auto", 2) == (5e-5, 1e-2)
    assert _training.resolved_rates("BertWordClassifier", "auto", 0.1, "lora") == (2e-3, 0.1)
    assert np.isclose(_training.resolved_rates("FineTunedVectorizer", "auto",
                                               freeze="lora")[0], 5e-4)
