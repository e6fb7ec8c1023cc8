"""The forward-pass cache: one encoder pass per distinct text, whatever the setting."""

import itertools
import os
import re
import stat
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest
from sklearn import clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline

import skbert
from skbert import BertVectorizer
from skbert._encoder import _cache, _encoding, _keys, _stores
from skbert._encoder._features import Layout, parts_for_cache


@pytest.fixture(autouse=True)
def empty_cache():
    skbert.clear_cache()
    yield
    skbert.clear_cache()


SETTINGS = list(itertools.product(
    ["mean", "cls", "max", "mean_sqrt_len", "mean_max", "pooler", "last"],
    [-1, 0, [-1, -2], [0, -1], [0, 1], "all"],
    ["mean", "sum", "concat"],
    [True, False],
))


def test_cached_equals_uncached_for_every_setting(tiny_model_dir, texts):
    cached = BertVectorizer(tiny_model_dir).fit()
    uncached = BertVectorizer(tiny_model_dir, cache=False).fit()
    for pooling, layer, combine, special in SETTINGS:
        if pooling == "pooler" and layer != -1:
            continue
        params = dict(pooling=pooling, layer=layer, layer_combine=combine,
                      include_special_tokens=special, norm="l2")
        got = cached.set_params(**params).transform(texts)
        expected = uncached.set_params(**params).transform(texts)
        assert np.abs(got - expected).max() <= 1e-6, params


def test_every_usual_setting_served_by_one_forward_pass(counted, texts):
    vectorizer, counter = counted
    for pooling, layer, combine, special in SETTINGS:
        if (pooling == "pooler" and layer != -1) or layer == [0, 1]:
            continue
        vectorizer.set_params(pooling=pooling, layer=layer, layer_combine=combine,
                              include_special_tokens=special).transform(texts)
    assert counter["rows"] == len(texts)


def test_unusual_multi_layer_max_costs_one_more_pass_then_is_cached(counted, texts):
    vectorizer, counter = counted
    vectorizer.transform(texts)
    vectorizer.set_params(pooling="max", layer=[0, 1])
    first = vectorizer.transform(texts)
    assert counter["rows"] == 2 * len(texts)
    np.testing.assert_array_equal(vectorizer.transform(texts), first)
    vectorizer.set_params(pooling="mean_max", layer_combine="sum").transform(texts)
    assert counter["rows"] == 2 * len(texts)


def test_grid_search_forwards_each_distinct_text_once(tiny_model_dir, counted):
    vectorizer, counter = counted
    positive = [f"good movie {w}" for w in ("the", "a", "cat", "dog", "red", "blue")]
    negative = [f"awful film {w}" for w in ("the", "a", "cat", "dog", "red", "blue")]
    X, y = positive + negative, [1] * 6 + [0] * 6
    pipe = Pipeline([("bert", vectorizer), ("clf", LogisticRegression())])
    grid = {"bert__pooling": ["cls", "mean", "max"],
            "bert__layer": [[-1], [-2], [-3], [-1, -2, -3]], "bert__norm": [None, "l2"]}
    # Fitting clones is what GridSearchCV does; keep the counted model by sharing it.
    search = GridSearchCV(pipe, grid, cv=3)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BertVectorizer, "fit", _fit_keeping_model(vectorizer.model_))
        search.fit(X, y)
    assert len(search.cv_results_["params"]) == 24
    assert counter["rows"] == len(set(X))


def _fit_keeping_model(model):
    original = BertVectorizer.fit

    def fit(self, X=None, y=None):
        original(self, X, y)
        self.model_ = model
        return self

    return fit


def test_duplicates_in_one_call_are_encoded_once(counted):
    vectorizer, counter = counted
    out = vectorizer.set_params(cache=False).transform(["the cat", "a dog", "the cat"] * 5)
    assert counter["rows"] == 2
    np.testing.assert_array_equal(out[0], out[2])


def test_cache_false_stores_nothing(tiny_model_dir, texts):
    BertVectorizer(tiny_model_dir, cache=False).fit().transform(texts)
    assert len(_cache.MEMORY) == 0


def test_reused_across_clones_and_calls(counted, texts):
    vectorizer, counter = counted
    vectorizer.transform(texts[:4])
    vectorizer.transform(texts)
    assert counter["rows"] == len(texts)
    assert len(_cache.MEMORY) == len(texts)


@pytest.mark.filterwarnings("ignore:This CPU has no native")  # bfloat16, emulated here
def test_keys_change_with_weights_max_length_and_dtype(tiny_model_dir):
    import torch

    long_text = ["the cat sat on the mat and the dog ran to the river " * 3]
    vectorizer = BertVectorizer(tiny_model_dir).fit()
    base = vectorizer.transform(long_text)
    n_entries = len(_cache.MEMORY)
    shorter = vectorizer.set_params(max_length=8).transform(long_text)
    assert len(_cache.MEMORY) == n_entries + 1 and not np.allclose(base, shorter)
    vectorizer.set_params(max_length=None, dtype="bfloat16").fit().transform(long_text)
    assert len(_cache.MEMORY) == n_entries + 2
    tuned = clone(vectorizer).set_params(dtype="float32")
    tuned.fit()
    from skbert._encoder import _loading

    model, _ = _loading.from_pretrained(tiny_model_dir, None, "float32")
    with torch.no_grad():
        model.encoder.layer[0].output.dense.weight.mul_(2.0)
    tuned.model_ = model  # fingerprinted anew
    changed = tuned.transform(long_text)
    assert len(_cache.MEMORY) == n_entries + 3 and not np.allclose(changed, base)


def test_keys_hash_each_window_alone_in_blocks_of_any_size(tiny_model_dir, texts,
                                                           monkeypatch):
    import hashlib

    from skbert._encoder._encoding import EXCLUDED, Windows, tokenize

    tokenizer = BertVectorizer(tiny_model_dir).fit().tokenizer_
    singles = Windows.concatenate([
        tokenize(tokenizer, texts + texts[:2], 12, "chunks", 2),
        tokenize(tokenizer, texts, 12, prompt="query: ", pool_prompt=False),
    ])
    pairs = tokenize(tokenizer, list(zip(texts, texts[::-1])) * 2, 16)
    assert (singles.special_mask.count(EXCLUDED) > 0).any() and pairs.token_type_ids is not None
    for windows in [singles, pairs]:
        keys = _keys.window_keys(windows, "model", "engine")
        for block in [1, 3]:
            monkeypatch.setattr(_keys, "KEY_BLOCK", block)
            assert (_keys.window_keys(windows, "model", "engine") == keys).all()
        monkeypatch.undo()
        # The bytes hashed are those of every earlier release: disk caches stay valid.
        for index in range(len(windows)):
            special = windows.special_mask[index]
            digest = hashlib.blake2b(_keys.FORMAT + b"modelengine", digest_size=16)
            digest.update(windows.input_ids[index].astype(np.int64))
            if windows.token_type_ids is not None:
                digest.update(b"|" + windows.token_type_ids[index].tobytes())
            if (special == EXCLUDED).any():
                digest.update(b"#" + special.tobytes())
            assert keys[index].decode() == digest.hexdigest()
        assert len(set(keys.tolist())) < len(keys)  # repeated texts' windows share keys


@pytest.fixture
def budget_of_three(counted, texts):
    """The counted vectorizer under an in-memory budget of three entries, and one's size."""
    vectorizer, counter = counted
    vectorizer.transform(texts[:1])
    one_entry = _cache.MEMORY.n_bytes
    previous = skbert.set_cache_limit(3 * one_entry)
    yield vectorizer, counter, one_entry
    skbert.set_cache_limit(previous)


def test_memory_budget_is_honoured_across_calls(budget_of_three, texts):
    vectorizer, counter, one_entry = budget_of_three
    vectorizer.transform(texts[:3])
    vectorizer.transform(texts[3:6])  # evicts the three entries of the earlier calls
    assert len(_cache.MEMORY) == 3 and _cache.MEMORY.n_bytes <= 3 * one_entry
    before = counter["rows"]
    vectorizer.transform(texts[3:6])
    assert counter["rows"] == before
    vectorizer.transform(texts[:1])  # evicted: encoded again
    assert counter["rows"] == before + 1


def test_a_call_larger_than_the_budget_keeps_what_fits_and_warns(budget_of_three, texts):
    vectorizer, counter, one_entry = budget_of_three
    with pytest.warns(RuntimeWarning, match=r"cache is full .*skbert\.set_cache_limit"
                                            r".*cache='some/directory'"):
        expected = vectorizer.transform(texts)
    assert len(_cache.MEMORY) == 3 and _cache.MEMORY.n_bytes <= 3 * one_entry
    before = counter["rows"]
    with pytest.warns(RuntimeWarning, match="cache is full"):
        again = vectorizer.transform(texts)  # misses batched otherwise: rounding may differ
    np.testing.assert_allclose(again, expected, rtol=0, atol=1e-6)
    assert counter["rows"] == before + len(texts) - 3  # no thrashing: three still hit


def test_a_budget_below_one_record_keeps_what_a_setting_reads(counted, texts, monkeypatch):
    """Where the in-memory budget cannot hold one record of every part, a pooler-only setting
    computes no layer's means, maxima or [CLS] (as with cache=False), and keeps its pooler
    records under their own layout, which a setting that reads means never takes."""
    vectorizer, counter = counted
    texts = texts[:5]
    layouts, compute = [], _encoding.compute_parts

    def spied(*args, **kwargs):
        layouts.append(args[4])
        return compute(*args, **kwargs)

    monkeypatch.setattr(_encoding, "compute_parts", spied)
    expected = {pooling: vectorizer.set_params(pooling=pooling, cache=False).transform(texts)
                for pooling in ("pooler", "mean")}
    assert layouts[0].keys == (("pooler",),)
    hidden_size = vectorizer._config.hidden_size
    record = Layout.of(parts_for_cache(vectorizer.n_layers_, True), hidden_size)
    budget = _stores.entry_bytes(record.width) - 1
    assert len(texts) * _stores.entry_bytes(hidden_size) <= budget  # the pooler records fit
    skbert.clear_cache()
    previous = skbert.set_cache_limit(budget)
    try:
        layouts.clear()
        vectorizer.set_params(pooling="pooler", cache=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # they fit: no "cache is full"
            np.testing.assert_array_equal(vectorizer.transform(texts), expected["pooler"])
            assert [layout.keys for layout in layouts] == [(("pooler",),)]
            before = counter["rows"]
            np.testing.assert_array_equal(vectorizer.transform(texts), expected["pooler"])
            assert counter["rows"] == before  # served by the cache
            means = vectorizer.set_params(pooling="mean").transform(texts)
        np.testing.assert_allclose(means, expected["mean"], rtol=0, atol=1e-6)
        assert counter["rows"] == before + len(texts)  # not from the pooler records
    finally:
        skbert.set_cache_limit(previous)
        skbert.clear_cache()


def forward_rows_in_a_new_process(model_dir, cache, texts, out):
    """Rows through the encoder when a fresh process transforms ``texts``; features to ``out``."""
    script = textwrap.dedent(f"""
        import numpy as np
        from skbert import BertVectorizer
        rows = []
        vectorizer = BertVectorizer({model_dir!r}, cache={str(cache)!r}).fit()
        vectorizer.model_.register_forward_pre_hook(
            lambda m, a, k: rows.append(k["input_ids"].shape[0]), with_kwargs=True)
        np.save({str(out)!r}, vectorizer.transform({texts!r}))
        print(sum(rows))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    return int(run.stdout.split()[-1])


def test_directory_cache_serves_a_second_process(tiny_model_dir, tmp_path, texts):
    runs = [forward_rows_in_a_new_process(tiny_model_dir, tmp_path / "cache", texts,
                                          tmp_path / "out.npy") for _ in range(2)]
    assert runs == [len(texts), 0]
    expected = BertVectorizer(tiny_model_dir, cache=False).fit().transform(texts)
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, rtol=0, atol=1e-6)


def test_directory_cache_writes_what_memory_served(tiny_model_dir, tmp_path, texts):
    vectorizer = BertVectorizer(tiny_model_dir).fit()
    expected = vectorizer.transform(texts)  # in memory only
    served = vectorizer.set_params(cache=str(tmp_path / "cache")).transform(texts)
    np.testing.assert_array_equal(served, expected)
    assert forward_rows_in_a_new_process(tiny_model_dir, tmp_path / "cache", texts,
                                         tmp_path / "out.npy") == 0
    # Another process: equal to rounding (1e-6), which is what torch and numpy keep.
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, rtol=0, atol=1e-6)


def test_chunks_mix_hits_misses_and_duplicates(counted, texts, monkeypatch):
    vectorizer, counter = counted
    expected = BertVectorizer(vectorizer.model, cache=False).fit().transform(texts)
    vectorizer.transform(texts[::2])
    monkeypatch.setattr(_cache, "CHUNK_BYTES", 1)  # one window per chunk
    got = vectorizer.set_params(batch_size=1).transform(texts + texts[::-1])
    assert counter["rows"] == len(texts)
    np.testing.assert_allclose(got, np.vstack([expected, expected[::-1]]), rtol=0, atol=1e-6)


def test_hits_beside_misses_copy_only_what_the_setting_reads(counted, texts):
    # A chunk's buffer holds the records of the windows it computes and, for the hits,
    # only the columns the setting reads: the rest is the last chunk's, and never read.
    vectorizer, counter = counted
    params = dict(pooling="mean_max", layer=[0, -1], layer_combine="concat",
                  include_special_tokens=False)
    expected = BertVectorizer(vectorizer.model, cache=False, **params).fit().transform(texts)
    vectorizer.transform(texts[1::2])
    got = vectorizer.set_params(**params).transform(texts)
    assert counter["rows"] == len(texts)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


def test_a_rarer_multi_layer_max_on_a_cold_cache_takes_one_pass(counted, texts):
    vectorizer, counter = counted
    vectorizer.set_params(pooling="max", layer=[0, 1]).transform(texts)
    vectorizer.set_params(pooling="mean", layer=-1).transform(texts)
    assert counter["rows"] == len(texts)


def test_damaged_disk_entries_are_recomputed_never_served(counted, tmp_path, texts):
    vectorizer, counter = counted
    vectorizer.set_params(cache=str(tmp_path))
    expected = vectorizer.transform(texts)
    files = sorted(tmp_path.rglob("*.f32"))
    assert len(files) == len(texts)
    for index, path in enumerate(files):
        data = bytearray(path.read_bytes())
        if index % 2:
            data[len(data) // 2] ^= 0xFF  # one flipped byte in the middle
        else:
            data = data[: len(data) // 3]  # truncated
        path.write_bytes(bytes(data))
    skbert.clear_cache()
    np.testing.assert_array_equal(vectorizer.transform(texts), expected)
    assert counter["rows"] == 2 * len(texts)
    skbert.clear_cache()
    np.testing.assert_array_equal(vectorizer.transform(texts), expected)  # rewritten, now served
    assert counter["rows"] == 2 * len(texts)


def test_memory_store_evicts_least_recently_used_and_shrinks():
    entry_bytes = 8 * 4 + _stores._ENTRY_OVERHEAD
    store = _stores.MemoryStore(10 * entry_bytes)
    for index in range(30):
        assert store.put(str(index), np.full(8, index, dtype=np.float32))
    assert len(store) == 10 and store.n_bytes == 10 * entry_bytes
    assert store.get("19") is None and store.get("20") is not None
    store.resize(5 * entry_bytes)  # keeps the five most recently used
    assert len(store) == 5 and store.get("20") is not None and store.get("21") is None
    for index in range(26, 30):
        np.testing.assert_array_equal(store.get(str(index)), index)


def test_cache_parameter_is_checked_at_fit(tiny_model_dir, tmp_path, texts):
    accepted = r"The 'cache' parameter must be True, False or the path of a directory\. "
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    with pytest.raises(ValueError, match=accepted + "Got '' instead"):
        BertVectorizer(tiny_model_dir, cache="").fit()
    with pytest.raises(ValueError, match=accepted + r"Got '.*a-file' instead, which exists and "
                                                    r"is not a directory"):
        BertVectorizer(tiny_model_dir, cache=str(a_file)).fit()
    for value in [np.False_, np.True_, 0, 1, None, 1.5]:
        got = re.escape(repr(value))
        with pytest.raises(ValueError, match=r"The 'cache' parameter of BertVectorizer must be an "
                                             r"instance of 'bool', an instance of 'str' or an "
                                             rf"instance of 'os.PathLike'\. Got {got} instead"):
            BertVectorizer(tiny_model_dir, cache=value).fit()
    with pytest.raises(OSError, match=r"The cache directory '.*a-file/cache' cannot be created "
                                      r"\(.*Not a directory.*\)\. Give a directory"):
        BertVectorizer(tiny_model_dir, cache=a_file / "cache").fit()
    fitted = BertVectorizer(tiny_model_dir).fit().set_params(cache=np.False_)  # not refitted
    with pytest.raises(ValueError, match=accepted + "Got np.False_ instead"):
        fitted.transform(texts)


def test_cache_directory_expands_the_home_directory(tiny_model_dir, tmp_path, monkeypatch,
                                                    texts):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    vectorizer = BertVectorizer(tiny_model_dir, cache="~/bert-cache").fit()
    assert (tmp_path / "home" / "bert-cache").is_dir()
    vectorizer.transform(texts)
    assert len(list((tmp_path / "home" / "bert-cache").rglob("*.f32"))) == len(texts)
    assert not (tmp_path / "~").exists()


def test_stale_temporary_files_go_when_the_directory_is_opened(tiny_model_dir, tmp_path, texts):
    folder = tmp_path / "cache" / "ab"
    folder.mkdir(parents=True)
    stale, recent = folder / ".tmp-killed-writer", folder / ".tmp-live-writer"
    for path in (stale, recent):
        path.write_bytes(b"torn")
    two_hours_ago = time.time() - 2 * 3600
    os.utime(stale, (two_hours_ago, two_hours_ago))
    BertVectorizer(tiny_model_dir, cache=str(tmp_path / "cache")).fit().transform(texts[:1])
    assert not stale.exists() and recent.exists()


def test_cache_files_follow_the_umask(tiny_model_dir, tmp_path, texts):
    previous = os.umask(0o002)  # a team's group-writable directory
    try:
        BertVectorizer(tiny_model_dir, cache=str(tmp_path / "cache")).fit().transform(texts)
    finally:
        os.umask(previous)
    files = list((tmp_path / "cache").rglob("*.f32"))
    assert len(files) == len(texts)
    assert {stat.S_IMODE(path.stat().st_mode) for path in files} == {0o664}
    folders = [tmp_path / "cache", *(tmp_path / "cache").iterdir()]
    assert {stat.S_IMODE(path.stat().st_mode) for path in folders} == {0o775}


@pytest.mark.parametrize("text, expected", [
    ("0", 0), ("2147483648", 2**31), ("512MB", 512 * 10**6), ("512 mb", 512 * 10**6),
    ("2GiB", 2 * 1024**3), ("1.5GB", 1_500_000_000), ("100KiB", 102_400), ("0.5kib", 512),
    ("1TB", 10**12), ("3tib", 3 * 1024**4), (" 7 B ", 7),
])
def test_cache_bytes_take_plain_bytes_and_units(text, expected):
    assert _stores.parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["-5", "1.5", "1e9", "100k", "2G", "1GB!", "2 GiB GiB",
                                  "lots", "1,000", "½GB", ""])
def test_bad_cache_bytes_name_the_variable(text):
    with pytest.raises(ValueError, match=rf"SKBERT_CACHE_BYTES={re.escape(repr(text))} is not a "
                                         r"byte count: give whole bytes \(2147483648\) or a "
                                         r"number and a unit \(512MB, 1\.5GB, 2GiB"):
        _stores.parse_bytes(text)


def test_bad_cache_bytes_fail_the_first_use_not_the_import(tiny_model_dir, texts, monkeypatch):
    bad = "1 gigabyte"
    run = subprocess.run([sys.executable, "-c", "import skbert"], capture_output=True, text=True,
                         env={**os.environ, "SKBERT_CACHE_BYTES": bad})
    assert run.returncode == 0, run.stderr[-2000:]
    monkeypatch.setenv("SKBERT_CACHE_BYTES", bad)
    monkeypatch.setattr(_stores, "MEMORY", _stores.MemoryStore())  # as a fresh process has it
    vectorizer = BertVectorizer(tiny_model_dir).fit()
    named = r"SKBERT_CACHE_BYTES='1 gigabyte' is not a byte count"
    with pytest.raises(ValueError, match=named):
        vectorizer.transform(texts)
    with pytest.raises(ValueError, match=named):
        skbert.set_cache_limit(10**9)
    monkeypatch.setenv("SKBERT_CACHE_BYTES", "1.5 GB")
    assert _stores.MemoryStore().max_bytes == 1_500_000_000
    monkeypatch.setenv("SKBERT_CACHE_BYTES", "")
    assert _stores.MemoryStore().max_bytes == 2 * 1024**3


def test_cache_limit_zero_turns_the_store_off_silently(tiny_model_dir, texts):
    expected = BertVectorizer(tiny_model_dir, cache=False).fit().transform(texts)
    vectorizer = BertVectorizer(tiny_model_dir).fit()
    previous = skbert.set_cache_limit(0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for _ in range(2):
                np.testing.assert_allclose(vectorizer.transform(texts), expected, rtol=0,
                                           atol=1e-6)
        assert len(_cache.MEMORY) == 0
    finally:
        skbert.set_cache_limit(previous)


def test_cache_limit_is_whole_bytes_zero_or_more():
    for value in [-1, 1.5, "1GB", True, None, float("nan")]:
        with pytest.raises(ValueError, match=r"max_bytes must be a whole number of bytes, 0 or "
                                             r"more \(0 turns the in-memory cache off\)\. Got "
                                             rf"{re.escape(repr(value))} instead"):
            skbert.set_cache_limit(value)
    previous = skbert.set_cache_limit(1e9)  # a float of whole bytes, as 1e9 is
    assert skbert.set_cache_limit(previous) == 10**9
