"""BertVectorizer.save_sentence_transformer: folders that sentence-transformers (and skbert)
load back to the vectors of transform, and the settings such a folder cannot express; the
window (max_seq_length) that such a folder sets."""

import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

import skbert
from skbert import BertVectorizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("sentence_transformers")

TEXTS = ["the cat sat on the mat", "what is the long river in the country ?", "", "good",
         "xyz unknownword qqq", "a big red dog runs fast"]
LONG = " ".join(["the cat sat on the mat and the dog ran to the river"] * 8)
PROMPTS = {"query": "question - ", "document": "answer - "}


@pytest.fixture(autouse=True)
def empty_cache():
    skbert.clear_cache()
    yield
    skbert.clear_cache()


def encode(folder, texts, **kwargs):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu").encode(texts, convert_to_numpy=True,
                                                                 **kwargs)


def read_json(folder, name):
    return json.loads((Path(folder) / name).read_text(encoding="utf-8"))


def assert_round_trip(vectorizer, folder, texts=TEXTS):
    """sentence-transformers and skbert's "auto" both read ``folder`` back to ``transform``."""
    ours = vectorizer.transform(texts)
    np.testing.assert_allclose(encode(folder, texts), ours, atol=1e-5, rtol=0)
    again = BertVectorizer(model=folder, pooling="auto", norm="auto").fit()
    assert (again.pooling_, again.norm_, again.prompt_) == (vectorizer.pooling_,
                                                            vectorizer.norm_, vectorizer.prompt_)
    np.testing.assert_allclose(again.transform(texts), ours, atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def instructor_dir(tiny_model_dir, tmp_path_factory):
    """The tiny BERT as a sentence-transformers folder whose mean pooling leaves the prompt
    out (include_prompt: false), with "query" / "document" prompts."""
    directory = tmp_path_factory.mktemp("instructor") / "model"
    shutil.copytree(tiny_model_dir, directory)
    files = {
        "modules.json": [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling",
             "type": "sentence_transformers.models.Pooling"}],
        "1_Pooling/config.json": {"word_embedding_dimension": 32,
                                  "pooling_mode_mean_tokens": True, "include_prompt": False},
        "config_sentence_transformers.json": {"prompts": PROMPTS, "default_prompt_name": None},
    }
    (directory / "1_Pooling").mkdir()
    for name, content in files.items():
        (directory / name).write_text(json.dumps(content), encoding="utf-8")
    return str(directory)


@pytest.mark.parametrize("norm", [None, "l2"])
@pytest.mark.parametrize("pooling", ["mean", "cls", "max", "mean_sqrt_len", "last"])
def test_round_trip(tiny_model_dir, tmp_path, pooling, norm):
    vectorizer = BertVectorizer(tiny_model_dir, pooling=pooling, norm=norm).fit()
    folder = vectorizer.save_sentence_transformer(tmp_path / "st")
    assert folder == tmp_path / "st" and isinstance(folder, Path)
    modules = [module["path"] for module in read_json(folder, "modules.json")]
    assert modules == ["", "1_Pooling"] + ["2_Normalize"] * (norm == "l2")
    config = read_json(folder, "1_Pooling/config.json")
    assert config["word_embedding_dimension"] == 32
    assert [flag for flag, on in config.items() if on is True and flag.startswith("pooling")] \
        == [{"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token",
             "max": "pooling_mode_max_tokens",
             "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens",
             "last": "pooling_mode_lasttoken"}[pooling]]
    assert read_json(folder, "sentence_bert_config.json") == {"max_seq_length": 64,
                                                              "do_lower_case": False}
    settings = read_json(folder, "config_sentence_transformers.json")
    assert (settings["prompts"], settings["default_prompt_name"]) == ({}, None)
    assert settings["similarity_fn_name"] == "cosine"
    assert (folder / "model.safetensors").is_file()
    assert_round_trip(vectorizer, folder)


def test_prompt_is_the_default_prompt(tiny_model_dir, tmp_path):
    vectorizer = BertVectorizer(tiny_model_dir, prompt="question - ", norm="l2").fit()
    folder = vectorizer.save_sentence_transformer(tmp_path / "st")
    settings = read_json(folder, "config_sentence_transformers.json")
    assert (settings["prompts"], settings["default_prompt_name"]) == (
        {"default": "question - "}, "default")
    assert read_json(folder, "1_Pooling/config.json")["include_prompt"] is True
    assert_round_trip(vectorizer, folder)  # encode applies the default prompt, as skbert does
    unprompted = BertVectorizer(tiny_model_dir, norm="l2").fit().transform(TEXTS)
    assert np.abs(encode(folder, TEXTS, prompt="") - unprompted).max() < 1e-5


@pytest.mark.parametrize("pooling", ["mean", "max", "last"])
def test_prompt_left_out_of_pooling(instructor_dir, tmp_path, pooling):
    vectorizer = BertVectorizer(instructor_dir, pooling=pooling, prompt="query").fit()
    assert (vectorizer.prompt_, vectorizer._sentence.include_prompt) == ("question - ", False)
    folder = vectorizer.save_sentence_transformer(tmp_path / "st")
    assert read_json(folder, "1_Pooling/config.json")["include_prompt"] is False
    settings = read_json(folder, "config_sentence_transformers.json")
    # The model's own prompts stay, under their names; the vectorizer's is the default.
    assert settings["prompts"] == {**PROMPTS, "default": "question - "}
    assert_round_trip(vectorizer, folder)
    document = BertVectorizer(instructor_dir, pooling=pooling, prompt="document").fit()
    np.testing.assert_allclose(encode(folder, TEXTS, prompt_name="document"),
                               document.transform(TEXTS), atol=1e-5, rtol=0)


def test_cls_with_a_prompt_left_out_of_pooling(instructor_dir, tmp_path):
    # skbert's cls is the [CLS] token, prompt or not; sentence-transformers takes the first token
    # after an excluded prompt, so the folder says include_prompt: true, where both take [CLS].
    vectorizer = BertVectorizer(instructor_dir, pooling="cls", prompt="query").fit()
    folder = vectorizer.save_sentence_transformer(tmp_path / "st")
    assert read_json(folder, "1_Pooling/config.json")["include_prompt"] is True
    assert_round_trip(vectorizer, folder)


def test_max_length_is_the_window(tiny_model_dir, tmp_path):
    vectorizer = BertVectorizer(tiny_model_dir, max_length=12, norm="l2").fit()
    folder = vectorizer.save_sentence_transformer(tmp_path / "st")
    assert read_json(folder, "sentence_bert_config.json")["max_seq_length"] == 12
    assert read_json(folder, "tokenizer_config.json")["model_max_length"] == 12
    texts = [LONG, "the cat"]
    assert_round_trip(vectorizer, folder, texts)
    whole = BertVectorizer(tiny_model_dir, norm="l2").fit().transform(texts)
    assert np.abs(encode(folder, texts)[0] - whole[0]).max() > 1e-3  # truncated at 12, not 64


@pytest.mark.parametrize("setting, named", [
    ({"layer": -2}, "layer=-2"),
    ({"layer": 0}, "layer=0"),
    ({"layer": [-1, -2]}, r"layer=\[-1, -2\]"),
    ({"layer": "all"}, "layer='all'"),
    ({"pooling": "pooler"}, "pooling='pooler'"),
    ({"pooling": "mean_max"}, "pooling='mean_max': .*max before mean"),
    ({"include_special_tokens": False}, "include_special_tokens=False"),
    ({"include_special_tokens": False, "pooling": "max"}, "include_special_tokens=False"),
    ({"norm": "l1"}, "norm='l1'"),
    ({"norm": "max"}, "norm='max'"),
    ({"truncate_dim": 8}, "truncate_dim=8: .*after Normalize"),
    ({"truncation": "tail"}, "truncation='tail'"),
    ({"truncation": "head_tail"}, "truncation='head_tail'"),
    ({"truncation": "chunks"}, "truncation='chunks'"),
])
def test_refuses_what_sentence_transformers_cannot_express(tiny_model_dir, tmp_path, setting,
                                                           named):
    vectorizer = BertVectorizer(tiny_model_dir, **setting).fit()
    target = tmp_path / "parent" / "st"
    with pytest.raises(ValueError, match=f"cannot reproduce .*{named}.*Nothing was written"):
        vectorizer.save_sentence_transformer(target)
    assert os.listdir(tmp_path) == []


def test_refusal_names_every_setting(tiny_model_dir, tmp_path):
    vectorizer = BertVectorizer(tiny_model_dir, layer=-2, norm="l1", truncation="tail").fit()
    with pytest.raises(ValueError, match="layer=-2.*; norm='l1'.*; truncation='tail'"):
        vectorizer.save_sentence_transformer(tmp_path / "st")


@pytest.mark.parametrize("setting", [{"layer": 2}, {"layer": [-1]},
                                     {"include_special_tokens": False, "pooling": "cls"},
                                     {"include_special_tokens": False, "pooling": "last"},
                                     {"truncate_dim": 32}, {"layer_combine": "concat"}])
def test_settings_that_change_nothing_are_written(tiny_model_dir, tmp_path, setting):
    vectorizer = BertVectorizer(tiny_model_dir, **setting).fit()
    folder = vectorizer.save_sentence_transformer(tmp_path / "st")
    np.testing.assert_allclose(encode(folder, TEXTS), vectorizer.transform(TEXTS), atol=1e-5,
                               rtol=0)


def test_cpu_backend_saves_the_torch_weights(tiny_model_dir, tmp_path):
    pytest.importorskip("onnxruntime")
    vectorizer = BertVectorizer(tiny_model_dir, backend="onnx", norm="l2").fit()
    folder = vectorizer.save_sentence_transformer(tmp_path / "st")
    torch_features = BertVectorizer(tiny_model_dir, norm="l2").fit().transform(TEXTS)
    np.testing.assert_allclose(encode(folder, TEXTS), torch_features, atol=1e-5, rtol=0)


def test_never_overwrites(tiny_model_dir, tmp_path):
    vectorizer = BertVectorizer(tiny_model_dir).fit()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="full' is not empty.*never overwrites"):
        vectorizer.save_sentence_transformer(tmp_path / "full")
    assert os.listdir(tmp_path / "full") == ["notes.txt"]
    (tmp_path / "file").write_text("mine")
    with pytest.raises(FileExistsError, match="file' is a file"):
        vectorizer.save_sentence_transformer(str(tmp_path / "file"))
    assert (tmp_path / "file").read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["file", "full"]  # no temporary left


def test_empty_folder_and_missing_parents(tiny_model_dir, tmp_path):
    vectorizer = BertVectorizer(tiny_model_dir).fit()
    (tmp_path / "empty").mkdir()
    assert vectorizer.save_sentence_transformer(tmp_path / "empty") == tmp_path / "empty"
    assert (tmp_path / "empty" / "modules.json").is_file()
    deep = vectorizer.save_sentence_transformer(str(tmp_path / "a" / "b" / "c"))
    assert (deep / "modules.json").is_file()
    assert sorted(os.listdir(tmp_path)) == ["a", "empty"]


def test_failed_write_leaves_nothing(tiny_model_dir, tmp_path, monkeypatch):
    vectorizer = BertVectorizer(tiny_model_dir).fit()

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(vectorizer.tokenizer_, "save_pretrained", full_disk)
    with pytest.raises(OSError, match="No space left"):
        vectorizer.save_sentence_transformer(tmp_path / "st")
    assert os.listdir(tmp_path) == []


def test_unfitted_and_changed_fit_parameters(tiny_model_dir, tmp_path):
    with pytest.raises(NotFittedError):
        BertVectorizer(tiny_model_dir).save_sentence_transformer(tmp_path / "st")
    vectorizer = BertVectorizer(tiny_model_dir).fit().set_params(dtype="float16")
    with pytest.raises(ValueError, match="dtype was set to 'float16' after fit"):
        vectorizer.save_sentence_transformer(tmp_path / "st")
    assert os.listdir(tmp_path) == []


def test_setting_that_fails_at_transform_writes_nothing(tiny_model_dir, tmp_path):
    vectorizer = BertVectorizer(tiny_model_dir).fit().set_params(max_length=65)
    with pytest.raises(ValueError, match="max_length=65 exceeds the model's limit of 64"):
        vectorizer.save_sentence_transformer(tmp_path / "st")
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_all_minilm_l6_v2(minilm_dir, tmp_path):
    vectorizer = BertVectorizer(minilm_dir, pooling="auto", norm="auto", max_length=256).fit()
    folder = vectorizer.save_sentence_transformer(tmp_path / "minilm")
    texts = TEXTS + ["Where is the Eiffel Tower?", " ".join(["A man is playing a guitar."] * 60)]
    assert_round_trip(vectorizer, folder, texts)
    # Its max_seq_length is 256 as well: the written folder is the original one.
    np.testing.assert_allclose(encode(folder, texts), encode(minilm_dir, texts), atol=1e-5,
                               rtol=0)


# The two runs round differently in half precision (measured on the tiny model: 1.9e-3 in
# bfloat16, 2.3e-4 in float16, as far as each is from float32), within a few units of it.
@pytest.mark.parametrize("dtype, atol", [("bfloat16", 1e-2), ("float16", 2e-3)])
def test_half_precision_weights_are_saved_as_they_are(tiny_model_dir, tmp_path, dtype, atol):
    import torch
    from safetensors import safe_open
    from sentence_transformers import SentenceTransformer

    vectorizer = BertVectorizer(tiny_model_dir, dtype=dtype, norm="l2").fit()
    folder = vectorizer.save_sentence_transformer(tmp_path / "st")
    with safe_open(str(folder / "model.safetensors"), "pt") as weights:
        assert {weights.get_tensor(name).dtype for name in weights.keys()} == {
            getattr(torch, dtype)}
    model = SentenceTransformer(str(folder), device="cpu")
    assert {parameter.dtype for parameter in model.parameters()} == {getattr(torch, dtype)}
    ours = vectorizer.transform(TEXTS)
    np.testing.assert_allclose(model.encode(TEXTS, convert_to_numpy=True), ours, atol=atol,
                               rtol=0)
    again = BertVectorizer(model=folder, pooling="auto", norm="auto", dtype=dtype).fit()
    np.testing.assert_array_equal(again.transform(TEXTS), ours)


def window_folder(base_dir, directory, config):
    """The tiny BERT (a 64-token limit) as a sentence-transformers folder (mean pooling,
    Normalize) whose ``sentence_bert_config.json`` holds ``config``, JSON text."""
    shutil.copytree(base_dir, directory)
    modules = [{"idx": index, "name": str(index), "path": path,
                "type": f"sentence_transformers.models.{kind}"}
               for index, (path, kind) in enumerate([("", "Transformer"), ("1_Pooling", "Pooling"),
                                                     ("2_Normalize", "Normalize")])]
    (directory / "1_Pooling").mkdir()
    (directory / "2_Normalize").mkdir()
    (directory / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}), encoding="utf-8")
    (directory / "sentence_bert_config.json").write_text(config, encoding="utf-8")
    return str(directory)


@pytest.fixture(scope="module")
def short_window_dir(tiny_model_dir, tmp_path_factory):
    """A sentence-transformers folder whose window (max_seq_length 16) is shorter than its
    tokenizer's and positions' limit (64), as all-MiniLM-L6-v2's (256 of 512)."""
    return window_folder(tiny_model_dir, tmp_path_factory.mktemp("short-window") / "model",
                         '{"max_seq_length": 16, "do_lower_case": false}')


def test_max_seq_length_is_the_default_window(short_window_dir):
    texts = [LONG, "the cat"]
    auto = BertVectorizer(short_window_dir, pooling="auto", norm="auto").fit()
    assert auto._window_length() == 16
    ours = auto.transform(texts)
    np.testing.assert_allclose(ours, encode(short_window_dir, texts), atol=1e-5, rtol=0)
    # The window is the model's as trained, whatever the pooling; pickles keep it.
    assert BertVectorizer(short_window_dir, pooling="cls").fit()._window_length() == 16
    assert pickle.loads(pickle.dumps(auto))._window_length() == 16
    # max_length chooses another, up to the model's limit.
    whole = BertVectorizer(short_window_dir, pooling="auto", norm="auto", max_length=64).fit()
    assert whole._window_length() == 64
    assert np.abs(whole.transform(texts)[0] - ours[0]).max() > 1e-3


def test_windows_of_other_lengths_share_no_cache_entry(short_window_dir):
    texts = [LONG, "the cat"]
    folder_window = BertVectorizer(short_window_dir).fit()
    model_limit = BertVectorizer(short_window_dir, max_length=64).fit()
    first, second = folder_window.transform(texts), model_limit.transform(texts)  # one store
    assert np.abs(first[0] - second[0]).max() > 1e-3
    np.testing.assert_array_equal(first[1], second[1])  # a short text: one entry serves both
    for vectorizer, features in [(folder_window, first), (model_limit, second)]:
        np.testing.assert_allclose(vectorizer.set_params(cache=False).transform(texts),
                                   features, atol=1e-6, rtol=0)


def test_the_window_read_is_the_window_written(short_window_dir, tiny_model_dir, tmp_path):
    vectorizer = BertVectorizer(short_window_dir, pooling="auto", norm="auto").fit()
    folder = vectorizer.save_sentence_transformer(tmp_path / "again")
    assert read_json(folder, "sentence_bert_config.json")["max_seq_length"] == 16
    assert_round_trip(vectorizer, folder, [LONG, "the cat"])
    # max_length=12 written, None read back: 12, from sentence_bert_config.json alone.
    folder = BertVectorizer(tiny_model_dir, max_length=12).fit().save_sentence_transformer(
        tmp_path / "twelve")
    tokenizer_config = {**read_json(folder, "tokenizer_config.json"), "model_max_length": 64}
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config), encoding="utf-8")
    assert BertVectorizer(folder).fit()._window_length() == 12


def test_a_folder_saved_at_a_short_window_reads_at_a_longer_one(tiny_model_dir, tmp_path):
    from sentence_transformers import SentenceTransformer

    # Written with max_seq_length 16 and the tokenizer's model_max_length 16; the positions
    # hold 64, and sentence-transformers reads the folder at any window up to them.
    folder = BertVectorizer(tiny_model_dir, max_length=16).fit().save_sentence_transformer(
        tmp_path / "sixteen")
    assert read_json(folder, "tokenizer_config.json")["model_max_length"] == 16
    texts = [LONG, "the cat"]
    assert BertVectorizer(folder).fit()._window_length() == 16
    wider = BertVectorizer(folder, pooling="auto", norm="auto", max_length=48).fit()
    assert wider._window_length() == 48
    model = SentenceTransformer(str(folder), device="cpu")
    model.max_seq_length = 48
    np.testing.assert_allclose(wider.transform(texts), model.encode(texts), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="max_length=65 exceeds the model's limit of 64"):
        BertVectorizer(folder, max_length=65).fit()._window_length()


@pytest.mark.parametrize("config, window", [
    ('{"max_seq_length": null}', 64),  # as sentence-transformers: the model's limit
    ('{"do_lower_case": false}', 64),
    ('{"max_seq_length": 3}', 3),
])
def test_max_seq_length_as_sentence_transformers_reads_it(tiny_model_dir, tmp_path, config,
                                                          window):
    folder = window_folder(tiny_model_dir, tmp_path / "st", config)
    vectorizer = BertVectorizer(folder, pooling="auto", norm="auto").fit()
    assert vectorizer._window_length() == window
    texts = [LONG, "the cat"]
    np.testing.assert_allclose(vectorizer.transform(texts), encode(folder, texts), atol=1e-5,
                               rtol=0)


def test_max_seq_length_past_the_positions_is_capped(tiny_model_dir, tmp_path):
    # sentence-transformers 6.3 truncates at 1000 tokens there and fails in the position
    # embeddings of a long text; the window is the model's limit instead.
    folder = window_folder(tiny_model_dir, tmp_path / "st", '{"max_seq_length": 1000}')
    vectorizer = BertVectorizer(folder).fit()
    assert vectorizer._window_length() == 64
    np.testing.assert_array_equal(vectorizer.transform([LONG]),
                                  BertVectorizer(folder, max_length=64).fit().transform([LONG]))


@pytest.mark.parametrize("config, shown", [
    ('{"max_seq_length": -3}', "-3"),
    ('{"max_seq_length": 0}', "0"),
    ('{"max_seq_length": "256"}', "'256'"),
    ('{"max_seq_length": 16.5}', "16.5"),
    ('{"max_seq_length": true}', "True"),
    ('{"max_seq_length": [16]}', r"\[16\]"),
    ("[16]", r"\[16\]"),
])
def test_a_malformed_max_seq_length_is_an_error(tiny_model_dir, tmp_path, config, shown):
    folder = window_folder(tiny_model_dir, tmp_path / "st", config)
    with pytest.raises(ValueError, match=f"sentence_bert_config.json of '.*st' has "
                                         f"max_seq_length={shown}; expected a positive int.*"
                                         "Pass max_length"):
        BertVectorizer(folder, pooling="auto", norm="auto").fit()
    # An explicit max_length does not read the file.
    assert BertVectorizer(folder, max_length=16).fit()._window_length() == 16


def test_a_window_without_room_for_text_is_an_error(tiny_model_dir, tmp_path):
    folder = window_folder(tiny_model_dir, tmp_path / "st", '{"max_seq_length": 2}')
    with pytest.raises(ValueError, match=r"max_length=None \(a window of 2 tokens from the "
                                         r"model\) leaves no room .* use at least 3"):
        BertVectorizer(folder).fit()


def test_fine_tuning_trains_in_the_folders_window(short_window_dir, monkeypatch):
    from skbert import FineTunedVectorizer
    from skbert._embeddings import _finetuned_vectorizer
    from skbert._encoder._encoding import tokenize

    lengths = []

    def recorded(tokenizer, texts, max_length, *args, **kwargs):
        lengths.append(max_length)
        return tokenize(tokenizer, texts, max_length, *args, **kwargs)

    monkeypatch.setattr(_finetuned_vectorizer, "tokenize", recorded)
    pairs = [(LONG, "the cat sat on the mat"), ("a big red dog runs fast", "good")]
    tuned = FineTunedVectorizer(BertVectorizer(short_window_dir, pooling="auto", norm="auto"),
                                batch_size=2, random_state=0).fit(pairs)
    assert lengths and set(lengths) == {16}
    assert tuned.vectorizer_._window_length() == 16


@pytest.mark.slow
def test_all_minilm_l6_v2_reads_its_256_token_window(minilm_dir):
    # 405 words of STS-B test sentences: 477 tokens, past the 256 of the folder's
    # sentence_bert_config.json and within the 512 of its tokenizer and positions.
    from skbert.datasets import load_stsb

    text = " ".join(first for first, _ in load_stsb("test").data[:65])
    texts = [text, "A man is playing a guitar."]
    vectorizer = BertVectorizer(minilm_dir, pooling="auto", norm="auto").fit()
    assert vectorizer._window_length() == 256
    assert len(vectorizer.tokenizer_(text)["input_ids"]) > 256
    theirs = encode(minilm_dir, texts)
    assert np.abs(vectorizer.transform(texts) - theirs).max() <= 1e-4
