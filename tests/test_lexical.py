"""BM25Vectorizer: bm25s's scores as sparse rows, scikit-learn's analyzer, and BM25 search."""

import json
import pickle
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import sklearn
from scipy import sparse
from sklearn.base import clone
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.neighbors import NearestNeighbors
from sklearn.pipeline import make_pipeline
from sklearn.utils import estimator_checks

from skbert import BM25Vectorizer, SimilaritySearch
from tests.conftest import TRANSFORMER_CHECKS

SCIFACT = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact"
DOCUMENTS = [
    "The cat sat on the mat, and the cat slept.",
    "Dogs were chasing cats in the park.",
    "Stock markets fell sharply on Monday.",
    "Shares dropped as the markets were falling.",
    "A kitten naps on a warm rug near the cat.",
    "The park was empty: no dogs, no cats.",
]
QUERIES = ["cat on the mat", "falling markets", "dogs chasing cats cats", "nothing matches zzz"]
METHODS = ["lucene", "robertson", "atire", "bm25l", "bm25+"]


def bm25s_scores(documents, queries, method="lucene", stemmer=None):
    """bm25s's scores of every query for every document, its own tokenizer and its "en"
    stop words (the reference the issue fixes)."""
    bm25s = pytest.importorskip("bm25s")
    stem = None
    if stemmer is not None:
        stem = pytest.importorskip("Stemmer").Stemmer(stemmer)
    retriever = bm25s.BM25(method=method)
    retriever.index(bm25s.tokenize(documents, stopwords="en", stemmer=stem,
                                   show_progress=False), show_progress=False)
    tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stem, show_progress=False,
                            return_ids=False)
    return np.stack([retriever.get_scores(query) for query in tokens])


def lucene_stop_words():
    return sorted(pytest.importorskip("bm25s").stopwords.STOPWORDS_EN)


def our_scores(vectorizer, documents, queries):
    vectorizer = clone(vectorizer).fit(documents)
    return (vectorizer.transform_queries(queries) @ vectorizer.transform(documents).T).toarray()


@pytest.mark.parametrize("check", TRANSFORMER_CHECKS)
def test_sklearn_data_free_check(check):
    getattr(estimator_checks, check)("BM25Vectorizer", BM25Vectorizer())


@pytest.mark.parametrize("method", METHODS)
def test_scores_equal_bm25s_for_every_method(method):
    expected = bm25s_scores(DOCUMENTS, QUERIES, method)
    got = our_scores(BM25Vectorizer(method=method, stop_words=lucene_stop_words()), DOCUMENTS,
                     QUERIES)
    difference = expected - got
    if method in ("bm25l", "bm25+"):
        # Each query's scores differ by one constant: the words absent from every document.
        assert np.ptp(difference, axis=1).max() < 1e-5
        assert np.abs(difference).max() > 0.1  # the constant is there, and left out
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert got[0].argmax() == 0 and got[1].argmax() == 3


def test_stop_words_are_dropped_before_stemming():
    pytest.importorskip("Stemmer")
    # "was" is a stop word; its stem "wa" is not: stemming first would keep it.
    vectorizer = BM25Vectorizer(stemmer="english", stop_words=["was", "the"]).fit(
        ["the cat was running", "dogs run"])
    assert sorted(vectorizer.vocabulary_) == ["cat", "dog", "run"]
    np.testing.assert_array_equal(vectorizer.transform_queries(["running runs was"]).toarray(),
                                  [[0, 0, 2]])


@pytest.mark.slow
def test_scifact_scores_equal_bm25s_within_1e5_relative():
    pytest.importorskip("Stemmer")
    if not (SCIFACT / "corpus.jsonl").is_file():
        pytest.skip("../shared/data not present (only in the development checkout)")
    corpus = [json.loads(line) for line in open(SCIFACT / "corpus.jsonl")]
    documents = [f"{row['title']} {row['text']}".strip() for row in corpus]
    tested = {line.split("\t")[0] for line in open(SCIFACT / "qrels" / "test.tsv")}
    queries = [row["text"] for row in map(json.loads, open(SCIFACT / "queries.jsonl"))
               if row["_id"] in tested]
    assert len(queries) == 300 and len(documents) == 5183
    expected = bm25s_scores(documents, queries, "lucene", "english")
    got = our_scores(BM25Vectorizer(stemmer="english", stop_words=lucene_stop_words()),
                     documents, queries)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * expected.max())


def test_the_words_are_count_vectorizers():
    settings = dict(lowercase=False, stop_words="english", ngram_range=(1, 2),
                    token_pattern=r"(?u)\b\w+\b")
    ours = BM25Vectorizer(**settings).fit(DOCUMENTS)
    theirs = CountVectorizer(**settings).fit(DOCUMENTS)
    assert ours.vocabulary_ == theirs.vocabulary_
    np.testing.assert_array_equal(ours.get_feature_names_out(), theirs.get_feature_names_out())
    np.testing.assert_array_equal(ours.transform_queries(QUERIES).toarray(),
                                  theirs.transform(QUERIES).toarray())
    chars = BM25Vectorizer(analyzer="char_wb", ngram_range=(2, 3)).fit(DOCUMENTS)
    assert chars.vocabulary_ == CountVectorizer(analyzer="char_wb",
                                                ngram_range=(2, 3)).fit(DOCUMENTS).vocabulary_


def test_a_naive_lucene_bm25():
    """The formula, term by term, as a loop (Kamphuis et al. 2020, Lucene's variant)."""
    k1, b = 1.2, 0.6
    vectorizer = BM25Vectorizer(k1=k1, b=b, dtype="float64").fit(DOCUMENTS)
    analyze = vectorizer.build_analyzer()
    words = [analyze(document) for document in DOCUMENTS]
    average = np.mean([len(document) for document in words])
    expected = np.zeros((len(QUERIES), len(DOCUMENTS)))
    for i, query in enumerate(QUERIES):
        for j, document in enumerate(words):
            for word in analyze(query):
                df = sum(word in other for other in words)
                if word in document:
                    tf = document.count(word)
                    idf = np.log(1 + (len(words) - df + 0.5) / (df + 0.5))
                    expected[i, j] += idf * tf / (tf + k1 * (1 - b + b * len(document) / average))
    np.testing.assert_allclose(our_scores(vectorizer, DOCUMENTS, QUERIES), expected, rtol=1e-12)


def test_fit_transform_is_fit_then_transform_and_reads_a_generator_once():
    vectorizer = BM25Vectorizer()
    together = vectorizer.fit_transform(document for document in DOCUMENTS)
    apart = clone(vectorizer).fit(DOCUMENTS).transform(DOCUMENTS)
    assert sparse.issparse(together) and together.dtype == np.float32
    assert together.shape == (len(DOCUMENTS), len(vectorizer.vocabulary_))
    np.testing.assert_array_equal(together.toarray(), apart.toarray())


def test_an_unseen_document_scores_with_the_fitted_statistics():
    vectorizer = BM25Vectorizer().fit(DOCUMENTS)
    extra = "cats and cats and a mat"
    row = vectorizer.transform([extra])
    assert row.shape == (1, len(vectorizer.vocabulary_))
    assert vectorizer.transform(DOCUMENTS + [extra])[-1].toarray().tolist() == \
        row.toarray().tolist()  # its weights depend on itself and the fitted corpus only


def test_pickle_clone_and_dtype():
    vectorizer = BM25Vectorizer(dtype="float64").fit(DOCUMENTS)
    loaded = pickle.loads(pickle.dumps(vectorizer))
    np.testing.assert_array_equal(loaded.transform(QUERIES).toarray(),
                                  vectorizer.transform(QUERIES).toarray())
    assert loaded.transform(QUERIES).dtype == np.float64
    assert clone(vectorizer).get_params() == vectorizer.get_params()


def test_a_stemming_vectorizer_pickles_without_its_stemmer():
    pytest.importorskip("Stemmer")
    vectorizer = BM25Vectorizer(stemmer="english").fit(DOCUMENTS)
    loaded = pickle.loads(pickle.dumps(vectorizer))
    np.testing.assert_array_equal(loaded.transform_queries(["running cats"]).toarray(),
                                  vectorizer.transform_queries(["running cats"]).toarray())


def test_the_pandas_output_config_leaves_the_sparse_rows_as_count_vectorizer_does():
    pytest.importorskip("pandas")
    labels = [0, 0, 1, 1, 0, 0]
    vectorizer = BM25Vectorizer().fit(DOCUMENTS)
    pipeline = make_pipeline(BM25Vectorizer(), LogisticRegression()).fit(DOCUMENTS, labels)
    search = SimilaritySearch(BM25Vectorizer()).fit(DOCUMENTS)
    expected = (vectorizer.transform(DOCUMENTS), vectorizer.transform_queries(QUERIES),
                pipeline.predict_proba(QUERIES), *search.search(QUERIES, k=3))
    with sklearn.config_context(transform_output="pandas"):
        # No set_output, as CountVectorizer and TfidfVectorizer have none: the global
        # setting leaves sparse rows alone instead of refusing them.
        assert hasattr(BM25Vectorizer(), "set_output") == hasattr(CountVectorizer(),
                                                                  "set_output")
        bm25 = BM25Vectorizer()
        rows, query_rows = bm25.fit_transform(DOCUMENTS), bm25.transform_queries(QUERIES)
        pipeline = make_pipeline(BM25Vectorizer(), LogisticRegression()).fit(DOCUMENTS, labels)
        got = (rows, query_rows, pipeline.predict_proba(QUERIES),
               *SimilaritySearch(BM25Vectorizer()).fit(DOCUMENTS).search(QUERIES, k=3))
    assert sparse.issparse(got[0]) and sparse.issparse(got[1])
    for got_one, expected_one in zip(got, expected):
        got_one, expected_one = (np.asarray(value.toarray() if sparse.issparse(value) else value)
                                 for value in (got_one, expected_one))
        np.testing.assert_array_equal(got_one, expected_one)


def test_grid_search_over_k1_b_and_stemmer():
    pytest.importorskip("Stemmer")
    texts = DOCUMENTS * 3
    labels = [0, 0, 1, 1, 0, 0] * 3
    grid = GridSearchCV(make_pipeline(BM25Vectorizer(), LogisticRegression()),
                        {"bm25vectorizer__k1": [0.9, 1.5], "bm25vectorizer__b": [0.4, 0.75],
                         "bm25vectorizer__stemmer": [None, "english"]}, cv=3)
    grid.fit(texts, labels)
    assert len(grid.cv_results_["params"]) == 8
    assert grid.score(texts, labels) == 1.0


@pytest.mark.parametrize("settings, message", [
    (dict(stemmer="english", analyzer="char"), "stemmer='english' stems words: it needs "
                                               "analyzer='word'"),
    (dict(stemmer="klingon"), "stemmer='klingon' is not a Snowball language"),
    (dict(k1=-1.0), "The 'k1' parameter of BM25Vectorizer must be"),
    (dict(method="bm26"), "The 'method' parameter of BM25Vectorizer must be"),
])
def test_bad_settings_say_what_is_wrong(settings, message):
    if "stemmer" in settings:
        pytest.importorskip("Stemmer")
    with pytest.raises(ValueError, match=message):
        BM25Vectorizer(**settings).fit(DOCUMENTS)


def test_bad_input_says_what_is_wrong():
    with pytest.raises(ValueError, match="BM25Vectorizer takes single texts"):
        BM25Vectorizer().fit([("a pair", "of texts")])
    with pytest.raises(ValueError, match="string object received"):
        BM25Vectorizer().fit("one string")
    with pytest.raises(ValueError, match="empty vocabulary"):
        BM25Vectorizer(stop_words="english").fit(["the", "a an"])


@pytest.mark.parametrize("corpus", [[], iter([])])
def test_an_empty_corpus_is_refused_at_fit_by_name(corpus):
    with pytest.raises(ValueError, match=r"^BM25Vectorizer\.fit got an empty corpus: give at "
                                         "least one document"):
        BM25Vectorizer().fit(corpus)
    with pytest.raises(ValueError, match=r"^BM25Vectorizer\.fit got an empty corpus"):
        BM25Vectorizer().fit_transform([])


def test_a_reversed_ngram_range_is_refused_as_count_vectorizer_refuses_it():
    with pytest.raises(ValueError) as theirs:
        CountVectorizer(ngram_range=(2, 1)).fit(DOCUMENTS)
    for method in ("fit", "fit_transform"):
        with pytest.raises(ValueError, match=re.escape(str(theirs.value))):
            getattr(BM25Vectorizer(ngram_range=(2, 1)), method)(DOCUMENTS)


def test_a_callable_analyzer_may_return_any_iterable_as_in_count_vectorizer():
    def words(text):
        return (word for word in text.lower().split() if len(word) > 2)

    ours = BM25Vectorizer(analyzer=words).fit(DOCUMENTS)
    theirs = CountVectorizer(analyzer=words).fit(DOCUMENTS)
    assert ours.vocabulary_ == theirs.vocabulary_
    np.testing.assert_array_equal(ours.transform_queries(QUERIES).toarray(),
                                  theirs.transform(QUERIES).toarray())
    listed = BM25Vectorizer(analyzer=lambda text: list(words(text))).fit(DOCUMENTS)
    assert ours.average_length_ == listed.average_length_
    np.testing.assert_array_equal(ours.transform(DOCUMENTS).toarray(),
                                  listed.transform(DOCUMENTS).toarray())


@pytest.mark.parametrize("settings", [dict(stop_words=["The", "cat"]),
                                      dict(tokenizer=str.split)])
def test_count_vectorizers_warnings_about_its_settings_come_at_fit(settings):
    with pytest.warns(UserWarning) as theirs:
        CountVectorizer(**settings).fit(DOCUMENTS)
    for message in {str(warning.message) for warning in theirs}:
        with pytest.warns(UserWarning, match=re.escape(message)):
            ours = BM25Vectorizer(**settings).fit(DOCUMENTS)
    with warnings.catch_warnings():  # once, at fit, as CountVectorizer warns once
        warnings.simplefilter("error")
        ours.transform(DOCUMENTS), ours.transform_queries(QUERIES)


def test_similarity_search_ranks_by_bm25_on_sparse_rows():
    vectorizer = BM25Vectorizer().fit(DOCUMENTS)
    expected = (vectorizer.transform_queries(QUERIES) @ vectorizer.transform(DOCUMENTS).T)
    search = SimilaritySearch(BM25Vectorizer(), block_size=4).fit(DOCUMENTS)
    scores, indices = search.search(QUERIES, k=6)
    expected = expected.toarray()
    order = np.lexsort((np.arange(6)[None].repeat(4, 0), -expected), axis=1)
    np.testing.assert_array_equal(indices, order)
    np.testing.assert_allclose(scores, np.take_along_axis(expected, order, axis=1), rtol=1e-6)
    rows = search._index.rows
    assert sparse.issparse(rows)
    assert search.index_bytes_ == rows.data.nbytes + rows.indices.nbytes + rows.indptr.nbytes
    distances, neighbours = search.kneighbors(n_neighbors=2)
    assert not (neighbours == np.arange(6)[:, None]).any()
    assert (np.diff(distances, axis=1) >= 0).all()


def test_similarity_search_takes_tfidf_rows_by_cosine():
    # Two neighbours: the queries share words with two documents at least (no ties at 1.0,
    # which NearestNeighbors breaks in no fixed order).
    search = SimilaritySearch(TfidfVectorizer(), n_neighbors=2).fit(DOCUMENTS)
    tfidf = TfidfVectorizer().fit(DOCUMENTS)
    oracle = NearestNeighbors(n_neighbors=2, metric="cosine").fit(tfidf.transform(DOCUMENTS))
    distances, indices = search.kneighbors(QUERIES[:3])
    expected_distances, expected_indices = oracle.kneighbors(tfidf.transform(QUERIES[:3]))
    np.testing.assert_array_equal(indices, expected_indices)
    np.testing.assert_allclose(distances, expected_distances, atol=1e-6)
    sparse_corpus = SimilaritySearch().fit(tfidf.transform(DOCUMENTS))
    np.testing.assert_array_equal(sparse_corpus.kneighbors(tfidf.transform(QUERIES[:3]), 2)[1],
                                  expected_indices)


def test_ties_at_the_cut_go_to_the_lower_index():
    # BM25 gives most documents 0 for a query: which of them make the top k must not be
    # the partition's chance.
    search = SimilaritySearch(BM25Vectorizer(), block_size=2).fit(DOCUMENTS)
    scores, indices = search.search(["markets"], k=4)
    np.testing.assert_array_equal(indices, [[2, 3, 0, 1]])
    np.testing.assert_array_equal(scores[0, 2:], [0, 0])


@pytest.mark.parametrize("settings", [dict(precision="int8"), dict(precision="binary")])
def test_sparse_rows_are_searched_exactly(settings):
    with pytest.raises(ValueError, match="BM25Vectorizer gives sparse rows, which are searched "
                                         "exactly"):
        SimilaritySearch(BM25Vectorizer(), **settings).fit(DOCUMENTS)


def test_mining_with_bm25_bounds_by_the_positives_bm25_score():
    search = SimilaritySearch(BM25Vectorizer()).fit(DOCUMENTS)
    tuples = search.mine_negatives(["cats in the park"], [1], n_negatives=2, margin=0)
    query, positive, *negatives = tuples[0]
    assert positive == DOCUMENTS[1] and DOCUMENTS[1] not in negatives
    scores = dict(zip(search.search([query], k=6)[1][0], search.search([query], k=6)[0][0]))
    for negative in negatives:
        assert scores[DOCUMENTS.index(negative)] <= scores[1]


def test_a_pickled_bm25_search_searches_the_same():
    search = SimilaritySearch(BM25Vectorizer()).fit(DOCUMENTS)
    loaded = pickle.loads(pickle.dumps(search))
    for got, expected in zip(loaded.search(QUERIES, k=3), search.search(QUERIES, k=3)):
        np.testing.assert_array_equal(got, expected)



def test_where_a_release_renames_count_vectorizers_checks_the_stop_words_check_remains():
    # skbert._compat's fallback: a CountVectorizer without the private checks still has its
    # public build_analyzer run, which warns about stop words its preprocessing cannot match.
    from skbert._compat import check_count_vectorizer

    class Renamed:  # the public face of a CountVectorizer whose private checks were renamed
        def __init__(self, **settings):
            self.counter = CountVectorizer(**settings)

        def build_analyzer(self):
            return self.counter.build_analyzer()

    with pytest.warns(UserWarning, match="stop_words may be inconsistent"):
        check_count_vectorizer(Renamed(stop_words=["The", "cat"]))
    check_count_vectorizer(Renamed(ngram_range=(2, 1)))  # its check gone: no error of ours
    with pytest.raises(ValueError, match=re.escape("Invalid value for ngram_range=(2, 1)")):
        check_count_vectorizer(CountVectorizer(ngram_range=(2, 1)))
