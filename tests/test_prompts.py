"""Sentence-embedding models: prompts, the folder's own pooling and normalization, truncate_dim."""

import json
import shutil

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import normalize

import skbert
from skbert import BertVectorizer
from skbert._encoder._encoding import EXCLUDED, _cut_windows, tokenize
from tests.conftest import count_forward_rows

LONG = " ".join(["the cat sat on the mat and the dog ran to the river"] * 8)
TEXTS = ["the cat sat on the mat", "what is the long river in the country ?", "", "good",
         "xyz unknownword qqq"]
PROMPTS = {"query": "query: ", "document": "passage: "}


@pytest.fixture(autouse=True)
def empty_cache():
    skbert.clear_cache()
    yield
    skbert.clear_cache()


def save_sentence_model(base_dir, directory, pooling_mode, normalize_module=True, prompts=None,
                        default_prompt_name=None, include_prompt=True, dense=False):
    """Save the tiny BERT as a sentence-transformers folder, with sentence-transformers itself."""
    from sentence_transformers import SentenceTransformer
    try:
        from sentence_transformers.sentence_transformer import modules as st
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers import models as st

    modules = [st.Transformer(base_dir),
               st.Pooling(32, pooling_mode=pooling_mode, include_prompt=include_prompt)]
    if dense:
        modules.append(st.Dense(32, 8))
    if normalize_module:
        modules.append(st.Normalize())
    model = SentenceTransformer(modules=modules, prompts=prompts,
                                default_prompt_name=default_prompt_name, device="cpu")
    model.save(str(directory))
    return str(directory)


@pytest.fixture(scope="module")
def cls_folder(tiny_model_dir, tmp_path_factory):
    """CLS pooling + Normalize + "query" / "document" prompts."""
    return save_sentence_model(tiny_model_dir, tmp_path_factory.mktemp("st-cls"), "cls",
                               prompts=PROMPTS)


@pytest.fixture(scope="module")
def instructor_folder(tiny_model_dir, tmp_path_factory):
    """Mean pooling that leaves the prompt out (include_prompt: false), no Normalize."""
    return save_sentence_model(tiny_model_dir, tmp_path_factory.mktemp("st-instructor"), "mean",
                               normalize_module=False, prompts=PROMPTS, include_prompt=False)


def encode_with_sentence_transformers(folder, texts, **kwargs):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(folder, device="cpu").encode(texts, **kwargs)


@pytest.mark.parametrize("name", ["query", "document"])
def test_auto_with_a_prompt_name_equals_sentence_transformers(cls_folder, name):
    vectorizer = BertVectorizer(cls_folder, pooling="auto", norm="auto", prompt=name).fit()
    assert (vectorizer.pooling_, vectorizer.norm_, vectorizer.prompt_) == ("cls", "l2",
                                                                           PROMPTS[name])
    expected = encode_with_sentence_transformers(cls_folder, TEXTS, prompt_name=name)
    np.testing.assert_allclose(vectorizer.transform(TEXTS), expected, atol=1e-5)
    # The prompt's text gives the same tokens as its name; "auto" is never written back.
    literal = BertVectorizer(cls_folder, pooling="auto", norm="auto", prompt=PROMPTS[name])
    np.testing.assert_array_equal(literal.fit().transform(TEXTS), vectorizer.transform(TEXTS))
    assert vectorizer.get_params()["pooling"] == "auto"


def test_an_excluded_prompt_is_left_out_of_pooling(instructor_folder, tiny_model_dir):
    vectorizer = BertVectorizer(instructor_folder, pooling="auto", norm="auto",
                                prompt="query").fit()
    assert (vectorizer.pooling_, vectorizer.norm_) == ("mean", None)
    got = vectorizer.transform(TEXTS)
    expected = encode_with_sentence_transformers(instructor_folder, TEXTS, prompt_name="query")
    np.testing.assert_allclose(got, expected, atol=1e-5)
    uncached = vectorizer.set_params(cache=False).transform(TEXTS)
    np.testing.assert_allclose(uncached, got, atol=1e-6)
    # The same weights and tokens pooled with the prompt: another vector, another cache entry.
    included = BertVectorizer(tiny_model_dir, prompt="query: ").fit().transform(TEXTS)
    assert np.abs(included - got).max() > 1e-3


def test_excluded_tokens_are_the_leading_special_tokens_and_the_prompt(tiny_model_dir):
    vectorizer = BertVectorizer(tiny_model_dir).fit()
    tokenizer = vectorizer.tokenizer_
    opening = ["[CLS]", *tokenizer.tokenize("query: ")]  # q ##u ##e ##r ##y : in this vocab
    for truncation in ("head", "tail", "chunks"):
        windows = tokenize(tokenizer, [LONG, "good"], 16, truncation, 2, "query: ", False)
        for ids, special in zip(windows.input_ids, windows.special_mask):
            tokens = tokenizer.convert_ids_to_tokens(ids.tolist())
            assert tokens[:len(opening)] == opening, truncation
            assert special[:len(opening)].tolist() == [EXCLUDED] * len(opening)
            assert set(special[len(opening):-1].tolist()) == {0} and special[-1] == 1


def test_the_default_prompt_applies_unless_the_prompt_is_empty(tiny_model_dir, tmp_path):
    folder = save_sentence_model(tiny_model_dir, tmp_path / "st", "mean", prompts=PROMPTS,
                                 default_prompt_name="query")
    vectorizer = BertVectorizer(folder, norm="auto").fit()
    assert vectorizer.prompt_ == "query: "
    np.testing.assert_allclose(vectorizer.transform(TEXTS),
                               encode_with_sentence_transformers(folder, TEXTS), atol=1e-5)
    assert vectorizer.set_params(prompt="").prompt_ == ""
    np.testing.assert_allclose(vectorizer.transform(TEXTS),
                               encode_with_sentence_transformers(folder, TEXTS, prompt=""),
                               atol=1e-5)


def test_auto_on_a_plain_model_is_mean_and_no_norm(tiny_model_dir):
    auto = BertVectorizer(tiny_model_dir, pooling="auto", norm="auto").fit()
    assert (auto.pooling_, auto.norm_, auto.prompt_) == ("mean", None, "")
    np.testing.assert_array_equal(auto.transform(TEXTS),
                                  BertVectorizer(tiny_model_dir).fit().transform(TEXTS))


@pytest.mark.slow
def test_auto_on_all_minilm_is_mean_and_l2_exactly(minilm_dir):
    auto = BertVectorizer(minilm_dir, pooling="auto", norm="auto").fit()
    assert (auto.pooling_, auto.norm_) == ("mean", "l2")
    explicit = BertVectorizer(minilm_dir, pooling="mean", norm="l2", cache=False).fit()
    np.testing.assert_array_equal(auto.set_params(cache=False).transform(TEXTS),
                                  explicit.transform(TEXTS))


def test_auto_refuses_a_pipeline_it_cannot_compute(tiny_model_dir, tmp_path):
    dense = save_sentence_model(tiny_model_dir, tmp_path / "dense", "mean", dense=True)
    with pytest.raises(ValueError, match="norm='auto' cannot reproduce .* a Dense module"):
        BertVectorizer(dense, norm="auto").fit()
    weighted = save_sentence_model(tiny_model_dir, tmp_path / "weighted", "weightedmean")
    with pytest.raises(ValueError, match="pooling='auto' .* pooling 'weightedmean'"):
        BertVectorizer(weighted, pooling="auto").fit()
    first_after_prompt = save_sentence_model(tiny_model_dir, tmp_path / "cls", "cls",
                                             include_prompt=False)
    with pytest.raises(ValueError, match="cls pooling with include_prompt: false"):
        BertVectorizer(first_after_prompt, pooling="auto").fit()
    # Chosen explicitly, the encoder is used as it is.
    assert BertVectorizer(dense, pooling="mean").fit().transform(["good"]).shape == (1, 32)


@pytest.mark.parametrize("flags, expected", [
    ({"pooling_mode_cls_token": False, "pooling_mode_max_tokens": True}, "max"),
    ({"pooling_mode_mean_sqrt_len_tokens": True}, "mean_sqrt_len"),
    ({}, "mean"),
    ({"pooling_mode_max_tokens": True, "pooling_mode_mean_tokens": True}, None),
])
def test_legacy_pooling_configs_are_read(tiny_model_dir, tmp_path, flags, expected):
    folder = save_sentence_model(tiny_model_dir, tmp_path / "legacy", "max")
    config = tmp_path / "legacy" / "1_Pooling" / "config.json"
    config.write_text(json.dumps({"word_embedding_dimension": 32, **flags}))
    if expected is None:  # concatenated in the order max, mean: not skbert's mean_max
        with pytest.raises(ValueError, match=r"pooling \('max', 'mean'\)"):
            BertVectorizer(folder, pooling="auto").fit()
    else:
        assert BertVectorizer(folder, pooling="auto").fit().pooling_ == expected


def test_a_prompt_opens_every_window_whatever_the_truncation(tiny_model_dir):
    vectorizer = BertVectorizer(tiny_model_dir, prompt="query: ", max_length=32, stride=3).fit()
    tokenizer = vectorizer.tokenizer_
    opening = ["[CLS]", *tokenizer.tokenize("query: ")]
    for truncation in ("head", "tail", "head_tail", "chunks"):
        windows = tokenize(tokenizer, [LONG], 16, truncation, 3, "query: ")
        for ids in windows.input_ids:
            tokens = tokenizer.convert_ids_to_tokens(ids.tolist())
            assert tokens[:len(opening)] == opening and len(ids) <= 16
        assert (len(windows) > 1) == (truncation == "chunks")
    # A text that fits in one window gets the same vector under every strategy.
    head = vectorizer.transform(TEXTS)
    for truncation in ("tail", "head_tail", "chunks"):
        np.testing.assert_array_equal(vectorizer.set_params(truncation=truncation)
                                      .transform(TEXTS), head)
    assert np.abs(head - BertVectorizer(tiny_model_dir, max_length=32).fit()
                  .transform(TEXTS)).max() > 1e-3


@pytest.mark.parametrize("stride", [0, 1, 4])
def test_windows_cut_by_hand_equal_the_tokenizer_overflow(tiny_model_dir, stride):
    tokenizer = BertVectorizer(tiny_model_dir).fit().tokenizer_
    texts = [LONG, "good", "", "the cat sat on the mat and the dog", LONG[:57]]
    by_hand = _cut_windows(tokenizer, texts, 12, "chunks", stride, "")
    overflow = tokenize(tokenizer, texts, 12, "chunks", stride)
    assert [ids.tolist() for ids in by_hand.input_ids] == [
        ids.tolist() for ids in overflow.input_ids]
    np.testing.assert_array_equal(by_hand.owner, overflow.owner)


def test_prompt_errors_name_the_problem(tiny_model_dir):
    with pytest.raises(ValueError, match="takes 6 tokens, which leaves no room for text"):
        BertVectorizer(tiny_model_dir, prompt="the cat sat on the mat", max_length=8).fit()
    with pytest.raises(ValueError, match="stride=5 must be smaller .* prompt = 3"):
        BertVectorizer(tiny_model_dir, prompt="the cat: ", max_length=8, truncation="chunks",
                       stride=5).fit()
    with pytest.raises(ValueError, match="'prompt' parameter of BertVectorizer must be"):
        BertVectorizer(tiny_model_dir, prompt=3).fit()


def test_truncate_dim_keeps_the_first_features_before_normalization(tiny_model_dir):
    full = BertVectorizer(tiny_model_dir, pooling="mean_max").fit().transform(TEXTS)
    vectorizer = BertVectorizer(tiny_model_dir, pooling="mean_max", truncate_dim=40,
                                norm="l2").fit()
    got = vectorizer.transform(TEXTS)
    assert got.flags.c_contiguous and got.dtype == np.float32
    np.testing.assert_allclose(got, normalize(full[:, :40]), atol=1e-6)
    assert len(vectorizer.get_feature_names_out()) == 40
    with pytest.raises(ValueError, match="truncate_dim=65 exceeds the 64 features"):
        vectorizer.set_params(truncate_dim=65).transform(TEXTS)
    with pytest.raises(ValueError, match="truncate_dim=65 exceeds the 64 features"):
        vectorizer.fit()


def test_grid_over_prompt_and_truncate_dim_forwards_each_window_once(tiny_model_dir):
    positive = [f"good movie {w}" for w in ("the", "a", "cat", "dog", "red", "blue")]
    negative = [f"awful film {w}" for w in ("the", "a", "cat", "dog", "red", "blue")]
    X, y = positive + negative, [1] * 6 + [0] * 6
    vectorizer = BertVectorizer(tiny_model_dir).fit()  # clones share its loaded model
    counter = count_forward_rows(vectorizer)
    prompts = ["", "query: ", "passage: "]
    grid = {"bert__prompt": prompts, "bert__truncate_dim": [None, 8, 16],
            "bert__pooling": ["mean", "cls"]}
    search = GridSearchCV(Pipeline([("bert", vectorizer), ("clf", LogisticRegression())]),
                          grid, cv=3).fit(X, y)
    assert len(search.cv_results_["params"]) == 18
    assert counter["rows"] == len(prompts) * len(set(X))


def test_sentence_folder_survives_pickling_without_its_files(cls_folder, tmp_path):
    import joblib

    folder = shutil.copytree(cls_folder, tmp_path / "copy")
    vectorizer = BertVectorizer(folder, pooling="auto", norm="auto", prompt="query").fit()
    expected = vectorizer.transform(TEXTS)
    joblib.dump(vectorizer, tmp_path / "v.joblib")
    shutil.rmtree(folder)
    loaded = joblib.load(tmp_path / "v.joblib")
    assert (loaded.pooling_, loaded.norm_, loaded.prompt_) == ("cls", "l2", "query: ")
    np.testing.assert_array_equal(loaded.transform(TEXTS), expected)
