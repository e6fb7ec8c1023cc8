"""Hostile input, invariance, concurrency, faults and safe persistence."""

import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skbert import BertVectorizer

HOSTILE = [
    "", " ", "\t\n\r ", "\x00", "a\x00b", "\x07\x1b[31mred\x1b[0m", "\u202eevil\u202c",
    "\u200d\u200b\ufeff", "👩‍👩‍👧‍👦🏳️‍🌈", "x" * 20_000, "[CLS] [SEP] [PAD] [MASK]", "[PAD]" * 50,
    "a\ud800b", "\udfff", "\U0010ffff", "é" * 3000, "ﷺ" * 100, "\u0301" * 500,
]


@pytest.fixture(scope="module")
def vectorizers(tiny_model_dir):
    return [BertVectorizer(tiny_model_dir, pooling=pooling, include_special_tokens=special,
                           truncation=truncation, norm="l2").fit()
            for pooling, special, truncation in [("mean", False, "head"), ("max", False, "chunks"),
                                                 ("last", True, "tail"),
                                                 ("mean_max", True, "head_tail")]]


def test_named_hostile_strings_give_finite_vectors(vectorizers):
    for vectorizer in vectorizers:
        out = vectorizer.transform(HOSTILE)
        assert out.shape[0] == len(HOSTILE) and np.isfinite(out).all(), vectorizer


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(st.characters(codec=None), max_size=300), min_size=1, max_size=6))
def test_random_unicode_gives_finite_vectors(vectorizers, texts):
    for vectorizer in vectorizers:
        out = vectorizer.transform(texts)
        assert out.shape == (len(texts), vectorizer._n_features_out)
        assert np.isfinite(out).all()


def test_thirty_texts_alone_equal_the_same_in_a_batch_of_130(tiny_model_dir):
    rng = np.random.default_rng(1)
    words = "the cat dog sat ran on mat house river city red blue good bad".split()
    texts = [" ".join(rng.choice(words, rng.integers(1, 40))) for _ in range(130)]
    for pooling in ("max", "last", "mean", "cls"):
        vectorizer = BertVectorizer(tiny_model_dir, pooling=pooling, cache=False,
                                    batch_size=64).fit()
        alone = np.vstack([vectorizer.transform([text]) for text in texts[:30]])
        in_batch = vectorizer.transform(texts)[:30]
        assert np.abs(alone - in_batch).max() <= 1e-5, pooling


def test_threads_get_their_own_rows(tiny_model_dir):
    import skbert

    rng = np.random.default_rng(2)
    words = "the cat dog sat ran on mat house river city red blue good bad".split()
    texts = list(dict.fromkeys(" ".join(rng.choice(words, rng.integers(1, 20)))
                               for _ in range(220)))[:200]
    skbert.clear_cache()
    vectorizer = BertVectorizer(tiny_model_dir, cache=False).fit()
    expected = vectorizer.transform(texts)
    shared = BertVectorizer(tiny_model_dir).fit()  # one instance, one cache, four threads
    orders = [rng.permutation(len(texts)) for _ in range(4)]
    results, errors = [None] * 4, []

    def work(i):
        try:
            results[i] = shared.transform([texts[j] for j in orders[i]])
        except Exception as exc:  # reported below; a thread cannot raise into pytest
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    for order, result in zip(orders, results):
        np.testing.assert_allclose(result, expected[order], atol=1e-5)


def test_interrupted_transform_leaves_the_cache_consistent(tiny_model_dir, tmp_path, texts):
    from skbert import _loading

    vectorizer = BertVectorizer(tiny_model_dir, cache=str(tmp_path), batch_size=2).fit()
    vectorizer.model_, _ = _loading.from_pretrained(tiny_model_dir, None, "float32")
    calls = []
    original = vectorizer.model_.forward

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    vectorizer.model_.forward = interrupted
    with pytest.raises(KeyboardInterrupt):
        vectorizer.transform(texts)
    assert not list(tmp_path.rglob(".tmp-*"))  # no half-written file left behind
    vectorizer.model_.forward = original
    expected = BertVectorizer(tiny_model_dir, cache=False).fit().transform(texts)
    np.testing.assert_allclose(vectorizer.transform(texts), expected, atol=1e-6)


def test_corrupt_weights_file_is_named(tiny_model_dir, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(OSError, match=r"Could not load the model directory '.*broken'"):
        BertVectorizer(str(broken)).fit()


def test_hub_id_without_network_is_named():
    with pytest.raises(OSError, match=r"Could not load the model 'no-such-org/no-such-model' "
                                      r"\(revision=None\)"):
        BertVectorizer("no-such-org/no-such-model").fit()


def test_remote_code_is_never_trusted(tiny_model_dir, monkeypatch):
    import transformers

    seen = []
    original = transformers.AutoModel.from_pretrained

    def spy(*args, **kwargs):
        seen.append(kwargs.get("trust_remote_code", False))
        return original(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", spy)
    from skbert import _loading

    _loading.from_pretrained(tiny_model_dir, None, "float32")
    assert seen == [False]


def test_skops_round_trip_with_skbert_types_trusted(tiny_model_dir, texts):
    sio = pytest.importorskip("skops.io")
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    vectorizer = BertVectorizer(tiny_model_dir, pooling="max").fit()
    pipe = make_pipeline(BertVectorizer(tiny_model_dir), LogisticRegression())
    pipe.fit(texts, [0, 1] * 4)
    for obj in (vectorizer, pipe):
        data = sio.dumps(obj)
        assert sio.get_untrusted_types(data=data) == ["skbert._vectorizer.BertVectorizer"]
        with pytest.raises(sio.exceptions.UntrustedTypesFoundException):
            sio.loads(data)
        loaded = sio.loads(data, trusted=["skbert._vectorizer.BertVectorizer"])
        method = "transform" if obj is vectorizer else "predict_proba"
        np.testing.assert_array_equal(getattr(loaded, method)(texts), getattr(obj, method)(texts))
