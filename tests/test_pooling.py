"""skbert.pooling against naive numpy loops, and purity of the functions."""

import numpy as np
import pytest
import torch

from skbert import pooling


def _naive(hidden, mask, name):
    rows = []
    for vectors, keep in zip(hidden, mask.astype(bool)):
        picked = vectors[keep]
        if name == "cls":
            rows.append(vectors[0])
        elif name == "last":
            rows.append(vectors[np.flatnonzero(keep)[-1]])
        elif name == "mean":
            rows.append(picked.mean(0) if len(picked) else np.zeros(vectors.shape[1]))
        elif name == "mean_sqrt_len":
            rows.append(picked.sum(0) / np.sqrt(max(len(picked), 1)))
        elif name == "max":
            rows.append(picked.max(0) if len(picked) else np.zeros(vectors.shape[1]))
        elif name == "mean_max":
            mean = picked.mean(0) if len(picked) else np.zeros(vectors.shape[1])
            top = picked.max(0) if len(picked) else np.zeros(vectors.shape[1])
            rows.append(np.concatenate([mean, top]))
    return np.asarray(rows)


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(4, 7, 5)).astype(np.float32)
    lengths = [7, 3, 1, 5]
    mask = (np.arange(7)[None, :] < np.array(lengths)[:, None]).astype(np.int64)
    return hidden, mask


@pytest.mark.parametrize("name", ["cls", "last", "mean", "mean_sqrt_len", "max", "mean_max"])
def test_pooling_matches_naive_loop(batch, name):
    hidden, mask = batch
    got = pooling.POOLINGS[name](torch.from_numpy(hidden), torch.from_numpy(mask))
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), _naive(hidden, mask, name), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(pooling.POOLINGS))
def test_pooling_never_writes_into_its_inputs(batch, name):
    hidden, mask = batch
    hidden_t, mask_t = torch.from_numpy(hidden.copy()), torch.from_numpy(mask.copy())
    pooling.POOLINGS[name](hidden_t, mask_t)
    np.testing.assert_array_equal(hidden_t.numpy(), hidden)
    np.testing.assert_array_equal(mask_t.numpy(), mask)


def test_padding_values_do_not_leak(batch):
    hidden, mask = batch
    poisoned = np.where(mask[..., None].astype(bool), hidden, 1e6).astype(np.float32)
    for name, function in pooling.POOLINGS.items():
        clean = function(torch.from_numpy(hidden), torch.from_numpy(mask))
        dirty = function(torch.from_numpy(poisoned), torch.from_numpy(mask))
        np.testing.assert_array_equal(clean.numpy(), dirty.numpy(), err_msg=name)


def test_empty_mask_pools_to_zeros():
    hidden = torch.randn(2, 3, 4)
    mask = torch.tensor([[0, 0, 0], [1, 1, 0]])
    for name in ("mean", "max", "mean_sqrt_len", "mean_max"):
        out = pooling.POOLINGS[name](hidden, mask)
        assert torch.isfinite(out).all(), name
        assert torch.equal(out[0], torch.zeros_like(out[0])), name


def test_bfloat16_input_pools_in_float32(batch):
    hidden, mask = batch
    low = torch.from_numpy(hidden).bfloat16()
    got = pooling.mean_pooling(low, torch.from_numpy(mask))
    assert got.dtype == torch.float32
    expected = _naive(low.float().numpy(), mask, "mean")
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("how", ["mean", "sum", "concat"])
def test_combine_layers(how):
    layers = [torch.randn(2, 3, 4) for _ in range(3)]
    got = pooling.combine_layers(layers, how).numpy()
    arrays = [layer.numpy() for layer in layers]
    expected = {"mean": np.mean(arrays, axis=0), "sum": np.sum(arrays, axis=0),
                "concat": np.concatenate(arrays, axis=-1)}[how]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_combine_layers_rejects_unknown_mode():
    with pytest.raises(ValueError, match="how must be 'mean', 'sum' or 'concat', got 'avg'"):
        pooling.combine_layers([torch.zeros(1, 1, 1)], "avg")
