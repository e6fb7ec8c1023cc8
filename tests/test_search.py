"""SimilaritySearch against sklearn's brute-force NearestNeighbors; PairSimilarity for STS."""

import warnings

import joblib
import numpy as np
import pandas as pd
import pytest
from scipy import sparse
from scipy.stats import spearmanr
from sklearn.base import BaseEstimator
from sklearn.decomposition import PCA
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, TunedThresholdClassifierCV
from sklearn.neighbors import NearestNeighbors
from sklearn.pipeline import make_pipeline

from skbert import BertVectorizer, PairSimilarity, SimilaritySearch
from skbert._retrieval._index import Int8Index, top_k_blocked


@pytest.fixture
def vectors():
    rng = np.random.default_rng(0)
    return rng.normal(size=(300, 16)).astype(np.float32), rng.normal(size=(40, 16))


def test_kneighbors_equals_sklearn_brute_force(vectors):
    corpus, queries = vectors
    ours = SimilaritySearch(n_neighbors=7, block_size=50).fit(corpus)
    theirs = NearestNeighbors(n_neighbors=7, metric="cosine", algorithm="brute").fit(corpus)
    for X in (queries, None):
        distances, indices = ours.kneighbors(X)
        expected_distances, expected_indices = theirs.kneighbors(X)
        np.testing.assert_array_equal(indices, expected_indices)
        np.testing.assert_allclose(distances, expected_distances, atol=1e-5)
    assert np.array_equal(ours.kneighbors(queries, 3, return_distance=False),
                          theirs.kneighbors(queries, 3, return_distance=False))


def test_search_is_kneighbors_in_similarity_terms(vectors):
    corpus, queries = vectors
    search = SimilaritySearch().fit(corpus)
    scores, indices = search.search(queries, k=5)
    distances, neighbor_indices = search.kneighbors(queries, n_neighbors=5)
    np.testing.assert_array_equal(indices, neighbor_indices)
    np.testing.assert_allclose(scores, 1 - distances, atol=1e-6)
    assert (np.diff(scores, axis=1) <= 0).all()


@pytest.mark.parametrize("block_size", [1, 7, 64, 1000])
@pytest.mark.parametrize("k", [1, 5, 300])
def test_blocked_equals_unblocked(vectors, block_size, k):
    corpus, queries = vectors
    queries = queries.astype(np.float32)
    scores, indices = top_k_blocked(queries, corpus, k, block_size)
    full = queries @ corpus.T
    expected = np.lexsort((np.broadcast_to(np.arange(300), full.shape), -full), axis=1)[:, :k]
    np.testing.assert_array_equal(indices, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(full, expected, axis=1), atol=1e-5)


def test_ties_are_broken_by_lower_index():
    corpus = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [2.0, 0.0]], dtype=np.float32)
    scores, indices = top_k_blocked(np.array([[1.0, 0.0]], np.float32), corpus, 3, 2)
    assert indices.tolist() == [[3, 0, 1]]  # raw inner products: [2, 0] scores highest
    unit = SimilaritySearch().fit(corpus)
    assert unit.search(np.array([[1.0, 0.0]]), k=3)[1].tolist() == [[0, 1, 3]]


def test_kneighbors_without_queries_excludes_each_point_itself():
    corpus = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    indices = SimilaritySearch(n_neighbors=1).fit(corpus).kneighbors(return_distance=False)
    assert indices[:, 0].tolist() == [1, 0, 0]


def test_errors(vectors):
    corpus, queries = vectors
    search = SimilaritySearch().fit(corpus)
    with pytest.raises(ValueError, match=r"k=0 must be an int between 1 and 300"):
        search.search(queries, k=0)
    with pytest.raises(ValueError, match=r"n_neighbors=300 must be an int between 1 and 299 "
                                         r"\(the corpus size less the query itself\)"):
        search.kneighbors(n_neighbors=300)
    with pytest.raises(ValueError, match="Queries have 3 features, the corpus has 16"):
        search.search(np.ones((2, 3)))
    with pytest.raises(ValueError, match="The 'backend' parameter of SimilaritySearch"):
        SimilaritySearch(backend="annoy").fit(corpus)


@pytest.mark.parametrize("make_corpus", [
    lambda: [], lambda: iter([]), lambda: np.empty((0, 16)), lambda: sparse.csr_matrix((0, 16)),
])
def test_an_empty_corpus_is_refused_at_fit_by_name(tiny_model_dir, make_corpus):
    vectors = isinstance(make_corpus(), np.ndarray) or sparse.issparse(make_corpus())
    searches = [SimilaritySearch()] if vectors else [SimilaritySearch(BertVectorizer(
        tiny_model_dir)), SimilaritySearch(TfidfVectorizer())]
    for search in searches:
        with pytest.raises(ValueError, match=r"^SimilaritySearch\.fit got an empty corpus: "
                                             "give at least one document"):
            search.fit(make_corpus())


@pytest.mark.parametrize("texts_given", [["a cat", "a dog"], np.array(["a cat", "a dog"]),
                                         pd.Series(["a cat", "a dog"]), "a cat",
                                         pd.DataFrame({"text": ["a cat", "a dog"]})])
def test_texts_without_a_vectorizer_say_how_to_give_a_vectorizer(vectors, texts_given):
    advice = (r"vectors \(a 2-D array or sparse matrix\), not texts such as 'a cat'.*"
              r"SimilaritySearch\(BertVectorizer\(model\)\) or "
              r"SimilaritySearch\(BM25Vectorizer\(\)\)")
    with pytest.raises(ValueError, match="SimilaritySearch without a vectorizer takes " + advice):
        SimilaritySearch().fit(texts_given)
    search = SimilaritySearch().fit(vectors[0])
    with pytest.raises(ValueError, match="SimilaritySearch was fitted without a vectorizer: "
                                         "its queries are " + advice):
        search.search(texts_given, k=2)
    with pytest.raises(ValueError, match="its queries are " + advice):
        search.kneighbors(texts_given)


@pytest.mark.parametrize("no_queries", [np.empty((0, 16)), sparse.csr_matrix((0, 16))])
def test_no_query_vectors_give_empty_arrays_as_no_query_texts_do(vectors, no_queries):
    scores, indices = SimilaritySearch().fit(vectors[0]).search(no_queries, k=3)
    assert scores.shape == indices.shape == (0, 3)
    assert scores.dtype == np.float32 and indices.dtype == np.int64


@pytest.mark.parametrize("settings", [dict(precision="int8"), dict(backend="faiss")])
def test_sparse_vectors_are_refused_naming_the_input(settings):
    with pytest.raises(ValueError, match="The sparse input X gives sparse rows, which are "
                                         "searched exactly"):
        SimilaritySearch(**settings).fit(sparse.random(5, 4, density=0.5, format="csr"))


def test_text_corpus_with_a_pipeline_vectorizer_and_joblib(tiny_model_dir, texts, tmp_path):
    vectorizer = make_pipeline(BertVectorizer(tiny_model_dir), PCA(n_components=4, whiten=True))
    search = SimilaritySearch(vectorizer, n_neighbors=2).fit(texts)
    scores, indices = search.search(texts[:3], k=1)
    assert indices[:, 0].tolist() == [0, 1, 2]  # each text finds itself
    features = search.vectorizer_.transform(texts)
    expected = NearestNeighbors(n_neighbors=2, metric="cosine").fit(features).kneighbors()
    np.testing.assert_array_equal(search.kneighbors()[1], expected[1])
    joblib.dump(search, tmp_path / "search.joblib")
    reloaded = joblib.load(tmp_path / "search.joblib")
    np.testing.assert_array_equal(reloaded.search(texts, k=3)[1], search.search(texts, k=3)[1])


def test_faiss_backend_finds_the_exact_neighbours_on_small_data(vectors, tmp_path):
    pytest.importorskip("faiss")
    corpus, queries = vectors
    approximate = SimilaritySearch(backend="faiss").fit(corpus)
    exact = SimilaritySearch().fit(corpus)
    agreement = np.mean(approximate.search(queries, k=5)[1] == exact.search(queries, k=5)[1])
    assert agreement > 0.95
    joblib.dump(approximate, tmp_path / "faiss.joblib")
    reloaded = joblib.load(tmp_path / "faiss.joblib")
    np.testing.assert_array_equal(reloaded.search(queries, k=5)[1],
                                  approximate.search(queries, k=5)[1])


def test_missing_faiss_is_a_clear_import_error(vectors, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_faiss(name, *args, **kwargs):
        if name == "faiss":
            raise ImportError("No module named 'faiss'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_faiss)
    with pytest.raises(ImportError, match=r"pip install 'skbert\[faiss\]'"):
        SimilaritySearch(backend="faiss").fit(vectors[0])


# --- compact indexes and asymmetric search -----------------------------------------------------

@pytest.fixture
def clustered():
    """Unit-ish vectors around 30 centres, off the origin as sentence embeddings are."""
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(30, 48)) + 1.5
    corpus = centres[rng.integers(0, 30, 600)] + 0.6 * rng.normal(size=(600, 48))
    queries = centres[rng.integers(0, 30, 50)] + 0.6 * rng.normal(size=(50, 48))
    return corpus.astype(np.float32), queries.astype(np.float32)


def _recall(found, exact):
    return np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(found, exact)])


def test_int8_scores_are_the_query_against_the_decoded_corpus(clustered):
    corpus, queries = clustered
    index = Int8Index(corpus)
    np.testing.assert_allclose(index.similarity(queries, 100, 300),
                               queries @ index.decode(100, 300).T, rtol=1e-5, atol=1e-4)
    # Each value within half a step of its dimension's range.
    assert (np.abs(index.decode() - corpus) <= index.scale / 2 + 1e-6).all()


def test_int8_index_finds_the_float32_neighbours_at_a_quarter_of_the_bytes(clustered):
    corpus, queries = clustered
    exact = SimilaritySearch().fit(corpus)
    compact = SimilaritySearch(precision="int8", block_size=64).fit(corpus)
    assert compact.index_bytes_ == corpus.size + 2 * 4 * corpus.shape[1]
    assert exact.index_bytes_ == 4 * corpus.size
    scores, indices = compact.search(queries, k=10)
    exact_scores, exact_indices = exact.search(queries, k=10)
    assert _recall(indices, exact_indices) >= 0.95
    np.testing.assert_allclose(scores, exact_scores, atol=0.01)
    neighbours = compact.kneighbors(n_neighbors=3, return_distance=False)
    assert not (neighbours == np.arange(len(corpus))[:, None]).any()


def test_binary_index_hamming_candidates_then_rescoring(clustered, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where the float32 rows are mapped from
    corpus, queries = clustered
    exact_indices = SimilaritySearch().fit(corpus).search(queries, k=10)[1]
    binary = SimilaritySearch(precision="binary", rescore=None).fit(corpus)
    assert binary.index_bytes_ == corpus.size // 8 and binary._index.vectors is None
    scores, indices = binary.search(queries, k=10)
    # Without rescoring: the cosine of the sign vectors, n_bits - 2 * hamming over n_bits.
    signs = np.where(corpus > 0, 1.0, -1.0)
    expected = np.where(queries > 0, 1.0, -1.0) @ signs.T / 48
    np.testing.assert_allclose(scores, np.take_along_axis(expected, indices, axis=1), atol=1e-6)
    np.testing.assert_allclose(scores[:, 0], expected.max(axis=1), atol=1e-6)
    assert (np.diff(scores, axis=1) <= 0).all()

    rescoring = SimilaritySearch(precision="binary", rescore=4).fit(corpus)
    assert rescoring.index_bytes_ == binary.index_bytes_
    assert isinstance(rescoring._index.vectors, np.memmap)
    assert list(tmp_path.iterdir()) == []  # mapped, the file's name already removed
    rescored_scores, rescored = rescoring.search(queries, k=10)
    assert _recall(rescored, exact_indices) > _recall(indices, exact_indices)
    # Rescoring ranks the 40 Hamming candidates by their float32 cosine similarity.
    candidates = binary.search(queries, k=40)[1]
    cosines = np.take_along_axis(_unit(queries) @ _unit(corpus).T, candidates, axis=1)
    best = np.argsort(-cosines, axis=1, kind="stable")[:, :10]
    np.testing.assert_array_equal(rescored, np.take_along_axis(candidates, best, axis=1))
    np.testing.assert_allclose(rescored_scores, np.take_along_axis(cosines, best, axis=1),
                               atol=1e-6)
    neighbours = rescoring.kneighbors(n_neighbors=3, return_distance=False)
    assert not (neighbours == np.arange(len(corpus))[:, None]).any()


def _unit(vectors):
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_compact_indexes_survive_joblib(clustered, tmp_path):
    corpus, queries = clustered
    for precision in ("int8", "binary"):
        search = SimilaritySearch(precision=precision).fit(corpus)
        joblib.dump(search, tmp_path / "search.joblib")
        reloaded = joblib.load(tmp_path / "search.joblib")
        for got, expected in zip(reloaded.search(queries, k=5), search.search(queries, k=5)):
            np.testing.assert_array_equal(got, expected)


def test_compact_index_errors(clustered, tiny_model_dir):
    corpus, _ = clustered
    with pytest.raises(ValueError, match="precision='int8' is for backend='exact'"):
        SimilaritySearch(backend="faiss", precision="int8").fit(corpus)
    with pytest.raises(ValueError, match="The 'precision' parameter of SimilaritySearch"):
        SimilaritySearch(precision="float16").fit(corpus)
    with pytest.raises(ValueError, match="The 'rescore' parameter of SimilaritySearch"):
        SimilaritySearch(precision="binary", rescore=0).fit(corpus)
    with pytest.raises(ValueError, match="query_vectorizer encodes query texts .* set vectorizer"):
        SimilaritySearch(query_vectorizer=BertVectorizer(tiny_model_dir)).fit(corpus)
    without_rows = SimilaritySearch(precision="binary", rescore=None).fit(corpus)
    with pytest.raises(ValueError, match="rescore=4 reads float32 rows, which this index was "
                                         "fitted without"):
        without_rows.set_params(rescore=4).search(corpus[:2])


def test_queries_and_documents_encoded_by_their_own_vectorizers(tiny_model_dir, texts):
    documents = BertVectorizer(tiny_model_dir, prompt="the text: ")
    queries = BertVectorizer(tiny_model_dir, prompt="what: ")
    search = SimilaritySearch(documents, query_vectorizer=queries).fit(texts)
    scores, indices = search.search(texts[:4], k=3)
    query_vectors = _unit(queries.fit().transform(texts[:4]))
    corpus_vectors = _unit(documents.fit().transform(texts))
    expected = top_k_blocked(query_vectors, corpus_vectors, 3, 2048)
    np.testing.assert_array_equal(indices, expected[1])
    np.testing.assert_allclose(scores, expected[0], atol=1e-6)
    symmetric = SimilaritySearch(documents).fit(texts).search(texts[:4], k=3)[0]
    assert np.abs(symmetric - scores).max() > 1e-3
    narrow = SimilaritySearch(documents, query_vectorizer=queries.set_params(truncate_dim=8))
    with pytest.raises(ValueError, match="query vectorizer's vectors have 8 features, the "
                                         "corpus has 32"):
        narrow.fit(texts).search(texts[:1], k=2)


# --- Mining hard negatives, and reranked distances ----------------------------------------

DOCUMENTS = ["a cat sat on the mat", "the dog runs fast", "the river is long", "a big red house",
             "what is the time", "people run fast", "the small blue car", "a good movie",
             "the film was awful", "a long river in the city"]


def test_a_query_in_the_corpus_is_never_its_own_negative(tiny_model_dir):
    search = SimilaritySearch(BertVectorizer(tiny_model_dir)).fit(DOCUMENTS)
    # Symmetric data: each query is a corpus document, ranked first for itself at cosine 1.
    queries, positives = DOCUMENTS[:4], DOCUMENTS[4:8]
    ranked = search.search(queries, k=len(DOCUMENTS))[1]
    np.testing.assert_array_equal(ranked[:, 0], np.arange(4))
    tuples = search.mine_negatives(queries, positives, n_negatives=3)
    assert [t[:2] for t in tuples] == list(zip(queries, positives))
    for row, (query, positive, *negatives) in zip(ranked, tuples):
        assert negatives == [DOCUMENTS[j] for j in row
                             if DOCUMENTS[j] not in (query, positive)][:3]


@pytest.mark.parametrize("sampling", ["top", "random"])
def test_a_document_comes_once_in_a_tuple_however_often_the_corpus_holds_it(tiny_model_dir,
                                                                              sampling):
    search = SimilaritySearch(BertVectorizer(tiny_model_dir)).fit(DOCUMENTS + DOCUMENTS[2:5])
    tuples = search.mine_negatives(["the cat sat"], [DOCUMENTS[0]], len(DOCUMENTS) - 1,
                                   range_max=None, sampling=sampling, random_state=0)
    assert sorted(tuples[0][2:]) == sorted(DOCUMENTS[1:])


def test_positives_match_by_exact_text_or_by_corpus_index(tiny_model_dir):
    corpus = DOCUMENTS + [DOCUMENTS[0]]  # the first query's positive twice
    search = SimilaritySearch(BertVectorizer(tiny_model_dir)).fit(corpus)
    queries = ["the cat sat", "a river"]
    # A trailing period: the positive is not the corpus's text, so its document is not known
    # as the positive.
    with pytest.warns(UserWarning, match=r"1 of 2 positives are not in the fitted corpus"):
        search.mine_negatives(queries, ["a cat sat on the mat.", DOCUMENTS[9]], 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        by_text = search.mine_negatives(queries, [DOCUMENTS[0], DOCUMENTS[9]], 3,
                                        range_max=None)
    by_index = search.mine_negatives(queries, [0, 9], 3, range_max=None)
    assert by_index == by_text
    assert by_index == search.mine_negatives(queries, np.array([10, 9]), 3, range_max=None)
    assert by_index[0][1] == DOCUMENTS[0] and DOCUMENTS[0] not in by_index[0][2:]
    with pytest.raises(ValueError, match=r"positives\[1\]=11 is not a corpus index: they go "
                                         r"from 0 to 10"):
        search.mine_negatives(queries, [0, 11], 3)
    with pytest.raises(ValueError, match=r"positives\[0\]=-1 is not a corpus index"):
        search.mine_negatives(queries, [-1, 2], 3)
    with pytest.raises(ValueError, match=r"all texts or all corpus indices.*index 1 is str"):
        search.mine_negatives(queries, [0, "a river"], 3)


class _WordCountReranker(BaseEstimator):
    """A stand-in cross-encoder whose scores are not bounded, as an identity activation's
    logits are not: a pair scores its document's number of words."""

    def fit(self, X=None, y=None):
        self.fitted_ = True
        return self

    def predict(self, pairs):
        return np.array([len(document.split()) for _, document in pairs], dtype=np.float64)


def test_reranked_distances_are_one_less_the_rerankers_scores(tiny_model_dir):
    reranker = _WordCountReranker().fit()
    search = SimilaritySearch(BertVectorizer(tiny_model_dir), reranker=reranker,
                              rerank_k=len(DOCUMENTS)).fit(DOCUMENTS)
    scores, indices = search.search(["the cat sat"], k=4)
    expected = reranker.predict([("the cat sat", DOCUMENTS[j]) for j in indices[0]])
    np.testing.assert_array_equal(scores[0], expected)  # the reranker's own scores
    distances, neighbours = search.kneighbors(["the cat sat"], n_neighbors=4)
    np.testing.assert_array_equal(neighbours, indices)
    np.testing.assert_array_equal(distances, 1 - scores)  # not cosine distances, not clipped
    assert (distances < 0).all() and (np.diff(distances, axis=1) >= 0).all()


# --- PairSimilarity ----------------------------------------------------------------------------

PAIRS = [("the cat sat", "a cat sat"), ("good movie", "awful film"), ("red house", "red house"),
         ("the river city", "what time ?"), ("big dog", "small dog"), ("run fast", "ran fast")]
GOLD = [4.0, 1.0, 5.0, 0.0, 2.5, 4.5]
PARAPHRASE = [1, 0, 1, 0, 0, 1]


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean", "manhattan"])
def test_pair_similarity_predict_and_score(tiny_model_dir, metric):
    model = PairSimilarity(BertVectorizer(tiny_model_dir), metric=metric).fit(PAIRS, GOLD)
    a = model.vectorizer_.transform([p[0] for p in PAIRS]).astype(np.float64)
    b = model.vectorizer_.transform([p[1] for p in PAIRS]).astype(np.float64)
    expected = {
        "cosine": np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1),
        "dot": np.sum(a * b, 1),
        "euclidean": -np.linalg.norm(a - b, axis=1),
        "manhattan": -np.abs(a - b).sum(1),
    }[metric]
    np.testing.assert_allclose(model.predict(PAIRS), expected, rtol=1e-5, atol=1e-6)
    assert model.score(PAIRS, GOLD) == pytest.approx(spearmanr(expected, GOLD).statistic)
    frame = pd.DataFrame(PAIRS, columns=["a", "b"])
    np.testing.assert_allclose(model.predict(frame), model.predict(PAIRS))


def test_pair_similarity_fits_the_vectorizer_on_all_texts(tiny_model_dir):
    vectorizer = make_pipeline(BertVectorizer(tiny_model_dir), PCA(n_components=3))
    model = PairSimilarity(vectorizer).fit(PAIRS)
    distinct = {text for pair in PAIRS for text in pair}
    assert model.vectorizer_[-1].n_samples_ == len(distinct)


def test_pair_similarity_grid_search(tiny_model_dir):
    search = GridSearchCV(PairSimilarity(BertVectorizer(tiny_model_dir)),
                          {"vectorizer__pooling": ["cls", "mean"], "vectorizer__layer": [-1, -2]},
                          cv=2).fit(PAIRS, GOLD)
    assert len(search.cv_results_["params"]) == 4
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    assert search.best_params_["vectorizer__pooling"] in ("cls", "mean")


def test_pair_similarity_rejects_single_texts(tiny_model_dir):
    with pytest.raises(ValueError, match="PairSimilarity takes text pairs"):
        PairSimilarity(BertVectorizer(tiny_model_dir)).fit(["just", "texts"])


def test_pair_similarity_transform_is_predict_as_one_column(tiny_model_dir):
    model = PairSimilarity(BertVectorizer(tiny_model_dir))
    features = model.fit_transform(pair for pair in PAIRS)  # a generator, read once
    assert features.shape == (len(PAIRS), 1) and features.dtype == np.float32
    np.testing.assert_allclose(features, model.predict(PAIRS)[:, None], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(model.transform(PAIRS), features)
    empty = model.transform([])
    assert empty.shape == (0, 1) and empty.dtype == np.float32


@pytest.mark.parametrize("metric, name", [("cosine", "cosine"), ("dot", "dot"),
                                          ("euclidean", "neg_euclidean"),
                                          ("manhattan", "neg_manhattan")])
def test_pair_similarity_feature_name_and_pandas_output(tiny_model_dir, metric, name):
    frame = pd.DataFrame(PAIRS, columns=["a", "b"], index=list("uvwxyz"))
    model = PairSimilarity(BertVectorizer(tiny_model_dir), metric=metric)
    out = model.set_output(transform="pandas").fit_transform(frame)
    assert model.get_feature_names_out().tolist() == [name]
    assert list(out.columns) == [name] and list(out.index) == list("uvwxyz")
    np.testing.assert_allclose(out[name], model.predict(frame), rtol=1e-6, atol=1e-6)


def test_pair_similarity_then_a_classifier_learns_a_threshold(tiny_model_dir):
    pipe = make_pipeline(PairSimilarity(BertVectorizer(tiny_model_dir)), LogisticRegression())
    assert set(pipe.fit(PAIRS, PARAPHRASE).predict(PAIRS)) <= {0, 1}
    tuned = TunedThresholdClassifierCV(pipe, scoring="balanced_accuracy", cv=3)
    tuned.fit(PAIRS * 2, PARAPHRASE * 2)
    assert 0 <= tuned.best_threshold_ <= 1
    assert tuned.predict(PAIRS).shape == (len(PAIRS),)
