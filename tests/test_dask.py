"""skbert.dask on a 2-process LocalCluster: results, pairs, bags, loads per worker, GridSearchCV.

What the workers compute is compared with local transforms to 1e-6: they are
other processes, which may pick other kernels, and torch promises equal
results to rounding there, not to the bit. Local transforms here run on one
torch thread, as the workers do. Whole-input comparisons use ``batch_size=1``
(no padding, so a text's features do not depend on its batch); with larger
batches, which texts share a batch changes float rounding (about 1e-7), as in
the batch-size invariance test of BertVectorizer. Exact equality is kept
within this process (a threaded scheduler, a pickled copy).
"""

import collections
import os
import pickle
import shutil

import joblib
import numpy as np
import pandas as pd
import pytest
import torch
from scipy import sparse
from sklearn.decomposition import PCA
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import FunctionTransformer

dd = pytest.importorskip("dask.dataframe")
db = pytest.importorskip("dask.bag")
distributed = pytest.importorskip("distributed")

import skbert.dask  # noqa: E402
from skbert import BertVectorizer  # noqa: E402
from skbert.dask import _Shipment  # noqa: E402

WORDS = "the cat sat on a mat big red dog runs fast what is long river good bad movie".split()
TEXTS = [" ".join(WORDS[(7 * i + j) % len(WORDS)] for j in range(1 + (5 * i) % 23))
         for i in range(48)]


@pytest.fixture(scope="module")
def cluster_client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        yield client


@pytest.fixture(autouse=True)
def one_thread():
    """Local transforms on one torch thread, as on the workers (``threads_per_worker=1``)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def client(cluster_client):
    """The cluster's client as the current one, for this test only."""
    with cluster_client.as_current():
        yield cluster_client


@pytest.fixture(scope="module")
def fitted(tiny_model_dir):
    # No cache: a local transform served from features computed in other batches could
    # differ from a fresh one in the last bit.
    return BertVectorizer(tiny_model_dir, cache=False).fit()


def series(texts, npartitions=4):
    index = pd.Index([f"row{i}" for i in range(len(texts))], name="id")
    return dd.from_pandas(pd.Series(texts, index=index), npartitions=npartitions, sort=False)


def partitionwise(estimator, collection):
    """The local transform of each partition's rows, stacked."""
    return np.vstack([estimator.transform(part.compute()) for part in collection.to_delayed()])


def test_series_equals_local_transform_with_index_and_meta(client, fitted):
    texts = series(TEXTS)
    features = skbert.dask.transform(fitted, texts)
    assert list(features.columns) == list(fitted.get_feature_names_out())
    assert (features.dtypes == np.float32).all() and features.index.name == "id"
    assert features.divisions == texts.divisions
    result = features.compute()
    assert list(result.index) == list(texts.index.compute())
    assert (result.dtypes == np.float32).all()
    np.testing.assert_allclose(result.to_numpy(), partitionwise(fitted, texts), rtol=0, atol=1e-6)
    np.testing.assert_allclose(result.to_numpy(), fitted.transform(TEXTS), atol=1e-5)


def test_no_padding_equals_whole_local_transform(client, tiny_model_dir):
    vectorizer = BertVectorizer(tiny_model_dir, batch_size=1, cache=False).fit()
    result = skbert.dask.transform(vectorizer, series(TEXTS, npartitions=5)).compute()
    np.testing.assert_allclose(result.to_numpy(), vectorizer.transform(TEXTS), rtol=0, atol=1e-6)


def test_text_pairs(client, fitted):
    pairs = pd.DataFrame({"a": TEXTS[:20], "b": TEXTS[20:40]})
    frame = dd.from_pandas(pairs, npartitions=3)
    result = skbert.dask.transform(fitted, frame).compute()
    expected = np.vstack([fitted.transform(part.compute()) for part in frame.to_delayed()])
    np.testing.assert_allclose(result.to_numpy(), expected, rtol=0, atol=1e-6)
    assert not np.allclose(result.to_numpy(), fitted.transform(TEXTS[:20]), atol=1e-3)


def test_bag_gives_an_array_in_item_order(client, fitted):
    bag = db.from_sequence(TEXTS, npartitions=5)
    features = skbert.dask.transform(fitted, bag)
    assert features.dtype == np.float32 and features.shape[1] == 32
    assert np.isnan(features.shape[0])
    np.testing.assert_allclose(features.compute(), partitionwise(fitted, bag), rtol=0, atol=1e-6)
    pairs = db.from_sequence(list(zip(TEXTS[:10], TEXTS[10:20])), npartitions=2)
    np.testing.assert_allclose(skbert.dask.transform(fitted, pairs).compute(),
                               partitionwise(fitted, pairs), rtol=0, atol=1e-6)


def test_pipeline_with_reference_shipment(client, fitted, tiny_model_dir):
    pipe = make_pipeline(BertVectorizer(tiny_model_dir, norm="l2", cache=False),
                         PCA(n_components=4))
    pipe.fit(TEXTS)
    texts = series(TEXTS, npartitions=3)
    features = skbert.dask.transform(pipe, texts, persist_weights=False)
    assert list(features.columns) == ["pca0", "pca1", "pca2", "pca3"]
    np.testing.assert_allclose(features.compute().to_numpy(), partitionwise(pipe, texts),
                               rtol=1e-5, atol=1e-6)
    assert pipe[0].persist_weights is True  # the estimator shipped is a copy


def test_empty_partitions(client, fitted):
    texts = series(TEXTS[:6], npartitions=3)
    texts = texts[texts.str.len() > 1000]  # every partition empty
    pipe = make_pipeline(fitted, PCA(2)).fit(TEXTS)
    result = skbert.dask.transform(pipe, texts).compute()
    assert result.shape == (0, 2)
    assert (result.dtypes == pipe.transform(TEXTS[:1]).dtype).all()


def count_calls():
    """Model loads and BertVectorizer.transform calls so far in this (worker) process."""
    from skbert import _vectorizer
    from skbert._encoder import _loading

    if not hasattr(_loading, "_calls_seen"):
        calls = _loading._calls_seen = collections.Counter()

        def counted(name, function):
            def wrapper(*args, **kwargs):
                calls[name] += 1
                return function(*args, **kwargs)
            return wrapper

        _loading.from_pretrained = counted("loads", _loading.from_pretrained)
        transform = _vectorizer.BertVectorizer.transform
        _vectorizer.BertVectorizer.transform = counted("transforms", transform)
    return dict(_loading._calls_seen)


@pytest.mark.parametrize("persist_weights", [None, False])
def test_each_worker_loads_the_model_once(client, tiny_model_dir, tmp_path, persist_weights):
    model_dir = shutil.copytree(tiny_model_dir, tmp_path / "model")  # not loaded anywhere yet
    vectorizer = BertVectorizer(model_dir, cache=False).fit()
    features = skbert.dask.transform(vectorizer, series(TEXTS, npartitions=12),
                                     persist_weights=persist_weights)
    before = client.run(count_calls)
    for _ in range(2):
        np.testing.assert_allclose(features.compute().to_numpy(), vectorizer.transform(TEXTS),
                                   atol=1e-5)
        client.amm.run_once()  # drops the extra replica of the estimator: refetched next time
    after = client.run(count_calls)
    loads = {w: after[w].get("loads", 0) - before[w].get("loads", 0) for w in after}
    transforms = {w: after[w].get("transforms", 0) - before[w].get("transforms", 0) for w in after}
    assert sum(transforms.values()) == 24 and min(transforms.values()) > 0, transforms
    assert loads == {worker: 1 for worker in after}


def test_reference_shipment_is_small_and_checked(fitted, tiny_model_dir):
    heavy, light = _Shipment(fitted, None), _Shipment(fitted, False)
    weights = os.path.getsize(os.path.join(tiny_model_dir, "model.safetensors"))
    assert len(light.payload) < 20_000 < weights < len(heavy.payload)
    assert fitted.persist_weights is True
    received = pickle.loads(pickle.dumps(light))
    assert received.estimator.persist_weights is False
    assert pickle.loads(pickle.dumps(light)).estimator is received.estimator  # once per process
    np.testing.assert_array_equal(received.estimator.transform(TEXTS), fitted.transform(TEXTS))


def test_without_a_distributed_client(fitted):
    features = skbert.dask.transform(fitted, series(TEXTS, npartitions=2))
    np.testing.assert_array_equal(features.compute(scheduler="threads").to_numpy(),
                                  partitionwise(fitted, series(TEXTS, npartitions=2)))


def test_grid_search_on_the_cluster_equals_local(client, tiny_model_dir):
    texts = [t for t in TEXTS if t] * 2
    labels = np.array([len(t.split()) % 2 for t in texts])
    pipe = Pipeline([("bert", BertVectorizer(tiny_model_dir)),
                     ("clf", LogisticRegression(max_iter=1000))])
    grid = {"bert__pooling": ["cls", "mean", "max"], "bert__layer": [-1, 0]}
    local = GridSearchCV(pipe, grid, cv=3).fit(texts, labels)
    with joblib.parallel_config(backend="dask"):
        remote = GridSearchCV(pipe, grid, cv=3, n_jobs=-1).fit(texts, labels)
    assert remote.best_params_ == local.best_params_
    assert remote.best_score_ == pytest.approx(local.best_score_, abs=1e-12)
    np.testing.assert_allclose(remote.cv_results_["mean_test_score"],
                               local.cv_results_["mean_test_score"], atol=1e-12)


@pytest.mark.parametrize("make, error, message", [
    (lambda m: (BertVectorizer(m), series(TEXTS)), NotFittedError, "not fitted"),
    (lambda m: (LogisticRegression(), series(TEXTS)), TypeError,
     "LogisticRegression has no transform method"),
    (lambda m: (BertVectorizer(m).fit(), TEXTS), TypeError,
     "Expected a dask.dataframe Series .* got list"),
    (lambda m: (BertVectorizer(m).fit(),
                dd.from_pandas(pd.DataFrame({"a": ["x"], "b": ["y"], "c": ["z"]}),
                               npartitions=1)),
     ValueError, "exactly 2 columns, got 3"),
    (lambda m: (make_pipeline(BertVectorizer(m), FunctionTransformer(sparse.csr_matrix)).fit(TEXTS),
                series(TEXTS)),
     TypeError, "needs dense features; the estimator's transform returned a sparse csr_matrix"),
])
def test_errors(tiny_model_dir, make, error, message):
    estimator, data = make(tiny_model_dir)
    with pytest.raises(error, match=message):
        skbert.dask.transform(estimator, data)


def test_bad_persist_weights(fitted):
    with pytest.raises(ValueError, match="persist_weights='yes'; use None, True or False"):
        skbert.dask.transform(fitted, series(TEXTS), persist_weights="yes")


def test_importing_skbert_does_not_import_dask():
    import subprocess
    import sys

    code = "import sys, skbert; print('dask' in sys.modules, 'torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.split() == ["False", "False"]
