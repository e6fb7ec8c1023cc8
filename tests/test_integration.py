"""The real offline all-MiniLM-L6-v2 against transformers, sentence-transformers and STS-B."""

import subprocess
import sys

import joblib
import numpy as np
import pytest
from scipy.stats import spearmanr
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline

from skbert import BertVectorizer
from skbert.datasets import load_stsb, load_trec
from tests.reference import reference_features
from tests.test_datasets import SHARED_DATA, SHARED_MISSING

pytestmark = pytest.mark.slow

SENTENCES = [
    "A man is playing a guitar.",
    "The quick brown fox jumps over the lazy dog near the river bank at dawn.",
    "Stocks fell sharply on Monday.",
    "",
    "Where is the Eiffel Tower?",
    "Short.",
]


@pytest.mark.parametrize("layer, combine", [(-1, "mean"), (-3, "mean"), (0, "mean"),
                                            ([-1, -2], "mean"), ([-1, -2], "concat")])
@pytest.mark.parametrize("pooling", ["cls", "max", "mean"])
def test_equals_direct_transformers(minilm_dir, pooling, layer, combine):
    got = BertVectorizer(minilm_dir, pooling=pooling, layer=layer, layer_combine=combine,
                         batch_size=4).fit_transform(SENTENCES)
    expected = reference_features(minilm_dir, SENTENCES, pooling=pooling, layer=layer,
                                  layer_combine=combine)
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)


def test_equals_sentence_transformers(minilm_dir):
    from sentence_transformers import SentenceTransformer

    texts = load_stsb("test").data[:200]
    texts = [sentence for pair in texts for sentence in pair]
    ours = BertVectorizer(minilm_dir, pooling="mean", norm="l2").fit_transform(texts)
    theirs = SentenceTransformer(minilm_dir, device="cpu").encode(texts, normalize_embeddings=True)
    assert np.abs(ours - theirs).max() <= 1e-4


def test_stsb_test_spearman_matches_mteb(minilm_dir):
    # MTEB's STSBenchmark result for all-MiniLM-L6-v2: cosine Spearman 0.8203 on the test split.
    pairs, scores = load_stsb("test", return_X_y=True)
    first, second = zip(*pairs)
    vectorizer = BertVectorizer(minilm_dir, norm="l2", batch_size=64).fit()
    cosine = np.sum(vectorizer.transform(first) * vectorizer.transform(second), axis=1)
    assert round(spearmanr(cosine, scores).statistic, 4) == 0.8203


def test_grid_search_over_pooling_on_trec(minilm_dir):
    X, y = load_trec("train", return_X_y=True)
    X, y = X[:300], y[:300]
    pipe = Pipeline([("bert", BertVectorizer(minilm_dir, max_length=64)),
                     ("clf", LogisticRegression(max_iter=1000))])
    search = GridSearchCV(pipe, {"bert__pooling": ["cls", "mean", "max"]}, cv=3).fit(X, y)
    scores = dict(zip(search.cv_results_["param_bert__pooling"],
                      search.cv_results_["mean_test_score"]))
    # all-MiniLM-L6-v2 was trained with mean pooling: its [CLS] vector is the weakest feature.
    assert scores["mean"] > scores["cls"] and search.best_params_["bert__pooling"] != "cls"
    X_test, y_test = load_trec("test", return_X_y=True)
    assert search.score(X_test, y_test) > 0.6


def test_joblib_round_trip_in_a_new_process_without_the_model_files(minilm_dir, tmp_path):
    import shutil

    model_copy = tmp_path / "minilm"
    shutil.copytree(minilm_dir, model_copy)
    # cache=False: both processes compute afresh, in the same batches, so bits must agree.
    vectorizer = BertVectorizer(str(model_copy), pooling="cls", layer=-2, norm="l2",
                                cache=False).fit()
    np.save(tmp_path / "expected.npy", vectorizer.transform(SENTENCES))
    joblib.dump(vectorizer, tmp_path / "vectorizer.joblib")
    shutil.rmtree(model_copy)
    script = (
        "import joblib, numpy as np, sys\n"
        f"v = joblib.load({str(tmp_path / 'vectorizer.joblib')!r})\n"
        f"np.save({str(tmp_path / 'got.npy')!r}, v.transform({SENTENCES!r}))\n"
    )
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    # Another process may pick other kernels: equal to rounding, not bits.
    np.testing.assert_allclose(np.load(tmp_path / "got.npy"), np.load(tmp_path / "expected.npy"),
                               rtol=0, atol=1e-6)


def test_scifact_search_matches_sentence_transformers(minilm_dir):

    from sentence_transformers import SentenceTransformer
    from sklearn.neighbors import NearestNeighbors

    from skbert import SimilaritySearch
    from skbert.datasets import load_beir
    from skbert.metrics import evaluate_retrieval, ndcg_at_k

    directory = SHARED_DATA / "scifact"
    if not directory.is_dir():
        pytest.skip(SHARED_MISSING)
    data = load_beir(directory)
    # A 1,000-document sub-corpus: every relevant document plus the first others.
    relevant = {doc for judged in data.qrels.values() for doc in judged}
    keep = [i for i, doc in enumerate(data.doc_ids) if doc in relevant]
    keep += [i for i, doc in enumerate(data.doc_ids) if doc not in relevant][:1000 - len(keep)]
    doc_ids = [data.doc_ids[i] for i in keep]
    documents = [data.documents[i] for i in keep]
    query_ids = list(data.queries)
    queries = [data.queries[q] for q in query_ids]

    search = SimilaritySearch(BertVectorizer(minilm_dir, norm="l2", max_length=128)).fit(documents)
    ours = evaluate_retrieval(search, data.queries, data.qrels, doc_ids, k_values=(10,))
    _, our_indices = search.kneighbors(queries, n_neighbors=10)

    model = SentenceTransformer(minilm_dir, device="cpu")
    model.max_seq_length = 128
    neighbours = NearestNeighbors(n_neighbors=10, metric="cosine", algorithm="brute")
    neighbours.fit(model.encode(documents, normalize_embeddings=True))
    distances, their_indices = neighbours.kneighbors(
        model.encode(queries, normalize_embeddings=True))
    run = {q: {doc_ids[i]: 1 - d for i, d in zip(row, dist)}
           for q, row, dist in zip(query_ids, their_indices, distances)}
    assert np.mean(our_indices == their_indices) > 0.99
    assert abs(ours["ndcg@10"] - ndcg_at_k(data.qrels, run, k=10)) <= 0.005
