"""The files of the ``skbert`` command: texts and labels read from .txt, .csv, .tsv and .jsonl
inputs, and features written to .npy or .parquet outputs that an interrupted run resumes.

Every record of an input is checked as it is read: a missing or non-string text is an error
that names the file, the record and the value, or is handled as ``--missing`` says. Partial
outputs are checked on ``--resume`` against a checksum per chunk kept in the progress file.
"""

import csv
import io
import itertools
import json
import os
import reprlib
import shutil
import sys
import zlib
from pathlib import Path

import numpy as np
from numpy.lib.format import open_memmap

from skbert._encoder._files import atomic_file

# Row indices written at a time by --missing skip: memory does not grow with the input.
_INDEX_BLOCK = 64 * 1024


class CommandError(Exception):
    """A problem with the command's input, reported as one line without a traceback."""


def iter_texts(path, text_column=None, text_field=None, missing="error"):
    r"""``(index, text)`` for each text of a file, one at a time; ``index`` counts records from 0.

    A record is a line of a .txt (split at "\n" and "\r\n" only; an empty line
    is the text ""), a row of a .csv/.tsv after its header, or a non-blank line
    of a .jsonl. A missing text (an empty or absent cell; a field that is absent,
    null or not a str) raises CommandError with ``missing="error"``, is the text
    "" with ``"empty"`` and is left out with ``"skip"``.
    """
    return ((index, text) for index, text in all_records(path, text_column, text_field, missing)
            if text is not None)


def all_records(path, text_column, text_field, missing):
    """``(index, text)`` for every record of a file; text is None where ``missing="skip"``."""
    path = _existing(path)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".tsv", ".jsonl"):
        with open(path, encoding="utf-8", newline="\n") as file:  # a lone "\r" is no line end
            yield from enumerate(_line_texts(file))
        return
    name, option = ((text_field, "--text-field") if suffix == ".jsonl" else
                    (text_column, "--text-column"))
    if name is None:
        raise CommandError(f"{path} needs {option} to say which column holds the text")
    for index, (where, row) in enumerate(_records(path, [name])):
        problem = _missing(row, name, "text", suffix != ".jsonl")
        if problem is None:
            yield index, row[name]
        elif missing == "error":
            raise CommandError(f"{where}: {problem}; every text must be a str (see --missing)")
        else:
            yield index, "" if missing == "empty" else None


def _existing(path):
    path = Path(path)
    if not path.is_file():
        raise CommandError(f"input file {str(path)!r} does not exist")
    return path


def _line_texts(lines):
    r"""The texts of lines split at "\n": the "\n" or "\r\n" that ends a line is not in its text."""
    for line in lines:
        yield line[:-1].removesuffix("\r") if line.endswith("\n") else line


def stdin_lines():
    r"""Lines of standard input, split at "\n" only (``sys.stdin`` splits at a lone "\r" too)."""
    if not hasattr(sys.stdin, "buffer"):  # a text stream put in its place, such as io.StringIO
        yield from sys.stdin
        return
    stream = io.TextIOWrapper(sys.stdin.buffer, encoding=sys.stdin.encoding,
                              errors=sys.stdin.errors, newline="\n")
    try:
        yield from stream
    finally:
        stream.detach()  # closing the wrapper would close standard input


def _records(path, names):
    """``(where, row)`` for each record of a .csv/.tsv/.jsonl file that has the columns ``names``.

    ``where`` locates the record for messages: "in.csv row 2 (line 3)" (rows
    count from 1 after the header), "in.jsonl line 3".
    """
    suffix = path.suffix.lower()
    with open(path, encoding="utf-8", newline="\n" if suffix == ".jsonl" else "") as file:
        if suffix == ".jsonl":
            for number, line in enumerate(file, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise CommandError(f"{path} line {number} is not JSON ({exc})") from None
                if not isinstance(row, dict):
                    raise CommandError(f"{path} line {number} is {_json_kind(row)}, not a JSON "
                                       "object")
                yield f"{path} line {number}", row
            return
        reader = csv.DictReader(file, delimiter="\t" if suffix == ".tsv" else ",")
        fieldnames = reader.fieldnames or []
        for name in names:
            if name not in fieldnames:
                raise CommandError(f"{path} has no column {name!r}; columns: "
                                   f"{', '.join(fieldnames)}")
        for number, row in enumerate(reader, start=1):
            yield f"{path} row {number} (line {reader.line_num})", row


def _missing(row, name, what, tabular):
    """Why ``row[name]`` is no ``what`` ("text" or "label"), in words; None when it is one.

    In a .csv/.tsv an empty cell is missing, as a short row's absent cell is:
    CSV cannot tell an empty text from no text (pandas reads both as NaN). A
    text must be a str; a label may be any JSON value but null.
    """
    where = f"the {what} {'column' if tabular else 'field'} {name!r}"
    value = row.get(name)
    if name not in row or (tabular and value is None):
        return f"{where} is missing" + (" (the row is short)" if tabular else "")
    if tabular and value == "":
        return f"{where} is empty (an empty cell counts as missing)"
    if value is None or (what == "text" and not isinstance(value, str)):
        return f"{where} is {_json_kind(value)} ({reprlib.repr(value)})"
    return None


def _json_kind(value):
    kinds = {type(None): "null", bool: "a boolean", int: "a number", float: "a number",
             str: "a string", list: "a list", dict: "an object"}
    return kinds.get(type(value), type(value).__name__)


def _checksum(rows):
    """CRC-32 of rows as their float32 bytes, row after row."""
    return zlib.crc32(np.ascontiguousarray(rows, dtype=np.float32))


def verified_rows(writer, chunks):
    """Rows that the chunks kept by an interrupted run still hold as written: up to the first
    chunk whose rows do not match its checksum (or cannot be read)."""
    for start, length, checksum in chunks:
        try:
            rows = writer.read(start, length)
            intact = len(rows) == length and _checksum(rows) == checksum
        except (OSError, ValueError):  # pyarrow's ArrowInvalid is a ValueError
            intact = False
        if not intact:
            print(f"skbert embed: rows {start} to {start + length - 1} of the partial output "
                  f"are not as written; computing them again, from row {start}", file=sys.stderr)
            return start
    return start + length


def write_row_index(path, indices, n_rows):
    """The ``n_rows`` ``indices`` to a .npy of int64, a block at a time, so memory does not grow
    with them."""
    header, n_written = {"descr": "<i8", "fortran_order": False, "shape": (n_rows,)}, 0
    with atomic_file(path) as file:
        np.lib.format.write_array_header_1_0(file, header)
        while len(block := np.fromiter(itertools.islice(indices, _INDEX_BLOCK), "<i8")):
            file.write(block.tobytes())
            n_written += len(block)
        if n_written != n_rows:
            raise CommandError(f"the input changed while it was read: {n_written} texts now, "
                               f"{n_rows} before; {str(path)!r} is not written")


class Progress:
    """``<output>.progress.json``: the chunks written so far, for which input and options.

    Each chunk is ``[start, rows, CRC-32 of its float32 rows]``. The file is
    replaced atomically, and only after the rows it counts are on disk.
    """

    def __init__(self, output, source, settings):
        self.output, self.path = output, output.with_name(output.name + ".progress.json")
        self.record = {"input": source, "settings": settings, "chunks": []}

    def resume(self):
        """The chunks written by the interrupted run ([] if there is none to resume)."""
        if not self.path.is_file():
            print(f"skbert embed: nothing to resume for {self.output}; starting from the "
                  "first text", file=sys.stderr)
            return []
        where = f"cannot resume {str(self.output)!r}:"
        try:
            saved = json.loads(self.path.read_text(encoding="utf-8"))
        except OSError as exc:
            damage = str(exc)
        except ValueError as exc:  # not JSON, or not UTF-8
            damage = f"not JSON: {exc}"
        else:
            damage = _damage(saved)
        if damage:
            raise CommandError(f"{where} its progress file {str(self.path)!r} is damaged "
                               f"({damage}); delete it, or run without --resume to start again")
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
        self.record["chunks"] = saved["chunks"]
        return saved["chunks"]

    def keep(self, done):
        """Forget the chunks from row ``done`` on: they are written again."""
        self.record["chunks"] = [chunk for chunk in self.record["chunks"] if chunk[0] < done]

    def add(self, start, features):
        """Record the chunk of rows just written from row ``start``."""
        self.record["chunks"].append([start, len(features), _checksum(features)])
        self.save()

    def save(self):
        with atomic_file(self.path, text=True, fsync=True) as file:
            json.dump(self.record, file)

    def remove(self):
        self.path.unlink(missing_ok=True)


def _damage(record):
    """What is wrong with a progress record read back, in words; None if nothing."""
    if not isinstance(record, dict):
        return f"it holds {_json_kind(record)}, not a JSON object"
    source, chunks = record.get("input"), record.get("chunks")
    if not (isinstance(source, dict) and isinstance(source.get("input"), str)
            and type(source.get("texts")) is int and isinstance(source.get("digest"), str)):
        return "no 'input' object with 'input', 'texts' and 'digest'"
    if not isinstance(record.get("settings"), dict):
        return "no 'settings' object"
    if not isinstance(chunks, list):
        return "no 'chunks' list"
    end = 0
    for chunk in chunks:
        if not (isinstance(chunk, list) and len(chunk) == 3
                and all(type(value) is int for value in chunk)
                and chunk[0] == end and chunk[1] > 0):
            return f"chunk {reprlib.repr(chunk)} is not [start, rows, checksum] from row {end}"
        end += chunk[1]
    if end > source["texts"]:
        return f"its chunks hold {end} rows, of {source['texts']} texts"
    return None


class NpyWriter:
    """Rows into ``<output>.partial``, a .npy file made with its final shape; renamed at the end.

    Each chunk maps the file, writes (or reads) its rows, flushes and unmaps, so
    written pages do not stay in this process's memory.
    """

    def __init__(self, output, n_rows, names):
        self.output, self.partial = output, output.with_name(output.name + ".partial")
        self.shape = (n_rows, len(names))

    def create(self):
        open_memmap(self.partial, mode="w+", dtype=np.float32, shape=self.shape).flush()

    def reopen(self):
        where = f"cannot resume {str(self.output)!r}:"
        if not self.partial.is_file():
            raise CommandError(f"{where} the partial output {str(self.partial)!r} is missing; "
                               "run without --resume")
        try:
            found = open_memmap(self.partial, mode="r").shape
        except (OSError, ValueError) as exc:
            raise CommandError(f"{where} the partial output {str(self.partial)!r} is not a "
                               f"readable .npy ({exc}); run without --resume") from None
        if found != self.shape:
            raise CommandError(f"{where} {str(self.partial)!r} holds {found}, expected "
                               f"{self.shape}; run without --resume")

    def read(self, start, length):
        return np.array(open_memmap(self.partial, mode="r")[start:start + length])

    def discard_from(self, start):
        """Nothing to do: the rows from ``start`` are written again in place."""

    def write(self, start, features):
        rows = open_memmap(self.partial, mode="r+")
        rows[start:start + len(features)] = features
        rows.flush()  # unmapped on return

    def finish(self):
        os.replace(self.partial, self.output)


class ParquetWriter:
    """Each chunk as a parquet file in ``<output>.parts/``, merged into one file at the end.

    A parquet file cannot take more row groups once closed, and an unclosed one
    is unreadable, so the chunks are separate files until the run completes;
    the merge streams them, one row group each, into the output.
    """

    def __init__(self, output, n_rows, names):
        self.output, self.n_rows, self.names = output, n_rows, list(names)
        self.parts = output.with_name(output.name + ".parts")

    def create(self):
        shutil.rmtree(self.parts, ignore_errors=True)
        self.parts.mkdir()

    def reopen(self):
        if not self.parts.is_dir():
            raise CommandError(f"cannot resume {str(self.output)!r}: the partial output "
                               f"{str(self.parts)!r} is missing; run without --resume")

    def _part_files(self):
        return sorted((int(path.stem.split("-")[1]), path)
                      for path in self.parts.glob("part-*.parquet"))

    def read(self, start, length):
        import pyarrow.parquet as pq

        table = pq.read_table(self.parts / f"part-{start:012d}.parquet")
        return np.column_stack([column.to_numpy() for column in table.columns])

    def discard_from(self, start):
        """Remove the parts from row ``start`` on, written after the last intact one."""
        for part_start, path in self._part_files():
            if part_start >= start:
                path.unlink()

    def write(self, start, features):
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table(dict(zip(self.names, features.T)))
        with atomic_file(self.parts / f"part-{start:012d}.parquet", fsync=True) as file:
            pq.write_table(table, file)

    def finish(self):
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pa.schema([(name, pa.float32()) for name in self.names])
        expected = 0
        with atomic_file(self.output) as merged, pq.ParquetWriter(merged, schema) as writer:
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
        shutil.rmtree(self.parts)


def read_examples(path, text_column, label_column, missing):
    """Texts and labels of a labelled file; a missing one is handled as ``missing`` says.

    ``"empty"`` applies to texts: an example without a label is still an error,
    as no label stands for a missing one.
    """
    path = _existing(path)
    tabular, texts, labels, n_records = path.suffix.lower() != ".jsonl", [], [], 0
    for where, row in _records(path, [text_column, label_column]):
        n_records += 1
        text_problem = _missing(row, text_column, "text", tabular)
        label_problem = _missing(row, label_column, "label", tabular)
        if text_problem and missing == "error":
            raise CommandError(f"{where}: {text_problem}; every text must be a str "
                               "(see --missing)")
        if label_problem and missing != "skip":
            raise CommandError(f"{where}: {label_problem}; every example needs a label "
                               "(--missing skip leaves such examples out)")
        if not (text_problem or label_problem) or missing == "empty":
            texts.append("" if text_problem else row[text_column])
            labels.append(row[label_column])
    if len(texts) < n_records:
        print(f"skbert probe: left out {n_records - len(texts)} of {n_records} examples with a "
              "missing text or label (--missing skip)", file=sys.stderr)
    return texts, labels
