"""The fitted model's state as it is now: a model assigned to ``model_``, weights changed in
place, and the length limit of models whose positions start after the padding index."""

import pickle
import shutil

import numpy as np
import pytest

from skbert import BertClassifier, BertVectorizer, BertWordVectorizer, _compat
from skbert._encoder import _loading

SAMPLES = [("the cat sat on the mat".split(), 1), ("a big red dog runs fast".split(), 3)]


def _deeper_model(tiny_model_dir, n_layers):
    """A random BERT of ``n_layers`` layers with the tiny model's vocabulary and width."""
    import torch
    from transformers import BertModel

    config = _loading.load_model(tiny_model_dir, None, "float32").config
    config.num_hidden_layers = n_layers
    torch.manual_seed(1)
    return BertModel(config).eval()


def _loaded(tiny_model_dir):
    model, tokenizer = _loading.from_pretrained(tiny_model_dir, None, "float32")
    return _loading.LoadedModel.of(model, tokenizer, _loading.SentenceConfig())


def _private(tiny_model_dir):
    """A model loaded for one test alone: changing it touches no other test's model."""
    return _loading.load_model(tiny_model_dir, None, "float32")


def _reference(model, tokenizer, texts, layer):
    """Mean pooling of ``layer``'s hidden states, computed with transformers directly."""
    import torch

    inputs = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**inputs, output_hidden_states=True).hidden_states[layer]
    mask = inputs["attention_mask"].unsqueeze(-1).float()
    return ((hidden * mask).sum(1) / mask.sum(1)).numpy()


@pytest.mark.parametrize("make", [lambda path: BertVectorizer(path),
                                  lambda path: BertWordVectorizer(path)])
def test_n_layers_follows_the_model_assigned(tiny_model_dir, texts, make):
    estimator = make(tiny_model_dir).fit()
    assert estimator.n_layers_ == 3
    estimator.model_ = _deeper_model(tiny_model_dir, 4)
    assert estimator.n_layers_ == 5
    X = texts if isinstance(estimator, BertVectorizer) else SAMPLES
    copy = pickle.loads(pickle.dumps(estimator))
    np.testing.assert_array_equal(estimator.transform(X), copy.transform(X))
    if isinstance(estimator, BertVectorizer):  # layer=-1 is the new model's last layer
        np.testing.assert_allclose(estimator.transform(texts[:3]),
                                   _reference(estimator.model_, estimator.tokenizer_,
                                              texts[:3], 4), atol=1e-5)
    with pytest.raises(ValueError, match="has 5 hidden states"):
        estimator.set_params(layer=5).transform(X)


def _scale_a_query_weight(model):
    import torch

    with torch.no_grad():
        model.encoder.layer[0].attention.self.query.weight.mul_(0.5)


def _replace_a_query_weight(model):
    import torch

    query = model.encoder.layer[0].attention.self.query
    query.weight = torch.nn.Parameter(query.weight.detach() * 0.5)


@pytest.mark.parametrize("change", [_scale_a_query_weight, _replace_a_query_weight])
@pytest.mark.parametrize("kind", [BertVectorizer, BertWordVectorizer])
def test_weights_changed_in_place_are_not_served_from_the_cache(tiny_model_dir, texts, change,
                                                                kind):
    X = texts if kind is BertVectorizer else SAMPLES
    estimator = kind(tiny_model_dir).fit()
    estimator.model_ = _private(tiny_model_dir)
    before = estimator.transform(X)  # now in the cache
    fingerprint = estimator._loaded.fingerprint
    change(estimator.model_)
    assert estimator._loaded.fingerprint != fingerprint
    uncached = estimator.set_params(cache=False).transform(X)
    assert not np.allclose(before, uncached)
    np.testing.assert_allclose(estimator.set_params(cache=True).transform(X), uncached,
                               atol=1e-5)


def test_a_fit_after_the_shared_model_changed_loads_the_folder_again(tiny_model_dir, texts,
                                                                     tmp_path):
    folder = shutil.copytree(tiny_model_dir, tmp_path / "model")  # its shared model: this test's
    first = BertVectorizer(folder).fit()
    original = first.transform(texts)
    _scale_a_query_weight(first.model_)
    second = BertVectorizer(folder).fit()
    assert second.model_ is not first.model_
    np.testing.assert_array_equal(second.transform(texts), original)


def test_the_fingerprint_is_not_taken_again_while_the_weights_stay(tiny_model_dir, monkeypatch):
    loaded = _loaded(tiny_model_dir)
    calls = []
    monkeypatch.setattr(_loading, "model_fingerprint", lambda model: calls.append(1) or "new")
    for _ in range(3):
        assert loaded.fingerprint == loaded.loaded_fingerprint
    assert calls == []
    _scale_a_query_weight(loaded.model)
    assert loaded.fingerprint == loaded.fingerprint == "new"
    assert calls == [1] and loaded.changed()


def test_without_version_counters_a_replaced_tensor_is_still_seen(tiny_model_dir, monkeypatch):
    monkeypatch.setattr(_compat, "tensor_version", lambda tensor: None)
    loaded = _loaded(tiny_model_dir)
    _scale_a_query_weight(loaded.model)  # invisible without the counters
    assert not loaded.changed()
    _replace_a_query_weight(loaded.model)
    assert loaded.changed()


def test_tensor_version_counts_in_place_changes_and_falls_back():
    import torch

    tensor = torch.zeros(3)
    before = _compat.tensor_version(tensor)
    tensor.add_(1)
    assert _compat.tensor_version(tensor) == before + 1
    with torch.inference_mode():
        inference = torch.zeros(3)
    assert _compat.tensor_version(inference) is None


@pytest.fixture(scope="module")
def roberta_without_a_length_limit(tmp_path_factory):
    """A tiny RoBERTa whose tokenizer does not say its length limit: the window length comes
    from its 67 position embeddings, of which positions 0 and 1 (padding) are never used."""
    import torch
    from test_architectures import MAX_LENGTH, _config, _tokenizer
    from transformers import AutoModel

    directory = tmp_path_factory.mktemp("roberta")
    tokenizer = _tokenizer("roberta")
    tokenizer.save_pretrained(directory)
    torch.manual_seed(0)
    config = _config("roberta", tokenizer)
    assert config.max_position_embeddings == MAX_LENGTH + 2
    AutoModel.from_config(config).eval().save_pretrained(directory)
    assert _loading.load(str(directory), None, "float32", "cpu").tokenizer.model_max_length \
        > 10 ** 6
    return str(directory), MAX_LENGTH


def test_roberta_windows_fit_its_positions(roberta_without_a_length_limit):
    directory, limit = roberta_without_a_length_limit
    long_text = " ".join(["the cat sat on the mat"] * 30)
    vectorizer = BertVectorizer(directory).fit()
    assert vectorizer._window_length() == limit
    np.testing.assert_array_equal(
        vectorizer.transform([long_text]),
        BertVectorizer(directory, max_length=limit).fit_transform([long_text]))
    with pytest.raises(ValueError, match=f"exceeds the model's limit of {limit} tokens"):
        BertVectorizer(directory, max_length=limit + 1).fit()
    words = long_text.split()
    assert BertWordVectorizer(directory).fit_transform([(words, 150)]).shape == (1, 32)
    classifier = BertClassifier(directory, epochs=1, batch_size=2, random_state=0)
    assert classifier.fit([long_text, "a dog"], [0, 1]).predict([long_text]).shape == (1,)


def test_with_children_replaces_children_of_a_copy_only():
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    view = _compat.with_children(model, {"1": torch.nn.Tanh()})
    assert isinstance(view[1], torch.nn.Tanh) and isinstance(model[1], torch.nn.ReLU)
    assert view[0] is model[0]  # shared, not copied


def test_without_a_child_dict_the_model_runs_whole(tiny_model_dir, texts, monkeypatch):
    from skbert._encoder._encoding import shallow_view

    model = _private(tiny_model_dir)
    assert shallow_view(model, 1) is not model
    expected = BertVectorizer(tiny_model_dir, layer=1, cache=False).fit().transform(texts)

    def no_child_dict(module, children):
        return None

    monkeypatch.setattr("skbert._encoder._encoding.with_children", no_child_dict)
    monkeypatch.setattr(_compat, "with_children", no_child_dict)  # the oneDNN tree's too
    assert shallow_view(model, 1) is model
    np.testing.assert_allclose(
        BertVectorizer(tiny_model_dir, layer=1, cache=False).fit().transform(texts), expected,
        atol=1e-5)
