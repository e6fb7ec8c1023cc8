"""The ``skbert`` console command: ``skbert embed`` and ``skbert probe``."""

import argparse
import csv
import json
import sys
from pathlib import Path

POOLINGS = ("mean", "cls", "max", "mean_sqrt_len", "mean_max", "pooler", "last")


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


def read_texts(path, text_column=None, text_field=None):
    """Texts of a .txt (one per line), .csv/.tsv (``text_column``) or .jsonl (``text_field``) file.

    ``-`` reads lines from standard input.
    """
    if str(path) == "-":
        return [line.rstrip("\r\n") for line in sys.stdin]
    path = Path(path)
    if not path.is_file():
        raise CommandError(f"input file {str(path)!r} does not exist")
    suffix = path.suffix.lower()
    with open(path, encoding="utf-8", newline="") as file:
        if suffix in (".csv", ".tsv"):
            reader = csv.DictReader(file, delimiter="\t" if suffix == ".tsv" else ",")
            return _column(reader, text_column, path, "--text-column", reader.fieldnames or [])
        if suffix == ".jsonl":
            rows = (json.loads(line) for line in file if line.strip())
            return _column(rows, text_field, path, "--text-field")
        return [line.rstrip("\r\n") for line in file]


def _column(rows, name, path, option, fieldnames=None):
    if name is None:
        raise CommandError(f"{path} needs {option} to say which column holds the text")
    if fieldnames is not None and name not in fieldnames:
        raise CommandError(f"{path} has no column {name!r}; columns: {', '.join(fieldnames)}")
    values = []
    for number, row in enumerate(rows, start=1):
        if name not in row:
            raise CommandError(f"{path} record {number} has no field {name!r}")
        values.append(row[name])
    return values


def _vectorizer(args, **overrides):
    from skbert import BertVectorizer

    params = dict(model=args.model, max_length=args.max_length, truncation=args.truncation,
                  batch_size=args.batch_size, device=args.device, dtype=args.dtype, verbose=True)
    params.update(overrides)
    return BertVectorizer(**params)


def embed(args):
    """``skbert embed``: texts -> features file (.npy, or .parquet with pyarrow)."""
    import numpy as np

    output = Path(args.output)
    if output.suffix not in (".npy", ".parquet"):
        raise CommandError(f"output {str(output)!r} must end in .npy or .parquet")
    texts = read_texts(args.input, args.text_column, args.text_field)
    norm = None if args.norm == "none" else args.norm
    vectorizer = _vectorizer(args, layer=args.layer, pooling=args.pooling, norm=norm).fit()
    features = vectorizer.transform(texts)
    if output.suffix == ".npy":
        np.save(output, features)
    else:
        try:
            import pandas as pd
            import pyarrow  # noqa: F401
        except ImportError:
            raise CommandError("writing .parquet needs pandas and pyarrow: "
                               "pip install pandas pyarrow") from None
        pd.DataFrame(features, columns=vectorizer.get_feature_names_out()).to_parquet(output)
    print(f"wrote {features.shape[0]} x {features.shape[1]} features to {output}", file=sys.stderr)


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
    report = layer_report(_vectorizer(args), texts, labels, layers=args.layers,
                          poolings=args.poolings, cv=args.cv, verbose=True)
    out = Path(args.out)
    table = out.with_suffix(".csv")
    report.to_csv(table)
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
        description="Embed texts with BertVectorizer; the output equals its transform.")
    embed_parser.add_argument("input", help=".txt (one text per line), .csv/.tsv, .jsonl, or - "
                                            "for standard input")
    embed_parser.add_argument("-o", "--output", required=True, help=".npy or .parquet file")
    embed_parser.add_argument("--text-column", help="column of a .csv/.tsv input")
    embed_parser.add_argument("--text-field", help="field of a .jsonl input")
    embed_parser.add_argument("--layer", type=parse_layer, default=-1,
                              help="int, comma list of ints, or 'all' (default: -1)")
    embed_parser.add_argument("--pooling", default="mean", choices=POOLINGS,
                              help="default: %(default)s")
    embed_parser.add_argument("--norm", default="none", choices=["none", "l1", "l2", "max"],
                              help="row normalization (default: %(default)s)")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
