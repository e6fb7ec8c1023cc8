"""Word samples after the review of issue 41: pairs of them in DataFrames and pipelines (item
7), DataFrames with their columns in any order and others beside them (item 9), a memo that
lives with its estimator (item 10) and no private attribute of the tokenizer."""

import ast
import gc
import weakref
from pathlib import Path

import numpy as np
import pytest
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import Normalizer

import skbert
from skbert import BertVectorizer, BertWordVectorizer, PairSimilarity
from skbert._words import _samples
from tests.test_words import SAMPLES, spans_of

PAIRS = [(SAMPLES[1], SAMPLES[8]), (SAMPLES[0], SAMPLES[4]), (SAMPLES[3], SAMPLES[20])]


@pytest.fixture
def fitted(tiny_model_dir):
    return BertWordVectorizer(tiny_model_dir).fit()


# Item 7: PairSimilarity with word samples.

def test_pair_similarity_takes_a_dataframe_of_word_sample_pairs(tiny_model_dir):
    pd = pytest.importorskip("pandas")
    model = PairSimilarity(BertWordVectorizer(tiny_model_dir)).fit(PAIRS)
    expected = model.predict(PAIRS)
    frame = pd.DataFrame({"left": [a for a, _ in PAIRS], "right": [b for _, b in PAIRS]})
    np.testing.assert_allclose(model.predict(frame), expected, atol=1e-6)
    np.testing.assert_allclose(PairSimilarity(BertWordVectorizer(tiny_model_dir))
                               .fit_transform(frame)[:, 0], expected, atol=1e-6)
    spans = [tuple(spans_of(pair)) for pair in PAIRS]
    np.testing.assert_allclose(model.predict(pd.DataFrame(spans, columns=["a", "b"])),
                               model.predict(spans), atol=1e-6)
    with pytest.raises(ValueError, match=r"A DataFrame of pairs of word samples has two columns, "
                                         r"one sample in each cell; got \['left'\]"):
        model.predict(frame[["left"]])


def test_pair_similarity_takes_polars_pairs_of_word_samples(tiny_model_dir):
    pl = pytest.importorskip("polars")
    model = PairSimilarity(BertWordVectorizer(tiny_model_dir)).fit(PAIRS)
    expected = model.predict(PAIRS)
    objects = pl.DataFrame({"left": [a for a, _ in PAIRS], "right": [b for _, b in PAIRS]},
                           schema={"left": pl.Object, "right": pl.Object})
    structs = pl.DataFrame({side: [{"index": sample[1], "words": sample[0]}
                                   for sample in column]
                            for side, column in zip(["left", "right"], zip(*PAIRS))})
    for frame in (objects, structs):
        np.testing.assert_allclose(model.predict(frame), expected, atol=1e-6)


def test_pair_similarity_reads_words_through_a_pipeline(tiny_model_dir):
    plain = PairSimilarity(BertWordVectorizer(tiny_model_dir)).fit(PAIRS)
    pipeline = Pipeline([("words", BertWordVectorizer(tiny_model_dir)), ("norm", Normalizer())])
    piped = PairSimilarity(pipeline).fit(PAIRS)
    np.testing.assert_allclose(piped.predict(PAIRS), plain.predict(PAIRS), atol=1e-6)


def test_reads_words_is_a_class_attribute_not_an_import():
    class Custom:
        _reads_words = True

    words = BertWordVectorizer()
    assert _samples.reads_words(words) and _samples.reads_words(Custom())
    assert _samples.reads_words(Pipeline([("words", words), ("norm", Normalizer())]))
    assert not _samples.reads_words(BertVectorizer())
    assert not _samples.reads_words(Pipeline([("norm", Normalizer()), ("words", words)]))
    assert not _samples.reads_words(Pipeline([("skip", "passthrough"), ("words", words)]))
    tree = ast.parse(Path(_samples.__file__).read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "skbert._words._word_vectorizer" not in imported


# Item 9: word-sample DataFrames.

def _frames():
    """The samples as a pandas DataFrame of words and one of spans, columns shuffled and a
    label column among them."""
    pd = pytest.importorskip("pandas")
    labels = [f"tag{k}" for k in range(len(SAMPLES))]
    words = pd.DataFrame({"label": labels, "index": [i for _, i in SAMPLES],
                          "words": [w for w, _ in SAMPLES]})
    spans = pd.DataFrame(spans_of(SAMPLES), columns=["text", "start", "end"])
    return words, spans.assign(label=labels)[["end", "label", "text", "start"]]


def test_word_dataframes_select_their_columns_in_any_order(fitted):
    expected = fitted.transform(SAMPLES)
    for frame in _frames():
        np.testing.assert_allclose(fitted.transform(frame), expected, atol=1e-6)


def test_polars_word_dataframes_select_their_columns_in_any_order(fitted):
    pl = pytest.importorskip("polars")
    expected = fitted.transform(SAMPLES)
    for frame in _frames():
        np.testing.assert_allclose(fitted.transform(pl.from_pandas(frame)), expected,
                                   atol=1e-6)


def test_word_dataframes_with_both_or_neither_column_set_are_refused(fitted):
    pd = pytest.importorskip("pandas")
    both = pd.DataFrame({"words": [["the", "cat"]], "index": [1], "text": ["the cat"],
                         "start": [4], "end": [7]})
    with pytest.raises(ValueError, match=r"A DataFrame of word samples has the columns 'words', "
                                         r"'index' or 'text', 'start', 'end'; got \['words', "
                                         r"'index', 'text', 'start', 'end'\], which hold both: "
                                         r"keep one set"):
        fitted.transform(both)
    with pytest.raises(ValueError, match=r"the columns 'words', 'index' or 'text', 'start', "
                                         r"'end'; got \['words', 'label'\]\. Other columns"):
        fitted.transform(pd.DataFrame({"words": [["the", "cat"]], "label": ["NOUN"]}))


def test_a_polars_lazyframe_of_word_samples_is_refused_as_word_samples(fitted):
    pl = pytest.importorskip("polars")
    lazy = pl.DataFrame({"words": [["the", "cat"]], "index": [1]}).lazy()
    with pytest.raises(ValueError, match=r"^Iterable over word samples expected, polars "
                                         r"LazyFrame object received: .*Call \.collect\(\)"):
        fitted.transform(lazy)


# Item 10: the memo lives with its estimator, within the cache budget.

def _watch_alignments(monkeypatch):
    """Weak references to every alignment that ``_samples._align`` makes."""
    made, original = [], _samples._align

    def watched(*args):
        alignment = original(*args)
        made.append(weakref.ref(alignment))
        return alignment

    monkeypatch.setattr(_samples, "_align", watched)
    return made


def test_the_alignment_memo_goes_with_its_estimator(tiny_model_dir, monkeypatch):
    made = _watch_alignments(monkeypatch)
    vectorizer = BertWordVectorizer(tiny_model_dir).fit()
    samples = [(tuple(words), i) for words, i in SAMPLES]
    first = vectorizer.transform(samples)
    vectorizer.set_params(layer=0).transform(samples)
    assert len(made) == 1 and made[0]() is not None  # a grid aligns once
    checked = weakref.ref(_samples.check_words(samples))
    assert checked() is not None  # the memo's samples: not checked again
    del vectorizer
    gc.collect()
    assert made[0]() is None and checked() is None  # nothing outlives the estimator
    np.testing.assert_array_equal(BertWordVectorizer(tiny_model_dir).fit().transform(samples),
                                  first)


def test_nothing_is_memoized_without_a_cache_budget(tiny_model_dir, monkeypatch):
    made = _watch_alignments(monkeypatch)
    vectorizer = BertWordVectorizer(tiny_model_dir).fit()
    samples = [(tuple(words), i) for words, i in SAMPLES[:5]]  # not aligned before
    previous = skbert.set_cache_limit(0)
    try:
        expected = vectorizer.transform(samples)
        gc.collect()
        assert made[0]() is None
        checked = weakref.ref(_samples.check_words(samples))
        gc.collect()
        assert checked() is None
        np.testing.assert_array_equal(vectorizer.transform(samples), expected)
        assert len(made) == 2
    finally:
        skbert.set_cache_limit(previous)


def test_transform_leaves_the_estimator_as_it_was(fitted):
    state = dict(vars(fitted))
    fitted.transform(SAMPLES)
    assert vars(fitted) == state  # the memo is not on it: pickles and clones carry none


# The tokenizer's private backend.

def test_words_reads_no_private_attribute_of_the_tokenizer():
    tree = ast.parse(Path(_samples.__file__).read_text(encoding="utf-8"))
    private = [node.attr for node in ast.walk(tree)
               if isinstance(node, ast.Attribute) and node.attr == "_tokenizer"]
    assert not private


def test_pretokenized_copies_a_byte_level_tokenizer_and_leaves_the_original():
    from tests.test_architectures import _tokenizer

    tokenizer = _tokenizer("roberta")
    before = tokenizer.backend_tokenizer.to_str()
    copied = _samples.pretokenized(tokenizer)
    assert copied is not tokenizer and _samples.pretokenized(tokenizer) is copied
    assert copied.tokenize(["the", "cat"], is_split_into_words=True)[0].startswith("\u0120")
    assert tokenizer.backend_tokenizer.to_str() == before
    assert tokenizer.tokenize("the cat")[0] == "the"  # no space put before the first word
