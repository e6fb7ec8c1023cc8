"""BertWordVectorizer: words in their context, against a hand-written transformers reference."""

import pickle
import warnings

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline

import skbert
from skbert import BertWordVectorizer
from skbert._words import _samples
from tests.conftest import count_forward_rows
from tests.test_architectures import model_dir  # noqa: F401 (a fixture)

SENTENCES = [
    "the cat sat on the mat".split(),
    "a big red dog runs fast by the long river".split(),
    "the runners ran quickly and the walkers walked".split(),  # words of several subwords
    "good".split(),
]
SAMPLES = [(words, i) for words in SENTENCES for i in range(len(words))]
POOLINGS = ["mean", "first", "last", "first_last", "max"]


def spans_of(samples):
    """The same targets as (text, start, end): the words joined by spaces."""
    spans = []
    for words, i in samples:
        start = len(" ".join(words[:i])) + (i > 0)
        spans.append((" ".join(words), start, start + len(words[i])))
    return spans


def reference(directory, samples, layer, pooling, spans=False):
    """One sentence at a time through AutoModel, the subwords found with ``word_ids()`` (a
    byte-level BPE tokenizer with the space before every word, as ``add_prefix_space=True``
    gives RoBERTa's), or with ``spans`` by the offsets of the joined words."""
    from tokenizers import pre_tokenizers
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory)
    if not spans and "ByteLevel" in str(tokenizer.backend_tokenizer.pre_tokenizer):
        tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(
            add_prefix_space=True)
    model = AutoModel.from_pretrained(directory).eval()
    rows = []
    for (words, i), (text, start, end) in zip(samples, spans_of(samples)):
        if spans:
            encoded = tokenizer(text, return_offsets_mapping=True, return_tensors="pt")
            offsets = encoded.pop("offset_mapping")[0].tolist()
            chosen = [k for k, (a, b) in enumerate(offsets) if b > a and a < end and b > start]
        else:
            encoded = tokenizer(words, is_split_into_words=True, return_tensors="pt")
            chosen = [k for k, word in enumerate(encoded.word_ids(0)) if word == i]
        with torch.no_grad():
            hidden = model(**encoded, output_hidden_states=True).hidden_states[layer][0]
        vectors = hidden[chosen]
        rows.append({"mean": vectors.mean(0), "first": vectors[0], "last": vectors[-1],
                     "max": vectors.max(0).values,
                     "first_last": torch.cat([vectors[0], vectors[-1]])}[pooling].numpy())
    return np.array(rows)


@pytest.mark.parametrize("layer", [-1, 0, 1])
@pytest.mark.parametrize("pooling", POOLINGS)
def test_both_formats_equal_the_reference(tiny_model_dir, layer, pooling):
    expected = reference(tiny_model_dir, SAMPLES, layer, pooling)
    vectorizer = BertWordVectorizer(tiny_model_dir, layer=layer, subword_pooling=pooling)
    np.testing.assert_allclose(vectorizer.fit_transform(SAMPLES), expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(vectorizer.transform(spans_of(SAMPLES)), expected, rtol=0,
                               atol=1e-5)


@pytest.mark.parametrize("arch", ["roberta", "modernbert", "xlm-roberta"])
def test_other_tokenizers_equal_the_reference(model_dir, arch):  # noqa: F811 (the fixture)
    samples = [(words, i) for words in SENTENCES[:2] for i in range(len(words))]
    for pooling in ["first_last", "max"]:
        vectorizer = BertWordVectorizer(model_dir(arch), subword_pooling=pooling)
        np.testing.assert_allclose(vectorizer.fit_transform(samples),
                                   reference(model_dir(arch), samples, -1, pooling), rtol=0,
                                   atol=1e-5)
        np.testing.assert_allclose(vectorizer.transform(spans_of(samples)),
                                   reference(model_dir(arch), samples, -1, pooling, spans=True),
                                   rtol=0, atol=1e-5)
    if arch != "xlm-roberta":  # byte-level BPE: words read with their leading space
        tokens = _samples.pretokenized(vectorizer.tokenizer_).tokenize(["the", "cat"],
                                                                     is_split_into_words=True)
        assert tokens[1].startswith("\u0120")  # "Ġ"


def test_some_words_have_several_subwords(tiny_model_dir):
    tokenizer = BertWordVectorizer(tiny_model_dir).fit().tokenizer_
    assert tokenizer.tokenize("runners") == ["run", "##n", "##er", "##s"]
    first, last = (BertWordVectorizer(tiny_model_dir, subword_pooling=pooling).fit_transform(
        [(SENTENCES[2], 1)]) for pooling in ("first", "last"))
    assert not np.allclose(first, last)


def test_layers_merge_as_for_texts(tiny_model_dir):
    single = [BertWordVectorizer(tiny_model_dir, layer=layer).fit_transform(SAMPLES)
              for layer in (0, 2)]
    merged = {combine: BertWordVectorizer(tiny_model_dir, layer=[0, 2],
                                          layer_combine=combine).fit_transform(SAMPLES)
              for combine in ("mean", "sum", "concat")}
    np.testing.assert_allclose(merged["mean"], (single[0] + single[1]) / 2, atol=1e-6)
    np.testing.assert_allclose(merged["sum"], single[0] + single[1], atol=1e-6)
    np.testing.assert_array_equal(merged["concat"], np.hstack(single))


def test_a_grid_forwards_each_sentence_once(tiny_model_dir):
    from skbert._encoder import _loading

    skbert.clear_cache()
    model, _ = _loading.from_pretrained(tiny_model_dir, None, "float32")
    vectorizer = BertWordVectorizer(tiny_model_dir).fit()
    vectorizer.model_ = model  # a private model: the hook does not leak
    counter = count_forward_rows(vectorizer)
    for layer in [-1, 0, [0, -1], "all"]:
        for pooling in POOLINGS:
            for norm in [None, "l2"]:
                vectorizer.set_params(layer=layer, subword_pooling=pooling, norm=norm)
                vectorizer.transform(SAMPLES)
    assert counter["rows"] == len(SENTENCES)
    vectorizer.set_params(cache=False, layer=-1).transform(SAMPLES)
    assert counter["rows"] == 2 * len(SENTENCES)  # uncached: once per sentence all the same


def test_long_sentences_are_read_in_a_window_around_the_target(tiny_model_dir):
    long = ("the cat sat on the mat " * 6).split() + ["runners"] + ("and the dog ran " * 6).split()
    vectorizer = BertWordVectorizer(tiny_model_dir, max_length=16).fit()
    target = long.index("runners")
    got = vectorizer.transform([(long, target), (long, 0), (long, len(long) - 1)])
    # The window of 14 text tokens centred on the target's 4 subwords, as a sentence.
    tokens = vectorizer.tokenizer_(long, is_split_into_words=True, add_special_tokens=False)
    subwords = [k for k, word in enumerate(tokens.word_ids()) if word == target]
    start = (subwords[0] + subwords[-1] + 1 - 14) // 2
    window = tokens["input_ids"][start:start + 14]
    ids = torch.tensor([[vectorizer.tokenizer_.cls_token_id, *window,
                         vectorizer.tokenizer_.sep_token_id]])
    with torch.no_grad():
        hidden = vectorizer.model_(input_ids=ids).last_hidden_state[0]
    inside = [1 + k - start for k in subwords]
    np.testing.assert_allclose(got[0], hidden[inside].mean(0).numpy(), rtol=0, atol=1e-5)
    np.testing.assert_allclose(got[1], vectorizer.transform([(long[:14], 0)])[0], atol=1e-5)


URL = "https://example.com/" + "a1b2c3" * 12  # 92 subwords of the tiny vocabulary


@pytest.mark.parametrize("pooling", ["mean", "first"])
def test_a_word_longer_than_a_window_is_read_from_its_first_subwords(tiny_model_dir, pooling):
    words = ["see", URL, "now"]
    vectorizer = BertWordVectorizer(tiny_model_dir, subword_pooling=pooling).fit()  # 64 tokens
    tokenizer = vectorizer.tokenizer_
    tokens = tokenizer(words, is_split_into_words=True, add_special_tokens=False)
    subwords = [k for k, word in enumerate(tokens.word_ids()) if word == 1]
    assert len(subwords) == 92

    def message(count, position=0):
        return (rf"^{count} target word\(s\) take more than the 62 text tokens of a window of "
                rf"max_length=64 \(the first is the sample at index {position}, of 92 tokens\) "
                r"and are read from their first 62 subwords\.$")

    samples = [(words, 0), (words, 1), (["a", URL], 1)]
    for _ in range(2):  # warned at every call, the alignment reused or not
        with pytest.warns(UserWarning, match=message(2, position=1)) as caught:
            got = vectorizer.transform(samples)
        assert len(caught) == 1
    # The window of the target's first 62 subwords, as a sentence of its own.
    window = tokens["input_ids"][subwords[0]:subwords[0] + 62]
    ids = torch.tensor([[tokenizer.cls_token_id, *window, tokenizer.sep_token_id]])
    with torch.no_grad():
        hidden = vectorizer.model_(input_ids=ids).last_hidden_state[0, 1:-1].numpy()
    expected = hidden.mean(0) if pooling == "mean" else hidden[0]
    np.testing.assert_allclose(got[1], expected, rtol=0, atol=1e-5)
    with pytest.warns(UserWarning, match=message(1)):  # a span is read the same way
        span = vectorizer.transform([(" ".join(words), 4, 4 + len(URL))])
    np.testing.assert_allclose(span[0], got[1], rtol=0, atol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the short words alone: no warning
        np.testing.assert_array_equal(vectorizer.transform(samples[:1]), got[:1])


@pytest.mark.parametrize("samples, message", [
    (["a text"], r"Sample at index 0 is str \('a text'\): a sample is \(words, i\)"),
    ([(["the", "cat"], 2)], r"Sample at index 0 has index 2, which is no word of its 2: use 0 "
                            r"to 1"),
    ([([], 0)], r"Sample at index 0 has an empty sentence"),
    ([(["the", 3], 0)], r"Sample at index 0: word 1 is int \(3\); every word must be a str"),
    ([(["the"], True)], r"Sample at index 0 has index True"),
    ([("the cat", 2, 2)], r"Sample at index 0 has the span \(2, 2\), which is no non-empty span"),
    ([("the cat", 3, 4)], r"Sample at index 0 spans only whitespace \(' '\)"),
    ([("the cat", 0, 9)], r"Sample at index 0 has the span \(0, 9\)"),
    ([("the cat", 4, 6)], r"Sample at index 0: the span \(4, 6\) \('ca'\) cuts the token 'cat' "
                          r"at \(4, 7\); give a span of whole tokens"),
    ([(["the"], 0), ("the cat", 0, 3)], r"Sample at index 1 is a \(text, start, end\) sample, "
                                        r"and the ones before are \(words, i\) samples"),
    ([(["the", "\u200b"], 1)], r"Sample at index 0: its word '\\u200b' tokenizes to no subword"),
    ("the cat", r"Iterable over word samples expected, str object received"),
    ({("the",): 0}, r"Iterable over word samples expected, dict object received"),
])
def test_bad_samples_are_named(tiny_model_dir, samples, message):
    vectorizer = BertWordVectorizer(tiny_model_dir).fit()
    with pytest.raises(ValueError, match=message):
        vectorizer.transform(samples)


def test_dataframes_of_either_format(tiny_model_dir):
    pd = pytest.importorskip("pandas")
    pl = pytest.importorskip("polars")
    vectorizer = BertWordVectorizer(tiny_model_dir).fit()
    expected = vectorizer.transform(SAMPLES)
    words = pd.DataFrame({"words": [w for w, _ in SAMPLES], "index": [i for _, i in SAMPLES]})
    spans = pd.DataFrame(spans_of(SAMPLES), columns=["text", "start", "end"])
    for frame in [words, spans, pl.from_pandas(spans)]:
        np.testing.assert_allclose(vectorizer.transform(frame), expected, atol=1e-6)
    with pytest.raises(ValueError, match=r"A DataFrame of word samples has the columns 'words', "
                                         r"'index' or 'text', 'start', 'end'; got \['a', 'b'\]"):
        vectorizer.transform(pd.DataFrame({"a": [1], "b": [2]}))


def test_alignment_errors_name_the_pandas_index_label(tiny_model_dir):
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"text": ["the cat", "the cat"], "start": [0, 4], "end": [3, 6]},
                         index=["first", "second"])
    with pytest.raises(ValueError, match=r"Sample at position 1 \(index label 'second'\): the "
                                         r"span \(4, 6\) \('ca'\) cuts the token 'cat'"):
        BertWordVectorizer(tiny_model_dir).fit().transform(frame)


def test_the_same_checked_samples_are_not_checked_again():
    samples = [(tuple(words), i) for words, i in SAMPLES]
    first = _samples.check_words(samples)
    assert _samples.check_words(samples) is first and _samples.check_words(list(samples)) is first
    samples[3] = (samples[3][0], 99)  # another object: checked
    with pytest.raises(ValueError, match="Sample at index 3 has index 99"):
        _samples.check_words(samples)
    lists = [(list(words), i) for words, i in SAMPLES]  # lists can change: checked every time
    assert _samples.check_words(lists) is not _samples.check_words(lists)
    spans = spans_of(SAMPLES)
    assert _samples.check_words(spans) is _samples.check_words(spans)


def test_the_last_alignment_is_reused_for_equal_samples_only(tiny_model_dir, monkeypatch):
    vectorizer = BertWordVectorizer(tiny_model_dir).fit()
    calls = []
    original = _samples._align

    def counted(tokenizer, samples, max_length):
        calls.append(max_length)
        return original(tokenizer, samples, max_length)

    monkeypatch.setattr(_samples, "_align", counted)
    expected = vectorizer.transform(SAMPLES)
    copied = [(list(words), i) for words, i in SAMPLES]  # equal, not the same objects
    np.testing.assert_array_equal(vectorizer.transform(copied), expected)
    assert len(calls) == 1
    copied[0][0][1] = "dog"  # a list changed in place after a transform: aligned anew
    changed = vectorizer.transform(copied)
    assert len(calls) == 2
    n_first = len(SENTENCES[0])
    assert not np.allclose(changed[:n_first], expected[:n_first])
    np.testing.assert_array_equal(changed[n_first:], expected[n_first:])
    vectorizer.set_params(max_length=12).transform(copied)
    assert calls[-1] == 12 and len(calls) == 3


def test_estimator_basics(tiny_model_dir, tmp_path):
    vectorizer = BertWordVectorizer(tiny_model_dir, subword_pooling="first_last")
    params = vectorizer.get_params()
    expected = vectorizer.fit_transform(SAMPLES)
    assert vectorizer.get_params() == params and expected.dtype == np.float32
    assert expected.shape == (len(SAMPLES), 64)
    assert list(vectorizer.get_feature_names_out()[:2]) == ["bertwordvectorizer0",
                                                             "bertwordvectorizer1"]
    assert vectorizer.transform([]).shape == (0, 64)
    np.testing.assert_array_equal(clone(vectorizer).fit().transform(SAMPLES), expected)
    np.testing.assert_array_equal(vectorizer.transform(SAMPLES[::-1]), expected[::-1])
    np.testing.assert_array_equal(
        clone(vectorizer).set_params(batch_size=1).fit().transform(SAMPLES), expected)
    for output in ["pandas", "polars"]:
        frame = clone(vectorizer).set_output(transform=output).fit_transform(SAMPLES)
        assert frame.shape == expected.shape and frame.columns[0] == "bertwordvectorizer0"
    for persist_weights in [True, False]:
        vectorizer.set_params(persist_weights=persist_weights)
        restored = pickle.loads(pickle.dumps(vectorizer))
        np.testing.assert_array_equal(restored.transform(SAMPLES), expected)
    with pytest.raises(ValueError, match=r"backend was set to 'onnx' after fit"):
        vectorizer.set_params(backend="onnx").transform(SAMPLES)


@pytest.mark.parametrize("backend", ["openvino", "onnx"])
def test_cpu_engines_equal_torch(tiny_model_dir, backend):
    pytest.importorskip(backend if backend == "openvino" else "onnxruntime")
    for setting in [{"layer": "all", "subword_pooling": "max"}, {"cache": False, "layer": 1}]:
        expected = BertWordVectorizer(tiny_model_dir, **setting).fit_transform(SAMPLES)
        got = BertWordVectorizer(tiny_model_dir, backend=backend, **setting).fit_transform(
            SAMPLES)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


def test_grid_search_over_layers_and_poolings(tiny_model_dir):
    labels = [len(words[i]) > 3 for words, i in SAMPLES]
    pipe = Pipeline([("words", BertWordVectorizer(tiny_model_dir)),
                     ("clf", LogisticRegression(max_iter=200))])
    grid = {"words__layer": [0, -1], "words__subword_pooling": ["mean", "first"]}
    search = GridSearchCV(pipe, grid, cv=2).fit(SAMPLES, labels)
    assert search.best_estimator_.predict(SAMPLES[:3]).shape == (3,)


def test_pair_similarity_of_words_in_two_contexts(tiny_model_dir):
    from sklearn.model_selection import TunedThresholdClassifierCV

    from skbert import PairSimilarity

    pairs = [(SAMPLES[k], SAMPLES[k + 3]) for k in range(12)]
    model = PairSimilarity(BertWordVectorizer(tiny_model_dir)).fit(pairs)
    vectors = BertWordVectorizer(tiny_model_dir, norm="l2").fit_transform(
        [side for pair in pairs for side in pair])
    expected = (vectors[::2] * vectors[1::2]).sum(axis=1)
    np.testing.assert_allclose(model.predict(pairs), expected, rtol=0, atol=1e-6)
    span_pairs = [tuple(spans_of(pair)) for pair in pairs]  # the same targets as spans
    np.testing.assert_allclose(model.transform(span_pairs), expected[:, None], atol=1e-5)
    labels = [k % 2 for k in range(12)]
    pipe = Pipeline([("similarity", PairSimilarity(BertWordVectorizer(tiny_model_dir))),
                     ("clf", LogisticRegression())])
    tuned = TunedThresholdClassifierCV(pipe, cv=2).fit(pairs, labels)
    assert tuned.predict(pairs).shape == (12,)
    with pytest.raises(ValueError, match=r"Pair at index 0 is tuple \(\(\(\('the', 'cat'\), "
                                         r"0\),\)\): with a BertWordVectorizer, PairSimilarity "
                                         r"takes pairs of word samples"):
        model.predict([((("the", "cat"), 0),)])


def conllu_text():
    """Sentences of the tiny vocabulary with UPOS tags, as CoNLL-U."""
    tags = {"the": "DET", "a": "DET", "cat": "NOUN", "dog": "NOUN", "mat": "NOUN",
            "river": "NOUN", "sat": "VERB", "ran": "VERB", "runs": "VERB", "on": "ADP",
            "by": "ADP", "big": "ADJ", "red": "ADJ"}
    sentences = ["the cat sat on the mat", "a dog ran by the river", "the big cat runs",
                 "a red dog sat", "the dog runs on the mat", "a cat ran by a big river"]
    blocks = []
    for number, sentence in enumerate(sentences):
        lines = [f"# sent_id = s{number}", f"# text = {sentence}"]
        lines += [f"{k}\t{word}\t{word}\t{tags[word]}\t_\t_\t0\tdep\t_\t_"
                  for k, word in enumerate(sentence.split(), 1)]
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks) + "\n"


def test_the_token_level_probe(tiny_model_dir, tmp_path, capsys):
    from skbert._cli import _command
    from skbert.datasets._conllu import read_conllu
    from skbert.probe import layer_report

    (tmp_path / "pos.conllu").write_text(conllu_text())
    samples, upos, groups, _ = read_conllu(tmp_path / "pos.conllu")
    report = layer_report(BertWordVectorizer(tiny_model_dir), samples, upos, cv=2,
                          groups=groups, poolings=["mean", "first"])
    assert report.columns.name == "subword_pooling" and list(report.columns) == ["mean", "first"]
    assert list(report.index) == [0, 1, 2] and np.isfinite(report.to_numpy()).all()
    assert _command.main(["probe", str(tmp_path / "pos.conllu"), "--model", tiny_model_dir,
                      "--cv", "2", "--out", str(tmp_path / "probe.png")]) == 0
    table = (tmp_path / "probe.csv").read_text().splitlines()
    assert table[0] == "layer,mean,first,last,first_last,max" and len(table) == 4
    assert "best: layer=" in capsys.readouterr().out and (tmp_path / "probe.png").is_file()


def test_chunks_of_a_few_sentences_give_the_same_features(tiny_model_dir, monkeypatch):
    from skbert._encoder import _cache

    skbert.clear_cache()
    vectorizer = BertWordVectorizer(tiny_model_dir, batch_size=1).fit()
    whole = vectorizer.transform(SAMPLES)
    skbert.clear_cache()
    monkeypatch.setattr(_cache, "CHUNK_BYTES", 1)  # one sentence per chunk
    calls = []
    original = _samples.forward_windows

    def counted(runner, tokenizer, windows, *args):
        calls.append(len(windows))
        return original(runner, tokenizer, windows, *args)

    monkeypatch.setattr(_samples, "forward_windows", counted)
    for cache in (True, False):
        np.testing.assert_array_equal(vectorizer.set_params(cache=cache).transform(SAMPLES),
                                      whole)
    assert calls == [1] * len(SENTENCES) * 2  # cached, then uncached: once per sentence


@pytest.mark.parametrize("combine", ["mean", "sum", "concat"])
@pytest.mark.parametrize("pooling", POOLINGS)
def test_pool_equals_a_loop_over_targets(combine, pooling):
    rng = np.random.default_rng(0)
    states = [rng.normal(size=(3, n_tokens, 8)).astype(np.float32) for n_tokens in (4, 7, 2)]
    owner = np.array([1, 0, 1, 2, 1])
    spans = np.array([[1, 4], [0, 1], [4, 7], [0, 2], [1, 2]])
    got = _samples.pool(states, owner, spans, [2, 0], combine, pooling)
    for row, (window, (start, stop)) in enumerate(zip(owner, spans)):
        layers = [states[window][layer, start:stop] for layer in (2, 0)]
        tokens = {"mean": np.mean(layers, axis=0), "sum": np.sum(layers, axis=0),
                  "concat": np.concatenate(layers, axis=1)}[combine]
        expected = {"mean": tokens.mean(0), "first": tokens[0], "last": tokens[-1],
                    "max": tokens.max(0), "first_last": np.r_[tokens[0], tokens[-1]]}[pooling]
        np.testing.assert_allclose(got[row], expected, rtol=0, atol=1e-6)
