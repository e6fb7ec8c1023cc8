"""HybridSearch: fused first stages, against a naive fusion loop; its parameters as
scikit-learn reaches them; a grid over the fusion that encodes no document again."""

import pickle

import numpy as np
import pytest
from sklearn.base import BaseEstimator, clone
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import ParameterGrid
from sklearn.utils import estimator_checks

from skbert import BertVectorizer, BM25Vectorizer, HybridSearch, SimilaritySearch
from skbert._retrieval._hybrid import fuse
from tests.conftest import DATA_FREE_CHECKS, count_forward_rows, run_without_torch

DOCUMENTS = [
    "The cat sat on the mat, and the cat slept.",
    "Dogs were chasing cats in the park.",
    "Stock markets fell sharply on Monday.",
    "Shares dropped as the markets were falling.",
    "A kitten naps on a warm rug near the cat.",
    "The park was empty: no dogs, no cats.",
    "Rivers flood in the spring.",
    "The film was long but good.",
]
QUERIES = ["cat on the mat", "falling markets", "dogs in a park", "a good long film"]


def naive_fusion(rankings, weights, fusion, normalization, rrf_k):
    """Each query's fused score of every document its stages ranked, in plain loops."""
    fused = []
    for query in range(len(rankings[0][1])):
        scores = {}
        for weight, (stage_scores, stage_indices) in zip(weights, rankings):
            row, documents = np.asarray(stage_scores[query], float), stage_indices[query]
            if fusion == "rrf":
                given = {doc: weight / (rrf_k + rank + 1) for rank, doc in enumerate(documents)}
                missing = 0.0
            else:
                if normalization == "minmax":
                    spread = row.max() - row.min()
                    normalized = (row - row.min()) / spread if spread > 0 else row * 0
                else:
                    normalized = (row - row.mean()) / row.std() if row.std() > 0 else row * 0
                given = {doc: weight * value for doc, value in zip(documents, normalized)}
                missing = weight * normalized.min()
            for doc in set().union(*(indices[query] for _, indices in rankings)):
                scores[doc] = scores.get(doc, 0.0) + given.get(doc, missing)
        fused.append(scores)
    return fused


@pytest.mark.parametrize("fusion, normalization", [("rrf", "minmax"), ("convex", "minmax"),
                                                   ("convex", "zscore")])
def test_fuse_equals_a_naive_loop(fusion, normalization):
    rng = np.random.default_rng(0)
    n_queries, n_documents = 5, 30
    rankings = []
    for depth in (7, 12, 4):
        indices = np.stack([rng.permutation(n_documents)[:depth] for _ in range(n_queries)])
        scores = -np.sort(-rng.normal(size=(n_queries, depth)), axis=1)
        scores[0] = 1.5  # one query whose stage gave every document the same score
        rankings.append((scores, indices))
    weights = [0.5, 1.0, 2.0]
    scores, indices = fuse(rankings, weights, fusion, normalization, rrf_k=3, k=6)
    expected = naive_fusion(rankings, weights, fusion, normalization, rrf_k=3)
    for query, row in enumerate(expected):
        ranked = sorted(row.items(), key=lambda item: (-item[1], item[0]))[:6]
        np.testing.assert_array_equal(indices[query], [doc for doc, _ in ranked])
        np.testing.assert_allclose(scores[query], [score for _, score in ranked], rtol=1e-6,
                                   atol=1e-7)


# Not check_parameters_default_constructible: searches has no default, as VotingClassifier's
# estimators has none.
@pytest.mark.parametrize("check", [check for check in DATA_FREE_CHECKS
                                   if check != "check_parameters_default_constructible"])
def test_sklearn_data_free_check(check):
    getattr(estimator_checks, check)("HybridSearch", bm25_and_chars())


def bm25_and_chars(**settings):
    return HybridSearch([
        ("bm25", SimilaritySearch(BM25Vectorizer())),
        ("chars", SimilaritySearch(TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 4)))),
    ], **settings)


def test_one_stage_with_all_the_weight_ranks_as_that_stage():
    search = bm25_and_chars(weights=[1.0, 0.0], depth=len(DOCUMENTS)).fit(DOCUMENTS)
    bm25 = SimilaritySearch(BM25Vectorizer()).fit(DOCUMENTS)
    expected = bm25.search(QUERIES, k=3)[1]
    np.testing.assert_array_equal(search.search(QUERIES, k=3)[1], expected)
    rrf = search.set_params(fusion="rrf").search(QUERIES, k=3)
    np.testing.assert_array_equal(rrf[1], expected)
    np.testing.assert_allclose(rrf[0], np.broadcast_to(1 / (60 + np.arange(1, 4)), (4, 3)),
                               rtol=1e-6)


def test_the_fusion_parameters_apply_at_the_next_search_without_a_fit():
    search = bm25_and_chars().fit(DOCUMENTS)
    fitted = [stage for _, stage in search.searches_]
    for params in ParameterGrid({"fusion": ["convex"], "weights": [[0.2, 0.8], [0.8, 0.2]],
                                 "normalization": ["minmax", "zscore"]}):
        got = search.set_params(**params).search(QUERIES, k=4)
        expected = clone(search).fit(DOCUMENTS).search(QUERIES, k=4)
        np.testing.assert_array_equal(got[1], expected[1])
        np.testing.assert_allclose(got[0], expected[0], rtol=1e-6)
    assert [stage for _, stage in search.searches_] == fitted


def test_a_grid_over_the_fusion_encodes_no_document_again(tiny_model_dir):
    search = HybridSearch([("bm25", SimilaritySearch(BM25Vectorizer())),
                           ("dense", SimilaritySearch(BertVectorizer(tiny_model_dir)))])
    search.fit(DOCUMENTS)
    counter = count_forward_rows(search.named_searches_.dense.vectorizer_)
    grid = ParameterGrid([{"fusion": ["convex"], "weights": [[w, 1 - w] for w in
                                                             np.linspace(0, 1, 9)]},
                          {"fusion": ["rrf"], "rrf_k": [1, 60]}])
    results = [search.set_params(**params).search(QUERIES, k=3)[1] for params in grid]
    assert len(results) == 11
    assert counter["rows"] <= len(QUERIES)  # the queries once (then cached), no document


def test_nested_parameters_reach_the_stages_at_the_next_fit():
    search = bm25_and_chars()
    search.set_params(bm25__vectorizer__k1=0.3, chars__vectorizer__ngram_range=(2, 2),
                      weights=[0.4, 0.6])
    params = search.get_params()
    assert params["bm25__vectorizer__k1"] == 0.3 and params["weights"] == [0.4, 0.6]
    search.fit(DOCUMENTS)
    assert search.named_searches_.bm25.vectorizer_.k1 == 0.3
    assert search.searches[0][1] is not search.searches_[0][1]  # the stages were cloned


def test_no_query_gives_empty_arrays():
    scores, indices = bm25_and_chars().fit(DOCUMENTS).search([], k=3)
    assert scores.shape == indices.shape == (0, 3)
    assert scores.dtype == np.float32 and indices.dtype == np.int64


def test_kneighbors_of_the_corpus_leaves_each_document_out():
    search = bm25_and_chars(n_neighbors=3).fit(DOCUMENTS)
    distances, indices = search.kneighbors()
    assert indices.shape == (len(DOCUMENTS), 3)
    assert not (indices == np.arange(len(DOCUMENTS))[:, None]).any()
    assert (np.diff(distances, axis=1) >= 0).all()
    scores, expected = search.search(QUERIES, k=3)
    got_distances, got = search.kneighbors(QUERIES)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_allclose(got_distances, 1 - scores)


class LengthReranker(BaseEstimator):
    """A fitted stand-in reranker: the shorter the document, the higher its score."""

    def fit(self, X=None, y=None):
        return self

    def predict(self, pairs):
        return np.array([-len(document) for _, document in pairs], dtype=float)

    def __sklearn_is_fitted__(self):
        return True


def test_the_reranker_reorders_the_fused_candidates():
    search = bm25_and_chars(reranker=LengthReranker(), rerank_k=4).fit(DOCUMENTS)
    fused = bm25_and_chars().fit(DOCUMENTS).search(QUERIES, k=4)[1]
    scores, indices = search.search(QUERIES, k=2)
    for row, candidates in zip(indices, fused):
        expected = sorted(candidates, key=lambda j: len(DOCUMENTS[j]))[:2]
        np.testing.assert_array_equal(row, expected)
    np.testing.assert_array_equal(scores, [[-len(DOCUMENTS[j]) for j in row] for row in indices])


def test_a_frozen_stage_fitted_on_the_corpus_is_used_as_it_is():
    bm25 = SimilaritySearch(BM25Vectorizer()).fit(DOCUMENTS)
    search = HybridSearch([("bm25", FrozenEstimator(bm25)),
                           ("chars", SimilaritySearch(TfidfVectorizer()))]).fit(DOCUMENTS)
    assert search.named_searches_.bm25 is search.searches[0][1]
    with pytest.raises(ValueError, match="The search 'bm25' is used fitted, on 8 documents; "
                                         "the corpus has 3"):
        clone(search).fit(DOCUMENTS[:3])


def test_pickles_search_the_same():
    search = bm25_and_chars(fusion="rrf").fit(DOCUMENTS)
    loaded = pickle.loads(pickle.dumps(search))
    for got, expected in zip(loaded.search(QUERIES, k=3), search.search(QUERIES, k=3)):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("make, message", [
    (lambda: HybridSearch([]), "searches must be a non-empty list"),
    (lambda: HybridSearch([("a", SimilaritySearch(BM25Vectorizer())),
                           ("a", SimilaritySearch(TfidfVectorizer()))]), "Names provided are "
                                                                         "not unique"),
    (lambda: HybridSearch([("vectors", SimilaritySearch())]),
     "The search 'vectors' \\(SimilaritySearch\\) must be a SimilaritySearch with a "
     "vectorizer"),
    (lambda: bm25_and_chars(weights=[1.0]), "weights=\\[1.0\\] must give one finite, "
                                            "non-negative weight to each of the 2 searches"),
    (lambda: bm25_and_chars(weights=[-1.0, 2.0]), "non-negative"),
    (lambda: bm25_and_chars(fusion="max"), "The 'fusion' parameter of HybridSearch must be"),
])
def test_bad_settings_say_what_is_wrong(make, message):
    with pytest.raises(ValueError, match=message):
        make().fit(DOCUMENTS)


def test_bad_searches_say_what_is_wrong():
    search = bm25_and_chars().fit(DOCUMENTS)
    with pytest.raises(ValueError, match="k=9 must be an int between 1 and 8"):
        search.search(QUERIES, k=9)
    with pytest.raises(ValueError, match="The 'fusion' parameter of HybridSearch must be"):
        search.set_params(fusion="max").search(QUERIES)
    with pytest.raises(ValueError, match="HybridSearch takes single texts"):
        search.set_params(fusion="rrf").search([("a", "pair")])
    with pytest.raises(ValueError, match="n_neighbors=8 must be an int between 1 and 7"):
        search.kneighbors(n_neighbors=8)


def test_a_fitted_bm25_and_static_search_runs_without_torch(tiny_model_dir, tmp_path):
    from skbert import StaticVectorizer

    static = StaticVectorizer(BertVectorizer(tiny_model_dir, pooling="mean"), n_components=8)
    search = HybridSearch([("bm25", SimilaritySearch(BM25Vectorizer())),
                           ("static", SimilaritySearch(static))]).fit(DOCUMENTS)
    path, expected = tmp_path / "search.pkl", tmp_path / "expected.npy"
    path.write_bytes(pickle.dumps(search))
    np.save(expected, search.search(QUERIES, k=3)[1])
    assert run_without_torch(f"""
import pickle
import numpy as np
search = pickle.loads(open({str(path)!r}, "rb").read())
np.testing.assert_array_equal(search.search({QUERIES!r}, k=3)[1], np.load({str(expected)!r}))
print("ok")
""").strip() == "ok"
