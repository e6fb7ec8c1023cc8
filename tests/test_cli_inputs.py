"""skbert embed / probe inputs: missing texts and labels, line ends, checked resumes."""

import argparse
import io
import json
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from numpy.lib.format import open_memmap

from skbert import BertVectorizer
from skbert._cli import _command, _inputs
from tests.test_probe_cli import LINES, counting_transform

POSITIVE = ["good movie", "great film", "a great good movie", "good good", "great", "good film"]
NEGATIVE = ["awful movie", "bad film", "a bad awful film", "bad bad", "awful", "bad movie"]


def read_texts(path, text_column=None, missing="error"):
    return [text for _, text in _inputs.iter_texts(path, text_column, None, missing)]


def embed(*args):
    return _command.main(["embed", *map(str, args)])


def transform(model, texts):
    # Without the process-wide cache: its entries would change the batches, and so the last
    # bits, of other tests' exact comparisons.
    return BertVectorizer(model, cache=False).fit().transform(texts)


def read(path):
    return np.load(path) if path.suffix == ".npy" else pd.read_parquet(path).to_numpy()


def one_line_error(capsys):
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1, error
    return error


# --- missing texts -----------------------------------------------------------------------------

# Each input holds the texts "the cat", <missing>, "a dog", one record each.
MISSING_INPUTS = {
    "empty cell": ("in.csv", "id,body\n1,the cat\n2,\n3,a dog\n",
                   r"in\.csv row 2 \(line 3\): the text column 'body' is empty \(an empty cell "
                   r"counts as missing\); every text must be a str \(see --missing\)"),
    "short row": ("in.csv", "id,body\n1,the cat\n2\n3,a dog\n",
                  r"in\.csv row 2 \(line 3\): the text column 'body' is missing \(the row is "
                  r"short\)"),
    "tsv empty cell": ("in.tsv", "id\tbody\n1\tthe cat\n2\t\n3\ta dog\n",
                       r"in\.tsv row 2 \(line 3\): the text column 'body' is empty"),
    # The blank line counts for line numbers, not for records.
    "null": ("in.jsonl", '{"body": "the cat"}\n\n{"body": null}\n{"body": "a dog"}\n',
             r"in\.jsonl line 3: the text field 'body' is null \(None\); every text must be a "
             r"str \(see --missing\)"),
    "number": ("in.jsonl", '{"body": "the cat"}\n{"body": 123}\n{"body": "a dog"}\n',
               r"in\.jsonl line 2: the text field 'body' is a number \(123\); every text must "
               r"be a str"),
    "list": ("in.jsonl", '{"body": "the cat"}\n{"body": ["a", 1]}\n{"body": "a dog"}\n',
             r"in\.jsonl line 2: the text field 'body' is a list \(\['a', 1\]\)"),
    "absent field": ("in.jsonl", '{"body": "the cat"}\n{"id": 2}\n{"body": "a dog"}\n',
                     r"in\.jsonl line 2: the text field 'body' is missing; every text"),
}


def write_input(tmp_path, case):
    name, content, message = MISSING_INPUTS[case]
    source = tmp_path / name
    source.write_text(content, encoding="utf-8")
    column = "--text-field" if name.endswith(".jsonl") else "--text-column"
    return source, [column, "body"], message


@pytest.mark.parametrize("case", MISSING_INPUTS)
def test_a_missing_text_is_an_error_naming_file_row_and_value(tiny_model_dir, tmp_path, capsys,
                                                              case):
    source, column, message = write_input(tmp_path, case)
    output = tmp_path / "out.npy"
    assert embed(source, "-o", output, *column, "--model", tiny_model_dir) == 1
    error = one_line_error(capsys)
    assert error.startswith("skbert embed: error: ") and re.search(message, error), error
    assert not output.exists()


@pytest.mark.parametrize("case", ["empty cell", "short row", "null", "number", "absent field"])
def test_missing_empty_embeds_the_empty_text(tiny_model_dir, tmp_path, case):
    source, column, _ = write_input(tmp_path, case)
    output = tmp_path / "out.npy"
    assert embed(source, "-o", output, *column, "--model", tiny_model_dir,
                 "--missing", "empty") == 0
    expected = transform(tiny_model_dir, ["the cat", "", "a dog"])
    np.testing.assert_allclose(np.load(output), expected, atol=1e-6)


@pytest.mark.parametrize("suffix", [".npy", ".parquet"])
def test_missing_skip_leaves_rows_out_and_writes_their_positions(tiny_model_dir, tmp_path,
                                                                 capsys, suffix):
    texts = ["the cat", None, "a dog", "good film", None]  # the last one: a trailing skip
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"body": text}) + "\n" for text in texts))
    output = tmp_path / f"out{suffix}"
    assert embed(source, "-o", output, "--text-field", "body", "--model", tiny_model_dir,
                 "--missing", "skip", "--chunk-size", "2") == 0
    assert "(2 of 5 left out by --missing skip)" in capsys.readouterr().err
    rows = np.load(tmp_path / f"out{suffix}.rows.npy")
    assert rows.dtype == np.int64 and rows.tolist() == [0, 2, 3]
    expected = transform(tiny_model_dir, ["the cat", "a dog", "good film"])
    np.testing.assert_allclose(read(output), expected, atol=1e-6)
    # Without skip, the rows are the input's: a row index from the run before would mislead.
    assert embed(source, "-o", output, "--text-field", "body", "--model", tiny_model_dir,
                 "--missing", "empty") == 0
    assert not (tmp_path / f"out{suffix}.rows.npy").exists() and len(read(output)) == 5


def test_iter_texts_gives_positions_of_the_texts_kept(tmp_path):
    source = tmp_path / "in.csv"
    source.write_text("body\nthe cat\n\n\"\"\na dog\n")  # DictReader skips the blank line
    assert list(_inputs.iter_texts(source, "body", missing="skip")) == [(0, "the cat"),
                                                                      (2, "a dog")]
    assert read_texts(source, "body", missing="empty") == ["the cat", "", "a dog"]


@pytest.mark.parametrize("line, message", [
    ('{"body": ', r"in\.jsonl line 2 is not JSON \(Expecting value"),
    ('["the cat"]', r"in\.jsonl line 2 is a list, not a JSON object"),
])
def test_a_jsonl_line_that_is_no_json_object_is_named(tiny_model_dir, tmp_path, capsys, line,
                                                      message):
    (tmp_path / "in.jsonl").write_text('{"body": "the cat"}\n' + line + "\n")
    assert embed(tmp_path / "in.jsonl", "-o", tmp_path / "out.npy", "--text-field", "body",
                 "--model", tiny_model_dir) == 1
    assert re.search(message, one_line_error(capsys))


# --- probe -------------------------------------------------------------------------------------

def probe(tiny_model_dir, tmp_path, *options):
    return _command.main(["probe", str(tmp_path / "data.csv"), "--text-column", "text",
                      "--label-column", "label", "--model", tiny_model_dir, "--cv", "2",
                      "--layers", "0", "--poolings", "mean", "--out",
                      str(tmp_path / "report.png"), *options])


def test_probe_a_missing_label_is_an_error_unless_skipped(tiny_model_dir, tmp_path, capsys):
    # Row 13 has no label; row 14, no text.
    pd.DataFrame({"text": POSITIVE + NEGATIVE + ["good great film", None],
                  "label": ["pos"] * 6 + ["neg"] * 6 + [None, "neg"]}).to_csv(
        tmp_path / "data.csv", index=False)
    for missing in ("error", "empty"):  # "" is no label, so empty does not apply to labels
        assert probe(tiny_model_dir, tmp_path, "--missing", missing) == 1
        assert re.search(r"data\.csv row 13 \(line 14\): the label column 'label' is empty \(an "
                         r"empty cell counts as missing\); every example needs a label "
                         r"\(--missing skip leaves such examples out\)", one_line_error(capsys))
    assert probe(tiny_model_dir, tmp_path, "--missing", "skip") == 0
    assert "left out 2 of 14 examples with a missing text or label (--missing skip)" in \
        capsys.readouterr().err
    assert _inputs.read_examples(tmp_path / "data.csv", "text", "label", "skip") == (
        POSITIVE + NEGATIVE, ["pos"] * 6 + ["neg"] * 6)


def test_probe_jsonl_missing_text_is_an_error_and_labels_may_be_numbers(tmp_path):
    (tmp_path / "data.jsonl").write_text('{"text": "good", "label": 1}\n'
                                         '{"text": null, "label": 0}\n')
    with pytest.raises(_inputs.CommandError, match=r"data\.jsonl line 2: the text field "
                                                      r"'text' is null \(None\); every text "
                                                      r"must be a str"):
        _inputs.read_examples(tmp_path / "data.jsonl", "text", "label", "error")
    assert _inputs.read_examples(tmp_path / "data.jsonl", "text", "label", "empty") == (
        ["good", ""], [1, 0])


# --- resume ------------------------------------------------------------------------------------

def interrupted_run(monkeypatch, source, output, *options):
    """An embed run of LINES in chunks of 8, interrupted in its third chunk (16 rows written)."""
    source.write_text("\n".join(LINES) + "\n")
    with monkeypatch.context() as patch:
        counting_transform(patch, interrupt_at=3)
        assert embed(source, "-o", output, "--chunk-size", "8", *options) == 130
    assert not output.exists()


def zero_npy_chunk(output):
    rows = open_memmap(output.with_name(output.name + ".partial"), mode="r+")
    rows[8:16] = 0
    rows.flush()


def zero_parquet_part(output):  # a readable part whose rows are not those written
    part = output.with_name(output.name + ".parts") / "part-000000000008.parquet"
    pd.DataFrame(np.zeros((8, 32), np.float32), columns=pd.read_parquet(part).columns).to_parquet(
        part, index=False)


def garble_parquet_part(output):
    part = output.with_name(output.name + ".parts") / "part-000000000008.parquet"
    part.write_bytes(b"not parquet")


@pytest.mark.parametrize("suffix, damage", [(".npy", zero_npy_chunk),
                                            (".parquet", zero_parquet_part),
                                            (".parquet", garble_parquet_part)])
def test_resume_computes_damaged_rows_again(tiny_model_dir, tmp_path, monkeypatch, capsys,
                                            suffix, damage):
    source, output = tmp_path / "in.txt", tmp_path / f"out{suffix}"
    options = ["--model", tiny_model_dir, "--chunk-size", "8"]
    interrupted_run(monkeypatch, source, output, *options)
    damage(output)
    capsys.readouterr()
    calls = counting_transform(monkeypatch)
    assert embed(source, "-o", output, "--resume", *options) == 0
    assert "skbert embed: rows 8 to 15 of the partial output are not as written; computing " \
           "them again, from row 8\n" in capsys.readouterr().err
    assert calls["rows"] == 50 - 8
    assert embed(source, "-o", tmp_path / f"whole{suffix}", *options) == 0
    np.testing.assert_allclose(read(output), read(tmp_path / f"whole{suffix}"), atol=1e-6)


def test_resume_keeps_intact_rows(tiny_model_dir, tmp_path, monkeypatch, capsys):
    source, output = tmp_path / "in.txt", tmp_path / "out.npy"
    options = ["--model", tiny_model_dir, "--chunk-size", "8"]
    interrupted_run(monkeypatch, source, output, *options)
    record = json.loads((tmp_path / "out.npy.progress.json").read_text())
    assert [chunk[:2] for chunk in record["chunks"]] == [[0, 8], [8, 8]]
    calls = counting_transform(monkeypatch)
    assert embed(source, "-o", output, "--resume", *options) == 0
    assert calls["rows"] == 50 - 16 and "not as written" not in capsys.readouterr().err


@pytest.mark.parametrize("content, damage", [
    ('{"input": {"input": "in.txt", "texts": ', r"not JSON: Expecting value"),
    ("[1, 2]", r"it holds a list, not a JSON object"),
    ('{"input": 1}', r"no 'input' object with 'input', 'texts' and 'digest'"),
    ("VALID", r"no 'chunks' list"),  # the record of a real run, less its chunks
    ("VALID-BAD-CHUNK", r"chunk \['0', 8, 1\] is not \[start, rows, checksum\] from row 0"),
])
def test_a_damaged_progress_file_is_a_clear_error(tiny_model_dir, tmp_path, monkeypatch, capsys,
                                                  content, damage):
    source, output = tmp_path / "in.txt", tmp_path / "out.npy"
    options = ["--model", tiny_model_dir, "--chunk-size", "8"]
    interrupted_run(monkeypatch, source, output, *options)
    progress = tmp_path / "out.npy.progress.json"
    if content.startswith("VALID"):
        record = json.loads(progress.read_text())
        record.pop("chunks")
        if content == "VALID-BAD-CHUNK":
            record["chunks"] = [["0", 8, 1]]
        content = json.dumps(record)
    progress.write_text(content)
    capsys.readouterr()
    assert embed(source, "-o", output, "--resume", *options) == 1
    error = one_line_error(capsys)
    assert re.search(r"cannot resume '.*out\.npy': its progress file '.*out\.npy\.progress\.json' "
                     rf"is damaged \(.*({damage}).*\); delete it, or run without --resume to "
                     r"start again", error), error
    progress.unlink()  # as the message says
    assert embed(source, "-o", output, "--resume", *options) == 0
    assert "nothing to resume" in capsys.readouterr().err and len(np.load(output)) == 50


def test_resume_refused_when_missing_changed(tiny_model_dir, tmp_path, monkeypatch, capsys):
    source, output = tmp_path / "in.txt", tmp_path / "out.npy"
    options = ["--model", tiny_model_dir, "--chunk-size", "8"]
    interrupted_run(monkeypatch, source, output, *options)
    capsys.readouterr()
    assert embed(source, "-o", output, "--resume", "--missing", "skip", *options) == 1
    assert re.search(r"options changed since the interrupted run \(--missing 'error' -> "
                     r"'skip'\)", one_line_error(capsys))


def test_resume_refused_when_the_tokenizer_changed(tiny_model_dir, tmp_path, monkeypatch,
                                                   capsys):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    source, output = tmp_path / "in.txt", tmp_path / "out.npy"
    options = ["--model", model, "--chunk-size", "8"]
    interrupted_run(monkeypatch, source, output, *options)
    settings = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**settings, "model_max_length": 16}))
    capsys.readouterr()
    assert embed(source, "-o", output, "--resume", *options) == 1
    assert re.search(r"options changed since the interrupted run \(the model's tokenizer '\w+' "
                     r"-> '\w+'\)", one_line_error(capsys))


def test_a_failed_parquet_merge_leaves_no_partial_output(tmp_path):
    pytest.importorskip("pyarrow")
    output = tmp_path / "out.parquet"
    writer = _inputs.ParquetWriter(output, 3, ["f0", "f1"])
    writer.create()
    writer.write(0, np.ones((2, 2), np.float32))
    with pytest.raises(_inputs.CommandError, match=r"'.*out\.parquet\.parts' holds 2 rows, "
                                                      r"expected 3; run without --resume"):
        writer.finish()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out.parquet.parts"]
    assert [path.name for path in writer.parts.iterdir()] == ["part-000000000000.parquet"]


def test_a_failed_progress_save_keeps_the_last_record(tmp_path):
    progress = _inputs.Progress(tmp_path / "out.npy", {"input": "in.txt", "texts": 2,
                                                          "digest": "d"}, {"--layer": -1})
    progress.save()
    saved = progress.path.read_text()
    progress.record["settings"]["--layer"] = object()  # no JSON for it: the dump fails midway
    with pytest.raises(TypeError, match="Object of type object is not JSON serializable"):
        progress.save()
    assert [path.name for path in tmp_path.iterdir()] == ["out.npy.progress.json"]
    assert progress.path.read_text() == saved


def test_the_row_index_is_written_whole_or_not_at_all(tmp_path):
    rows = tmp_path / "out.npy.rows.npy"
    _inputs.write_row_index(rows, iter(range(0, 200_000, 2)), 100_000)  # blocks of 65,536
    np.testing.assert_array_equal(np.load(rows), np.arange(0, 200_000, 2))
    with pytest.raises(_inputs.CommandError, match=r"the input changed while it was read: 2 "
                                                      r"texts now, 3 before; '.*rows\.npy' is not "
                                                      r"written"):
        _inputs.write_row_index(rows, iter([4, 7]), 3)
    assert [path.name for path in tmp_path.iterdir()] == ["out.npy.rows.npy"]
    assert len(np.load(rows)) == 100_000  # the last one written


# --- line ends ---------------------------------------------------------------------------------

# A lone "\r" is inside a text; "\n" and "\r\n" end lines; a last line may lack its end.
LINE_BYTES = b"the cat\rsat\na dog\r\n\nlast\r"
LINE_TEXTS = ["the cat\rsat", "a dog", "", "last\r"]


def test_a_lone_carriage_return_stays_in_a_text_file_line(tiny_model_dir, tmp_path):
    (tmp_path / "in.txt").write_bytes(LINE_BYTES)
    assert read_texts(tmp_path / "in.txt") == LINE_TEXTS
    assert embed(tmp_path / "in.txt", "-o", tmp_path / "out.npy", "--model", tiny_model_dir) == 0
    expected = transform(tiny_model_dir, LINE_TEXTS)
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, atol=1e-6)


def test_standard_input_keeps_a_lone_carriage_return(monkeypatch):
    def stdin():  # as Python opens it: universal newlines, which split at a lone "\r"
        return io.TextIOWrapper(io.BytesIO(LINE_BYTES), encoding="utf-8")

    monkeypatch.setattr(sys, "stdin", stdin())
    assert list(_inputs._line_texts(_inputs.stdin_lines())) == LINE_TEXTS
    monkeypatch.setattr(sys, "stdin", stdin())
    with _command._input_file(argparse.Namespace(input="-", resume=False)) as path:
        assert path.read_bytes() == LINE_BYTES  # the copy read twice is the input
        assert read_texts(path) == LINE_TEXTS


def test_embed_from_standard_input_keeps_a_lone_carriage_return(tiny_model_dir, tmp_path):
    result = subprocess.run([sys.executable, "-m", "skbert._cli", "embed", "-", "-o",
                             str(tmp_path / "out.npy"), "--model", tiny_model_dir],
                            input=LINE_BYTES, capture_output=True)
    assert result.returncode == 0, result.stderr.decode()
    expected = transform(tiny_model_dir, LINE_TEXTS)
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, atol=1e-6)


def help_text(capsys, command):
    with pytest.raises(SystemExit):
        _command.main([command, "--help"])
    return " ".join(capsys.readouterr().out.split())  # as one line: argparse wraps it


def test_help_says_what_missing_means_and_where_the_rows_go(capsys):
    embed_help, probe_help = help_text(capsys, "embed"), help_text(capsys, "probe")
    for text in (embed_help, probe_help):
        assert "--missing {error,empty,skip}" in text and "an empty or absent" in text
    assert "<output>.rows.npy, the int64 positions (from 0) of the input rows embedded" in \
        embed_help and 'an empty line is the text ""' in embed_help
    assert "a missing label is still an error" in probe_help
