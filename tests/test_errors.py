"""One message per mistake, for every estimator that owns an encoder: a method called
before fit, a model folder that does not exist, a hub model that cannot load offline."""

import pytest
from sklearn.exceptions import NotFittedError

from skbert import (
    BertClassifier,
    BertRegressor,
    BertReranker,
    BertVectorizer,
    BertWordClassifier,
    BertWordVectorizer,
    BM25Vectorizer,
    FineTunedVectorizer,
    HybridSearch,
    PairSimilarity,
    SimilaritySearch,
    StaticVectorizer,
)

TEXTS = ["the cat sat", "a dog ran"]
PAIRS = [("the cat sat", "a cat sat on the mat"), ("what river", "the river is long")]
TUPLES = [("the cat sat", "a cat sat on the mat", "the river is long")]
WORDS = [(["the", "cat", "sat"], 1), (["a", "dog", "ran"], 2)]


def _vectorizer(model):
    return BertVectorizer(model, pooling="mean")


# name -> (a maker from the model, how fit is called)
ESTIMATORS = {
    "BertVectorizer": (_vectorizer, lambda estimator: estimator.fit(TEXTS)),
    "BertWordVectorizer": (BertWordVectorizer, lambda estimator: estimator.fit(WORDS)),
    "BertClassifier": (BertClassifier, lambda estimator: estimator.fit(TEXTS, [0, 1])),
    "BertRegressor": (BertRegressor, lambda estimator: estimator.fit(TEXTS, [0.0, 1.0])),
    "FineTunedVectorizer": (lambda model: FineTunedVectorizer(_vectorizer(model)),
                            lambda estimator: estimator.fit(PAIRS)),
    "BertWordClassifier": (BertWordClassifier,
                           lambda estimator: estimator.fit(WORDS, ["NOUN", "VERB"])),
    "BertReranker": (BertReranker, lambda estimator: estimator.fit(TUPLES)),
    "BertReranker.fit()": (BertReranker, lambda estimator: estimator.fit()),
    "StaticVectorizer": (lambda model: StaticVectorizer(_vectorizer(model)),
                         lambda estimator: estimator.fit()),
    "SimilaritySearch": (lambda model: SimilaritySearch(_vectorizer(model)),
                         lambda estimator: estimator.fit(TEXTS)),
    "PairSimilarity": (lambda model: PairSimilarity(_vectorizer(model)),
                       lambda estimator: estimator.fit(PAIRS)),
    "HybridSearch": (lambda model: HybridSearch([("bm25", SimilaritySearch(BM25Vectorizer())),
                                                 ("dense", SimilaritySearch(_vectorizer(model)))]),
                     lambda estimator: estimator.fit(TEXTS)),
}

# The same for those that own no encoder.
NO_MODEL = {
    "BM25Vectorizer": (lambda model: BM25Vectorizer(), lambda estimator: estimator.fit(TEXTS)),
}

# (estimator, method, arguments): every method that needs a fitted estimator.
BEFORE_FIT = [
    ("BertVectorizer", "transform", (TEXTS,)),
    ("BertVectorizer", "get_feature_names_out", ()),
    ("BertVectorizer", "save_sentence_transformer", ("unused",)),
    ("BertWordVectorizer", "transform", (WORDS,)),
    ("BertWordVectorizer", "get_feature_names_out", ()),
    ("BertClassifier", "predict", (TEXTS,)),
    ("BertClassifier", "predict_proba", (TEXTS,)),
    ("BertClassifier", "decision_function", (TEXTS,)),
    ("BertClassifier", "transform", (TEXTS,)),
    ("BertClassifier", "score", (TEXTS, [0, 1])),
    ("BertRegressor", "predict", (TEXTS,)),
    ("BertRegressor", "transform", (TEXTS,)),
    ("BertRegressor", "score", (TEXTS, [0.0, 1.0])),
    ("FineTunedVectorizer", "transform", (TEXTS,)),
    ("FineTunedVectorizer", "get_feature_names_out", ()),
    ("FineTunedVectorizer", "score", (PAIRS,)),
    ("FineTunedVectorizer", "save_sentence_transformer", ("unused",)),
    ("BertWordClassifier", "predict", (WORDS,)),
    ("BertWordClassifier", "predict_proba", (WORDS,)),
    ("BertWordClassifier", "decision_function", (WORDS,)),
    ("BertWordClassifier", "transform", (WORDS,)),
    ("BertWordClassifier", "score", (WORDS, ["NOUN", "VERB"])),
    ("BertReranker", "predict", (PAIRS,)),
    ("BertReranker", "decision_function", (PAIRS,)),
    ("BertReranker", "rank", ("the cat sat", TEXTS)),
    ("BertReranker", "score", (PAIRS, [1.0, 0.0])),
    ("BertReranker", "score", (TUPLES,)),
    ("BertReranker", "save_cross_encoder", ("unused",)),
    ("StaticVectorizer", "transform", (TEXTS,)),
    ("StaticVectorizer", "get_feature_names_out", ()),
    ("StaticVectorizer", "save_model2vec", ("unused",)),
    ("SimilaritySearch", "search", (TEXTS,)),
    ("SimilaritySearch", "kneighbors", (TEXTS,)),
    ("SimilaritySearch", "mine_negatives", (TEXTS, TEXTS)),
    ("PairSimilarity", "predict", (PAIRS,)),
    ("PairSimilarity", "transform", (PAIRS,)),
    ("PairSimilarity", "score", (PAIRS, [0.0, 1.0])),
    ("PairSimilarity", "get_feature_names_out", ()),
    ("BM25Vectorizer", "transform", (TEXTS,)),
    ("BM25Vectorizer", "transform_queries", (TEXTS,)),
    ("BM25Vectorizer", "get_feature_names_out", ()),
    ("HybridSearch", "search", (TEXTS,)),
    ("HybridSearch", "kneighbors", (TEXTS,)),
]


@pytest.mark.parametrize("name, method, arguments", BEFORE_FIT,
                         ids=[f"{name}.{method}" for name, method, _ in BEFORE_FIT])
def test_a_method_before_fit_is_not_fitted_error(tiny_model_dir, tmp_path, name, method,
                                                 arguments):
    make, _ = {**ESTIMATORS, **NO_MODEL}[name]
    arguments = [tmp_path / "saved" if argument == "unused" else argument
                 for argument in arguments]
    with pytest.raises(NotFittedError, match=f"This {name} instance is not fitted yet"):
        getattr(make(tiny_model_dir), method)(*arguments)


@pytest.mark.parametrize("model", ["/wrong/folder", "./my-reranker", "~/no-such-model"])
@pytest.mark.parametrize("name", ESTIMATORS)
def test_a_missing_folder_does_not_exist(name, model):
    make, fit = ESTIMATORS[name]
    with pytest.raises(FileNotFoundError, match=f"Model directory '{model}' does not exist"):
        fit(make(model))


@pytest.mark.parametrize("name", ESTIMATORS)
def test_a_hub_model_not_cached_offline_says_so(name, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    make, fit = ESTIMATORS[name]
    # Not "no sequence-classification head", nor a failed connection: the hub is off.
    with pytest.raises(OSError, match=r"Could not load the model 'skbert-tests/not-cached' "
                                      r"\(revision=None\) offline: HF_HUB_OFFLINE is set and "
                                      r"the Hugging Face cache holds no copy of it"):
        fit(make("skbert-tests/not-cached"))


def test_the_default_reranker_offline_says_it_is_not_cached(monkeypatch):
    from huggingface_hub import constants, try_to_load_from_cache

    model = BertReranker().model
    if isinstance(try_to_load_from_cache(model, "config.json"), str):
        pytest.skip(f"{model} is in this machine's Hugging Face cache")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(OSError, match=f"Could not load the model '{model}' .* offline"):
        BertReranker().fit()
