"""The ``skbert`` console command: ``skbert embed`` and ``skbert probe``."""

import argparse
import contextlib
import csv
import hashlib
import itertools
import json
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
from numpy.lib.format import open_memmap
from tqdm.auto import tqdm

POOLINGS = ("mean", "cls", "max", "mean_sqrt_len", "mean_max", "pooler", "last")
# Texts per chunk of skbert embed: dozens of batches, so length sorting still pays, and a
# working set that does not depend on the input's size.
CHUNK_SIZE = 1024


class CommandError(Exception):
    """A problem with the command's input, reported as one line without a traceback."""


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


def read_texts(path, text_column=None, text_field=None):
    """Texts of a .txt (one per line), .csv/.tsv (``text_column``) or .jsonl (``text_field``) file.

    ``-`` reads lines from standard input.
    """
    if str(path) == "-":
        return [line.rstrip("\r\n") for line in sys.stdin]
    return list(iter_texts(path, text_column, text_field))


def iter_texts(path, text_column=None, text_field=None):
    """The texts of a file (as :func:`read_texts` reads them), one at a time."""
    path = Path(path)
    if not path.is_file():
        raise CommandError(f"input file {str(path)!r} does not exist")
    suffix = path.suffix.lower()
    with open(path, encoding="utf-8", newline="") as file:
        if suffix in (".csv", ".tsv"):
            reader = csv.DictReader(file, delimiter="\t" if suffix == ".tsv" else ",")
            yield from _column(reader, text_column, path, "--text-column",
                               reader.fieldnames or [])
        elif suffix == ".jsonl":
            rows = (json.loads(line) for line in file if line.strip())
            yield from _column(rows, text_field, path, "--text-field")
        else:
            yield from (line.rstrip("\r\n") for line in file)


def _column(rows, name, path, option, fieldnames=None):
    if name is None:
        raise CommandError(f"{path} needs {option} to say which column holds the text")
    if fieldnames is not None and name not in fieldnames:
        raise CommandError(f"{path} has no column {name!r}; columns: {', '.join(fieldnames)}")
    for number, row in enumerate(rows, start=1):
        if name not in row:
            raise CommandError(f"{path} record {number} has no field {name!r}")
        yield row[name]


def _vectorizer(args, **overrides):
    from skbert import BertVectorizer

    params = dict(model=args.model, max_length=args.max_length, truncation=args.truncation,
                  batch_size=args.batch_size, device=args.device, dtype=args.dtype, verbose=True)
    params.update(overrides)
    return BertVectorizer(**params)


def embed(args):
    """``skbert embed``: texts -> features file (.npy, or .parquet with pyarrow), chunk by chunk.

    A first pass over the input counts and fingerprints the texts (and checks
    every record) without keeping them; the second reads ``--chunk-size`` texts
    at a time, transforms them and writes their rows before reading more, so
    memory does not grow with the input. Rows go to a partial output next to
    the final one, and a progress file records how many are written; ``--resume``
    continues from there when the input and the options are the same.
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
        n_texts, texts_digest = _scan(iter_texts(source, args.text_column, args.text_field))
        norm = None if args.norm == "none" else args.norm
        vectorizer = _vectorizer(args, layer=args.layer, pooling=args.pooling, norm=norm,
                                 prompt=args.prompt, truncate_dim=args.truncate_dim,
                                 cache=False, verbose=False).fit()
        names = vectorizer.get_feature_names_out()
        progress = _Progress(output, {"input": str(source), "texts": n_texts,
                                      "digest": texts_digest}, _settings(args, vectorizer))
        if args.resume:
            done = progress.resume()
        else:  # a stale record must not describe the new partial output
            progress.remove()
            done = 0
        writer = (_NpyWriter if output.suffix == ".npy" else _ParquetWriter)(
            output, n_texts, names, done)
        progress.save(done)
        texts = itertools.islice(iter_texts(source, args.text_column, args.text_field), done,
                                 None)
        with tqdm(total=n_texts, initial=done, desc="skbert embed", unit="text",
                  file=sys.stderr) as bar:
            try:
                while chunk := list(itertools.islice(texts, args.chunk_size)):
                    writer.write(done, vectorizer.transform(chunk))
                    done += len(chunk)
                    progress.save(done)
                    bar.update(len(chunk))
            except KeyboardInterrupt:
                bar.close()
                print(f"skbert embed: interrupted after {done} of {n_texts} texts; run the same "
                      "command with --resume to continue", file=sys.stderr)
                raise
        writer.finish()
        progress.remove()
    print(f"wrote {n_texts} x {len(names)} features to {output}", file=sys.stderr)


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
        with open(path, "w", encoding="utf-8", newline="\n") as file:
            file.writelines(line if line.endswith("\n") else line + "\n" for line in sys.stdin)
        yield path


def _scan(texts):
    """Number of texts and a digest of them all, in order."""
    digest, n_texts = hashlib.blake2b(digest_size=16), 0
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little") + data)
        n_texts += 1
    return n_texts, digest.hexdigest()


def _settings(args, vectorizer):
    """The options that decide the features, by name: a resumed run must have the same."""
    from skbert import _loading

    model = os.path.abspath(args.model) if os.path.isdir(args.model) else args.model
    settings = {"--model": model, "--layer": args.layer, "--pooling": args.pooling,
                "--norm": args.norm, "--prompt": vectorizer.prompt_,
                "--truncate-dim": args.truncate_dim, "--max-length": args.max_length,
                "--truncation": args.truncation, "--dtype": args.dtype,
                "the model's weights": _loading.weights_fingerprint(vectorizer.model_)}
    return json.loads(json.dumps(settings))  # as read back from the progress file


class _Progress:
    """``<output>.progress.json``: the texts written so far, for which input and options.

    It is replaced atomically, and only after the rows it counts are on disk.
    """

    def __init__(self, output, source, settings):
        self.output, self.path = output, output.with_name(output.name + ".progress.json")
        self.record = {"input": source, "settings": settings, "done": 0}

    def resume(self):
        """Texts already written by the interrupted run (0 if there is none to resume)."""
        if not self.path.is_file():
            print(f"skbert embed: nothing to resume for {self.output}; starting from the "
                  "first text", file=sys.stderr)
            return 0
        saved = json.loads(self.path.read_text(encoding="utf-8"))
        where = f"cannot resume {str(self.output)!r}:"
        if saved["input"]["texts"] != self.record["input"]["texts"] or \
                saved["input"]["digest"] != self.record["input"]["digest"]:
            raise CommandError(
                f"{where} the input changed since the interrupted run of "
                f"{saved['input']['input']!r} ({saved['input']['texts']} texts then, "
                f"{self.record['input']['texts']} now, or other texts); run without --resume "
                "to start again")
        changed = [f"{name} {saved['settings'].get(name)!r} -> {value!r}"
                   for name, value in self.record["settings"].items()
                   if saved["settings"].get(name) != value]
        if changed:
            raise CommandError(f"{where} options changed since the interrupted run "
                               f"({'; '.join(changed)}); rerun with the same options, or without "
                               "--resume to start again")
        return saved["done"]

    def save(self, done):
        self.record["done"] = done
        temporary = self.path.with_name(self.path.name + ".tmp")
        with open(temporary, "w", encoding="utf-8") as file:
            json.dump(self.record, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.path)

    def remove(self):
        self.path.unlink(missing_ok=True)


class _NpyWriter:
    """Rows into ``<output>.partial``, a .npy file made with its final shape; renamed at the end.

    Each chunk maps the file, writes its rows, flushes and unmaps, so written
    pages do not stay in this process's memory.
    """

    def __init__(self, output, n_rows, names, done):
        self.output, self.partial = output, output.with_name(output.name + ".partial")
        shape = (n_rows, len(names))
        if done:
            if not self.partial.is_file():
                raise CommandError(f"cannot resume {str(output)!r}: the partial output "
                                   f"{str(self.partial)!r} is missing; run without --resume")
            found = open_memmap(self.partial, mode="r").shape
            if found != shape:
                raise CommandError(f"cannot resume {str(output)!r}: {str(self.partial)!r} holds "
                                   f"{found}, expected {shape}; run without --resume")
        else:
            open_memmap(self.partial, mode="w+", dtype=np.float32, shape=shape).flush()

    def write(self, start, features):
        rows = open_memmap(self.partial, mode="r+")
        rows[start:start + len(features)] = features
        rows.flush()  # unmapped on return

    def finish(self):
        os.replace(self.partial, self.output)


class _ParquetWriter:
    """Each chunk as a parquet file in ``<output>.parts/``, merged into one file at the end.

    A parquet file cannot take more row groups once closed, and an unclosed one
    is unreadable, so the chunks are separate files until the run completes;
    the merge streams them, one row group each, into the output.
    """

    def __init__(self, output, n_rows, names, done):
        self.output, self.n_rows, self.names = output, n_rows, list(names)
        self.parts = output.with_name(output.name + ".parts")
        if done and not self.parts.is_dir():
            raise CommandError(f"cannot resume {str(output)!r}: the partial output "
                               f"{str(self.parts)!r} is missing; run without --resume")
        if not done:
            shutil.rmtree(self.parts, ignore_errors=True)
        self.parts.mkdir(exist_ok=True)
        for start, path in self._part_files():
            if start >= done:  # written after the last progress record: written again
                path.unlink()

    def _part_files(self):
        return sorted((int(path.stem.split("-")[1]), path)
                      for path in self.parts.glob("part-*.parquet"))

    def write(self, start, features):
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table(dict(zip(self.names, features.T)))
        temporary = self.parts / f"part-{start:012d}.tmp"
        with open(temporary, "wb") as file:
            pq.write_table(table, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.parts / f"part-{start:012d}.parquet")

    def finish(self):
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pa.schema([(name, pa.float32()) for name in self.names])
        merged, expected = self.output.with_name(self.output.name + ".partial"), 0
        with pq.ParquetWriter(merged, schema) as writer:
            for start, path in self._part_files():
                if start != expected:
                    raise CommandError(f"{str(self.parts)!r} lacks the rows from {expected} to "
                                       f"{start}; run without --resume to start again")
                table = pq.read_table(path)
                writer.write_table(table)
                expected += table.num_rows
        if expected != self.n_rows:
            raise CommandError(f"{str(self.parts)!r} holds {expected} rows, expected "
                               f"{self.n_rows}; run without --resume to start again")
        os.replace(merged, self.output)
        shutil.rmtree(self.parts)


def probe(args):
    """``skbert probe``: layer x pooling report as a heatmap PNG and a CSV table."""
    import matplotlib

    matplotlib.use("Agg")
    from skbert.probe import layer_report, plot_layer_report

    if args.label_column is None or args.text_column is None:
        raise CommandError("probe needs --text-column and --label-column")
    if Path(args.data).suffix.lower() not in (".csv", ".tsv", ".jsonl"):
        raise CommandError(f"probe reads labelled .csv, .tsv or .jsonl files, got {args.data!r}")
    texts = read_texts(args.data, args.text_column, args.text_column)
    labels = read_texts(args.data, args.label_column, args.label_column)
    # One progress bar, over the report's cells: none for each cell's transform.
    report = layer_report(_vectorizer(args, verbose=False), texts, labels, layers=args.layers,
                          poolings=args.poolings, cv=args.cv, verbose=True)
    out = Path(args.out)
    table = out.with_suffix(".csv")
    report.round(4).to_csv(table)
    ax = plot_layer_report(report)
    ax.figure.savefig(out, dpi=120, bbox_inches="tight")
    layer, pooling = report.stack().idxmax()
    print(report.round(4).to_string())
    print(f"best: layer={layer} pooling={pooling} score={report.loc[layer, pooling]:.4f} "
          f"(wrote {out} and {table})")


def build_parser():
    parser = argparse.ArgumentParser(prog="skbert", description="BERT features from the shell.")
    commands = parser.add_subparsers(dest="command", required=True)

    def model_options(sub):
        sub.add_argument("--model", default="bert-base-uncased",
                         help="hub id or local model directory (default: %(default)s)")
        sub.add_argument("--max-length", type=int, default=None,
                         help="tokens per window, special tokens included (default: model limit)")
        sub.add_argument("--truncation", default="head",
                         choices=["head", "tail", "head_tail", "chunks"],
                         help="what happens to long texts (default: %(default)s)")
        sub.add_argument("--batch-size", type=int, default=32,
                         help="texts per forward pass (default: %(default)s)")
        sub.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
        sub.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"],
                         help="compute precision (default: %(default)s)")

    embed_parser = commands.add_parser(
        "embed", help="embed texts into a .npy or .parquet file",
        description="Embed texts with BertVectorizer, --chunk-size texts at a time; the output "
                    "equals its transform of each chunk.")
    embed_parser.add_argument("input", help=".txt (one text per line), .csv/.tsv, .jsonl, or - "
                                            "for standard input")
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
    embed_parser.add_argument("--resume", action="store_true",
                              help="continue an interrupted run of the same command from the "
                                   "last chunk written (refused if the input or options changed)")
    model_options(embed_parser)
    embed_parser.set_defaults(run=embed)

    probe_parser = commands.add_parser(
        "probe", help="layer x pooling report of a labelled .csv/.tsv/.jsonl",
        description="Cross-validated score for every layer x pooling: heatmap PNG + CSV table.")
    probe_parser.add_argument("data", help="labelled .csv, .tsv or .jsonl file")
    probe_parser.add_argument("--text-column", help="column (or field) holding the text")
    probe_parser.add_argument("--label-column", help="column (or field) holding the label")
    probe_parser.add_argument("--layers", type=parse_layer, default="all",
                              help="comma list of ints or 'all' (default: all)")
    probe_parser.add_argument("--poolings", type=lambda v: v.split(","), default=["cls", "mean",
                                                                                   "max"],
                              help="comma list (default: cls,mean,max)")
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
        print(f"skbert {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130  # 128 + SIGINT, as shells report it
    return 0


def run():
    """The ``skbert`` console command: :func:`main` in a process of its own.

    oneDNN, torch's CPU kernel library, keeps one compiled kernel per input
    shape. Over the varied batch shapes of ``skbert embed``, 2,000 -> 12,000
    lines of SST-2 raised peak RSS by 40 to 68 MB with that cache and by 26 to
    31 MB without it, at the same speed (fp32 and bf16, measured on the
    project's CPU; docs/scaling.md). The command owns its process, so it turns the cache
    off unless ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` is set; :func:`main`, which
    other programs may call, leaves process-wide settings alone.
    """
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "0")  # read when torch loads
    warnings.showwarning = _show_warning
    return main()


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """Warnings of the command as one line each, without the source line that raised them."""
    print(f"skbert: warning: {message}", file=sys.stderr if file is None else file)


if __name__ == "__main__":
    sys.exit(run())
