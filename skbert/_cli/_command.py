"""The ``skbert`` console command: ``skbert embed`` and ``skbert probe``."""

import argparse
import contextlib
import hashlib
import itertools
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

from skbert._cli._inputs import (
    CommandError,
    NpyWriter,
    ParquetWriter,
    Progress,
    all_records,
    iter_texts,
    read_examples,
    stdin_lines,
    verified_rows,
    write_row_index,
)
from skbert._encoder._loading import LoadError
from skbert._progress import is_terminal, progress_bar

POOLINGS = ("mean", "cls", "max", "mean_sqrt_len", "mean_max", "pooler", "last")
# Texts per chunk of skbert embed: dozens of batches, so length sorting still pays, and a
# working set that does not depend on the input's size.
CHUNK_SIZE = 1024
# Kernels that oneDNN and ideep keep per input shape in the command's process (see run).
KERNEL_CACHE = "16"
DEFAULT_MODEL = "bert-base-uncased"
MISSING = ("error", "empty", "skip")


def parse_layer(value):
    """``--layer``: an int, a comma-separated list of ints, or "all"."""
    if value == "all":
        return "all"
    try:
        layers = [int(part) for part in value.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an int, a comma-separated list of ints, or 'all'") from None
    return layers[0] if len(layers) == 1 else layers


def positive_int(value):
    """An int >= 1 (``--chunk-size``)."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive int")
    return number


def _vectorizer(args, words=False, **overrides):
    """The BertVectorizer of the options (a BertWordVectorizer with ``words``)."""
    from skbert import BertVectorizer, BertWordVectorizer

    params = dict(model=args.model or DEFAULT_MODEL, max_length=args.max_length,
                  batch_size=args.batch_size, device=args.device, dtype=args.dtype,
                  backend=args.backend)
    if words:
        return BertWordVectorizer(**params, **overrides)
    return BertVectorizer(**params, truncation=args.truncation, **overrides)


def embed(args):
    """``skbert embed``: texts -> features file (.npy, or .parquet with pyarrow), chunk by chunk.

    A first pass over the input counts and fingerprints the texts (and checks
    every record) without keeping them; the second reads ``--chunk-size`` texts
    at a time, transforms them and writes their rows before reading more, so
    memory does not grow with the input. Rows go to a partial output next to
    the final one, and a progress file records each chunk written with a
    checksum of its rows; ``--resume`` continues from there when the input and
    the options are the same, after checking the rows it keeps. With
    ``--missing skip`` a last pass writes the positions of the rows embedded.
    """
    output = Path(args.output)
    if output.suffix not in (".npy", ".parquet"):
        raise CommandError(f"output {str(output)!r} must end in .npy or .parquet")
    if output.suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise CommandError("writing .parquet needs pyarrow: pip install pyarrow") from None
    with _input_file(args) as source:
        reading = (source, args.text_column, args.text_field, args.missing)
        n_records, n_texts, texts_digest = _scan(all_records(*reading))
        norm = None if args.norm == "none" else args.norm
        vectorizer = _vectorizer(args, layer=args.layer, pooling=args.pooling, norm=norm,
                                 prompt=args.prompt, truncate_dim=args.truncate_dim,
                                 cache=False).fit()
        names = vectorizer.get_feature_names_out()
        progress = Progress(output, {"input": str(source), "texts": n_texts,
                                     "digest": texts_digest}, _settings(args, vectorizer))
        writer = (NpyWriter if output.suffix == ".npy" else ParquetWriter)(
            output, n_texts, names)
        if args.resume and (chunks := progress.resume()):
            writer.reopen()
            done = verified_rows(writer, chunks)
            writer.discard_from(done)
            progress.keep(done)
        else:  # a stale record must not describe the new partial output
            progress.remove()
            writer.create()
            done = 0
        progress.save()
        texts = (text for _, text in itertools.islice(iter_texts(*reading), done, None))
        with progress_bar(is_terminal(sys.stderr), total=n_texts, initial=done,
                          desc="skbert embed", unit="text") as bar:
            try:
                while chunk := list(itertools.islice(texts, args.chunk_size)):
                    features = vectorizer.transform(chunk)
                    writer.write(done, features)
                    progress.add(done, features)
                    done += len(chunk)
                    bar.update(len(chunk))
            except KeyboardInterrupt:
                bar.close()
                print(f"skbert embed: interrupted after {done} of {n_texts} texts; run the same "
                      "command with --resume to continue", file=sys.stderr)
                raise
        rows = output.with_name(output.name + ".rows.npy")
        if args.missing == "skip":
            write_row_index(rows, (index for index, _ in iter_texts(*reading)), n_texts)
        else:  # one from an earlier run would not describe this output
            rows.unlink(missing_ok=True)
        writer.finish()
        progress.remove()
    rows_note = (f", and their rows in the input to {rows} ({n_records - n_texts} of "
                 f"{n_records} left out by --missing skip)" if args.missing == "skip" else "")
    print(f"wrote {n_texts} x {len(names)} features to {output}{rows_note}", file=sys.stderr)


@contextlib.contextmanager
def _input_file(args):
    """The input path; standard input is first copied to a temporary file, read twice."""
    if args.input != "-":
        yield args.input
        return
    if args.resume:
        raise CommandError("--resume needs an input file: standard input cannot be read again")
    with tempfile.TemporaryDirectory(prefix="skbert-embed-") as directory:
        path = Path(directory) / "stdin.txt"
        with open(path, "w", encoding="utf-8", newline="") as file:  # the lines as they came
            file.writelines(stdin_lines())
        yield path


def _scan(records):
    """Numbers of records and of texts, and a digest of the texts and their positions, in order."""
    digest, n_records, n_texts = hashlib.blake2b(digest_size=16), 0, 0
    for index, text in records:
        n_records += 1
        if text is None:  # left out by --missing skip
            continue
        data = text.encode("utf-8", "surrogatepass")
        digest.update(index.to_bytes(8, "little") + len(data).to_bytes(8, "little") + data)
        n_texts += 1
    return n_records, n_texts, digest.hexdigest()


def _settings(args, vectorizer):
    """The options that decide the features, by name: a resumed run must have the same."""
    model = args.model or DEFAULT_MODEL
    model = os.path.abspath(model) if os.path.isdir(model) else model
    settings = {"--model": model, "--layer": args.layer, "--pooling": args.pooling,
                "--norm": args.norm, "--prompt": vectorizer.prompt_,
                "--truncate-dim": args.truncate_dim, "--max-length": args.max_length,
                "--truncation": args.truncation, "--dtype": args.dtype,
                "--backend": args.backend,
                "--missing": args.missing,
                # The fingerprints the vectorizer keys its cache with (equal to recomputing them).
                "the model's weights": vectorizer._loaded.fingerprint,
                "the model's tokenizer": vectorizer._loaded.tokenizer_fingerprint}
    return json.loads(json.dumps(settings))  # as read back from the progress file


def probe(args):
    """``skbert probe``: layer x pooling report as a heatmap PNG and a CSV table."""
    import matplotlib

    matplotlib.use("Agg")
    from skbert.probe import layer_report, plot_layer_report

    suffix = Path(args.data).suffix.lower()
    if suffix == ".conllu":  # words and their UPOS tags: the token-level probe
        from skbert.datasets._conllu import read_conllu

        try:
            samples, labels, groups, _ = read_conllu(args.data)
        except OSError as exc:
            raise CommandError(f"cannot read {args.data!r}: {exc}") from exc
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        vectorizer = _vectorizer(args, words=True)
    elif suffix in (".csv", ".tsv", ".jsonl"):
        if args.label_column is None or args.text_column is None:
            raise CommandError("probe needs --text-column and --label-column")
        samples, labels = read_examples(args.data, args.text_column, args.label_column,
                                        args.missing)
        groups, vectorizer = None, _vectorizer(args)
    else:
        raise CommandError(f"probe reads labelled .csv, .tsv or .jsonl files, or a CoNLL-U "
                           f".conllu file (words and UPOS tags), got {args.data!r}")
    # One progress bar, over the report's cells: none for each cell's transform.
    report = layer_report(vectorizer, samples, labels, layers=args.layers,
                          poolings=args.poolings, cv=args.cv, verbose=is_terminal(sys.stderr),
                          groups=groups)
    out = Path(args.out)
    table = out.with_suffix(".csv")
    report.round(4).to_csv(table)
    ax = plot_layer_report(report)
    ax.figure.savefig(out, dpi=120, bbox_inches="tight")
    layer, pooling = report.stack().idxmax()
    print(report.round(4).to_string())
    print(f"best: layer={layer} {report.columns.name}={pooling} "
          f"score={report.loc[layer, pooling]:.4f} (wrote {out} and {table})")


def build_parser():
    parser = argparse.ArgumentParser(prog="skbert", description="BERT features from the shell.")
    commands = parser.add_subparsers(dest="command", required=True)

    def model_options(sub):
        sub.add_argument("--model", default=None,
                         help=f"hub id or local model directory (default: {DEFAULT_MODEL})")
        sub.add_argument("--max-length", type=int, default=None,
                         help="tokens per window, special tokens included (default: model limit)")
        sub.add_argument("--truncation", default="head",
                         choices=["head", "tail", "head_tail", "chunks"],
                         help="what happens to long texts (default: %(default)s)")
        sub.add_argument("--batch-size", type=int, default=32,
                         help="texts per forward pass (default: %(default)s)")
        sub.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
        sub.add_argument("--backend", default="torch", choices=["torch", "openvino", "onnx"],
                         help="inference engine: openvino and onnx (ONNX Runtime) run on the CPU "
                              "(default: %(default)s)")
        sub.add_argument("--dtype", default="float32",
                         choices=["float32", "float16", "bfloat16", "int8"],
                         help="compute precision; int8 needs --backend openvino "
                              "(default: %(default)s)")

    embed_parser = commands.add_parser(
        "embed", help="embed texts into a .npy or .parquet file",
        description="Embed texts with BertVectorizer, --chunk-size texts at a time; the output "
                    "equals its transform of each chunk.")
    embed_parser.add_argument("input", help=".txt (one text per line: lines end at \\n or "
                                            "\\r\\n, an empty line is the text \"\"), "
                                            ".csv/.tsv, .jsonl, or - for standard input "
                                            "(read as a .txt)")
    embed_parser.add_argument("-o", "--output", required=True, help=".npy or .parquet file")
    embed_parser.add_argument("--text-column", help="column of a .csv/.tsv input")
    embed_parser.add_argument("--text-field", help="field of a .jsonl input")
    embed_parser.add_argument("--layer", type=parse_layer, default=-1,
                              help="int, comma list of ints, or 'all' (default: -1)")
    embed_parser.add_argument("--pooling", default="mean", choices=(*POOLINGS, "auto"),
                              help="'auto': what a sentence-transformers folder declares "
                                   "(default: %(default)s)")
    embed_parser.add_argument("--norm", default="none",
                              choices=["none", "l1", "l2", "max", "auto"],
                              help="row normalization (default: %(default)s)")
    embed_parser.add_argument("--prompt", help="text put before every text, or the name of a "
                                               "prompt of the model's sentence-transformers "
                                               "config (default: its default prompt, if any)")
    embed_parser.add_argument("--truncate-dim", type=positive_int,
                              help="keep the first N features, before normalization")
    embed_parser.add_argument("--chunk-size", type=positive_int, default=CHUNK_SIZE,
                              help="texts read, transformed and written at a time; memory "
                                   "grows with it, not with the input (default: %(default)s)")
    embed_parser.add_argument("--missing", choices=MISSING, default="error",
                              help="a missing text: an empty or absent .csv/.tsv cell, or a "
                                   ".jsonl field that is absent, null or not a string. 'error' "
                                   "stops at the first, naming its row; 'empty' embeds \"\" in "
                                   "its place; 'skip' leaves its row out and writes "
                                   "<output>.rows.npy, the int64 positions (from 0) of the input "
                                   "rows embedded, to align the output with labels "
                                   "(default: %(default)s)")
    embed_parser.add_argument("--resume", action="store_true",
                              help="continue an interrupted run of the same command from the "
                                   "last chunk written, after checking the rows it keeps against "
                                   "their checksums (refused if the input or options changed)")
    model_options(embed_parser)
    embed_parser.set_defaults(run=embed)

    probe_parser = commands.add_parser(
        "probe", help="layer x pooling report of a labelled .csv/.tsv/.jsonl or a .conllu",
        description="Cross-validated score for every layer x pooling: heatmap PNG + CSV table.")
    probe_parser.add_argument("data", help="labelled .csv, .tsv or .jsonl file, or a CoNLL-U "
                                           ".conllu file: its words, by UPOS tag, the words of "
                                           "one sentence in one fold")
    probe_parser.add_argument("--text-column", help="column (or field) holding the text")
    probe_parser.add_argument("--label-column", help="column (or field) holding the label")
    probe_parser.add_argument("--layers", type=parse_layer, default="all",
                              help="comma list of ints or 'all' (default: all)")
    probe_parser.add_argument("--poolings", type=lambda v: v.split(","), default=None,
                              help="comma list of poolings (default: cls,mean,max), or for a "
                                   ".conllu file of subword poolings (default: mean,first,last,"
                                   "first_last,max)")
    probe_parser.add_argument("--missing", choices=MISSING, default="error",
                              help="a missing text or label (an empty or absent cell, a field "
                                   "that is absent or null; a text that is not a string): "
                                   "'error' stops at the first, naming its row; 'skip' leaves "
                                   "the example out; 'empty' embeds \"\" for a missing text, "
                                   "and a missing label is still an error (default: "
                                   "%(default)s)")
    probe_parser.add_argument("--cv", type=int, default=5, help="folds (default: %(default)s)")
    probe_parser.add_argument("--out", default="layer_report.png",
                              help="heatmap PNG; the CSV table is written next to it")
    model_options(probe_parser)
    probe_parser.set_defaults(run=probe)
    return parser


def main(argv=None):
    """Entry point of the ``skbert`` command; returns the exit status."""
    args = build_parser().parse_args(argv)
    if getattr(args, "layers", None) is not None and not isinstance(args.layers, (list, str)):
        args.layers = [args.layers]
    try:
        args.run(args)
    except (CommandError, FileNotFoundError, ValueError, OSError, ImportError) as exc:
        if isinstance(exc, LoadError) and args.model is None:
            exc = (f"no --model given, and the default {DEFAULT_MODEL!r} could not be loaded "
                   "(it is not in the local Hugging Face cache, and the hub cannot be reached "
                   f"or does not have it): pass --model with a model directory or a hub id. "
                   f"[{exc}]")
        print(f"skbert {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130  # 128 + SIGINT, as shells report it
    return 0


def run():
    """The ``skbert`` console command: :func:`main` in a process of its own.

    oneDNN, torch's CPU kernel library, keeps compiled kernels per input
    shape, up to 1,024 (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``), and so does
    ideep, torch's wrapper of it, which runs skbert's float32 Linear layers on
    CPUs with AVX-512 (``LRU_CACHE_CAPACITY``). Over the varied batch shapes
    of ``skbert embed``, 2,000 -> 12,000 lines of SST-2 raised peak RSS by 40
    to 68 MB with that cache and by 26 to 31 MB without it (docs/scaling.md).
    With oneDNN's cache off, every batch builds its kernels again: on an
    AVX-512 CPU a first pass over 3,424 sentences took 1.1x-1.3x as long.
    Batches go longest first, so a batch's shape is mostly its predecessor's: 16 kernels
    each ran as fast as 1,024, and a transform of 20,000 / 60,000 texts held
    60 / 75 MB beyond its output with them, 104 / 120 with 1,024 and 62 / 59
    with oneDNN's cache off (benchmarks/README.md, 2026-12-02 (Zen 5, last
    run)). The command owns its process, so it sets both
    capacities to 16 unless they are set; :func:`main`, which other programs
    may call, leaves process-wide settings alone.
    """
    for variable in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):
        os.environ.setdefault(variable, KERNEL_CACHE)  # read when torch loads
    warnings.showwarning = _show_warning
    return main()


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """Warnings of the command as one line each, without the source line that raised them."""
    print(f"skbert: warning: {message}", file=sys.stderr if file is None else file)

