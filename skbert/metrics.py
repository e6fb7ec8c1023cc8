"""Ranking metrics for evaluating retrieval, as trec_eval and BEIR define them.

The functions take plain dictionaries, the format of BEIR and pytrec_eval:

- ``qrels = {query_id: {doc_id: relevance}}``: the relevance judgments. A
  document is relevant when its relevance is ``> 0``; judgments ``<= 0`` are
  kept as "judged not relevant" and weigh exactly like unjudged documents.
- ``run = {query_id: {doc_id: score}}``: what a system retrieved, higher score
  is better.

Conventions shared by every metric (they follow trec_eval, which BEIR calls
through pytrec_eval):

- **Ranking.** Each query's run is sorted by score, descending; equal scores
  are ordered by doc id, descending (trec_eval compares doc ids as strings, so
  use string ids to reproduce its order exactly). The order is therefore
  deterministic and does not depend on dictionary insertion order.
- **Averaging.** The result is the mean over the queries of ``qrels`` that
  have at least one relevant document. Queries with no relevant document are
  left out (every metric is undefined or trivially 0 for them); a query that
  is missing from ``run``, or has an empty run, scores 0; queries that appear
  only in ``run`` are ignored.
- **Cut-off.** Only the top ``k`` documents of the ranking count; a ranking
  shorter than ``k`` is used as it is.

:func:`evaluate_retrieval` runs a fitted search object (such as
:class:`skbert.SimilaritySearch`) over a query set and reports all three
metrics at several cut-offs.

This module is pure Python and numpy: importing it does not import torch or
transformers.
"""

import heapq
import math
import numbers
from collections.abc import Mapping

import numpy as np

__all__ = ["ndcg_at_k", "recall_at_k", "mrr_at_k", "evaluate_retrieval"]


# --------------------------------------------------------------------------
# validation


def _check_k(k, name="k"):
    """Return ``k`` as an int, or raise if it is not an integer >= 1."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {k!r}.")
    return int(k)


def _check_number(value, what):
    """Raise unless ``value`` is a real, non-NaN number; ``what`` names it in the message."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{what} must be a real number, got {value!r} of type "
                         f"{type(value).__name__}.")
    if math.isnan(value):
        raise ValueError(f"{what} must not be NaN.")


def _check_qrels(qrels):
    """Validate ``qrels``; return the queries that have a relevant doc (relevance > 0)."""
    if not isinstance(qrels, Mapping):
        raise ValueError("qrels must be a mapping {query_id: {doc_id: relevance}}, got "
                         f"{type(qrels).__name__}.")
    if len(qrels) == 0:
        raise ValueError("qrels is empty: at least one query with a relevant document "
                         "(relevance > 0) is needed.")
    judged = {}
    for query_id, judgments in qrels.items():
        if not isinstance(judgments, Mapping):
            raise ValueError(f"qrels[{query_id!r}] must be a mapping {{doc_id: relevance}}, "
                             f"got {type(judgments).__name__}.")
        for doc_id, relevance in judgments.items():
            _check_number(relevance, f"qrels[{query_id!r}][{doc_id!r}]")
        if any(relevance > 0 for relevance in judgments.values()):
            judged[query_id] = judgments
    if not judged:
        raise ValueError(f"None of the {len(qrels)} queries in qrels has a relevant document "
                         "(relevance > 0); the metrics are undefined.")
    return judged


def _check_run(run):
    """Validate ``run`` ({query_id: {doc_id: score}})."""
    if not isinstance(run, Mapping):
        raise ValueError("run must be a mapping {query_id: {doc_id: score}}, got "
                         f"{type(run).__name__}.")
    for query_id, scores in run.items():
        if not isinstance(scores, Mapping):
            raise ValueError(f"run[{query_id!r}] must be a mapping {{doc_id: score}}, "
                             f"got {type(scores).__name__}.")
        for doc_id, score in scores.items():
            _check_number(score, f"run[{query_id!r}][{doc_id!r}]")


# --------------------------------------------------------------------------
# per-query metrics


def _top_k(scores, k, query_id):
    """Doc ids of the ``k`` best documents: score descending, then doc id descending."""
    try:
        # nlargest on (score, doc_id) is sorted(..., reverse=True)[:k]: ties
        # fall to the larger doc id, as in trec_eval.
        best = heapq.nlargest(k, ((score, doc_id) for doc_id, score in scores.items()))
    except TypeError as error:
        raise ValueError(
            f"run[{query_id!r}] has tied scores between doc ids that cannot be ordered "
            f"({error}); use doc ids of one type (str, as in trec_eval) to break ties."
        ) from None
    return [doc_id for _, doc_id in best]


def _dcg(gains):
    """Discounted cumulative gain: sum of gain / log2(rank + 1), ranks from 1."""
    gains = np.asarray(gains, dtype=np.float64)
    return float(np.sum(gains / np.log2(np.arange(2, gains.size + 2))))


def _ndcg(judgments, ranking, k):
    gains = [max(judgments.get(doc_id, 0), 0) for doc_id in ranking]
    ideal = sorted((relevance for relevance in judgments.values() if relevance > 0),
                   reverse=True)[:k]
    return _dcg(gains) / _dcg(ideal)


def _recall(judgments, ranking, k):
    n_relevant = sum(1 for relevance in judgments.values() if relevance > 0)
    n_found = sum(1 for doc_id in ranking if judgments.get(doc_id, 0) > 0)
    return n_found / n_relevant


def _reciprocal_rank(judgments, ranking, k):
    for rank, doc_id in enumerate(ranking, start=1):
        if judgments.get(doc_id, 0) > 0:
            return 1.0 / rank
    return 0.0


def _mean_over_queries(qrels, run, k, per_query):
    """Validate, rank each query's run, and average ``per_query`` over the judged queries."""
    k = _check_k(k)
    judged = _check_qrels(qrels)
    _check_run(run)
    values = []
    for query_id, judgments in judged.items():
        ranking = _top_k(run.get(query_id, {}), k, query_id)
        values.append(per_query(judgments, ranking, k))
    return float(np.mean(values))


# --------------------------------------------------------------------------
# public metrics


def ndcg_at_k(qrels, run, k=10):
    """Normalized discounted cumulative gain at rank ``k``, averaged over queries.

    For one query, with the run ranked by score (descending, ties by doc id
    descending) and cut at ``k``::

        DCG@k  = sum over ranks r <= k of gain(doc at r) / log2(r + 1)
        nDCG@k = DCG@k / IDCG@k

    where the gain of a document is its relevance in ``qrels`` (linear gains,
    as trec_eval's ``ndcg_cut``; not ``2**rel - 1``), 0 when the relevance is
    ``<= 0`` or the document is unjudged, and ``IDCG@k`` is the DCG of the
    query's positive relevances sorted in descending order, cut at ``k``.

    Parameters
    ----------
    qrels : mapping of query id to mapping of doc id to relevance
        Relevance judgments, ``{query_id: {doc_id: relevance}}``. Relevances
        may be graded (any real number); only those ``> 0`` are gains.
    run : mapping of query id to mapping of doc id to score
        Retrieved documents, ``{query_id: {doc_id: score}}``; higher scores
        rank first.
    k : int, default=10
        Cut-off rank, ``>= 1``. A ranking shorter than ``k`` is used whole.

    Returns
    -------
    score : float
        Mean nDCG@k over the queries of ``qrels`` that have at least one
        relevant document, in ``[0, 1]``. A query missing from ``run`` counts
        as 0; queries only in ``run`` are ignored.

    Raises
    ------
    ValueError
        If ``k`` is not an integer >= 1, if ``qrels`` is empty or has no
        relevant document at all, or if a relevance or score is not a real
        number (or is NaN).

    See Also
    --------
    recall_at_k : Fraction of the relevant documents found in the top ``k``.
    mrr_at_k : Reciprocal rank of the first relevant document.
    sklearn.metrics.ndcg_score : The same gain and discount on dense arrays
        (it averages over tied scores instead of breaking ties).

    Examples
    --------
    >>> from skbert.metrics import ndcg_at_k
    >>> qrels = {"q1": {"d1": 2, "d3": 1}}
    >>> run = {"q1": {"d1": 0.9, "d2": 0.8, "d3": 0.7}}
    >>> # DCG = 2/log2(2) + 0 + 1/log2(4) = 2.5; IDCG = 2 + 1/log2(3)
    >>> round(ndcg_at_k(qrels, run, k=3), 4)
    0.9502
    >>> ndcg_at_k(qrels, {"q1": {"d1": 0.9, "d3": 0.7}}, k=3)
    1.0
    """
    return _mean_over_queries(qrels, run, k, _ndcg)


def recall_at_k(qrels, run, k=10):
    """Recall at rank ``k``, averaged over queries.

    For one query: the number of relevant documents (relevance ``> 0``) among
    the top ``k`` of the run, divided by the number of relevant documents in
    ``qrels`` for that query. This is trec_eval's ``recall_k``, which BEIR
    reports as ``Recall@k``; it stays below 1 when a query has more than ``k``
    relevant documents.

    Parameters
    ----------
    qrels : mapping of query id to mapping of doc id to relevance
        Relevance judgments, ``{query_id: {doc_id: relevance}}``. A document
        is relevant when its relevance is ``> 0``.
    run : mapping of query id to mapping of doc id to score
        Retrieved documents, ``{query_id: {doc_id: score}}``; higher scores
        rank first, ties go to the larger doc id.
    k : int, default=10
        Cut-off rank, ``>= 1``.

    Returns
    -------
    score : float
        Mean recall@k over the queries of ``qrels`` that have at least one
        relevant document, in ``[0, 1]``. A query missing from ``run`` counts
        as 0; queries only in ``run`` are ignored.

    Raises
    ------
    ValueError
        If ``k`` is not an integer >= 1, if ``qrels`` is empty or has no
        relevant document at all, or if a relevance or score is not a real
        number (or is NaN).

    See Also
    --------
    ndcg_at_k : Graded, position-discounted quality of the top ``k``.
    mrr_at_k : Reciprocal rank of the first relevant document.

    Examples
    --------
    >>> from skbert.metrics import recall_at_k
    >>> qrels = {"q1": {"d1": 1, "d3": 1, "d9": 1}, "q2": {"d2": 1}}
    >>> run = {"q1": {"d1": 0.9, "d2": 0.8, "d3": 0.7}, "q2": {"d1": 0.5, "d2": 0.4}}
    >>> # q1: 2 of 3 relevant in the top 3; q2: 0 of 1 in the top 1
    >>> round(recall_at_k(qrels, run, k=3), 4)
    0.8333
    >>> round(recall_at_k(qrels, run, k=1), 4)
    0.1667
    """
    return _mean_over_queries(qrels, run, k, _recall)


def mrr_at_k(qrels, run, k=10):
    """Mean reciprocal rank at cut-off ``k``.

    For one query: ``1 / rank`` of the highest-ranked relevant document
    (relevance ``> 0``) if it is within the top ``k``, else 0. Ranks start at
    1; the run is ranked by score descending, ties by doc id descending.

    Parameters
    ----------
    qrels : mapping of query id to mapping of doc id to relevance
        Relevance judgments, ``{query_id: {doc_id: relevance}}``. A document
        is relevant when its relevance is ``> 0``.
    run : mapping of query id to mapping of doc id to score
        Retrieved documents, ``{query_id: {doc_id: score}}``; higher scores
        rank first.
    k : int, default=10
        Cut-off rank, ``>= 1``.

    Returns
    -------
    score : float
        Mean reciprocal rank over the queries of ``qrels`` that have at least
        one relevant document, in ``[0, 1]``. A query missing from ``run``
        counts as 0; queries only in ``run`` are ignored.

    Raises
    ------
    ValueError
        If ``k`` is not an integer >= 1, if ``qrels`` is empty or has no
        relevant document at all, or if a relevance or score is not a real
        number (or is NaN).

    See Also
    --------
    ndcg_at_k : Graded, position-discounted quality of the top ``k``.
    recall_at_k : Fraction of the relevant documents found in the top ``k``.

    Examples
    --------
    >>> from skbert.metrics import mrr_at_k
    >>> qrels = {"q1": {"d3": 1}, "q2": {"d1": 1}}
    >>> run = {"q1": {"d1": 0.9, "d2": 0.8, "d3": 0.7}, "q2": {"d1": 0.5, "d2": 0.4}}
    >>> # q1: first relevant at rank 3 -> 1/3; q2: rank 1 -> 1
    >>> round(mrr_at_k(qrels, run, k=10), 4)
    0.6667
    >>> mrr_at_k(qrels, run, k=2)
    0.5
    """
    return _mean_over_queries(qrels, run, k, _reciprocal_rank)


# --------------------------------------------------------------------------
# end-to-end evaluation of a search object


_METRICS = (("ndcg", ndcg_at_k), ("recall", recall_at_k), ("mrr", mrr_at_k))


def _check_k_values(k_values):
    if isinstance(k_values, numbers.Integral) and not isinstance(k_values, bool):
        k_values = (k_values,)
    try:
        k_values = list(k_values)
    except TypeError:
        raise ValueError(f"k_values must be a sequence of integers >= 1, got {k_values!r}.")\
            from None
    if not k_values:
        raise ValueError("k_values is empty: give at least one cut-off, e.g. (1, 10, 100).")
    checked = [_check_k(k, name="every k in k_values") for k in k_values]
    return list(dict.fromkeys(checked))


def _check_queries(queries):
    """Return ``{query_id: text}`` from a mapping or a sequence of (query_id, text) pairs."""
    if isinstance(queries, Mapping):
        pairs = list(queries.items())
    elif isinstance(queries, str | bytes):
        raise ValueError("queries must be a mapping {query_id: text} or a sequence of "
                         "(query_id, text) pairs, got a str.")
    else:
        try:
            pairs = list(queries)
        except TypeError:
            raise ValueError("queries must be a mapping {query_id: text} or a sequence of "
                             f"(query_id, text) pairs, got {type(queries).__name__}.") from None
        for position, pair in enumerate(pairs):
            if isinstance(pair, str) or not hasattr(pair, "__len__") or len(pair) != 2:
                raise ValueError(f"queries[{position}] must be a (query_id, text) pair, "
                                 f"got {pair!r}.")
        pairs = [tuple(pair) for pair in pairs]
    texts = {}
    for query_id, text in pairs:
        if query_id in texts:
            raise ValueError(f"queries has query id {query_id!r} more than once.")
        if not isinstance(text, str):
            raise ValueError(f"The text of query {query_id!r} must be a str, got "
                             f"{type(text).__name__}.")
        texts[query_id] = text
    return texts


def _check_doc_ids(doc_ids):
    if isinstance(doc_ids, str | bytes | Mapping) or not hasattr(doc_ids, "__len__"):
        raise ValueError("doc_ids must be a sequence giving the doc id of each corpus row, "
                         f"got {type(doc_ids).__name__}.")
    doc_ids = list(doc_ids)
    if not doc_ids:
        raise ValueError("doc_ids is empty: the search corpus needs at least one document.")
    return doc_ids


def _check_judged_in_corpus(judged, doc_ids):
    """Refuse qrels none of whose judged documents is among ``doc_ids``: every score would be
    0.0 for ids of two kinds (BEIR's str ``"12"`` against a row number 12), not for the search.
    Some judged documents outside the corpus are normal (a part of a collection indexed)."""
    judged_ids = [doc_id for judgments in judged.values() for doc_id in judgments]
    if set(doc_ids).isdisjoint(judged_ids):
        ours, theirs = judged_ids[0], doc_ids[0]
        raise ValueError(
            f"qrels judge documents such as {ours!r} ({type(ours).__name__}); none is among "
            f"doc_ids, such as {theirs!r} ({type(theirs).__name__}): give doc_ids as the ids "
            "that qrels uses, one per corpus row."
        )


def _run_from_search(scores, indices, query_ids, doc_ids, k):
    """Turn ``search`` output into a run dict, checking shapes and index ranges."""
    if len(scores) != len(query_ids) or len(indices) != len(query_ids):
        raise ValueError(f"search returned {len(scores)} score rows and {len(indices)} index "
                         f"rows for {len(query_ids)} queries.")
    n_docs = len(doc_ids)
    run = {}
    for query_id, row_scores, row_indices in zip(query_ids, scores, indices, strict=True):
        row_scores = np.asarray(row_scores, dtype=np.float64).ravel()
        row_indices = np.asarray(row_indices).ravel()
        if row_scores.shape != row_indices.shape or row_indices.size > k:
            raise ValueError(
                f"search returned {row_scores.size} scores and {row_indices.size} indices "
                f"for query {query_id!r}; expected as many of each, at most k={k}."
            )
        if row_indices.size and not np.issubdtype(row_indices.dtype, np.integer):
            raise ValueError(f"search returned non-integer indices for query {query_id!r}: "
                             f"dtype {row_indices.dtype}.")
        out_of_range = (row_indices < 0) | (row_indices >= n_docs)
        if out_of_range.any():
            raise ValueError(
                f"search returned corpus index {int(row_indices[out_of_range][0])} for query "
                f"{query_id!r}, but doc_ids has {n_docs} entries: doc_ids must give one id "
                "per row of the corpus the search object was fitted on."
            )
        ranked = {}
        for score, index in zip(row_scores.tolist(), row_indices.tolist(), strict=True):
            doc_id = doc_ids[index]
            # Several corpus rows may share a doc id (passages of one document):
            # the document takes its best passage's score.
            if doc_id not in ranked or score > ranked[doc_id]:
                ranked[doc_id] = score
        run[query_id] = ranked
    return run


def evaluate_retrieval(search, queries, qrels, doc_ids, k_values=(1, 10, 100)):
    """Search with every judged query and report nDCG, recall and MRR at each ``k``.

    One call to ``search.search(texts, k=K)`` with ``K = min(max(k_values),
    len(doc_ids))`` retrieves the ranking of every query of ``qrels`` that has
    at least one relevant document. The returned corpus indices are mapped to
    doc ids through ``doc_ids`` and the scores form a run, which
    :func:`ndcg_at_k`, :func:`recall_at_k` and :func:`mrr_at_k` score at every
    cut-off. As in BEIR, the ranking is re-derived from the returned scores, so
    equal scores are ordered by doc id (descending) rather than by the order
    the search object returned them.

    Parameters
    ----------
    search : object
        A fitted search object with a method ``search(texts, k=K)`` returning
        ``(scores, indices)``: for each query, the scores (higher is better)
        and the corpus row indices of its ``K`` best documents, such as a
        fitted :class:`skbert.SimilaritySearch`.
    queries : mapping of query id to str, or sequence of (query id, str) pairs
        Query texts. Every query of ``qrels`` that has a relevant document must
        be present; other queries are not searched.
    qrels : mapping of query id to mapping of doc id to relevance
        Relevance judgments, ``{query_id: {doc_id: relevance}}``; relevant
        means relevance ``> 0``.
    doc_ids : sequence
        The doc id of each row of the corpus ``search`` was fitted on:
        ``doc_ids[i]`` is the id of row ``i``. Rows may share an id (passages
        of one document); such a document scores as its best row.
    k_values : int or sequence of int, default=(1, 10, 100)
        Cut-offs, each ``>= 1``. A cut-off larger than the corpus evaluates
        the whole ranking.

    Returns
    -------
    scores : dict of str to float
        ``{"ndcg@k": ..., "recall@k": ..., "mrr@k": ...}`` for every ``k`` in
        ``k_values`` (duplicates removed), nDCG first, then recall, then MRR,
        each in the order of ``k_values``.

    Raises
    ------
    ValueError
        If a cut-off is not an integer >= 1, ``qrels`` is empty or has no
        relevant document, a judged query has no text in ``queries``,
        ``doc_ids`` is empty or does not match the corpus, no document that
        ``qrels`` judges is among ``doc_ids`` (ids of another type: ``"12"``
        against ``12``), or ``search`` returns output of the wrong shape.
    TypeError
        If ``search`` has no ``search`` method.

    See Also
    --------
    ndcg_at_k, recall_at_k, mrr_at_k : The metrics, on run dictionaries.

    Examples
    --------
    >>> import numpy as np
    >>> from skbert.metrics import evaluate_retrieval
    >>> class FixedSearch:
    ...     # stands in for a fitted SimilaritySearch over a 3-row corpus
    ...     def search(self, texts, k):
    ...         scores = np.array([[0.9, 0.5, 0.1], [0.8, 0.7, 0.2]])
    ...         indices = np.array([[0, 1, 2], [2, 0, 1]])
    ...         return scores[:len(texts), :k], indices[:len(texts), :k]
    >>> queries = {"q1": "what is a cat", "q2": "who ran"}
    >>> qrels = {"q1": {"cat": 1}, "q2": {"mat": 1}}
    >>> result = evaluate_retrieval(FixedSearch(), queries, qrels,
    ...                             doc_ids=["cat", "dog", "mat"], k_values=(1, 3))
    >>> {name: round(value, 4) for name, value in result.items()}
    {'ndcg@1': 1.0, 'ndcg@3': 1.0, 'recall@1': 1.0, 'recall@3': 1.0, 'mrr@1': 1.0, 'mrr@3': 1.0}
    """
    k_values = _check_k_values(k_values)
    judged = _check_qrels(qrels)
    texts = _check_queries(queries)
    doc_ids = _check_doc_ids(doc_ids)
    _check_judged_in_corpus(judged, doc_ids)
    if not callable(getattr(search, "search", None)):
        raise TypeError("search must be a fitted search object with a method "
                        f"search(texts, k=...), got {type(search).__name__}.")
    n_samples_fit = getattr(search, "n_samples_fit_", None)
    if n_samples_fit is not None and n_samples_fit != len(doc_ids):
        raise ValueError(f"doc_ids has {len(doc_ids)} entries but the search object was "
                         f"fitted on {n_samples_fit} documents: give one id per corpus row.")

    missing = [query_id for query_id in judged if query_id not in texts]
    if missing:
        shown = ", ".join(repr(query_id) for query_id in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise ValueError(f"{len(missing)} judged queries of qrels have no text in queries: "
                         f"{shown}{more}.")

    query_ids = list(judged)
    # A search index, like NearestNeighbors, may refuse k > corpus size.
    k_search = min(max(k_values), len(doc_ids))
    scores, indices = search.search([texts[query_id] for query_id in query_ids], k=k_search)
    run = _run_from_search(scores, indices, query_ids, doc_ids, k_search)

    return {f"{name}@{k}": metric(judged, run, k=k)
            for name, metric in _METRICS for k in k_values}
