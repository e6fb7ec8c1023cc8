"""fit_transform reads X once: every skbert transformer that has it gives, for a generator,
what it gives for the same items in a list (issue 66, item 2)."""

import numpy as np
import pytest

from skbert import (
    BertVectorizer,
    BertWordVectorizer,
    BM25Vectorizer,
    FineTunedVectorizer,
    PairSimilarity,
    StaticVectorizer,
)

TEXTS = [f"the {adjective} {word}" for word in ("cat", "dog", "river", "film")
         for adjective in ("big", "red", "good")]
LABELS = np.arange(len(TEXTS)) % 3
WORD_SAMPLES = [(text.split(), i) for text in TEXTS[:4] for i in range(3)]
PAIRS = list(zip(TEXTS[:6], TEXTS[6:]))
WORD_PAIRS = list(zip(WORD_SAMPLES[:6], WORD_SAMPLES[6:]))


def transformers(model):
    """(name, transformer, X, y) of every transformer with a fit_transform."""
    return {
        "BertVectorizer": (BertVectorizer(model, pooling="mean"), TEXTS, None),
        "BertWordVectorizer": (BertWordVectorizer(model), WORD_SAMPLES, None),
        "FineTunedVectorizer": (FineTunedVectorizer(BertVectorizer(model), loss="supcon",
                                                    epochs=1, batch_size=6, random_state=0),
                                TEXTS, LABELS),
        "StaticVectorizer": (StaticVectorizer(BertVectorizer(model, pooling="mean"),
                                              n_components=4), TEXTS, None),
        "PairSimilarity": (PairSimilarity(BertVectorizer(model)), PAIRS, None),
        "PairSimilarity-words": (PairSimilarity(BertWordVectorizer(model)), WORD_PAIRS, None),
        "BM25Vectorizer": (BM25Vectorizer(), TEXTS, None),
    }


@pytest.mark.parametrize("name", list(transformers(None)))
def test_fit_transform_of_a_generator_equals_that_of_the_list(tiny_model_dir, name):
    from sklearn.base import clone

    estimator, X, y = transformers(tiny_model_dir)[name]
    expected = clone(estimator).fit_transform(list(X), y)
    got = clone(estimator).fit_transform((item for item in X), y)
    if hasattr(got, "toarray"):  # sparse rows
        got, expected = got.toarray(), expected.toarray()
    assert got.shape == expected.shape == (len(X), expected.shape[1])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
