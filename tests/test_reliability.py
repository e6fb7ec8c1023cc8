"""Hostile input, invariance, concurrency, faults and safe persistence."""

import errno
import os
import re
import shutil
import threading
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn import clone

import skbert
from skbert import BertVectorizer
from skbert._encoder import _cache, _exports, _stores

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
    from skbert._encoder import _loading

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


def test_remote_code_is_never_trusted(tiny_model_dir, tmp_path, monkeypatch):
    import transformers

    from skbert._encoder import _loading

    calls = []  # (kind, the trust_remote_code skbert passed)

    def spy(kind):
        real = getattr(transformers, kind)

        def from_pretrained(*args, **kwargs):
            calls.append((kind, kwargs.get("trust_remote_code", "not given")))
            return real.from_pretrained(*args, **kwargs)

        return SimpleNamespace(from_pretrained=from_pretrained)

    for kind in ("AutoTokenizer", "AutoModel", "AutoConfig"):
        # Replaced on the package only: transformers' own calls inside stay unspied.
        monkeypatch.setattr(transformers, kind, spy(kind))
    for _ in range(2):  # loaded, then recalled from its record: tokenizer and config only
        monkeypatch.setattr(_loading, "_shared", {})
        _loading.load(tiny_model_dir, None, "float32", "cpu",
                      records=_exports.Records(tmp_path))
    assert {kind for kind, _ in calls} == {"AutoTokenizer", "AutoModel", "AutoConfig"}
    assert all(trusted is False for _, trusted in calls), calls


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



FAULT_TEXTS = ["the cat sat on the mat", "a big red dog runs fast", "good", "",
               "what is the long river in the country ?", "who ran ? where ! when ..."]


def _open_inside(directory, patch, opened):
    """Patch os.open: in ``directory`` it is ``opened(path, the real os.open, flags, ...)``."""
    original = os.open

    def guarded(path, flags, *args, **kwargs):
        if not os.fspath(path).startswith(os.fspath(directory)):
            return original(path, flags, *args, **kwargs)
        return opened(path, original, flags, *args, **kwargs)

    patch.setattr(os, "open", guarded)


def _read_only(vectorizer, directory, patch):
    def refuse(path, *_):  # chmod would not stop root
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))

    _open_inside(directory, patch, refuse)
    return errno.EROFS, None


def _full_disk(vectorizer, directory, patch):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full, whose writes fail with ENOSPC")

    def onto_a_full_disk(path, original, flags, *args, **kwargs):
        handle = original(path, flags, *args, **kwargs)  # the file is made, its writes fail
        full = original("/dev/full", os.O_WRONLY)
        os.dup2(full, handle)
        os.close(full)
        return handle

    _open_inside(directory, patch, onto_a_full_disk)
    return errno.ENOSPC, None


def _filled(vectorizer, directory):
    vectorizer.transform(FAULT_TEXTS)
    skbert.clear_cache()
    return sorted(directory.rglob("*.f32"))


def _swapped(vectorizer, directory, patch):
    files = _filled(vectorizer, directory)
    contents = [path.read_bytes() for path in files]
    for path, data in zip(files, contents[1:] + contents[:1]):
        path.write_bytes(data)  # each a valid entry, of another key
    return None, None


def _wrong_length(vectorizer, directory, patch):
    for path in _filled(vectorizer, directory):
        values = path.read_bytes()[4:]
        values = values[:len(values) // 8 * 4]
        path.write_bytes(_stores._checksum(path.stem, values) + values)  # valid, half as long
    return None, None


def _directory_in_place(vectorizer, directory, patch):
    target = _filled(vectorizer, directory)[0]
    target.unlink()
    (target / "in-the-way").mkdir(parents=True)
    return errno.EISDIR, lambda: shutil.rmtree(target)


def _file_in_place(vectorizer, directory, patch):
    shutil.rmtree(directory)  # made by fit
    directory.write_text("not a directory")
    return errno.EEXIST, directory.unlink


@pytest.mark.parametrize("fault", [_read_only, _full_disk, _swapped, _wrong_length,
                                   _directory_in_place, _file_in_place],
                         ids=lambda fault: fault.__name__.strip("_"))
def test_disk_faults_cost_entries_never_the_call(counted, tmp_path, fault):
    vectorizer, counter = counted
    expected = BertVectorizer(vectorizer.model, cache=False).fit().transform(FAULT_TEXTS)
    directory = tmp_path / "cache"
    counted_model = vectorizer.model_
    vectorizer.set_params(cache=str(directory)).fit().model_ = counted_model
    skbert.clear_cache()
    with pytest.MonkeyPatch.context() as patch:
        code, undo = fault(vectorizer, directory, patch)
        if code is None:  # every write succeeds: no warning
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                got = vectorizer.transform(FAULT_TEXTS)
        else:
            message = (rf"skbert's cache directory '.*cache' cannot be written "
                       rf"\(.*{re.escape(os.strerror(code))}.*\); entries this call could not "
                       r"write: \d+\. .* the features are computed all the same")
            with pytest.warns(RuntimeWarning, match=message) as caught:
                got = vectorizer.transform(FAULT_TEXTS)
            assert sum("cannot be written" in str(w.message) for w in caught) == 1
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    assert len(_cache.MEMORY) == len(FAULT_TEXTS)  # the memory store still works
    assert not list(tmp_path.rglob(".tmp-*"))
    if undo is not None:
        undo()
    for _ in range(2):  # the first call repairs, the second reads every entry from disk
        skbert.clear_cache()
        before = counter["rows"]
        np.testing.assert_allclose(vectorizer.transform(FAULT_TEXTS), expected, rtol=0, atol=1e-6)
    assert counter["rows"] == before
    assert len(list(directory.rglob("*.f32"))) == len(FAULT_TEXTS)


def test_a_write_fault_warns_once_per_process_and_directory(counted, tmp_path):
    vectorizer, _ = counted
    directory = tmp_path / "cache"
    vectorizer.set_params(cache=str(directory)).fit()
    with pytest.MonkeyPatch.context() as patch:
        _read_only(vectorizer, directory, patch)
        with pytest.warns(RuntimeWarning, match="cannot be written"):
            vectorizer.transform(FAULT_TEXTS[:3])
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a grid search's next fits stay quiet
            skbert.clear_cache()
            vectorizer.transform(FAULT_TEXTS[:3])
            clone(vectorizer).fit().transform(FAULT_TEXTS[3:])
