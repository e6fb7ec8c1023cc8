"""Where a cold default transform spends the time that ``cache=False`` does not.

The offline all-MiniLM-L6-v2 on OpenVINO int8 (``--backend torch`` for torch
fp32), mean pooling + L2, batch size 32, over the 3,424 sentences of
``cpu_backends.py``. After one warm-up pass of each, ``--rounds`` rounds
alternate a ``cache=False`` transform and a cold default one (the store
emptied before it) under ``cProfile``; the table gives each step's seconds
summed over the rounds: the engine's graph (its outputs: every layer's token
states for the cache's record, the last layer's for ``cache=False``), the
reductions into records (``compute_parts``), the store's writes, the keys, and
tokenizing.

Run: ``python benchmarks/cache_profile.py [--backend openvino-int8|torch] [--rounds 3]``
"""

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from cpu_backends import print_header, sentences, vectorizer  # noqa: E402

import skbert  # noqa: E402

STEPS = {  # label -> (file name end, function name) as cProfile names them
    "the engine's graph": ("_exports.py", "__call__"),
    "torch's encoder": ("_engines.py", "encode"),
    "records (compute_parts)": ("_features.py", "compute_parts"),
    "store writes (MemoryStore.put)": ("_stores.py", "put"),
    "keys (window_keys)": ("_keys.py", "window_keys"),
    "tokenizing": ("_encoding.py", "tokenize"),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="openvino-int8", choices=["openvino-int8", "torch"])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    engine = {"torch": {"backend": "torch"},
              "openvino-int8": {"backend": "openvino", "dtype": "int8"}}[args.backend]
    print_header(torch.get_num_threads())
    texts = sentences()[0]
    runs = {"cache=False": vectorizer(**engine), "default, cold": vectorizer(cache=True, **engine)}
    for model in runs.values():  # kernels of every batch shape, the export
        model.transform(texts)
    profiles = {name: cProfile.Profile() for name in runs}
    seconds = dict.fromkeys(runs, 0.0)
    for _ in range(args.rounds):
        for name, model in runs.items():
            skbert.clear_cache()
            start = time.perf_counter()
            profiles[name].runcall(model.transform, texts)
            seconds[name] += time.perf_counter() - start
    print(f"\n{args.backend}, {len(texts)} sentences, {args.rounds} rounds, seconds (under "
          "cProfile, which slows Python calls)")
    print(f"{'step':<32}" + "".join(f"{name:>16}" for name in runs))
    stats = {name: pstats.Stats(profile).stats for name, profile in profiles.items()}
    for label, (file, function) in STEPS.items():
        row = [sum(entry[3] for (path, _, name), entry in stats[run].items()
                   if path.endswith(file) and name == function) for run in runs]
        if any(row):
            print(f"{label:<32}" + "".join(f"{value:>16.2f}" for value in row))
    print(f"{'the whole transform':<32}" + "".join(f"{seconds[run]:>16.2f}" for run in runs))


if __name__ == "__main__":
    main()
