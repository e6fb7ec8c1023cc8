"""Records: every part of a layout in a handful of tensor operations, checked part by part."""

import numpy as np
import pytest
import torch

from skbert import pooling
from skbert._encoder._features import EXCLUDED, Layout, compute_parts, parts_for_cache


def make_batch(kind):
    """Hidden states of 4 layers for 5 right-padded windows, one without text tokens.

    Single texts have special tokens at both ends only, pairs one more in the
    middle; "none empty" gives the window without text tokens one more token;
    "a prompt" marks a text token of two windows as one that no pooling reads.
    """
    generator = torch.Generator().manual_seed(0)
    n_layers, n_windows, n_tokens, dim = 4, 5, 9, 8
    hidden = [torch.randn(n_windows, n_tokens, dim, generator=generator) for _ in range(n_layers)]
    lengths = torch.tensor([9, 3, 3 if kind.endswith("none empty") else 2, 7, 5])
    attention = (torch.arange(n_tokens)[None] < lengths[:, None]).long()
    special = torch.zeros_like(attention)
    special[:, 0] = 1
    special[torch.arange(n_windows), lengths - 1] = 1
    if kind == "text pairs":
        special[[0, 3, 4], [4, 3, 2]] = 1
    if kind.endswith("a prompt"):
        special[[0, 3], [1, 1]] = EXCLUDED
    pooler_output = torch.randn(n_windows, dim, generator=generator)
    return hidden, attention, special, pooler_output


@pytest.fixture(params=["single texts", "text pairs", "single texts, none empty",
                        "single texts, a prompt"])
def batch(request):
    return make_batch(request.param)


def expected_part(key, hidden, attention, special, pooler_output):
    """One part computed on its own with the public pooling functions."""
    masks = {True: attention.bool() & (special != EXCLUDED),
             False: attention.bool() & (special == 0)}
    kind = key[0]
    if kind == "pooler":
        return pooler_output
    if kind == "count":
        return pooling.token_counts(masks[key[1]])
    if kind == "max_of_mean":
        merged = pooling.combine_layers([hidden[layer] for layer in key[1]], "mean")
        return pooling.max_pooling(merged, masks[key[2]])
    if kind in ("cls", "last"):
        return pooling.POOLINGS[kind](hidden[key[1]], attention)
    return pooling.POOLINGS[kind](hidden[key[1]], masks[key[2]])


def test_cache_layout_record_holds_every_part(batch):
    keys = parts_for_cache(4, has_pooler=True) | {("max_of_mean", (0, 2), False)}
    layout = Layout.of(keys, hidden_size=8)
    records = compute_parts(*batch[:3], batch[3], layout).numpy()
    assert records.shape == (5, layout.width) and records.dtype == np.float32
    parts = layout.parts(records)
    assert set(parts) == keys
    for key, values in parts.items():
        np.testing.assert_allclose(values, expected_part(key, *batch).numpy(), rtol=0, atol=1e-6,
                                   err_msg=repr(key))


@pytest.mark.parametrize("kind", ["single texts", "text pairs"])
def test_a_window_without_text_tokens_pools_to_zeros(kind):
    hidden, attention, special, pooler_output = make_batch(kind)  # window 2: [CLS] [SEP]
    layout = Layout.of({("mean", 1, False), ("max", 1, False), ("max_of_mean", (1, 2), False)}, 8)
    records = compute_parts(hidden, attention, special, pooler_output, layout).numpy()
    np.testing.assert_array_equal(records[2], 0.0)
    assert np.isfinite(records).all()


def test_a_smaller_layout_gives_the_same_values(batch):
    full = Layout.of(parts_for_cache(4, has_pooler=True), 8)
    small = Layout.of({("mean", 2, False), ("max", 1, True), ("cls", 3), ("count", True)}, 8)
    everything = full.parts(compute_parts(*batch[:3], batch[3], full).numpy())
    few = small.parts(compute_parts(*batch[:3], None, small).numpy())
    for key, values in few.items():
        np.testing.assert_allclose(values, everything[key], rtol=0, atol=1e-6)


def test_layout_is_canonical_and_tagged():
    keys = [("mean", 1, True), ("cls", 0), ("count", False), ("mean", 0, True)]
    layout = Layout.of(keys, 4)
    assert layout == Layout.of(reversed(keys), 4) and layout.tag == Layout.of(keys, 4).tag
    assert layout.width == 3 * 4 + 1
    assert layout.tag != Layout.of(keys, 8).tag
    assert [key for key in layout.keys if key[0] == "mean"] == [("mean", 0, True),
                                                                 ("mean", 1, True)]


def test_layout_columns_are_the_parts_slices_merged():
    layout = Layout.of([("cls", 0), ("mean", 0, True), ("mean", 1, True), ("count", False),
                        ("count", True)], 4)
    assert layout.columns({("mean", 1, True), ("mean", 0, True), ("count", True)}) == [
        slice(4, 12), slice(13, 14)]
    assert layout.columns({("cls", 0), ("count", False)}) == [slice(0, 4), slice(12, 13)]
    assert layout.columns(set(layout.keys)) == [slice(0, layout.width)]
    assert layout.columns({("max", 0, True)}) == []


def test_compute_parts_leaves_the_hidden_states_alone(batch):
    hidden, attention, special, pooler_output = batch
    before = [h.clone() for h in hidden]
    compute_parts(hidden, attention, special, pooler_output,
                  Layout.of(parts_for_cache(4, has_pooler=True), 8))
    for original, now in zip(before, hidden):
        torch.testing.assert_close(now, original, rtol=0, atol=0)


# One token a tile; three (a row of 5 windows of 8 float32 values a token).
@pytest.mark.parametrize("tile_bytes", [1, 3 * 5 * 8 * 4])
def test_tiles_of_tokens_give_the_same_records(batch, tile_bytes, monkeypatch):
    from skbert._encoder import _features

    layout = Layout.of(parts_for_cache(4, has_pooler=True), 8)
    whole = compute_parts(*batch[:3], batch[3], layout)
    monkeypatch.setattr(_features, "TILE_BYTES", tile_bytes)
    torch.testing.assert_close(compute_parts(*batch[:3], batch[3], layout), whole,
                               rtol=0, atol=1e-6)
