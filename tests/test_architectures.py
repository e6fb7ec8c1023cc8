"""BertVectorizer on every BERT-family architecture it claims, against transformers itself.

Each architecture is a tiny random model (hidden 32, 2 layers, 2 heads) with a
tokenizer made here, offline: WordPiece for BERT, DistilBERT, ELECTRA and
MPNet, a Unigram (sentencepiece-style) vocabulary for XLM-R, ALBERT and
DeBERTa-v2, byte-level BPE trained on a few sentences for RoBERTa and
ModernBERT. Features are compared with :func:`tests.reference.reference_features`
(one text at a time through ``AutoModel``, pooled with numpy), so padding,
special-token masks, position ids and token types are checked per architecture.
"""

import json
from dataclasses import dataclass

import numpy as np
import pytest

import skbert
from skbert import BertVectorizer
from skbert._encoder._encoding import tokenize
from tests.conftest import LETTERS, SUBWORDS, WORDS
from tests.reference import reference_features

MAX_LENGTH = 64  # tokens per text, special tokens included, for every tokenizer

TEXTS = [
    "the cat sat on the mat",
    "",
    "good",
    "a big red dog runs fast and the small blue cat ran slow by the long river",
    "Zebra xylophone \u2603 qqq unknownword",  # words and characters the vocabularies lack
    "who ran ? where ! when ...",
]
PAIRS = [
    ("the cat sat on the mat", "a dog runs fast"),
    ("what is the long river in the country ?", ""),
    ("", "good movie"),
    ("Zebra \u2603", "the film was awful and the movie was great"),
]
# The sentences the byte-level BPE tokenizers are trained on.
CORPUS = TEXTS[:1] + [
    "a big red dog runs fast",
    "what is the long river in the country ?",
    "the movie was great and the film was awful",
    "who ran ? where ! when ...",
    " ".join(WORDS),
]


@dataclass(frozen=True)
class Architecture:
    model_class: str  # what AutoModel loads
    has_pooler: bool


ARCHITECTURES = {
    "bert": Architecture("BertModel", True),
    "distilbert": Architecture("DistilBertModel", False),
    "electra": Architecture("ElectraModel", False),
    "roberta": Architecture("RobertaModel", True),
    "xlm-roberta": Architecture("XLMRobertaModel", True),
    "deberta-v2": Architecture("DebertaV2Model", False),
    "albert": Architecture("AlbertModel", True),
    "mpnet": Architecture("MPNetModel", True),
    "modernbert": Architecture("ModernBertModel", False),
}
ARCHS = list(ARCHITECTURES)
WITHOUT_POOLER = [arch for arch in ARCHS if not ARCHITECTURES[arch].has_pooler]


def _wordpiece(special):
    tokens = dict.fromkeys(special + LETTERS + ["##" + c for c in LETTERS] + WORDS + SUBWORDS)
    return {token: i for i, token in enumerate(tokens)}  # "a" is a letter and a word: once


def _unigram(special):
    """(piece, log-probability) pairs: whole words, then single characters to fall back on."""
    return ([(token, 0.0) for token in special] + [("\u2581" + word, -2.0) for word in WORDS]
            + [("\u2581", -3.0)] + [(c, -5.0) for c in LETTERS])


def _byte_level_bpe(special):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=400, special_tokens=special, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tokenizer


def _tokenizer(arch):
    import transformers
    from tokenizers import processors

    bert_special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    roberta_special = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    if arch in ("bert", "electra"):  # ELECTRA's checkpoints ship BERT's tokenizer
        return transformers.BertTokenizerFast(vocab=_wordpiece(bert_special))
    if arch == "distilbert":
        return transformers.DistilBertTokenizerFast(vocab=_wordpiece(bert_special))
    if arch == "mpnet":
        return transformers.MPNetTokenizerFast(
            vocab=_wordpiece(["<s>", "<pad>", "</s>", "[UNK]", "<mask>"]))
    if arch == "roberta":
        bpe = json.loads(_byte_level_bpe(roberta_special).to_str())["model"]
        return transformers.RobertaTokenizerFast(vocab=bpe["vocab"],
                                                 merges=[tuple(m) for m in bpe["merges"]])
    if arch == "xlm-roberta":
        return transformers.XLMRobertaTokenizerFast(vocab=_unigram(roberta_special))
    if arch == "albert":
        return transformers.AlbertTokenizerFast(
            vocab=_unigram(["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]))
    if arch == "deberta-v2":
        return transformers.DebertaV2TokenizerFast(vocab=_unigram(bert_special))
    assert arch == "modernbert"
    bpe = _byte_level_bpe(bert_special)
    bpe.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[(token, bpe.token_to_id(token)) for token in ("[CLS]", "[SEP]")])
    # As ModernBERT's own tokenizer_config.json: the model takes no token_type_ids.
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]", model_input_names=["input_ids", "attention_mask"])


def _config(arch, tokenizer):
    import transformers

    size = dict(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                num_attention_heads=2, intermediate_size=37, pad_token_id=tokenizer.pad_token_id)
    # RoBERTa-style position ids start after the padding index.
    offset_positions = MAX_LENGTH + tokenizer.pad_token_id + 1
    if arch == "bert":
        return transformers.BertConfig(max_position_embeddings=MAX_LENGTH, **size)
    if arch == "distilbert":
        return transformers.DistilBertConfig(
            vocab_size=len(tokenizer), dim=32, n_layers=2, n_heads=2, hidden_dim=37,
            max_position_embeddings=MAX_LENGTH, pad_token_id=tokenizer.pad_token_id)
    if arch in ("electra", "albert"):  # embeddings narrower than the layers, projected up
        config = transformers.ElectraConfig if arch == "electra" else transformers.AlbertConfig
        return config(embedding_size=16, max_position_embeddings=MAX_LENGTH, **size)
    if arch == "roberta":
        return transformers.RobertaConfig(max_position_embeddings=offset_positions, **size)
    if arch == "xlm-roberta":
        return transformers.XLMRobertaConfig(max_position_embeddings=offset_positions, **size)
    if arch == "mpnet":
        return transformers.MPNetConfig(max_position_embeddings=offset_positions, **size)
    if arch == "deberta-v2":  # as DeBERTa-v3: relative attention only, no token type embedding
        return transformers.DebertaV2Config(
            max_position_embeddings=MAX_LENGTH, relative_attention=True, position_buckets=32,
            pos_att_type=["p2c", "c2p"], position_biased_input=False, norm_rel_ebd="layer_norm",
            share_att_key=True, type_vocab_size=0, **size)
    assert arch == "modernbert"
    # One global and one sliding-window layer, the window shorter than the longest texts.
    return transformers.ModernBertConfig(
        max_position_embeddings=MAX_LENGTH, global_attn_every_n_layers=2, local_attention=16,
        cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id,
        bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id, **size)


def _build(arch, directory):
    """Save a tiny random ``arch`` and its tokenizer to ``directory``; check they load back."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = _tokenizer(arch)
    tokenizer.model_max_length = MAX_LENGTH
    tokenizer.save_pretrained(directory)
    torch.manual_seed(0)
    AutoModel.from_config(_config(arch, tokenizer)).eval().save_pretrained(directory)

    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = AutoModel.from_pretrained(directory).eval()
    assert tokenizer.model_max_length == MAX_LENGTH
    assert type(model).__name__ == ARCHITECTURES[arch].model_class
    assert (getattr(model, "pooler", None) is not None) == ARCHITECTURES[arch].has_pooler
    single = tokenizer(["the cat sat on the mat"], return_special_tokens_mask=True)
    special = single["special_tokens_mask"][0]
    assert special[0] == special[-1] == 1 and not any(special[1:-1]), special
    assert sum(1 - flag for flag in special) > 1  # the sentence is split into several tokens
    pair = tokenizer(["the cat"], ["a dog"], return_special_tokens_mask=True)
    special = pair["special_tokens_mask"][0]
    assert special[0] == special[-1] == 1 and 1 <= sum(special[1:-1]) <= 2, special
    with torch.no_grad():
        output = model(**tokenizer(["the cat"], return_tensors="pt"), output_hidden_states=True)
    assert len(output.hidden_states) == model.config.num_hidden_layers + 1 == 3
    return str(directory)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """``model_dir(arch)``: the directory of the tiny ``arch``, built on first use."""
    built = {}

    def get(arch):
        if arch not in built:
            built[arch] = _build(arch, tmp_path_factory.mktemp(arch))
        return built[arch]

    return get


def _case(arch, pooling, layer, combine, special, cache):
    """``pytest.param`` of one pooling case, with a readable id."""
    layers = "+".join(map(str, np.atleast_1d(layer)))
    return pytest.param(arch, pooling, layer, combine, special, cache,
                        id=f"{arch}-{pooling}-layer{layers}-{combine}-special{special}-cache{cache}")


LAYERS = [(-1, "mean"), (0, "mean"), (-2, "mean"), ([0, -1], "mean"), ([0, -1], "concat")]


def _pooling_cases():
    for arch in ARCHS:
        poolings = ["mean", "cls", "max", "mean_sqrt_len", "mean_max", "last"]
        for pooling in poolings + ["pooler"] * ARCHITECTURES[arch].has_pooler:
            for layer, combine in [(-1, "mean")] if pooling == "pooler" else LAYERS:
                for special in (True, False) if pooling in ("mean", "max") else (True,):
                    for cache in (False, True):
                        yield _case(arch, pooling, layer, combine, special, cache)


@pytest.mark.parametrize("arch, pooling, layer, layer_combine, include_special_tokens, cache",
                         list(_pooling_cases()))
def test_pooling_matches_transformers(model_dir, arch, pooling, layer, layer_combine,
                                      include_special_tokens, cache):
    setting = dict(pooling=pooling, layer=layer, layer_combine=layer_combine,
                   include_special_tokens=include_special_tokens)
    got = BertVectorizer(model_dir(arch), cache=cache, **setting).fit_transform(TEXTS)
    np.testing.assert_allclose(got, reference_features(model_dir(arch), TEXTS, **setting),
                               atol=1e-5, rtol=1e-5)


CACHE_SETTINGS = [
    dict(pooling="mean"),
    dict(pooling="max", layer=[0, -1]),
    dict(pooling="mean_sqrt_len", layer=-2, include_special_tokens=False),
    dict(pooling="cls", layer=[0, -1], layer_combine="concat"),
    dict(pooling="last"),
    dict(pooling="mean_max", layer=[-1, -2], layer_combine="sum", include_special_tokens=False),
]


@pytest.mark.parametrize("arch", ARCHS)
def test_cache_agrees_with_no_cache_and_serves_every_setting(model_dir, arch):
    texts = [f"{arch} {text}" for text in TEXTS]
    settings = CACHE_SETTINGS + [dict(pooling="pooler")] * ARCHITECTURES[arch].has_pooler
    skbert.clear_cache()
    counter = {"rows": 0}
    model = BertVectorizer(model_dir(arch)).fit().model_

    def count(module, args, kwargs):
        counter["rows"] += kwargs["input_ids"].shape[0]

    hook = model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        for setting in settings:
            cached = BertVectorizer(model_dir(arch), **setting).fit()
            first = cached.transform(texts)
            np.testing.assert_array_equal(cached.transform(texts), first)  # now from the cache
            uncached = BertVectorizer(model_dir(arch), cache=False, **setting).fit()
            rows = counter["rows"]
            np.testing.assert_allclose(first, uncached.transform(texts), atol=1e-6, rtol=1e-6)
            counter["rows"] = rows  # count the cached transforms only
        assert counter["rows"] == len(texts)  # one pass filled the cache for every setting
        rare = dict(pooling="max", layer=[0, 1])  # max of a layer average the cache lacks
        first = BertVectorizer(model_dir(arch), **rare).fit_transform(texts)
        assert counter["rows"] == 2 * len(texts)
        np.testing.assert_allclose(
            first, BertVectorizer(model_dir(arch), cache=False, **rare).fit_transform(texts),
            atol=1e-6, rtol=1e-6)
    finally:
        hook.remove()
        skbert.clear_cache()


PAIR_SETTINGS = [
    dict(pooling="mean"),
    dict(pooling="mean", include_special_tokens=False),
    dict(pooling="max", include_special_tokens=False),
    dict(pooling="cls"),
    dict(pooling="last", layer=-2),
]


@pytest.mark.parametrize("cache", [False, True])
@pytest.mark.parametrize("arch", ARCHS)
def test_text_pairs_match_transformers(model_dir, arch, cache):
    for setting in PAIR_SETTINGS:
        got = BertVectorizer(model_dir(arch), cache=cache, **setting).fit_transform(PAIRS)
        np.testing.assert_allclose(got, reference_features(model_dir(arch), PAIRS, **setting),
                                   atol=1e-5, rtol=1e-5, err_msg=repr(setting))


WINDOW = dict(max_length=12, stride=2)
SHORT = "the cat sat on the mat"
LONG = ("the movie was great and the film was awful but a big red dog ran fast "
        "by the long river in the city")


def _chunks_reference(model_dir, text, how):
    """Mean pooling of each overflow window of ``text`` alone, merged across windows."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    encoded = tokenizer([text], truncation=True, return_overflowing_tokens=True,
                        return_special_tokens_mask=True, **WINDOW)
    vectors, weights = [], []
    for window in range(len(encoded["input_ids"])):
        inputs = {name: torch.tensor([encoded[name][window]])
                  for name in tokenizer.model_input_names if name in encoded}
        with torch.no_grad():
            vectors.append(model(**inputs).last_hidden_state[0].double().mean(dim=0).numpy())
        weights.append(len(encoded["input_ids"][window])
                       - sum(encoded["special_tokens_mask"][window]))
    weights = np.ones(len(vectors)) if how == "mean" else np.asarray(weights, float)
    return len(vectors), np.average(vectors, axis=0, weights=weights)


@pytest.mark.parametrize("arch", ARCHS)
def test_chunks_match_windows_and_short_text_matches_head(model_dir, arch):
    from transformers import AutoTokenizer

    assert len(AutoTokenizer.from_pretrained(model_dir(arch))(SHORT)["input_ids"]) <= 12
    head = BertVectorizer(model_dir(arch), cache=False, **WINDOW).fit_transform([SHORT])
    for truncation in ("chunks", "tail", "head_tail"):
        got = BertVectorizer(model_dir(arch), cache=False, truncation=truncation,
                             **WINDOW).fit_transform([SHORT])
        np.testing.assert_allclose(got, head, atol=1e-6, rtol=1e-6, err_msg=truncation)
    for how in ("mean", "weighted"):
        n_windows, expected = _chunks_reference(model_dir(arch), LONG, how)
        assert n_windows >= 3
        got = BertVectorizer(model_dir(arch), truncation="chunks", chunk_pooling=how,
                             **WINDOW).fit_transform([SHORT, LONG])
        np.testing.assert_allclose(got[1], expected, atol=1e-5, rtol=1e-5, err_msg=how)
        np.testing.assert_allclose(got[0], head[0], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_prompt_opens_every_window_and_equals_the_prompted_text(model_dir, arch):
    """The prompt's tokens are those of ``prompt + text`` (byte-level BPE merges a leading
    space into the next word), and a chunked text repeats them in every window."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir(arch))
    prompt = "what: "
    vectorizer = BertVectorizer(model_dir(arch), prompt=prompt, max_length=16).fit()
    np.testing.assert_array_equal(
        vectorizer.transform([SHORT]),
        BertVectorizer(model_dir(arch), max_length=16).fit().transform([prompt + SHORT]))
    joined = tokenizer(prompt + SHORT)["input_ids"]
    alone = tokenizer(SHORT)["input_ids"]
    n_prompt = len(joined) - len(alone)  # prompts keep the text's own tokens in these vocabularies
    windows = tokenize(tokenizer, [LONG], 16, "chunks", 3, prompt)
    assert len(windows) >= 3
    for ids in windows.input_ids:
        assert ids[:n_prompt + 1].tolist() == joined[:n_prompt + 1]
    np.testing.assert_allclose(vectorizer.set_params(truncation="chunks").transform([SHORT]),
                               vectorizer.set_params(truncation="head").transform([SHORT]),
                               atol=1e-6)


@pytest.mark.parametrize("arch", WITHOUT_POOLER)
def test_pooler_on_a_model_without_one_is_an_error(model_dir, arch):
    with pytest.raises(ValueError, match="pooling='pooler' needs a model with a pooler layer"):
        BertVectorizer(model_dir(arch), pooling="pooler").fit()
