"""Tests for skbert.metrics: hand-computed cases, trec_eval conventions, and oracles."""

import math
import subprocess
import sys

import numpy as np
import pytest

from skbert.metrics import evaluate_retrieval, mrr_at_k, ndcg_at_k, recall_at_k

LOG2_3 = math.log2(3)  # discount at rank 2
LOG2_5 = math.log2(5)  # discount at rank 4


# --------------------------------------------------------------------------
# nDCG


def test_ndcg_graded_hand_computed():
    qrels = {"q": {"a": 3, "b": 2, "c": 0, "d": 1}}
    run = {"q": {"b": 0.9, "c": 0.8, "a": 0.7, "e": 0.6, "d": 0.5}}
    # ranking b, c, a, e, d with gains 2, 0, 3, 0, 1 (linear gains, not 2**rel - 1)
    # DCG@3  = 2/log2(2) + 0/log2(3) + 3/log2(4) = 2 + 1.5 = 3.5
    # IDCG@3 = 3/log2(2) + 2/log2(3) + 1/log2(4) = 3 + 2/log2(3) + 0.5
    assert ndcg_at_k(qrels, run, k=3) == pytest.approx(3.5 / (3.5 + 2 / LOG2_3))
    # DCG@5  = 3.5 + 0/log2(5) + 1/log2(6); IDCG@5 = IDCG@3 (only three gains)
    expected = (3.5 + 1 / math.log2(6)) / (3.5 + 2 / LOG2_3)
    assert ndcg_at_k(qrels, run, k=5) == pytest.approx(expected)
    # k=1: gain 2 at rank 1 against the ideal 3
    assert ndcg_at_k(qrels, run, k=1) == pytest.approx(2 / 3)


def test_ndcg_is_one_for_ideal_ranking_and_zero_without_relevant_hits():
    qrels = {"q": {"a": 2, "b": 1}}
    assert ndcg_at_k(qrels, {"q": {"a": 2.0, "b": 1.0, "x": 0.0}}, k=10) == 1.0
    assert ndcg_at_k(qrels, {"q": {"x": 2.0, "y": 1.0}}, k=10) == 0.0


def test_ndcg_zero_and_negative_relevance_give_no_gain():
    qrels = {"q": {"a": 1, "zero": 0, "neg": -1}}
    run = {"q": {"neg": 0.9, "zero": 0.8, "a": 0.7}}
    # gains 0, 0, 1 -> DCG = 1/log2(4) = 0.5; ideal uses only the positive 1 -> IDCG = 1
    assert ndcg_at_k(qrels, run, k=3) == pytest.approx(0.5)


def test_ndcg_k_larger_than_ranking():
    qrels = {"q": {"a": 1, "b": 1}}
    run = {"q": {"a": 0.5}}
    # DCG = 1; IDCG@100 = 1 + 1/log2(3) (two relevant docs, the ranking has only one)
    assert ndcg_at_k(qrels, run, k=100) == pytest.approx(1 / (1 + 1 / LOG2_3))


# --------------------------------------------------------------------------
# ties


def test_ties_break_by_doc_id_descending():
    qrels = {"q": {"a": 1}}
    run = {"q": {"a": 1.0, "b": 1.0, "c": 1.0}}
    # trec_eval order for equal scores: doc id descending -> c, b, a
    assert mrr_at_k(qrels, run, k=10) == pytest.approx(1 / 3)
    assert recall_at_k(qrels, run, k=2) == 0.0
    assert ndcg_at_k(qrels, run, k=3) == pytest.approx(1 / 2)  # 1/log2(4) / 1


def test_ties_do_not_depend_on_insertion_order():
    qrels = {"q": {"b": 2, "c": 1}}
    forward = {"q": {"a": 0.5, "b": 0.5, "c": 0.5, "d": 0.9}}
    backward = {"q": dict(reversed(list(forward["q"].items())))}
    for metric in (ndcg_at_k, recall_at_k, mrr_at_k):
        for k in (1, 2, 3, 4):
            assert metric(qrels, forward, k=k) == metric(qrels, backward, k=k)
    # order d, c, b, a: MRR = 1/2; nDCG@2 = (0 + 1/log2(3)) / (2 + 1/log2(3))
    assert mrr_at_k(qrels, forward) == 0.5
    assert ndcg_at_k(qrels, forward, k=2) == pytest.approx((1 / LOG2_3) / (2 + 1 / LOG2_3))


def test_higher_score_wins_over_doc_id():
    qrels = {"q": {"a": 1}}
    # "a" has the smaller id but the larger score: rank 1
    assert mrr_at_k(qrels, {"q": {"a": 0.6, "z": 0.5}}) == 1.0


def test_ties_between_unorderable_doc_ids_raise():
    with pytest.raises(ValueError, match=r"tied scores between doc ids that cannot be ordered"):
        mrr_at_k({"q": {"a": 1}}, {"q": {"a": 1.0, 7: 1.0}})
    # without a tie, mixed id types are fine
    assert mrr_at_k({"q": {"a": 1}}, {"q": {"a": 2.0, 7: 1.0}}) == 1.0


# --------------------------------------------------------------------------
# averaging over queries


def test_query_missing_from_run_scores_zero():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    run = {"q1": {"a": 1.0}}
    # q1 perfect (1), q2 missing (0): mean 0.5 for every metric
    for metric in (ndcg_at_k, recall_at_k, mrr_at_k):
        assert metric(qrels, run, k=10) == 0.5
    # an empty ranking counts like a missing one
    assert mrr_at_k(qrels, {"q1": {"a": 1.0}, "q2": {}}) == 0.5


def test_queries_only_in_run_are_ignored():
    qrels = {"q1": {"a": 1}}
    run = {"q1": {"a": 1.0}, "extra": {"x": 1.0}}
    assert ndcg_at_k(qrels, run) == 1.0


def test_queries_without_relevant_docs_are_left_out_of_the_mean():
    qrels = {"q1": {"a": 1}, "q2": {"b": 0, "c": -1}, "q3": {}}
    run = {"q1": {"a": 1.0}, "q2": {"b": 1.0}}
    # only q1 counts: mean over one query = 1, not 1/3
    for metric in (ndcg_at_k, recall_at_k, mrr_at_k):
        assert metric(qrels, run) == 1.0


def test_returns_python_float():
    value = ndcg_at_k({"q": {"a": 1}}, {"q": {"a": np.float32(0.5)}})
    assert type(value) is float


# --------------------------------------------------------------------------
# recall and MRR


def test_recall_hand_computed():
    qrels = {"q1": {"a": 1, "b": 2, "c": 1, "x": 0}, "q2": {"d": 1}}
    run = {"q1": {"a": 0.9, "x": 0.8, "b": 0.7, "e": 0.6}, "q2": {"e": 0.9, "d": 0.1}}
    # q1 has 3 relevant docs (x has relevance 0). top2 = a, x -> 1/3; top3 adds b -> 2/3
    # q2: d is rank 2 -> 0 at k=1, 1 at k>=2
    assert recall_at_k(qrels, run, k=1) == pytest.approx((1 / 3 + 0) / 2)
    assert recall_at_k(qrels, run, k=2) == pytest.approx((1 / 3 + 1) / 2)
    assert recall_at_k(qrels, run, k=3) == pytest.approx((2 / 3 + 1) / 2)
    # k beyond the ranking: c is never retrieved, q1 stays at 2/3
    assert recall_at_k(qrels, run, k=1000) == pytest.approx((2 / 3 + 1) / 2)


def test_recall_counts_graded_relevance_as_binary():
    qrels = {"q": {"a": 3, "b": 1}}
    # one of two relevant docs found, whatever its grade
    assert recall_at_k(qrels, {"q": {"a": 1.0}}) == 0.5
    assert recall_at_k(qrels, {"q": {"b": 1.0}}) == 0.5


def test_mrr_hand_computed():
    qrels = {"q1": {"c": 1}, "q2": {"a": 0, "b": 2}, "q3": {"z": 1}}
    run = {
        "q1": {"a": 0.9, "b": 0.8, "c": 0.7},  # c at rank 3 -> 1/3
        "q2": {"a": 0.9, "b": 0.8},  # a has relevance 0: first relevant is b at rank 2 -> 1/2
        "q3": {"a": 0.9},  # z never retrieved -> 0
    }
    assert mrr_at_k(qrels, run, k=10) == pytest.approx((1 / 3 + 1 / 2 + 0) / 3)
    # k=2 cuts q1's hit at rank 3
    assert mrr_at_k(qrels, run, k=2) == pytest.approx((0 + 1 / 2 + 0) / 3)
    assert mrr_at_k(qrels, run, k=1) == 0.0


def test_mrr_uses_only_the_first_relevant_doc():
    qrels = {"q": {"b": 1, "c": 1}}
    run = {"q": {"a": 0.9, "b": 0.8, "c": 0.7}}
    assert mrr_at_k(qrels, run) == 0.5


def test_integer_doc_ids_and_numpy_scalars():
    qrels = {0: {10: 1, 11: np.int64(2)}}
    run = {0: {10: np.float64(0.2), 11: np.float32(0.9), 12: 0.1}}
    # ranking 11, 10, 12: ideal order -> nDCG 1
    assert ndcg_at_k(qrels, run, k=2) == pytest.approx(1.0)
    assert mrr_at_k(qrels, run) == 1.0


# --------------------------------------------------------------------------
# validation of the metric functions


@pytest.mark.parametrize("metric", [ndcg_at_k, recall_at_k, mrr_at_k])
@pytest.mark.parametrize("k", [0, -1, 1.5, "10", None, True])
def test_invalid_k(metric, k):
    with pytest.raises(ValueError, match=r"k must be an integer >= 1, got"):
        metric({"q": {"a": 1}}, {"q": {"a": 1.0}}, k=k)


def test_numpy_integer_k_is_accepted():
    assert ndcg_at_k({"q": {"a": 1}}, {"q": {"a": 1.0}}, k=np.int64(3)) == 1.0


@pytest.mark.parametrize("metric", [ndcg_at_k, recall_at_k, mrr_at_k])
def test_empty_qrels(metric):
    with pytest.raises(ValueError, match=r"qrels is empty"):
        metric({}, {"q": {"a": 1.0}})


def test_qrels_without_any_relevant_document():
    with pytest.raises(ValueError, match=r"None of the 2 queries in qrels has a relevant document"):
        ndcg_at_k({"q1": {"a": 0}, "q2": {}}, {"q1": {"a": 1.0}})


def test_malformed_qrels_and_run():
    with pytest.raises(ValueError, match=r"qrels must be a mapping"):
        ndcg_at_k([("q", "a", 1)], {})
    with pytest.raises(ValueError, match=r"qrels\['q'\] must be a mapping"):
        ndcg_at_k({"q": ["a"]}, {})
    with pytest.raises(ValueError, match=r"qrels\['q'\]\['a'\] must be a real number, got 'yes'"):
        ndcg_at_k({"q": {"a": "yes"}}, {})
    with pytest.raises(ValueError, match=r"run must be a mapping"):
        ndcg_at_k({"q": {"a": 1}}, [("q", "a", 1.0)])
    with pytest.raises(ValueError, match=r"run\['q'\] must be a mapping"):
        ndcg_at_k({"q": {"a": 1}}, {"q": ["a"]})
    with pytest.raises(ValueError, match=r"run\['q'\]\['a'\] must not be NaN"):
        ndcg_at_k({"q": {"a": 1}}, {"q": {"a": float("nan")}})
    with pytest.raises(ValueError, match=r"run\['q'\]\['a'\] must be a real number, got None"):
        ndcg_at_k({"q": {"a": 1}}, {"q": {"a": None}})


# --------------------------------------------------------------------------
# oracles on random data


def _random_judgments(rng, n_queries, n_docs, with_ties):
    """Random graded qrels (some 0 and negative) and runs over string ids."""
    qrels, run = {}, {}
    for query in range(n_queries):
        query_id = f"q{query}"
        docs = [f"d{doc}" for doc in range(n_docs)]
        judged = rng.choice(n_docs, size=rng.integers(1, n_docs), replace=False)
        qrels[query_id] = {docs[doc]: int(rng.integers(-1, 4)) for doc in judged}
        if query % 7 == 3:
            continue  # missing from the run
        retrieved = rng.choice(n_docs, size=rng.integers(1, n_docs), replace=False)
        scores = rng.random(retrieved.size)
        if with_ties:
            scores = np.round(scores, 1)  # many ties, broken by doc id
        pairs = zip(retrieved, scores, strict=True)
        run[query_id] = {docs[doc]: float(score) for doc, score in pairs}
    return qrels, run


def test_ndcg_matches_sklearn_ndcg_score_without_ties():
    from sklearn.metrics import ndcg_score

    rng = np.random.default_rng(0)
    n_queries, n_docs = 40, 25
    relevance = rng.integers(0, 4, size=(n_queries, n_docs))
    relevance[:, 0] = np.maximum(relevance[:, 0], 1)  # sklearn keeps all-zero rows; we skip them
    scores = rng.random((n_queries, n_docs))  # continuous: no ties, so no tie averaging
    qrels = {f"q{i}": {f"d{j}": int(relevance[i, j]) for j in range(n_docs)}
             for i in range(n_queries)}
    run = {f"q{i}": {f"d{j}": float(scores[i, j]) for j in range(n_docs)}
           for i in range(n_queries)}
    for k in (1, 3, 10, n_docs, n_docs + 5):
        expected = ndcg_score(relevance, scores, k=k)
        assert ndcg_at_k(qrels, run, k=k) == pytest.approx(expected, abs=1e-6)


def test_ndcg_recall_mrr_match_pytrec_eval():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = np.random.default_rng(42)
    cuts = (1, 3, 5, 10, 30)
    for with_ties in (False, True):
        qrels, run = _random_judgments(rng, n_queries=60, n_docs=20, with_ties=with_ties)
        measures = {f"ndcg_cut.{k}" for k in cuts} | {f"recall.{k}" for k in cuts}
        measures.add("recip_rank")
        per_query = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
        # our convention: mean over queries with a relevant doc, 0 when absent from the run
        judged = [q for q, docs in qrels.items() if any(rel > 0 for rel in docs.values())]

        def expected(measure, judged=judged, per_query=per_query):
            return np.mean([per_query.get(q, {}).get(measure, 0.0) for q in judged])

        for k in cuts:
            assert ndcg_at_k(qrels, run, k=k) == pytest.approx(expected(f"ndcg_cut_{k}"),
                                                               abs=1e-6)
            assert recall_at_k(qrels, run, k=k) == pytest.approx(expected(f"recall_{k}"),
                                                                 abs=1e-6)
        # trec_eval's recip_rank has no cut-off: compare with k past every ranking
        assert mrr_at_k(qrels, run, k=1000) == pytest.approx(expected("recip_rank"), abs=1e-6)


def test_mrr_at_k_matches_naive_loop():
    rng = np.random.default_rng(7)
    qrels, run = _random_judgments(rng, n_queries=50, n_docs=15, with_ties=True)
    for k in (1, 2, 5, 20):
        values = []
        for query_id, judgments in qrels.items():
            if not any(rel > 0 for rel in judgments.values()):
                continue
            # doc id descending among ties: sort ids descending first, then stable sort by score
            ranking = sorted(sorted(run.get(query_id, {}).items(), reverse=True),
                             key=lambda item: -item[1])
            value = 0.0
            for rank, (doc_id, _) in enumerate(ranking[:k], start=1):
                if judgments.get(doc_id, 0) > 0:
                    value = 1 / rank
                    break
            values.append(value)
        assert mrr_at_k(qrels, run, k=k) == pytest.approx(np.mean(values))


# --------------------------------------------------------------------------
# evaluate_retrieval


class FakeSearch:
    """A fitted search stand-in: fixed rankings per query text, records its calls."""

    def __init__(self, rankings, n_samples_fit=None):
        self.rankings = rankings  # text -> list of (corpus index, score), best first
        self.calls = []
        if n_samples_fit is not None:
            self.n_samples_fit_ = n_samples_fit

    def search(self, texts, k):
        self.calls.append((list(texts), k))
        scores = np.array([[score for _, score in self.rankings[t][:k]] for t in texts])
        indices = np.array([[index for index, _ in self.rankings[t][:k]] for t in texts])
        return scores, indices


CORPUS_IDS = ["d0", "d1", "d2", "d3", "d4"]
RANKINGS = {
    "first": [(2, 0.9), (0, 0.8), (4, 0.7), (1, 0.6), (3, 0.5)],  # d2 d0 d4 d1 d3
    "second": [(1, 0.9), (3, 0.8), (0, 0.7), (2, 0.6), (4, 0.5)],  # d1 d3 d0 d2 d4
    "unjudged": [(0, 0.9), (1, 0.8), (2, 0.7), (3, 0.6), (4, 0.5)],
}
QUERIES = {"q1": "first", "q2": "second", "q3": "unjudged"}
QRELS = {"q1": {"d0": 2, "d4": 1}, "q2": {"d4": 1}}


def test_evaluate_retrieval_hand_computed():
    search = FakeSearch(RANKINGS)
    result = evaluate_retrieval(search, QUERIES, QRELS, CORPUS_IDS, k_values=(1, 3))
    # one search call, only the judged queries, k = max(k_values)
    assert search.calls == [(["first", "second"], 3)]
    assert list(result) == ["ndcg@1", "ndcg@3", "recall@1", "recall@3", "mrr@1", "mrr@3"]
    # q1 top3 d2 d0 d4, gains 0 2 1: DCG = 2/log2(3) + 1/2; IDCG = 2 + 1/log2(3)
    # q2 top3 d1 d3 d0: no hit -> 0 for every metric
    assert result["ndcg@1"] == 0.0
    assert result["ndcg@3"] == pytest.approx((2 / LOG2_3 + 0.5) / (2 + 1 / LOG2_3) / 2)
    assert result["recall@1"] == 0.0
    assert result["recall@3"] == pytest.approx((1 + 0) / 2)  # q1 finds both
    assert result["mrr@1"] == 0.0
    assert result["mrr@3"] == pytest.approx((1 / 2 + 0) / 2)


def test_evaluate_retrieval_matches_metrics_on_the_run():
    search = FakeSearch(RANKINGS)
    result = evaluate_retrieval(search, QUERIES, QRELS, CORPUS_IDS, k_values=[5, 2])
    run = {qid: {CORPUS_IDS[i]: s for i, s in RANKINGS[QUERIES[qid]]} for qid in QRELS}
    for k in (5, 2):
        assert result[f"ndcg@{k}"] == ndcg_at_k(QRELS, run, k=k)
        assert result[f"recall@{k}"] == recall_at_k(QRELS, run, k=k)
        assert result[f"mrr@{k}"] == mrr_at_k(QRELS, run, k=k)
    # q2's only relevant doc d4 is at rank 5
    assert result["mrr@5"] == pytest.approx((1 / 2 + 1 / 5) / 2)


def test_evaluate_retrieval_clamps_k_to_corpus_size_and_accepts_pairs():
    search = FakeSearch(RANKINGS, n_samples_fit=5)
    pairs = [("q1", "first"), ("q2", "second")]
    result = evaluate_retrieval(search, pairs, QRELS, tuple(CORPUS_IDS), k_values=(1, 10, 100))
    assert search.calls[0][1] == 5  # never asks for more neighbors than corpus rows
    # the whole corpus is ranked, so every relevant doc is found by k=10
    assert result["recall@10"] == result["recall@100"] == 1.0
    assert result["mrr@100"] == pytest.approx((1 / 2 + 1 / 5) / 2)


def test_evaluate_retrieval_duplicate_doc_ids_take_the_best_row():
    # rows 0 and 3 are passages of the same document "A"
    doc_ids = ["A", "B", "C", "A"]
    search = FakeSearch({"t": [(1, 0.9), (3, 0.8), (0, 0.4), (2, 0.1)]})
    result = evaluate_retrieval(search, {"q": "t"}, {"q": {"A": 1}}, doc_ids, k_values=(2, 4))
    # run: B 0.9, A 0.8 (best of its rows), C 0.1 -> A at rank 2
    assert result["mrr@2"] == 0.5
    assert result["recall@4"] == 1.0


def test_evaluate_retrieval_rebreaks_tied_scores_by_doc_id():
    # the search returns a then b at equal scores; trec_eval order is b then a
    search = FakeSearch({"t": [(0, 0.5), (1, 0.5)]})
    result = evaluate_retrieval(search, {"q": "t"}, {"q": {"a": 1}}, ["a", "b"], k_values=(1, 2))
    assert result["mrr@1"] == 0.0
    assert result["mrr@2"] == 0.5


def test_evaluate_retrieval_single_int_k_values():
    result = evaluate_retrieval(FakeSearch(RANKINGS), QUERIES, QRELS, CORPUS_IDS, k_values=3)
    assert sorted(result) == ["mrr@3", "ndcg@3", "recall@3"]


@pytest.mark.parametrize("k_values, message", [
    ((), r"k_values is empty"),
    ((1, 0), r"every k in k_values must be an integer >= 1, got 0"),
    (None, r"k_values must be a sequence of integers >= 1, got None"),
])
def test_evaluate_retrieval_invalid_k_values(k_values, message):
    with pytest.raises(ValueError, match=message):
        evaluate_retrieval(FakeSearch(RANKINGS), QUERIES, QRELS, CORPUS_IDS, k_values=k_values)


def test_evaluate_retrieval_invalid_inputs():
    search = FakeSearch(RANKINGS)
    with pytest.raises(ValueError, match=r"qrels is empty"):
        evaluate_retrieval(search, QUERIES, {}, CORPUS_IDS)
    with pytest.raises(ValueError, match=r"doc_ids is empty"):
        evaluate_retrieval(search, QUERIES, QRELS, [])
    with pytest.raises(ValueError, match=r"doc_ids must be a sequence .* got str"):
        evaluate_retrieval(search, QUERIES, QRELS, "d0 d1")
    with pytest.raises(ValueError, match=r"1 judged queries of qrels have no text in queries"):
        evaluate_retrieval(search, {"q1": "first"}, QRELS, CORPUS_IDS)
    with pytest.raises(ValueError, match=r"The text of query 'q1' must be a str, got NoneType"):
        evaluate_retrieval(search, {"q1": None, "q2": "second"}, QRELS, CORPUS_IDS)
    with pytest.raises(ValueError, match=r"queries\[1\] must be a \(query_id, text\) pair"):
        evaluate_retrieval(search, [("q1", "first"), "q2"], QRELS, CORPUS_IDS)
    with pytest.raises(ValueError, match=r"queries has query id 'q1' more than once"):
        evaluate_retrieval(search, [("q1", "first"), ("q1", "second")], QRELS, CORPUS_IDS)
    with pytest.raises(ValueError, match=r"queries must be a mapping .* got a str"):
        evaluate_retrieval(search, "first", QRELS, CORPUS_IDS)
    with pytest.raises(TypeError, match=r"search must be a fitted search object .* got list"):
        evaluate_retrieval([], QUERIES, QRELS, CORPUS_IDS)


def test_evaluate_retrieval_doc_ids_length_mismatch():
    # known corpus size (n_samples_fit_, as NearestNeighbors has)
    search = FakeSearch(RANKINGS, n_samples_fit=5)
    with pytest.raises(ValueError, match=r"doc_ids has 4 entries but the search object was "
                                         r"fitted on 5 documents"):
        evaluate_retrieval(search, QUERIES, QRELS, CORPUS_IDS[:4])
    # unknown corpus size: caught when an index falls outside doc_ids
    with pytest.raises(ValueError, match=r"search returned corpus index 4 for query 'q1', "
                                         r"but doc_ids has 4 entries"):
        evaluate_retrieval(FakeSearch(RANKINGS), QUERIES, QRELS, CORPUS_IDS[:4])


def test_evaluate_retrieval_refuses_qrels_that_judge_no_corpus_document():
    # int row ids against BEIR's str doc ids would score 0.0, as if the search found nothing.
    search = FakeSearch(RANKINGS)
    with pytest.raises(ValueError, match=r"^qrels judge documents such as 'd0' \(str\); none "
                                         r"is among doc_ids, such as 0 \(int\)"):
        evaluate_retrieval(search, QUERIES, QRELS, list(range(5)))
    assert search.calls == []  # refused before searching
    with pytest.raises(ValueError, match=r"such as 0 \(int\); none is among doc_ids, such as "
                                         r"'0' \(str\)"):
        evaluate_retrieval(search, QUERIES, {"q1": {0: 1, 4: 0}}, [str(i) for i in range(5)])
    # Some judged documents outside the corpus are normal (a subset of it was indexed).
    partial = evaluate_retrieval(search, QUERIES, {"q1": {"d0": 1, "gone": 1}}, CORPUS_IDS,
                                 k_values=(5,))
    assert partial["recall@5"] == 0.5


def test_evaluate_retrieval_malformed_search_output():
    class WrongRows:
        def search(self, texts, k):
            return np.zeros((1, k)), np.zeros((1, k), dtype=int)

    class TooMany:
        def search(self, texts, k):
            return np.zeros((len(texts), k + 1)), np.zeros((len(texts), k + 1), dtype=int)

    class FloatIndices:
        def search(self, texts, k):
            return np.zeros((len(texts), k)), np.zeros((len(texts), k))

    with pytest.raises(ValueError, match=r"search returned 1 score rows and 1 index rows for 2"):
        evaluate_retrieval(WrongRows(), QUERIES, QRELS, CORPUS_IDS, k_values=(2,))
    with pytest.raises(ValueError, match=r"expected as many of each, at most k=2"):
        evaluate_retrieval(TooMany(), QUERIES, QRELS, CORPUS_IDS, k_values=(2,))
    with pytest.raises(ValueError, match=r"non-integer indices for query 'q1'"):
        evaluate_retrieval(FloatIndices(), QUERIES, QRELS, CORPUS_IDS, k_values=(2,))


# --------------------------------------------------------------------------
# packaging


def test_import_does_not_load_torch_or_transformers():
    code = ("import sys, skbert.metrics; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout
    assert output.strip() == "[]"
