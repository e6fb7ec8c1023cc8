"""Pickles written before the estimators moved into wings (issue 72) name the old modules
(``skbert._finetune.BertClassifier``): they load, and predict as the estimator did."""

import pickle
import pickletools
import sys

import numpy as np
import pytest

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
from skbert._moved import MOVED

CORPUS = ["a cat sat on the mat", "the dog runs fast", "the river is long", "a big red house",
          "what is the time", "the film was awful"]
QUERIES = ["the cat sat", "what river", "red house"]
PAIRS = [("the cat sat", "a cat sat on the mat"), ("what river", "the river is long"),
         ("red house", "a big red house"), ("the cat sat", "the film was awful")]
LABELS = np.array([0, 1, 0, 1, 2, 2])
WORDS = [(tuple("the cat sat on the mat".split()), i) for i in range(6)]
TAGS = np.array(["DET", "NOUN", "VERB", "ADP", "DET", "NOUN"])
FAST = {"epochs": 1, "learning_rate": 1e-3, "random_state": 0}
# Where each module's names were before: {new module: old module}.
OLD = {new: old for old, modules in MOVED.items() for new in modules}


def _lora(model):
    pytest.importorskip("peft")
    return BertClassifier(model, freeze="lora", persist_weights=False, **FAST).fit(CORPUS, LABELS)


# name -> (a fitted estimator of the tiny model, what it outputs)
ESTIMATORS = {
    "BertClassifier": (lambda m: BertClassifier(m, freeze="all", **FAST).fit(CORPUS, LABELS),
                       lambda e: e.predict_proba(CORPUS)),
    "BertClassifier lora light": (_lora, lambda e: e.predict_proba(CORPUS)),
    "BertRegressor": (lambda m: BertRegressor(m, **FAST).fit(CORPUS, LABELS.astype(float)),
                      lambda e: e.predict(CORPUS)),
    "FineTunedVectorizer": (lambda m: FineTunedVectorizer(BertVectorizer(m), batch_size=3,
                                                          **FAST).fit(PAIRS[:3]),
                            lambda e: e.transform(CORPUS)),
    "StaticVectorizer": (lambda m: StaticVectorizer(BertVectorizer(m), n_components=4).fit(),
                         lambda e: e.transform(CORPUS)),
    "PairSimilarity": (lambda m: PairSimilarity(BertVectorizer(m)).fit(PAIRS),
                       lambda e: e.predict(PAIRS)),
    "BertWordVectorizer": (lambda m: BertWordVectorizer(m).fit(), lambda e: e.transform(WORDS)),
    "BertWordClassifier": (lambda m: BertWordClassifier(m, **FAST).fit(WORDS, TAGS),
                           lambda e: e.predict_proba(WORDS)),
    "BertReranker": (lambda m: BertReranker(m, batch_size=2, **FAST).fit(PAIRS, [1, 1, 1, 0]),
                     lambda e: e.predict(PAIRS)),
    "SimilaritySearch int8, reranked": (
        lambda m: SimilaritySearch(BertVectorizer(m), precision="int8", n_neighbors=3,
                                   reranker=BertReranker(m).fit(PAIRS, [1, 1, 1, 0]),
                                   rerank_k=4).fit(CORPUS),
        lambda e: e.search(QUERIES, k=2)),
    "BM25Vectorizer": (lambda m: BM25Vectorizer(stemmer="english").fit(CORPUS),
                       lambda e: e.transform_queries(QUERIES).toarray()),
    "HybridSearch": (lambda m: HybridSearch([("bm25", SimilaritySearch(BM25Vectorizer())),
                                             ("dense", SimilaritySearch(BertVectorizer(m)))],
                                            depth=4, n_neighbors=3).fit(CORPUS),
                     lambda e: e.search(QUERIES, k=2)),
}


def _globals(data):
    """The ``module.name`` of every GLOBAL opcode of a protocol 2 pickle."""
    return {arg.replace(" ", ".") for op, arg, _ in pickletools.genops(data)
            if op.name == "GLOBAL"}


def as_old_pickle(estimator):
    """``estimator`` pickled as the code before the move pickled it: each class named by the
    module it was in then."""
    data = pickle.dumps(estimator, protocol=2)  # GLOBAL opcodes: "c<module>\n<name>\n"
    for name in _globals(data):
        module, _, qualname = name.rpartition(".")
        if module in OLD:
            data = data.replace(f"c{module}\n{qualname}\n".encode(),
                                f"c{OLD[module]}\n{qualname}\n".encode())
    return data


def test_every_moved_name_is_found_under_its_old_module():
    for old, modules in MOVED.items():
        for new in modules:
            module = sys.modules[new]
            defined = {name: value for name, value in vars(module).items()
                       if getattr(value, "__module__", None) == new}
            assert defined, new
            for name, value in defined.items():
                assert getattr(sys.modules[old], name) is value, f"{old}.{name}"
    assert not hasattr(sys.modules["skbert._finetune"], "SimilaritySearch")


@pytest.mark.parametrize("name", ESTIMATORS)
def test_a_pickle_of_the_old_modules_loads_and_predicts_the_same(tiny_model_dir, name):
    make, output = ESTIMATORS[name]
    estimator = make(tiny_model_dir)
    data = as_old_pickle(estimator)
    named = {module.rpartition(".")[0] for module in _globals(data)}
    assert named & MOVED.keys() and not named & OLD.keys(), named
    loaded = pickle.loads(data)
    assert type(loaded) is type(estimator)
    expected, got = output(estimator), output(loaded)
    if not isinstance(expected, tuple):
        expected, got = (expected,), (got,)
    for a, b in zip(expected, got, strict=True):
        np.testing.assert_array_equal(b, a)
