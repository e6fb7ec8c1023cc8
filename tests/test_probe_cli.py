"""skbert.probe (layer x pooling report, heatmap) and the skbert command line."""

import json
import re
import subprocess
import sys

import matplotlib
import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score

from skbert import BertVectorizer, _cli
from skbert.probe import layer_report, plot_layer_report

matplotlib.use("Agg")

POSITIVE = ["good movie", "great film", "a great good movie", "good good", "great", "good film"]
NEGATIVE = ["awful movie", "bad film", "a bad awful film", "bad bad", "awful", "bad movie"]
X, Y = POSITIVE + NEGATIVE, ["pos"] * 6 + ["neg"] * 6


def test_layer_report_cells_equal_cross_validation(tiny_model_dir):
    estimator = LogisticRegression()
    report = layer_report(BertVectorizer(tiny_model_dir), X, Y, poolings=["cls", "mean"],
                          estimator=estimator, cv=3)
    assert list(report.index) == [0, 1, 2] and list(report.columns) == ["cls", "mean"]
    features = BertVectorizer(tiny_model_dir, layer=1, pooling="mean").fit().transform(X)
    expected = cross_val_score(estimator, features, Y, cv=3)
    assert report.loc[1, "mean"] == pytest.approx(expected.mean())
    assert report.attrs["std"].loc[1, "mean"] == pytest.approx(expected.std())


def test_layer_report_negative_layers_and_default_estimator(tiny_model_dir):
    report = layer_report(BertVectorizer(tiny_model_dir), X, Y, layers=[-1, 0],
                          poolings=["max"], cv=2)
    assert list(report.index) == [2, 0] and report.notna().all().all()


def test_plot_layer_report_marks_the_best_cell(tmp_path):
    report = pd.DataFrame([[0.5, 0.7], [0.9, 0.6]], index=pd.Index([0, 1], name="layer"),
                          columns=pd.Index(["cls", "mean"], name="pooling"))
    ax = plot_layer_report(report)
    assert ax.get_title().startswith("best: layer 1, cls (0.900)")
    assert len(ax.texts) == 4 and len(ax.patches) == 1
    ax.figure.savefig(tmp_path / "report.png")
    assert (tmp_path / "report.png").stat().st_size > 5000


# --- command line ------------------------------------------------------------------------------

def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "skbert._cli", *map(str, args)],
                          capture_output=True, text=True)


def test_embed_text_file_equals_transform(tiny_model_dir, tmp_path, texts):
    source = tmp_path / "texts.txt"
    lines = [t for t in texts if t]  # one text per line
    source.write_text("\n".join(lines) + "\n")
    assert _cli.main(["embed", str(source), "-o", str(tmp_path / "out.npy"), "--model",
                      tiny_model_dir, "--pooling", "cls", "--layer", "-2", "--norm", "l2"]) == 0
    expected = BertVectorizer(tiny_model_dir, pooling="cls", layer=-2, norm="l2").fit()
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), expected.transform(lines))


def test_embed_csv_jsonl_and_parquet(tiny_model_dir, tmp_path):
    pd.DataFrame({"id": [1, 2], "body": ["the cat", "a dog, sat"]}).to_csv(
        tmp_path / "in.csv", index=False)
    (tmp_path / "in.jsonl").write_text("\n".join(json.dumps({"body": t})
                                                 for t in ["the cat", "a dog, sat"]))
    common = ["--model", tiny_model_dir, "--layer", "0,-1"]
    assert _cli.main(["embed", str(tmp_path / "in.csv"), "-o", str(tmp_path / "a.npy"),
                      "--text-column", "body", *common]) == 0
    assert _cli.main(["embed", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "b.parquet"),
                      "--text-field", "body", *common]) == 0
    expected = BertVectorizer(tiny_model_dir, layer=[0, -1]).fit().transform(["the cat",
                                                                             "a dog, sat"])
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), expected)
    np.testing.assert_array_equal(pd.read_parquet(tmp_path / "b.parquet").to_numpy(), expected)


def test_embed_reads_standard_input(tiny_model_dir, tmp_path):
    result = subprocess.run([sys.executable, "-m", "skbert._cli", "embed", "-", "-o",
                             str(tmp_path / "out.npy"), "--model", tiny_model_dir],
                            input="the cat\na dog\n", capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert np.load(tmp_path / "out.npy").shape == (2, 32)


@pytest.mark.parametrize("args, message", [
    (["embed", "missing.txt", "-o", "x.npy"], "input file 'missing.txt' does not exist"),
    (["embed", "{csv}", "-o", "x.npy", "--text-column", "nope"],
     "has no column 'nope'; columns: id, body"),
    (["embed", "{csv}", "-o", "x.npy"], "needs --text-column"),
    (["embed", "{csv}", "-o", "x.txt", "--text-column", "body"], "must end in .npy or .parquet"),
    (["embed", "{csv}", "-o", "{tmp}/x.npy", "--text-column", "body", "--model",
      "{tmp}/no-model"], "Model directory '.*no-model' does not exist"),
    (["probe", "{csv}", "--text-column", "body"], "probe needs --text-column and --label-column"),
])
def test_errors_are_one_line(tmp_path, capsys, args, message):
    pd.DataFrame({"id": [1], "body": ["x"]}).to_csv(tmp_path / "in.csv", index=False)
    args = [a.format(csv=tmp_path / "in.csv", tmp=tmp_path) for a in args]
    assert _cli.main(args) == 1
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1
    assert re.search(message, error), error


def test_a_missing_file_exits_nonzero_without_traceback():
    result = run_cli("embed", "missing.txt", "-o", "x.npy")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip() == "skbert embed: error: input file 'missing.txt' does not exist"


@pytest.mark.parametrize("option, message", [(["--pooling", "avg"], "invalid choice: 'avg'"),
                                              (["--layer", "top"], "'top' is not an int")])
def test_bad_option_value_exits_with_usage(capsys, option, message):
    with pytest.raises(SystemExit) as exit_info:
        _cli.main(["embed", "x.txt", "-o", "y.npy", *option])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_help_documents_every_option(capsys):
    for command in ("embed", "probe"):
        with pytest.raises(SystemExit):
            _cli.main([command, "--help"])
    text = capsys.readouterr().out
    for option in ("--model", "--layer", "--pooling", "--norm", "--max-length", "--truncation",
                   "--batch-size", "--device", "--dtype", "--text-column", "--text-field",
                   "--label-column", "--layers", "--poolings", "--cv", "--out"):
        assert option in text


def test_probe_writes_png_and_csv(tiny_model_dir, tmp_path, capsys):
    pd.DataFrame({"text": X, "label": Y}).to_csv(tmp_path / "data.csv", index=False)
    assert _cli.main(["probe", str(tmp_path / "data.csv"), "--text-column", "text",
                      "--label-column", "label", "--model", tiny_model_dir, "--cv", "2",
                      "--poolings", "cls,mean", "--out", str(tmp_path / "report.png")]) == 0
    assert "best: layer=" in capsys.readouterr().out
    assert (tmp_path / "report.png").stat().st_size > 5000
    table = pd.read_csv(tmp_path / "report.csv", index_col=0)
    assert table.shape == (3, 2)
