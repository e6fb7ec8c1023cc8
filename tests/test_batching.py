"""Batching: token-budget batches, out-of-memory back-off, reduced precision, order."""

import re
import warnings

import numpy as np
import pytest
import torch

import skbert
from skbert import BertVectorizer
from skbert._encoder import _encoding, _loading
from skbert._encoder._encoding import length_sorted_batches, tokenize
from tests.reference import reference_features


def test_batches_respect_batch_size_and_token_budget():
    lengths = np.array([5, 300, 20, 512, 7, 512, 100, 3])
    batches = length_sorted_batches(lengths, batch_size=3, max_tokens=1024)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) <= 3 and len(batch) * lengths[batch].max() <= 1024
    assert [lengths[b].tolist() for b in batches][0] == [512, 512]  # longest first


def test_a_window_longer_than_the_budget_still_runs_alone():
    assert [b.tolist() for b in length_sorted_batches(np.array([50, 10]), 8, max_tokens=20)] \
        == [[0], [1]]


@pytest.fixture
def private(tiny_model_dir):
    vectorizer = BertVectorizer(tiny_model_dir, cache=False).fit()
    vectorizer.model_, _ = _loading.from_pretrained(tiny_model_dir, None, "float32")
    return vectorizer


def test_out_of_memory_batches_are_split_and_retried(private, tiny_model_dir, texts):
    expected = BertVectorizer(tiny_model_dir, cache=False).fit().transform(texts)
    seen = []
    original = private.model_.forward

    def forward(*args, **kwargs):
        rows = kwargs["input_ids"].shape[0]
        seen.append(rows)
        if rows > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")
        return original(*args, **kwargs)

    private.model_.forward = forward  # before the first transform, which runs a copy of it
    with pytest.warns(RuntimeWarning, match="Out of GPU memory on a batch of") as caught:
        got = private.transform(texts)
    # 8 windows fail, then each half of 4, whose halves of 2 pass
    assert [re.search(r"batch of (\d+)", str(w.message))[1] for w in caught] == ["8", "4", "4"]
    np.testing.assert_allclose(got, expected, atol=1e-5)  # no row lost, duplicated or moved
    assert seen[0] == 8 and max(seen[1:]) <= 8 and sum(r for r in seen if r <= 2) == len(texts)


def test_out_of_memory_on_a_single_window_is_raised(private):
    def forward(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")

    private.model_.forward = forward
    with pytest.raises(torch.cuda.OutOfMemoryError), pytest.warns(RuntimeWarning):
        private.transform(["the cat", "a dog"])


@pytest.mark.filterwarnings("ignore:This CPU has no native")
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_reduced_precision_is_close_to_float32(tiny_model_dir, texts, dtype):
    skbert.clear_cache()
    full = BertVectorizer(tiny_model_dir, norm="l2").fit().transform(texts)
    low = BertVectorizer(tiny_model_dir, norm="l2", dtype=dtype).fit().transform(texts)
    assert low.dtype == np.float32
    assert np.min(np.sum(full * low, axis=1)) > 0.99  # cosine of each row with its fp32 twin


@pytest.mark.parametrize("native", [False, True])
def test_emulated_half_precision_on_the_cpu_warns(monkeypatch, native):
    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.setattr(torch.cpu, probe, lambda: native)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _loading.check_dtype("bfloat16", torch.device("cpu"))
        _loading.check_dtype("float32", torch.device("cpu"))
    assert [str(w.message).split(":")[0] for w in caught] == (
        [] if native else ["This CPU has no native bfloat16 arithmetic (AVX512 or AMX)"])


def test_bfloat16_on_a_gpu_without_it_is_an_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "Tesla T4")
    with pytest.raises(ValueError, match="dtype='bfloat16' is not supported by Tesla T4"):
        _loading.check_dtype("bfloat16", torch.device("cuda"))


def test_batch_widths_come_from_a_bounded_grid():
    widths = [_encoding.padded_length(length, 512) for length in range(1, 513)]
    assert widths[:32] == list(range(1, 33))  # short windows are not padded
    assert len(set(widths)) == 96  # not one per length: oneDNN keeps kernels per shape
    assert all(length <= width <= 1.0625 * length for length, width in enumerate(widths, 1))
    assert _encoding.padded_length(497, 500) == 500  # never past the model's longest window


def test_padded_batches_keep_every_feature(tiny_model_dir):
    model, _ = _loading.from_pretrained(tiny_model_dir, None, "float32")
    vectorizer = BertVectorizer(tiny_model_dir, cache=False, batch_size=1).fit()
    vectorizer.model_ = model  # a private model: the hook does not leak into other tests
    widths = []
    model.register_forward_pre_hook(
        lambda module, args, kwargs: widths.append(kwargs["input_ids"].shape[1]),
        with_kwargs=True)
    texts = [" ".join(["cat"] * n) for n in range(31, 63)]  # 33 to 64 tokens
    features = vectorizer.transform(texts)
    # 16 shapes for 32 lengths, the longest no wider than the model's 64 positions
    assert sorted(widths, reverse=True) == [64 - 2 * (i // 2) for i in range(32)]
    np.testing.assert_allclose(features, reference_features(tiny_model_dir, texts), atol=1e-5)


def test_vector_does_not_depend_on_batch_mates(tiny_model_dir, texts):
    vectorizer = BertVectorizer(tiny_model_dir, cache=False, pooling="max").fit()
    alone = np.vstack([vectorizer.transform([text]) for text in texts])
    mixed = vectorizer.transform(texts * 3)[: len(texts)]
    np.testing.assert_allclose(mixed, alone, atol=1e-5)


@pytest.mark.parametrize("truncation", ["head", "chunks", "tail", "pairs"])
def test_tokenizing_in_slices_changes_nothing(tiny_model_dir, texts, truncation, monkeypatch):
    long = [" ".join(texts[i:] + texts[:i]) for i in range(len(texts))]  # several windows each
    inputs = list(zip(texts, long)) if truncation == "pairs" else long
    vectorizer = BertVectorizer(tiny_model_dir, cache=False, max_length=16, **(
        {} if truncation == "pairs" else {"truncation": truncation})).fit()

    def windows():
        return tokenize(vectorizer.tokenizer_, inputs, 16, "head" if truncation == "pairs"
                        else truncation, stride=4)

    whole, features = windows(), vectorizer.transform(inputs)
    monkeypatch.setattr(skbert._encoder._encoding, "TOKENIZE_SLICE", 3)
    sliced = windows()
    np.testing.assert_array_equal(sliced.owner, whole.owner)
    for name in ("input_ids", "special_mask", "token_type_ids"):
        rows, sliced_rows = getattr(whole, name), getattr(sliced, name)
        assert (sliced_rows is None if rows is None
                else list(map(list, sliced_rows)) == list(map(list, rows))), name
    np.testing.assert_array_equal(vectorizer.transform(inputs), features)


def record_layer_calls(model):
    """Indices of the encoder layers that run, in order, appended to a list."""
    calls = []
    for index, module in enumerate(model.encoder.layer):
        module.register_forward_pre_hook(lambda module, args, index=index: calls.append(index))
    return calls


@pytest.mark.parametrize("layer", [0, 1, -2, [0, 1], [0, -2], -1, "all"])
def test_the_encoder_stops_at_the_deepest_layer_read(private, texts, layer, monkeypatch):
    calls = record_layer_calls(private.model_)
    shallow = private.set_params(layer=layer, pooling="mean_max").transform(texts)
    deepest = max(private._extraction().layers)
    assert set(calls) == set(range(max(deepest, 1)))  # at least one layer runs
    assert len(private.model_.encoder.layer) == 2  # the shared model is left as it is
    calls.clear()
    monkeypatch.setattr(_encoding, "shallow_view", lambda model, n_layers: model)
    np.testing.assert_allclose(shallow, private.transform(texts), rtol=0, atol=1e-6)
    assert set(calls) == {0, 1}


def test_the_cache_and_the_pooler_read_the_last_layer(private, texts):
    calls = record_layer_calls(private.model_)
    skbert.clear_cache()
    private.set_params(layer=0, cache=True).transform(texts)
    skbert.clear_cache()
    assert set(calls) == {0, 1}
    calls.clear()
    private.set_params(pooling="pooler", layer=-1, cache=False).transform(texts)
    assert set(calls) == {0, 1}


def test_a_shallow_pass_first_leaves_later_full_passes_right(private, texts):
    """transformers records hidden states with hooks on the layers: never installed twice."""
    private.set_params(layer=[0, 1]).transform(texts)  # the first call: a shallow view
    got = private.set_params(layer="all").transform(texts)
    expected = reference_features(private.model, texts, layer="all")
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


def test_flat_rows_match_the_rows_they_hold():
    rows = [[5, 1, 2], [7], [], [3, 3, 4, 9], [8, 0]]
    flat = _encoding.Rows.of(rows, np.int32)
    assert [row.tolist() for row in flat] == rows and len(flat) == len(rows)
    assert flat[-1].tolist() == rows[-1] and flat.lengths.tolist() == [3, 1, 0, 4, 2]
    with pytest.raises(IndexError):
        flat[len(rows)]
    picked = [3, 0, 2, 3]
    assert [row.tolist() for row in flat.take(picked)] == [rows[i] for i in picked]
    padded = flat.padded(picked, -1)
    assert padded.dtype == np.int64 and padded.shape == (4, 4)
    assert padded.tolist() == [rows[i] + [-1] * (4 - len(rows[i])) for i in picked]
    assert flat.count(3).tolist() == [row.count(3) for row in rows]
    for part in [slice(1, 4), slice(-2, None), slice(2, 2), slice(4, 9), slice(None)]:
        assert [row.tolist() for row in flat[part]] == rows[part]
    with pytest.raises(ValueError, match="step 1"):
        flat[::2]
    halves = _encoding.Rows.concatenate([flat.take([0, 1]), flat.take([2, 3, 4])])
    assert [row.tolist() for row in halves] == rows
    flat[0][:] = 6  # a row is a view: written in place
    assert flat.values[:3].tolist() == [6, 6, 6]


def test_windows_held_flat_keep_their_rows(tiny_model_dir, texts):
    vectorizer = BertVectorizer(tiny_model_dir, cache=False).fit()
    windows = tokenize(vectorizer.tokenizer_, texts, 16, "chunks", 2)
    expected = vectorizer.tokenizer_(texts, truncation=True, max_length=16, stride=2,
                                     return_overflowing_tokens=True)["input_ids"]
    assert [row.tolist() for row in windows.input_ids] == expected
    assert windows.input_ids.values.dtype == np.int32
    assert windows.special_mask.values.dtype == np.int8
    part = windows.subset([2, 0])
    assert [row.tolist() for row in part.input_ids] == [expected[2], expected[0]]
    assert part.owner.tolist() == windows.owner[[2, 0]].tolist()
