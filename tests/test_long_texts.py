"""Long texts (head, tail, head_tail, chunks) and text pairs, against direct computations."""

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from skbert import BertVectorizer
from tests.reference import reference_features

MAX_LENGTH = 16  # 14 text tokens + [CLS] + [SEP]
BUDGET = MAX_LENGTH - 2


@pytest.fixture(scope="module")
def direct(tiny_model_dir):
    """Mean-pooled last layer of explicit windows of text token ids, straight through the model."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModel.from_pretrained(tiny_model_dir).eval()

    def encode(text_ids_per_window):
        rows = []
        for ids in text_ids_per_window:
            full = [tokenizer.cls_token_id, *ids, tokenizer.sep_token_id]
            with torch.no_grad():
                hidden = model(input_ids=torch.tensor([full])).last_hidden_state[0]
            rows.append(hidden.double().mean(0).numpy())
        return np.array(rows)

    def text_ids(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    return encode, text_ids


def words(n, seed):
    vocabulary = "the cat dog sat ran on mat house river city red blue good bad".split()
    return " ".join(np.random.default_rng(seed).choice(vocabulary, n))


def vectorize(model_dir, texts, **params):
    return BertVectorizer(model_dir, max_length=MAX_LENGTH, **params).fit().transform(texts)


def test_shared_start_equal_only_under_head(tiny_model_dir):
    start = words(40, 0)
    texts = [start + " " + words(10, 1), start + " " + words(10, 2)]
    for truncation in ("head", "tail", "head_tail", "chunks"):
        a, b = vectorize(tiny_model_dir, texts, truncation=truncation)
        assert np.allclose(a, b) == (truncation == "head"), truncation


@pytest.mark.parametrize("truncation", ["tail", "head_tail"])
def test_tail_and_head_tail_against_direct(tiny_model_dir, direct, truncation):
    encode, text_ids = direct
    texts = [words(37, 3), words(5, 4)]
    got = vectorize(tiny_model_dir, texts, truncation=truncation)
    n_head = BUDGET // 4 if truncation == "head_tail" else 0
    kept = []
    for text in texts:
        ids = text_ids(text)
        kept.append(ids if len(ids) <= BUDGET else ids[:n_head] + ids[len(ids) - BUDGET + n_head:])
    np.testing.assert_allclose(got, encode(kept), atol=1e-5)


@pytest.mark.parametrize("stride", [0, 3])
@pytest.mark.parametrize("chunk_pooling", ["mean", "max", "weighted"])
def test_chunks_against_direct_windows(tiny_model_dir, direct, stride, chunk_pooling):
    encode, text_ids = direct
    texts = [words(45, 5), words(3, 6), words(BUDGET + 1, 7)]
    got = vectorize(tiny_model_dir, texts, truncation="chunks", stride=stride,
                    chunk_pooling=chunk_pooling)
    for row, text in zip(got, texts):
        ids = text_ids(text)
        starts = range(0, max(len(ids) - stride, 1), BUDGET - stride)
        windows = [ids[s:s + BUDGET] for s in starts]
        vectors = encode(windows)
        weights = np.array([len(w) for w in windows], float)
        expected = {"mean": vectors.mean(0), "max": vectors.max(0),
                    "weighted": weights @ vectors / weights.sum()}[chunk_pooling]
        np.testing.assert_allclose(row, expected, atol=1e-5)


def test_window_boundaries(tiny_model_dir, direct):
    encode, text_ids = direct
    exact, one_more = words(BUDGET, 8), words(BUDGET + 1, 8)
    assert len(text_ids(exact)) == BUDGET and len(text_ids(one_more)) == BUDGET + 1
    single = vectorize(tiny_model_dir, [exact], truncation="chunks")
    np.testing.assert_allclose(single, encode([text_ids(exact)]), atol=1e-5)
    ids = text_ids(one_more)
    double = vectorize(tiny_model_dir, [one_more], truncation="chunks")
    np.testing.assert_allclose(double, encode([ids[:BUDGET], ids[BUDGET:]]).mean(0)[None],
                               atol=1e-5)


@pytest.mark.parametrize("stride", [BUDGET, BUDGET + 5])
def test_stride_not_smaller_than_window_is_rejected(tiny_model_dir, stride):
    vectorizer = BertVectorizer(tiny_model_dir, max_length=MAX_LENGTH, truncation="chunks",
                                stride=stride)
    message = rf"stride={stride} must be smaller than the text tokens of a window \(max_length=16"
    with pytest.raises(ValueError, match=message + r" less special tokens = 14\)"):
        vectorizer.fit()


def test_texts_that_fit_are_equal_under_every_strategy(tiny_model_dir, texts):
    vectorizer = BertVectorizer(tiny_model_dir, pooling="max", layer=[0, -1], stride=2).fit()
    base = vectorizer.transform(texts)
    for truncation in ("tail", "head_tail", "chunks"):
        for chunk_pooling in ("mean", "max", "weighted"):
            params = dict(truncation=truncation, chunk_pooling=chunk_pooling)
            got = vectorizer.set_params(**params).fit().transform(texts)
            np.testing.assert_allclose(got, base, atol=1e-6)


@pytest.mark.parametrize("truncation", ["head", "tail", "head_tail", "chunks"])
def test_a_million_characters(tiny_model_dir, truncation):
    text = ("the cat sat on the mat " * 45_000)[:1_000_000]
    out = BertVectorizer(tiny_model_dir, truncation=truncation, batch_size=256).fit().transform(
        [text, "short"])
    assert out.shape == (2, 32) and np.isfinite(out).all()


# --- pairs --------------------------------------------------------------------------------------

PAIRS = [("the cat sat", "a dog ran"), ("good movie", ""), ("what city ?", "the river city")]


def test_pairs_equal_tokenizer_pair_encoding(tiny_model_dir):
    for pooling in ("mean", "cls", "max"):
        got = BertVectorizer(tiny_model_dir, pooling=pooling).fit().transform(PAIRS)
        expected = reference_features(tiny_model_dir, PAIRS, pooling=pooling)
        np.testing.assert_allclose(got, expected, atol=1e-5)


def test_pairs_are_not_the_concatenated_text(tiny_model_dir):
    vectorizer = BertVectorizer(tiny_model_dir).fit()
    joined = vectorizer.transform([f"{a} {b}" for a, b in PAIRS])
    assert not np.allclose(vectorizer.transform(PAIRS), joined)


def test_pair_containers_agree(tiny_model_dir):
    vectorizer = BertVectorizer(tiny_model_dir).fit()
    expected = vectorizer.transform(PAIRS)
    for container in (np.array(PAIRS, dtype=object), pd.DataFrame(PAIRS, columns=["a", "b"]),
                      [list(pair) for pair in PAIRS]):
        np.testing.assert_allclose(vectorizer.transform(container), expected, atol=1e-6)


def test_long_pairs_truncate_longest_first(tiny_model_dir):
    pairs = [(words(30, 9), words(4, 10))]
    got = vectorize(tiny_model_dir, pairs)
    expected = reference_features(tiny_model_dir, pairs, max_length=MAX_LENGTH)
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_pairs_reject_single_text_truncations(tiny_model_dir):
    vectorizer = BertVectorizer(tiny_model_dir, truncation="chunks").fit()
    with pytest.raises(ValueError, match="truncation='chunks' applies to single texts"):
        vectorizer.transform(PAIRS)


@pytest.mark.parametrize("bad, message", [
    ([("a", "b"), "c"], r"Text pair at index 1 is 'c'"),
    ([("a", "b", "c")], r"Text pair at index 0 is \('a', 'b', 'c'\)"),
    ([("a", None)], r"The second text of the pair at index 0 is NoneType"),
])
def test_bad_pairs_are_named(tiny_model_dir, bad, message):
    with pytest.raises(ValueError, match=message):
        BertVectorizer(tiny_model_dir).fit().transform(bad)
