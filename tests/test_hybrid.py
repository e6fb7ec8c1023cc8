"""HybridSearch: fused first stages, against a naive fusion loop; its parameters as
scikit-learn reaches them; a grid over the fusion that encodes no document again."""

import math
import pickle

import numpy as np
import pytest
import sklearn
from sklearn.base import BaseEstimator, clone
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import ParameterGrid
from sklearn.utils import estimator_checks

from skbert import BertVectorizer, BM25Vectorizer, HybridSearch, SimilaritySearch
from skbert._retrieval import _hybrid
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


def naive_fusion(rankings, weights, n_documents, fusion, normalization, rrf_k, no_match_at_zero):
    """Each query's fused score of every corpus document, in plain loops, weights as given."""
    fused = []
    for query in range(len(rankings[0][1])):
        parts = {doc: [] for doc in range(n_documents)}
        for weight, (stage_scores, stage_indices), zero_is_no_match in zip(
                weights, rankings, no_match_at_zero):
            row, documents = [float(score) for score in stage_scores[query]], stage_indices[query]
            if fusion == "rrf":
                for doc, score in zip(documents, row):
                    if not (zero_is_no_match and score == 0):
                        rank = 1 + sum(other > score for other in row)  # a tie's best rank
                        parts[doc].append(weight / (rrf_k + rank))
                continue
            row = np.array(row)
            if normalization == "minmax":
                spread = row.max() - row.min()
                normalized = (row - row.min()) / spread if spread > 0 else row * 0
            else:
                normalized = (row - row.mean()) / row.std() if row.std() > 0 else row * 0
            given = dict(zip(documents, normalized))
            for doc in parts:
                parts[doc].append(weight * given.get(doc, normalized.min()))
        fused.append({doc: math.fsum(values) for doc, values in parts.items()})
    return fused


def random_rankings(rng, n_queries, n_documents, depths, zeros=False):
    """Rankings of random scores with ties (and, with ``zeros``, 0s at their ends)."""
    rankings = []
    for depth in depths:
        indices = np.stack([rng.permutation(n_documents)[:depth] for _ in range(n_queries)])
        scores = -np.sort(-rng.integers(0, 4, size=(n_queries, depth)) * rng.uniform(0.5, 2),
                          axis=1)
        if not zeros:
            scores[1] = -np.sort(-rng.normal(size=depth))
        scores[0] = 1.5  # one query whose stage gave every document the same score
        rankings.append((scores.astype(np.float32), indices))
    return rankings


@pytest.mark.parametrize("fusion, normalization", [("rrf", "minmax"), ("convex", "minmax"),
                                                   ("convex", "zscore")])
@pytest.mark.parametrize("seed", range(3))
def test_fuse_equals_a_naive_loop(fusion, normalization, seed):
    rng = np.random.default_rng(seed)
    n_queries, n_documents = 6, 30
    rankings = random_rankings(rng, n_queries, n_documents, (7, 12, 4), zeros=seed > 0)
    weights, no_match_at_zero = [0.5, 1.0, 2.0], [True, False, True]
    expected = naive_fusion(rankings, weights, n_documents, fusion, normalization, 3,
                            no_match_at_zero)
    for k in (1, 6, 19, n_documents):
        scores, indices = fuse(rankings, weights, n_documents, fusion, normalization, rrf_k=3,
                               k=k, no_match_at_zero=no_match_at_zero)
        for query, row in enumerate(expected):
            # Scaled by the weights' sum; equal float32 scores by the lower index.
            row = {doc: np.float32(score / sum(weights)) for doc, score in row.items()}
            ranked = sorted(row.items(), key=lambda item: (-item[1], item[0]))[:k]
            np.testing.assert_array_equal(indices[query], [doc for doc, _ in ranked])
            np.testing.assert_allclose(scores[query], [score for _, score in ranked],
                                       rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("normalization", ["minmax", "zscore"])
def test_convex_fusion_ranks_a_zero_as_any_score(normalization):
    rng = np.random.default_rng(0)
    rankings = random_rankings(rng, 6, 30, (7, 12, 4), zeros=True)
    got = fuse(rankings, [1, 2, 1], 30, "convex", normalization, k=30,
               no_match_at_zero=[True, True, True])
    expected = fuse(rankings, [1, 2, 1], 30, "convex", normalization, k=30)
    for got_part, expected_part in zip(got, expected):
        np.testing.assert_array_equal(got_part, expected_part)


@pytest.mark.parametrize("fusion", ["rrf", "convex"])
def test_the_fused_order_does_not_follow_the_order_of_the_stages(fusion):
    # Each document ranked first, second and third once: three equal sums, whose float64
    # rounding used to order them by the order of the stages ([0, 2, 1] at rrf_k=2).
    scores = np.array([[3.0, 2.0, 1.0]])
    rankings = [(scores, np.array([[0, 1, 2]])), (scores, np.array([[1, 2, 0]])),
                (scores, np.array([[2, 0, 1]]))]
    for rrf_k in range(10):
        expected = fuse(rankings, [1, 1, 1], 3, fusion, rrf_k=rrf_k, k=3)
        assert expected[1].tolist() == [[0, 1, 2]]
        assert len(set(expected[0][0])) == 1
        for order in ([2, 0, 1], [1, 2, 0], [2, 1, 0]):
            got = fuse([rankings[i] for i in order], [1, 1, 1], 3, fusion, rrf_k=rrf_k, k=3)
            for got_part, expected_part in zip(got, expected):
                np.testing.assert_array_equal(got_part, expected_part)
    rng = np.random.default_rng(0)
    rankings = random_rankings(rng, 6, 30, (7, 12, 4, 9), zeros=True)
    weights, no_match_at_zero = [0.1, 0.7, 0.2, 0.3], [True, False, True, False]
    expected = fuse(rankings, weights, 30, fusion, k=30, no_match_at_zero=no_match_at_zero)
    for order in ([3, 2, 1, 0], [1, 3, 0, 2]):
        got = fuse([rankings[i] for i in order], [weights[i] for i in order], 30, fusion, k=30,
                   no_match_at_zero=[no_match_at_zero[i] for i in order])
        for got_part, expected_part in zip(got, expected):
            np.testing.assert_array_equal(got_part, expected_part)


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
    # 1 / (60 + rank) where BM25 matched the document, else 0 (three places here).
    bm25_scores = bm25.search(QUERIES, k=3)[0]
    np.testing.assert_allclose(rrf[0], np.where(bm25_scores > 0, 1 / (60 + np.arange(1, 4)), 0),
                               rtol=1e-6)
    assert (bm25_scores == 0).sum() == 3


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


@pytest.mark.parametrize("corpus", [[], iter([])])
def test_an_empty_corpus_is_refused_at_fit_by_name(corpus):
    with pytest.raises(ValueError, match=r"^HybridSearch\.fit got an empty corpus: give at "
                                         "least one document"):
        bm25_and_chars().fit(corpus)


def test_the_pandas_output_config_changes_nothing_with_a_bm25_stage():
    pytest.importorskip("pandas")
    expected = bm25_and_chars().fit(DOCUMENTS).kneighbors(QUERIES, n_neighbors=3)
    with sklearn.config_context(transform_output="pandas"):
        got = bm25_and_chars().fit(DOCUMENTS).kneighbors(QUERIES, n_neighbors=3)
    for got_one, expected_one in zip(got, expected):
        np.testing.assert_array_equal(got_one, expected_one)


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
    (lambda: bm25_and_chars(weights=[1.0]), "weights=\\[1.0\\] must be a sequence \\(list, "
                                            "tuple, 1-D array\\) of 2 finite, non-negative "
                                            "numbers, not all 0"),
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


# Issue 72's faults, each reproduced at the level a user meets it.

LEXICAL_CORPUS = ["rain in spain", "stock markets", "the cat", "catalog of items"]


def test_rrf_gives_nothing_for_a_sparse_stage_score_of_zero():
    # "cat": BM25 matches document 2 only, the character n-grams 2 and 3. Document 0, which
    # neither stage matched, took BM25's second rank (zeros listed by index) and outranked 3.
    search = bm25_and_chars(fusion="rrf").fit(LEXICAL_CORPUS)
    scores, indices = search.search(["cat"], k=4)
    assert indices.tolist() == [[2, 3, 0, 1]]
    np.testing.assert_allclose(scores[0], [1 / 61, 0.5 / 62, 0, 0], rtol=1e-6)


def test_a_frozen_stage_fitted_on_another_corpus_of_the_same_size_is_refused():
    other = ["rain in spain", "stock markets", "dogs bark", "cat naps"]
    bm25 = SimilaritySearch(BM25Vectorizer()).fit(other)
    search = HybridSearch([("bm25", FrozenEstimator(bm25)),
                           ("chars", SimilaritySearch(TfidfVectorizer()))])
    with pytest.raises(ValueError, match="The search 'bm25' is used fitted, on other documents "
                                         "than this corpus: they differ first at document 2"):
        search.fit(LEXICAL_CORPUS)


def random_corpus(rng, n_documents):
    words = ["cat", "dog", "mat", "park", "stock", "fell", "rain", "film", "good", "long"]
    return [" ".join(rng.choice(words, size=rng.integers(1, 6))) for _ in range(n_documents)]


@pytest.mark.parametrize("seed", range(4))
def test_the_first_k_of_a_longer_list_is_the_shorter_list(seed):
    from sklearn.decomposition import TruncatedSVD
    from sklearn.pipeline import make_pipeline

    rng = np.random.default_rng(seed)
    n_documents = int(rng.integers(5, 12))
    corpus = random_corpus(rng, n_documents)
    queries = [*random_corpus(rng, 3), "unseen words only"]
    dense = make_pipeline(TfidfVectorizer(), TruncatedSVD(n_components=3, random_state=0))
    search = HybridSearch([
        ("bm25", SimilaritySearch(BM25Vectorizer(stop_words=None))),
        ("chars", SimilaritySearch(TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 3)))),
        ("dense", SimilaritySearch(dense)),
    ], depth=int(rng.integers(1, n_documents)), weights=rng.uniform(0.1, 1, size=3)).fit(corpus)
    depths = (search.depth, None)
    for params in ParameterGrid([{"fusion": ["rrf"], "depth": depths},
                                 {"fusion": ["convex"], "normalization": ["minmax", "zscore"],
                                  "depth": depths}]):
        search.set_params(**params)
        longest = search.search(queries, k=n_documents)
        neighbours = search.kneighbors(n_neighbors=n_documents - 1)
        for k in range(1, n_documents):
            for got, expected in zip(search.search(queries, k=k), longest):
                np.testing.assert_array_equal(got, expected[:, :k], err_msg=f"{params} k={k}")
            for got, expected in zip(search.kneighbors(n_neighbors=k), neighbours):
                np.testing.assert_array_equal(got, expected[:, :k], err_msg=f"{params} k={k}")


def test_the_order_of_the_searches_changes_nothing():
    stages = [("bm25", SimilaritySearch(BM25Vectorizer())),
              ("chars", SimilaritySearch(TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 4)))),
              ("words", SimilaritySearch(TfidfVectorizer()))]
    weights = [0.3, 0.5, 0.2]
    for fusion in ("rrf", "convex"):
        expected = HybridSearch(stages, fusion=fusion, weights=weights, depth=5).fit(DOCUMENTS)
        expected = expected.search(QUERIES, k=len(DOCUMENTS))
        for order in ([2, 0, 1], [1, 2, 0], [2, 1, 0]):
            got = HybridSearch([stages[i] for i in order], fusion=fusion, depth=5,
                               weights=[weights[i] for i in order]).fit(DOCUMENTS)
            for got_part, expected_part in zip(got.search(QUERIES, k=len(DOCUMENTS)), expected):
                np.testing.assert_array_equal(got_part, expected_part)


class NeverFitted(TfidfVectorizer):
    """A vectorizer that fails the test where it is fitted."""

    def fit(self, raw_documents, y=None):
        raise AssertionError("a stage was fitted before the settings were checked")

    def fit_transform(self, raw_documents, y=None):
        return self.fit(raw_documents)


@pytest.mark.parametrize("settings, message", [
    ({"weights": {"first": 1.0, "second": 2.0}},
     "weights={'first': 1.0, 'second': 2.0} must be a sequence .* of 2 finite, non-negative "
     "numbers"),
    ({"weights": [1.0, 2.0, 3.0]}, "of 2 finite, non-negative numbers"),
    ({"weights": [0.0, 0.0]}, "not all 0"),
    ({"searches": [("words", SimilaritySearch(NeverFitted())), ("vectors", SimilaritySearch())]},
     "The search 'vectors' \\(SimilaritySearch\\) must be a SimilaritySearch with a vectorizer"),
])
def test_the_settings_are_checked_before_any_stage_is_fitted(settings, message):
    search = HybridSearch([("words", SimilaritySearch(NeverFitted())),
                           ("more", SimilaritySearch(NeverFitted()))])
    with pytest.raises(ValueError, match=message):
        search.set_params(**settings).fit(DOCUMENTS)


def test_the_weights_are_scaled_to_sum_to_one():
    search = bm25_and_chars(normalization="minmax", n_neighbors=len(DOCUMENTS) - 1).fit(DOCUMENTS)
    expected = search.search(QUERIES, k=len(DOCUMENTS))
    for weights in ([1.0, 1.0], [3.0, 3.0], [0.5, 0.5]):
        got = search.set_params(weights=weights).search(QUERIES, k=len(DOCUMENTS))
        for got_part, expected_part in zip(got, expected):
            np.testing.assert_array_equal(got_part, expected_part)
    for weights in (None, [5.0, 1.0], [1.0, 5.0]):
        scores = search.set_params(weights=weights).search(QUERIES, k=len(DOCUMENTS))[0]
        assert scores.min() >= 0 and scores.max() <= 1
        assert (search.kneighbors()[0] >= 0).all()
        assert (search.kneighbors(QUERIES)[0] >= 0).all()


def test_with_a_reranker_the_first_k_up_to_rerank_k_are_one_list():
    search = bm25_and_chars(reranker=LengthReranker(), rerank_k=4, depth=2).fit(DOCUMENTS)
    longest = search.search(QUERIES, k=4)
    for k in (1, 2, 3):
        for got, expected in zip(search.search(QUERIES, k=k), longest):
            np.testing.assert_array_equal(got, expected[:, :k])
    # Past rerank_k, the reranker scores the fused top k (each stage ranking rerank_k at
    # least, 4 here): the list is its order of those.
    fused = bm25_and_chars(depth=4).fit(DOCUMENTS).search(QUERIES, k=6)[1]
    got = search.set_params(reranker=LengthReranker()).fit(DOCUMENTS).search(QUERIES, k=6)[1]
    for row, candidates in zip(got, fused):
        np.testing.assert_array_equal(row, sorted(candidates, key=lambda j: len(DOCUMENTS[j])))


def test_fuse_builds_nothing_of_the_corpus_width():
    rankings = random_rankings(np.random.default_rng(0), 6, 30, (7, 12), zeros=True)
    for fusion in ("rrf", "convex"):
        scores, indices = fuse(rankings, [1, 1], 10**12, fusion, k=40)
        assert indices.shape == (6, 40) and (indices < 10**12).all()


@pytest.mark.parametrize("settings", [{"fusion": "rrf"}, {"normalization": "minmax"},
                                      {"normalization": "zscore"}])
def test_depth_none_is_the_depth_of_the_corpus_size(settings, monkeypatch):
    from sklearn.decomposition import TruncatedSVD
    from sklearn.pipeline import make_pipeline

    corpus = random_corpus(np.random.default_rng(0), 40)
    queries = [*QUERIES, *corpus[:5], "no word of the corpus"]
    dense = make_pipeline(TfidfVectorizer(), TruncatedSVD(n_components=4, random_state=0))
    search = HybridSearch([("bm25", SimilaritySearch(BM25Vectorizer())),
                           ("dense", SimilaritySearch(dense))],
                          weights=[0.3, 0.7], **settings).fit(corpus)
    expected = search.set_params(depth=len(corpus)).search(queries, k=len(corpus))
    monkeypatch.setattr(_hybrid, "_BLOCK_VALUES", 3 * len(corpus))  # blocks of 3 queries
    for k in (1, 7, len(corpus)):
        scores, indices = search.set_params(depth=None).search(queries, k=k)
        np.testing.assert_allclose(scores, expected[0][:, :k], rtol=1e-5, atol=1e-7)
        # Where two documents' scores differ only by rounding, their order may too.
        same = indices == expected[1][:, :k]
        assert same.mean() > 0.95
        np.testing.assert_allclose(np.sort(expected[0][:, :k])[~same.all(axis=1)],
                                   np.sort(scores)[~same.all(axis=1)], rtol=1e-5)


def test_depth_none_differs_from_the_top_depth_only_by_its_statistics():
    # A document outside BM25's top 2 takes its floor at depth=2, its own score at None.
    search = bm25_and_chars(depth=2, normalization="minmax").fit(DOCUMENTS)
    top = search.search(["the cat in the park"], k=len(DOCUMENTS))
    everywhere = search.set_params(depth=None).search(["the cat in the park"],
                                                       k=len(DOCUMENTS))
    assert top[1].tolist() != everywhere[1].tolist()
    exact = [SimilaritySearch(vectorizer).fit(DOCUMENTS).search(["the cat in the park"],
                                                                k=len(DOCUMENTS))
             for vectorizer in (BM25Vectorizer(),
                                TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 4)))]
    fused = np.zeros(len(DOCUMENTS))
    for scores, indices in exact:
        fused[indices[0]] += 0.5 * (scores[0] - scores[0].min()) / np.ptp(scores[0])
    np.testing.assert_allclose(everywhere[0][0], np.sort(fused)[::-1], rtol=1e-6)


def _dense_words():
    from sklearn.decomposition import TruncatedSVD
    from sklearn.pipeline import make_pipeline

    return make_pipeline(TfidfVectorizer(), TruncatedSVD(n_components=3, random_state=0))


@pytest.mark.parametrize("stage, message", [
    (SimilaritySearch(BM25Vectorizer(), reranker=LengthReranker()), "a reranker of its own"),
    (SimilaritySearch(_dense_words(), backend="faiss"), "backend='faiss'"),
])
def test_depth_none_refuses_a_stage_that_ranks_only_its_top_k(stage, message):
    if "faiss" in message:
        pytest.importorskip("faiss")
    search = HybridSearch([("bm25", stage),
                           ("words", SimilaritySearch(TfidfVectorizer()))],
                          depth=None).fit(DOCUMENTS)
    with pytest.raises(ValueError, match=f"depth=None scores every document.*'bm25' "
                                         f"\\({message}\\)"):
        search.search(QUERIES, k=2)
