"""What skbert prints: progress bars that suit a terminal or a log, errors that say what to do."""

import io
import os
import subprocess
import sys

import numpy as np
import pytest

from skbert import BertVectorizer, _progress, _threads
from skbert.probe import layer_report


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("stream, interval", [(Terminal(), 0.1), (io.StringIO(), 30.0)])
def test_a_bar_updates_live_on_a_terminal_and_seldom_in_a_log(monkeypatch, stream, interval):
    monkeypatch.setattr(sys, "stderr", stream)
    with _progress.progress_bar(True, total=3, desc="work") as bar:
        assert bar.mininterval == interval
        assert bar.maxinterval == max(interval, 10)  # tqdm's 10 s on a terminal
        bar.update(3)
    written = stream.getvalue()
    assert "work: 100%" in written
    with _progress.progress_bar(False, total=3, desc="quiet") as bar:
        bar.update(3)
    assert stream.getvalue() == written  # not verbose: nothing


def test_a_closed_stream_is_no_terminal():
    stream = io.StringIO()
    stream.close()
    assert not _progress.is_terminal(stream)


def test_verbose_transform_in_a_log_writes_one_line_per_bar(tiny_model_dir, texts, monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    BertVectorizer(tiny_model_dir, cache=False, batch_size=2, verbose=True).fit_transform(texts)
    lines = [line for line in log.getvalue().replace("\r", "\n").splitlines() if line]
    # the bar as it starts and as it ends: no update in between (they come 30 s apart at most)
    assert len(lines) == 2 and lines[-1].startswith("BertVectorizer: 100%")


def test_command_line_writes_no_progress_to_a_log(tiny_model_dir, tmp_path, texts):
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n")
    with open(tmp_path / "log", "w") as log:
        done = subprocess.run([sys.executable, "-m", "skbert._cli", "embed", tmp_path / "in.txt",
                               "-o", tmp_path / "out.npy", "--model", tiny_model_dir],
                              stdout=log, stderr=subprocess.STDOUT)
    assert done.returncode == 0, (tmp_path / "log").read_text()
    assert "%|" not in (tmp_path / "log").read_text()  # no bar drawn at all
    assert np.load(tmp_path / "out.npy").shape[0] == len(texts)


def test_no_model_offline_names_the_option(tmp_path):
    (tmp_path / "in.txt").write_text("a text\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run([sys.executable, "-m", "skbert._cli", "embed", tmp_path / "in.txt",
                           "-o", tmp_path / "out.npy"], capture_output=True, text=True, env=env)
    assert done.returncode == 1
    assert done.stderr.startswith("skbert embed: error: no --model given, and the default "
                                  "'bert-base-uncased' could not be loaded"), done.stderr
    assert "pass --model with a model directory or a hub id" in done.stderr


def blas_threads():
    from threadpoolctl import threadpool_info

    return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}


def test_one_blas_thread_is_scoped_and_yields_to_the_environment(monkeypatch):
    import numpy  # noqa: F401 (its BLAS is loaded)

    for name in _threads._SET_BY_USER:
        monkeypatch.delenv(name, raising=False)
    before = blas_threads()
    with _threads.one_blas_thread():
        assert blas_threads() == {1}
    assert blas_threads() == before
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    with _threads.one_blas_thread():
        assert blas_threads() == before  # the user's setting applies


def test_layer_report_fits_with_one_blas_thread(tiny_model_dir, texts, monkeypatch):
    from sklearn.dummy import DummyClassifier

    for name in _threads._SET_BY_USER:
        monkeypatch.delenv(name, raising=False)
    seen = []

    class Recording(DummyClassifier):
        def fit(self, X, y):
            seen.append(blas_threads())
            return super().fit(X, y)

    labels = ["a", "b"] * (len(texts) // 2)
    layer_report(BertVectorizer(tiny_model_dir), texts[:len(labels)], labels, layers=[-1],
                 poolings=["mean"], estimator=Recording(), cv=2)
    assert seen == [{1}, {1}]
