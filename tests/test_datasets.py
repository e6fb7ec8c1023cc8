"""Tests for skbert.datasets: the bundled TREC and STS-B copies.

Expected counts and means come from each set's SOURCE.md in ../shared/data/,
which match the official figures of the releases.
"""

import csv
import os
import re
import subprocess
import sys
from collections import Counter
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from sklearn.utils import Bunch

import skbert.datasets
from skbert.datasets import load_stsb, load_trec

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
# The real data sets sit beside the development checkout, not in a clone or the wheel.
SHARED_MISSING = "../shared/data not present (only in the development checkout)"

TREC_COARSE_COUNTS = {
    "train": {"ABBR": 86, "DESC": 1162, "ENTY": 1250, "HUM": 1223, "LOC": 835, "NUM": 896},
    "test": {"ABBR": 9, "DESC": 138, "ENTY": 94, "HUM": 65, "LOC": 81, "NUM": 113},
}
STSB_COUNTS = {"train": 5749, "dev": 1500, "test": 1379}
STSB_MEANS = {"train": 2.70, "dev": 2.36, "test": 2.61}


def read_shared_tsv(path):
    with open(path, encoding="utf-8", newline="") as file:
        return list(csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]


def test_public_names():
    assert sorted(skbert.datasets.__all__) == ["load_beir", "load_stsb", "load_trec"]


def test_import_does_not_import_torch():
    package_root = Path(skbert.datasets.__file__).resolve().parents[2]
    python_path = os.pathsep.join([str(package_root), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": python_path}
    code = (
        "import skbert.datasets, sys; "
        "assert 'torch' not in sys.modules; assert 'transformers' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_bundle_is_small():
    data = resources.files("skbert.datasets").joinpath("data")
    sizes = {item.name: len(item.read_bytes()) for item in data.iterdir() if item.is_file()}
    assert {"README.md", "trec.md", "stsb.md", "stsb_LICENSE.txt"} <= set(sizes)
    assert sum(sizes.values()) < 1_000_000


# TREC


@pytest.mark.parametrize("split", ["train", "test"])
def test_trec_coarse_counts(split):
    trec = load_trec(split)
    assert isinstance(trec, Bunch)
    expected = TREC_COARSE_COUNTS[split]
    assert len(trec.data) == trec.target.shape[0] == sum(expected.values())
    assert all(isinstance(question, str) and question for question in trec.data)
    assert Counter(trec.target) == expected
    assert list(trec.target_names) == sorted(expected)


def test_trec_fine_labels_extend_coarse():
    coarse = load_trec("train").target
    fine = load_trec("train", label="fine")
    assert len(fine.target_names) == 50
    assert list(fine.target_names) == sorted(set(fine.target_names))
    assert [label.split(":")[0] for label in fine.target] == list(coarse)
    # target_names covers the whole set, so it is the same for the test split,
    # which uses only 42 of the 50 fine classes.
    fine_test = load_trec("test", label="fine")
    assert list(fine_test.target_names) == list(fine.target_names)
    assert len(set(fine_test.target)) == 42


def test_trec_first_rows():
    train = load_trec("train", label="fine")
    assert train.data[0] == "How did serfdom develop in and then leave Russia ?"
    assert train.target[0] == "DESC:manner"
    test = load_trec("test")
    assert test.data[0] == "How far is it from Denver to Aspen ?"
    assert test.target[0] == "NUM"
    # The one non-ASCII byte of the original (0xF0 in ISO-8859-1) decodes to "ð".
    assert "sisterðcity" in train.data[65]


@pytest.mark.parametrize("label", ["coarse", "fine"])
def test_trec_return_X_y(label):
    trec = load_trec("test", label=label)
    data, target = load_trec("test", label=label, return_X_y=True)
    assert data == trec.data
    np.testing.assert_array_equal(target, trec.target)


def test_trec_descr():
    descr = load_trec().DESCR
    assert "Li" in descr and "Roth" in descr and "COLING" in descr
    assert "5,452" in descr


@pytest.mark.parametrize("split", ["train", "test"])
def test_trec_matches_shared_copy(split):
    path = SHARED_DATA / "trec" / f"{split}.tsv"
    if not path.exists():
        pytest.skip(SHARED_MISSING)
    rows = read_shared_tsv(path)
    assert load_trec(split).data == [question for _, _, question in rows]
    assert list(load_trec(split).target) == [coarse for coarse, _, _ in rows]
    assert list(load_trec(split, label="fine").target) == [fine for _, fine, _ in rows]


# STS-B


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_stsb_counts_and_scores(split):
    stsb = load_stsb(split)
    assert isinstance(stsb, Bunch)
    n_pairs = STSB_COUNTS[split]
    assert len(stsb.data) == n_pairs
    for name in ["target", "genre", "filename", "year"]:
        assert stsb[name].shape == (n_pairs,)
    assert all(
        isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(s, str) and s for s in pair)
        for pair in stsb.data
    )
    assert stsb.target.dtype == np.float64
    assert stsb.target.min() == 0.0 and stsb.target.max() == 5.0
    assert round(float(stsb.target.mean()), 2) == STSB_MEANS[split]


def test_stsb_genres():
    # Counts from the release readme (its 525 test captions is a typo for 625).
    expected = {
        "train": {"main-news": 3299, "main-captions": 2000, "main-forum": 450},
        "dev": {"main-news": 500, "main-captions": 625, "main-forums": 375},
        "test": {"main-news": 500, "main-captions": 625, "main-forums": 254},
    }
    for split, counts in expected.items():
        assert Counter(load_stsb(split).genre) == counts


def test_stsb_first_rows():
    train = load_stsb("train")
    assert train.data[0] == ("A plane is taking off.", "An air plane is taking off.")
    assert train.target[0] == 5.0
    origin = (train.genre[0], train.filename[0], train.year[0])
    assert origin == ("main-captions", "MSRvid", "2012test")
    test = load_stsb("test")
    assert test.data[0] == ("A girl is styling her hair.", "A girl is brushing her hair.")
    assert test.target[0] == 2.5


def test_stsb_keeps_quotes():
    # Read with QUOTE_NONE: a csv reader that honours quotes would merge rows.
    sentences = [s for pair in load_stsb("train").data for s in pair]
    assert any(s.startswith('"') for s in sentences)
    assert not any("\t" in s or "\n" in s for s in sentences)


@pytest.mark.parametrize("split", ["dev", "test"])
def test_stsb_return_X_y(split):
    stsb = load_stsb(split)
    pairs, scores = load_stsb(split, return_X_y=True)
    assert pairs == stsb.data
    np.testing.assert_array_equal(scores, stsb.target)


def test_stsb_descr():
    descr = load_stsb().DESCR
    assert "SemEval-2017" in descr and "Attribution-ShareAlike 4.0" in descr
    assert "stsb_LICENSE.txt" in descr


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_stsb_matches_shared_copy(split):
    path = SHARED_DATA / "stsb" / f"{split}.tsv"
    if not path.exists():
        pytest.skip(SHARED_MISSING)
    rows = read_shared_tsv(path)
    stsb = load_stsb(split)
    assert stsb.data == [(row[5], row[6]) for row in rows]
    np.testing.assert_array_equal(stsb.target, [float(row[4]) for row in rows])
    assert list(stsb.genre) == [row[0] for row in rows]


def test_stsb_license_is_verbatim():
    path = SHARED_DATA / "stsb" / "LICENSE.txt"
    if not path.exists():
        pytest.skip(SHARED_MISSING)
    bundled = resources.files("skbert.datasets").joinpath("data", "stsb_LICENSE.txt")
    assert bundled.read_bytes() == path.read_bytes()


# Errors


@pytest.mark.parametrize(
    "load, kwargs, bad",
    [
        (load_trec, {"split": "dev"}, "'dev'"),
        (load_trec, {"split": "Train"}, "'Train'"),
        (load_trec, {"split": None}, "None"),
        (load_trec, {"label": "medium"}, "'medium'"),
        (load_stsb, {"split": "validation"}, "'validation'"),
    ],
)
def test_bad_option_raises(load, kwargs, bad):
    (name,) = kwargs
    accepted = {
        ("load_trec", "split"): "['train', 'test']",
        ("load_trec", "label"): "['coarse', 'fine']",
        ("load_stsb", "split"): "['train', 'dev', 'test']",
    }[load.__name__, name]
    message = f"The '{name}' parameter of {load.__name__} must be one of {accepted}; got {bad}."
    with pytest.raises(ValueError, match=re.escape(message)):
        load(**kwargs)


# --- load_beir ----------------------------------------------------------------------------------

def test_load_beir_reads_a_beir_directory(tmp_path):
    import json

    from skbert.datasets import load_beir

    (tmp_path / "qrels").mkdir()
    docs = [{"_id": "d1", "title": "Title", "text": "Body one."}, {"_id": "d2", "text": "Two."}]
    (tmp_path / "corpus.jsonl").write_text("\n".join(map(json.dumps, docs)) + "\n")
    queries = [{"_id": "q1", "text": "first?"}, {"_id": "q2", "text": "unjudged?"}]
    (tmp_path / "queries.jsonl").write_text("\n".join(map(json.dumps, queries)) + "\n")
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td2\t2\n")
    data = load_beir(tmp_path)
    assert data.doc_ids == ["d1", "d2"]
    assert data.documents == ["Title Body one.", "Two."]
    assert data.queries == {"q1": "first?"} and data.qrels == {"q1": {"d2": 2}}
    with pytest.raises(FileNotFoundError, match=r"train.tsv does not exist: .* with a 'train'"):
        load_beir(tmp_path, split="train")
