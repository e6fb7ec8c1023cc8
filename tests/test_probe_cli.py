"""skbert.probe (layer x pooling report, heatmap) and the skbert command line."""

import json
import os
import re
import subprocess
import sys

import matplotlib
import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import (
    GroupKFold,
    LeaveOneGroupOut,
    StratifiedGroupKFold,
    cross_val_score,
)

from skbert import BertVectorizer, probe
from skbert._cli import _command
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


GROUPS = ["a", "a", "b", "b", "c", "c"] * 2  # each group: two positive, two negative texts


@pytest.fixture
def cv_calls(monkeypatch):
    """The ``cv`` and ``groups`` of every cross_val_score call of layer_report."""
    calls = []

    def spy(*args, cv, groups, **kwargs):
        calls.append((cv, groups))
        return cross_val_score(*args, cv=cv, groups=groups, **kwargs)

    monkeypatch.setattr(probe, "cross_val_score", spy)
    return calls


@pytest.mark.parametrize("estimator, labels, splitter", [
    (None, Y, StratifiedGroupKFold), (Ridge(), [1.0] * 6 + [0.0] * 6, GroupKFold)])
def test_layer_report_groups_with_a_number_of_folds_use_a_group_splitter(
        tiny_model_dir, cv_calls, estimator, labels, splitter):
    report = layer_report(BertVectorizer(tiny_model_dir), X, labels, layers=[-1],
                          poolings=["mean"], estimator=estimator, cv=3, groups=GROUPS)
    assert report.notna().all().all()
    [(cv, groups)] = cv_calls
    assert type(cv) is splitter and cv.n_splits == 3 and groups is GROUPS
    groups = np.asarray(GROUPS)
    for train, test in cv.split(X, labels, groups):
        assert set(groups[train]).isdisjoint(groups[test])


def test_layer_report_passes_groups_to_the_splitter(tiny_model_dir, cv_calls):
    report = layer_report(BertVectorizer(tiny_model_dir), X, Y, layers=[-1], poolings=["mean"],
                          estimator=LogisticRegression(), cv=LeaveOneGroupOut(), groups=GROUPS)
    features = BertVectorizer(tiny_model_dir, pooling="mean").fit().transform(X)
    expected = cross_val_score(LogisticRegression(), features, Y, groups=GROUPS,
                               cv=LeaveOneGroupOut())  # needs the groups: raises without
    assert report.loc[2, "mean"] == pytest.approx(expected.mean())
    layer_report(BertVectorizer(tiny_model_dir), X, Y, layers=[-1], poolings=["mean"], cv=3)
    assert cv_calls[1:] == [(3, None)]  # no groups: cv as given


@pytest.mark.parametrize("groups, shape", [(GROUPS[:-1], r"\(11,\)"),
                                           (np.zeros((12, 2)), r"\(12, 2\)")])
def test_layer_report_needs_one_group_per_sample(tiny_model_dir, groups, shape):
    with pytest.raises(ValueError, match=f"groups has shape {shape} and X 12 samples: groups "
                                         "needs one group label per sample"):
        layer_report(BertVectorizer(tiny_model_dir), X, Y, cv=3, groups=groups)


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
    assert _command.main(["embed", str(source), "-o", str(tmp_path / "out.npy"), "--model",
                      tiny_model_dir, "--pooling", "cls", "--layer", "-2", "--norm", "l2"]) == 0
    expected = BertVectorizer(tiny_model_dir, pooling="cls", layer=-2, norm="l2").fit()
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), expected.transform(lines))


def test_embed_with_a_prompt_auto_and_truncate_dim(tiny_model_dir, tmp_path, texts):
    source = tmp_path / "texts.txt"
    lines = [t for t in texts if t]
    source.write_text("\n".join(lines) + "\n")
    assert _command.main(["embed", str(source), "-o", str(tmp_path / "out.npy"), "--model",
                      tiny_model_dir, "--pooling", "auto", "--norm", "auto", "--prompt",
                      "query: ", "--truncate-dim", "8"]) == 0
    expected = BertVectorizer(tiny_model_dir, prompt="query: ", truncate_dim=8, cache=False).fit()
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), expected.transform(lines))


def test_embed_csv_jsonl_and_parquet(tiny_model_dir, tmp_path):
    pd.DataFrame({"id": [1, 2], "body": ["the cat", "a dog, sat"]}).to_csv(
        tmp_path / "in.csv", index=False)
    (tmp_path / "in.jsonl").write_text("\n".join(json.dumps({"body": t})
                                                 for t in ["the cat", "a dog, sat"]))
    common = ["--model", tiny_model_dir, "--layer", "0,-1"]
    assert _command.main(["embed", str(tmp_path / "in.csv"), "-o", str(tmp_path / "a.npy"),
                      "--text-column", "body", *common]) == 0
    assert _command.main(["embed", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "b.parquet"),
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


@pytest.mark.parametrize("suffix", [".npy", ".parquet"])
def test_embed_empty_input(tiny_model_dir, tmp_path, suffix):
    (tmp_path / "empty.txt").write_text("")
    output = tmp_path / f"out{suffix}"
    assert _command.main(["embed", str(tmp_path / "empty.txt"), "-o", str(output), "--model",
                      tiny_model_dir]) == 0
    features = np.load(output) if suffix == ".npy" else pd.read_parquet(output).to_numpy()
    assert features.shape == (0, 32) and features.dtype == np.float32


LINES = [" ".join(["the", "cat", "dog", "sat", "big", "red"][: 1 + i % 6]) + f" {i}"
         for i in range(50)]


def counting_transform(monkeypatch, interrupt_at=None):
    """Count BertVectorizer.transform calls and rows; interrupt call ``interrupt_at``."""
    calls, transform = {"calls": 0, "rows": 0}, BertVectorizer.transform

    def counted(self, X):
        calls["calls"] += 1
        if calls["calls"] == interrupt_at:
            raise KeyboardInterrupt
        calls["rows"] += len(X)
        return transform(self, X)

    monkeypatch.setattr(BertVectorizer, "transform", counted)
    return calls


def interrupted_run(monkeypatch, capsys, source, output, *options):
    """An embed run of LINES in chunks of 8, interrupted in its third chunk."""
    source.write_text("\n".join(LINES) + "\n")
    with monkeypatch.context() as patch:
        counting_transform(patch, interrupt_at=3)
        assert _command.main(["embed", str(source), "-o", str(output), "--chunk-size", "8",
                          *options]) == 130
    assert "interrupted after 16 of 50 texts; run the same command with --resume" in \
        capsys.readouterr().err
    assert not output.exists()


@pytest.mark.parametrize("suffix", [".npy", ".parquet"])
def test_embed_resume_finishes_without_recomputing(tiny_model_dir, tmp_path, monkeypatch,
                                                   capsys, suffix):
    source, output = tmp_path / "in.txt", tmp_path / f"out{suffix}"
    options = ["--model", tiny_model_dir, "--pooling", "max"]
    interrupted_run(monkeypatch, capsys, source, output, *options)
    calls = counting_transform(monkeypatch)
    assert _command.main(["embed", str(source), "-o", str(output), "--chunk-size", "8", "--resume",
                      *options]) == 0
    assert calls["rows"] == 50 - 16
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt", output.name]
    assert _command.main(["embed", str(source), "-o", str(tmp_path / f"whole{suffix}"),
                      "--chunk-size", "8", *options]) == 0
    read = np.load if suffix == ".npy" else (lambda path: pd.read_parquet(path).to_numpy())
    np.testing.assert_array_equal(read(output), read(tmp_path / f"whole{suffix}"))
    expected = BertVectorizer(tiny_model_dir, pooling="max").fit().transform(LINES)
    np.testing.assert_allclose(read(output), expected, atol=1e-5)


@pytest.mark.parametrize("change, message", [
    (lambda source, options: source.write_text("\n".join(LINES[:-1] + ["changed"]) + "\n"),
     r"cannot resume '.*out.npy': the input changed since the interrupted run of '.*in.txt' "
     r"\(50 texts then, 50 now, or other texts\); run without --resume to start again"),
    (lambda source, options: source.write_text("\n".join(LINES[:-1]) + "\n"),
     r"the input changed .* \(50 texts then, 49 now"),
    (lambda source, options: options.extend(["--pooling", "cls", "--norm", "l2"]),
     r"cannot resume '.*out.npy': options changed since the interrupted run \(--pooling 'mean' "
     r"-> 'cls'; --norm 'none' -> 'l2'\); rerun with the same options, or without --resume"),
])
def test_embed_resume_refused_when_input_or_options_changed(tiny_model_dir, tmp_path,
                                                            monkeypatch, capsys, change, message):
    source, output = tmp_path / "in.txt", tmp_path / "out.npy"
    options = ["--model", tiny_model_dir]
    interrupted_run(monkeypatch, capsys, source, output, *options)
    change(source, options)
    assert _command.main(["embed", str(source), "-o", str(output), "--chunk-size", "8", "--resume",
                      *options]) == 1
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1 and re.search(message, error), error
    assert _command.main(["embed", str(source), "-o", str(output), *options]) == 0  # starts over


def test_embed_resume_with_nothing_to_resume_starts_from_the_first_text(tiny_model_dir,
                                                                        tmp_path, capsys):
    (tmp_path / "in.txt").write_text("the cat\na dog\n")
    assert _command.main(["embed", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.npy"),
                      "--resume", "--model", tiny_model_dir]) == 0
    assert "nothing to resume" in capsys.readouterr().err
    assert np.load(tmp_path / "out.npy").shape == (2, 32)


PEAK_RSS = """
import json, resource, sys
from skbert._cli import run
status = run()  # as the skbert command: arguments from sys.argv
print(json.dumps({"status": status, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                  / 1024}))
"""


def test_embed_memory_stays_flat(tiny_model_dir, tmp_path):
    """Peak RSS of embedding 12,000 lines exceeds that of 2,000 lines by < 60 MB.

    Reading and transforming the 12,000 lines at once (as embed did before it
    streamed) grows the peak by about 180 MB; streaming, by about 5 MB.
    """
    rng = np.random.default_rng(0)
    words = np.array("the a of and cat dog sat mat house red big small fast run good bad "
                     "movie film what who river city people year day time long text".split())
    peaks = {}
    for n_lines in (2_000, 12_000):
        source = tmp_path / f"lines{n_lines}.txt"
        source.write_text("".join(" ".join(rng.choice(words, rng.integers(5, 80))) + "\n"
                                  for _ in range(n_lines)))
        result = subprocess.run(
            [sys.executable, "-c", PEAK_RSS, "embed", str(source), "-o",
             str(tmp_path / f"out{n_lines}.npy"), "--model", tiny_model_dir, "--chunk-size", "256"],
            capture_output=True, text=True, check=True)
        report = json.loads(result.stdout.strip().splitlines()[-1])
        assert report["status"] == 0, result.stderr
        assert np.load(tmp_path / f"out{n_lines}.npy").shape == (n_lines, 32)
        peaks[n_lines] = report["peak_mb"]
    assert peaks[12_000] - peaks[2_000] < 60, peaks


@pytest.mark.parametrize("args, message", [
    (["embed", "missing.txt", "-o", "x.npy"], "input file 'missing.txt' does not exist"),
    (["embed", "{csv}", "-o", "x.npy", "--text-column", "nope"],
     "has no column 'nope'; columns: id, body"),
    (["embed", "{csv}", "-o", "x.npy"], "needs --text-column"),
    (["embed", "{csv}", "-o", "x.txt", "--text-column", "body"], "must end in .npy or .parquet"),
    (["embed", "{csv}", "-o", "{tmp}/x.npy", "--text-column", "body", "--model",
      "{tmp}/no-model"], "Model directory '.*no-model' does not exist"),
    (["probe", "{csv}", "--text-column", "body"], "probe needs --text-column and --label-column"),
    (["embed", "-", "-o", "x.npy", "--resume"], "--resume needs an input file"),
])
def test_errors_are_one_line(tmp_path, capsys, args, message):
    pd.DataFrame({"id": [1], "body": ["x"]}).to_csv(tmp_path / "in.csv", index=False)
    args = [a.format(csv=tmp_path / "in.csv", tmp=tmp_path) for a in args]
    assert _command.main(args) == 1
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1
    assert re.search(message, error), error


def test_a_missing_file_exits_nonzero_without_traceback():
    result = run_cli("embed", "missing.txt", "-o", "x.npy")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip() == "skbert embed: error: input file 'missing.txt' does not exist"


@pytest.mark.parametrize("option, message", [(["--pooling", "avg"], "invalid choice: 'avg'"),
                                              (["--layer", "top"], "'top' is not an int"),
                                              (["--chunk-size", "0"], "'0' is not a positive int")])
def test_bad_option_value_exits_with_usage(capsys, option, message):
    with pytest.raises(SystemExit) as exit_info:
        _command.main(["embed", "x.txt", "-o", "y.npy", *option])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_help_documents_every_option(capsys):
    for command in ("embed", "probe"):
        with pytest.raises(SystemExit):
            _command.main([command, "--help"])
    text = capsys.readouterr().out
    for option in ("--model", "--layer", "--pooling", "--norm", "--max-length", "--truncation",
                   "--batch-size", "--device", "--dtype", "--text-column", "--text-field",
                   "--label-column", "--layers", "--poolings", "--cv", "--out", "--chunk-size",
                   "--resume"):
        assert option in text


def test_probe_writes_png_and_csv(tiny_model_dir, tmp_path, capsys):
    pd.DataFrame({"text": X, "label": Y}).to_csv(tmp_path / "data.csv", index=False)
    assert _command.main(["probe", str(tmp_path / "data.csv"), "--text-column", "text",
                      "--label-column", "label", "--model", tiny_model_dir, "--cv", "2",
                      "--poolings", "cls,mean", "--out", str(tmp_path / "report.png")]) == 0
    assert "best: layer=" in capsys.readouterr().out
    assert (tmp_path / "report.png").stat().st_size > 5000
    table = pd.read_csv(tmp_path / "report.csv", index_col=0)
    assert table.shape == (3, 2)


@pytest.mark.parametrize("labels", [Y + ["mixed"] * 2, np.array(Y + ["mixed"] * 2, dtype=object),
                                    [0] * 6 + [1] * 6 + [2] * 2])
def test_a_class_smaller_than_the_folds_is_said_once(tiny_model_dir, labels):
    texts = X + ["good great film", "awful bad movie"]
    with pytest.warns(UserWarning) as caught:
        layer_report(BertVectorizer(tiny_model_dir), texts, labels, layers=[0, -1], cv=3)
    least = "2" if isinstance(labels[0], int) else "'mixed'"
    expected = f"1 class(es) of y have fewer members than cv=3 folds (least populated: {least} "
    assert [str(warning.message)[:len(expected)] for warning in caught] == [expected]


@pytest.mark.parametrize("terminal", [False, True])
def test_probe_is_quiet_and_its_table_rounded(tiny_model_dir, tmp_path, capsys, monkeypatch,
                                              terminal):
    monkeypatch.setattr(_command, "is_terminal", lambda stream: terminal)
    texts = X + ["good great film", "awful bad movie"]
    labels = Y + ["mixed", "mixed"]  # a class smaller than the folds
    pd.DataFrame({"text": texts, "label": labels}).to_csv(tmp_path / "data.csv", index=False)
    with pytest.warns(UserWarning) as caught:
        assert _command.main(["probe", str(tmp_path / "data.csv"), "--text-column", "text",
                          "--label-column", "label", "--model", tiny_model_dir, "--cv", "3",
                          "--out", str(tmp_path / "report.png")]) == 0
    messages = [str(warning.message) for warning in caught]
    assert len(messages) == 1, messages
    assert re.match(r"1 class\(es\) of y have fewer members than cv=3 folds \(least "
                    r"populated: 'mixed' with 2\)", messages[0])
    bars = capsys.readouterr().err
    assert ("layer_report" in bars) == terminal and "BertVectorizer" not in bars  # a log: none
    cells = (tmp_path / "report.csv").read_text().splitlines()[1].split(",")[1:]
    assert cells and all(len(cell.partition(".")[2]) <= 4 for cell in cells), cells


def test_the_command_prints_a_warning_as_one_line(tiny_model_dir, tmp_path):
    pd.DataFrame({"text": X + ["good great film"], "label": Y + ["mixed"]}).to_csv(
        tmp_path / "data.csv", index=False)
    result = run_cli("probe", tmp_path / "data.csv", "--text-column", "text", "--label-column",
                     "label", "--model", tiny_model_dir, "--cv", "2", "--layers", "0",
                     "--out", tmp_path / "report.png")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if "warning" in line.lower()]
    assert len(lines) == 1 and lines[0].startswith("skbert: warning: 1 class(es) of y"), lines


def test_device_and_model_directory_errors_say_what_is_wrong(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match="device='gpu' is not a device: use 'auto', 'cpu'"):
        BertVectorizer(tiny_model_dir, device="gpu").fit()
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(OSError, match="is not a model directory: it has no config.json"):
        BertVectorizer(str(tmp_path)).fit()


def test_the_command_bounds_the_onednn_kernel_caches_unless_set(monkeypatch):
    variables, seen = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"), []
    monkeypatch.setattr(_command, "main",
                        lambda: seen.append([os.environ.get(name) for name in variables]) or 0)
    for variable in variables:
        monkeypatch.setenv(variable, "unset below")  # so that the test's end restores it
        monkeypatch.delenv(variable)
    assert _command.run() == 0
    monkeypatch.setenv(variables[0], "256")
    assert _command.run() == 0
    assert seen == [["16", "16"], ["256", "16"]]
