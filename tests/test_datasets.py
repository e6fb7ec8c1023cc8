"""Tests for skbert.datasets: the bundled TREC and STS-B copies and the UD English EWT sample.

Expected counts and means come from each set's SOURCE.md in ../shared/data/,
which match the official figures of the releases.
"""

import csv
import gzip
import io
import os
import re
import subprocess
import sys
from collections import Counter
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from sklearn.model_selection import GroupKFold
from sklearn.utils import Bunch

import skbert.datasets
from skbert.datasets import load_stsb, load_trec, load_ud_pos
from skbert.datasets._conllu import read_conllu

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
# The real data sets sit beside the development checkout, not in a clone or the wheel.
SHARED_MISSING = "../shared/data not present (only in the development checkout)"

TREC_COARSE_COUNTS = {
    "train": {"ABBR": 86, "DESC": 1162, "ENTY": 1250, "HUM": 1223, "LOC": 835, "NUM": 896},
    "test": {"ABBR": 9, "DESC": 138, "ENTY": 94, "HUM": 65, "LOC": 81, "NUM": 113},
}
STSB_COUNTS = {"train": 5749, "dev": 1500, "test": 1379}
STSB_MEANS = {"train": 2.70, "dev": 2.36, "test": 2.61}
# The bundled UD English EWT sample: the first 500 sentences of each split. Word counts
# from a plain reading of the CoNLL-U lines with an integer ID (not with conllu).
UD_SENTENCES = 500
UD_WORDS = {"dev": 7621, "test": 7275}
UD_NOUN_PUNCT = {"dev": (1168, 984), "test": (1021, 957)}
# The full splits in ../shared/data/ud_ewt, from its SOURCE.md.
UD_FULL = {"dev": (2001, 25147), "test": (2077, 25094)}
UPOS_TAGS = ["ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM",
             "PART", "PRON", "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X"]
# The 37 universal relations of https://universaldependencies.org/u/dep/, sorted.
UD_RELATIONS = ["acl", "advcl", "advmod", "amod", "appos", "aux", "case", "cc", "ccomp", "clf",
                "compound", "conj", "cop", "csubj", "dep", "det", "discourse", "dislocated",
                "expl", "fixed", "flat", "goeswith", "iobj", "list", "mark", "nmod", "nsubj",
                "nummod", "obj", "obl", "orphan", "parataxis", "punct", "reparandum", "root",
                "vocative", "xcomp"]
# Neither sample holds these (clf is in neither full split either).
UD_RELATIONS_NOT_IN_SAMPLES = {"clf", "dep", "dislocated", "orphan"}
# Distinct universal relations (DEPREL before ":") of the full splits, by plain reading.
UD_FULL_RELATIONS = {"dev": 36, "test": 34}


def read_shared_tsv(path):
    with open(path, encoding="utf-8", newline="") as file:
        return list(csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]


def test_public_names():
    assert sorted(skbert.datasets.__all__) == ["load_beir", "load_stsb", "load_trec", "load_ud_pos"]


def test_import_does_not_import_torch():
    package_root = Path(skbert.datasets.__file__).resolve().parents[2]
    python_path = os.pathsep.join([str(package_root), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": python_path}
    code = (
        "import skbert.datasets, sys; "
        "assert 'torch' not in sys.modules; assert 'transformers' not in sys.modules; "
        "assert 'conllu' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_bundle_is_small():
    data = resources.files("skbert.datasets").joinpath("data")
    sizes = {item.name: len(item.read_bytes()) for item in data.iterdir() if item.is_file()}
    notes = {"README.md", "trec.md", "stsb.md", "stsb_LICENSE.txt"}
    assert notes | {"ud_ewt.md", "ud_ewt_LICENSE.txt"} <= set(sizes)
    assert sizes["ud_ewt_dev.conllu.gz"] + sizes["ud_ewt_test.conllu.gz"] < 250_000
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


# UD English EWT (load_ud_pos, read_conllu)


def read_shared_conllu(path, column=3):
    """(sent_id, [(FORM, UPOS), ...]) per sentence, read with plain string splitting.

    ``column`` picks the field paired with FORM: 3 for UPOS, 7 for DEPREL.
    """
    sentences = []
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        lines = block.strip("\n").split("\n")
        if not block.strip():
            continue
        prefix = "# sent_id = "
        (sent_id,) = [line[len(prefix):] for line in lines if line.startswith(prefix)]
        fields = [line.split("\t") for line in lines if not line.startswith("#")]
        sentences.append((sent_id, [(f[1], f[column]) for f in fields if f[0].isdigit()]))
    return sentences


def bundled_bytes(split):
    name = f"ud_ewt_{split}.conllu.gz"
    return gzip.decompress(resources.files("skbert.datasets").joinpath("data", name).read_bytes())


@pytest.mark.parametrize("split", ["dev", "test"])
def test_ud_counts(split):
    ud = load_ud_pos(split)
    assert isinstance(ud, Bunch)
    n_words = UD_WORDS[split]
    assert len(ud.data) == n_words
    assert ud.target.shape == ud.groups.shape == (n_words,)
    assert len(ud.sentences) == ud.sent_id.shape[0] == UD_SENTENCES
    assert sum(len(words) for words in ud.sentences) == n_words
    assert ud.target.dtype == object and ud.sent_id.dtype == object
    assert ud.groups.dtype == np.int64
    counts = Counter(ud.target)
    assert (counts["NOUN"], counts["PUNCT"]) == UD_NOUN_PUNCT[split]
    assert list(ud.target_names) == UPOS_TAGS == sorted(counts)


@pytest.mark.parametrize("split", ["dev", "test"])
def test_ud_samples_are_words_in_their_sentence(split):
    ud = load_ud_pos(split)
    for (words, i), group in zip(ud.data, ud.groups):
        assert isinstance(words, tuple) and all(isinstance(w, str) and w for w in words)
        assert isinstance(i, int) and 0 <= i < len(words)
        assert words == ud.sentences[group]
    assert all(isinstance(tag, str) for tag in ud.target)
    assert all(isinstance(sent_id, str) for sent_id in ud.sent_id)
    assert len(set(ud.sent_id)) == UD_SENTENCES


@pytest.mark.parametrize("split", ["dev", "test"])
def test_ud_groups_are_sentences(split):
    ud = load_ud_pos(split)
    # One id per sentence, numbered in order: constant within a sentence, distinct across.
    np.testing.assert_array_equal(np.unique(ud.groups), np.arange(UD_SENTENCES))
    assert np.all(np.diff(ud.groups) >= 0)
    for group, words in enumerate(ud.sentences):
        positions = np.flatnonzero(ud.groups == group)
        assert [ud.data[k][1] for k in positions] == list(range(len(words)))
        assert all(ud.data[k][0] == words for k in positions)
    train, test = next(GroupKFold(n_splits=5).split(ud.data, ud.target, groups=ud.groups))
    assert not set(ud.groups[train]) & set(ud.groups[test])


@pytest.mark.parametrize("split", ["dev", "test"])
def test_ud_return_X_y(split):
    ud = load_ud_pos(split)
    data, target = load_ud_pos(split, return_X_y=True)
    assert data == ud.data
    np.testing.assert_array_equal(target, ud.target)


def test_ud_default_split_is_test():
    assert load_ud_pos().sent_id[0] == load_ud_pos("test").sent_id[0]
    assert len(load_ud_pos().data) == UD_WORDS["test"]


def test_ud_descr_records_the_sample():
    descr = load_ud_pos().DESCR
    assert descr == load_ud_pos("dev").DESCR
    assert "Silveira" in descr and "LREC" in descr and "Attribution-ShareAlike 4.0" in descr
    assert "ud_ewt_LICENSE.txt" in descr and "15d613d8447b3478787d4c278730a1e48a945efb" in descr
    data = resources.files("skbert.datasets").joinpath("data")
    for split in ["dev", "test"]:
        compressed = data.joinpath(f"ud_ewt_{split}.conllu.gz").read_bytes()
        for figure in [len(compressed), len(gzip.decompress(compressed)), UD_WORDS[split]]:
            assert f"{figure:,}" in descr, (split, figure)


@pytest.mark.parametrize("split", ["dev", "test"])
def test_ud_matches_shared_copy(split):
    path = SHARED_DATA / "ud_ewt" / f"en_ewt-ud-{split}.conllu"
    if not path.exists():
        pytest.skip(SHARED_MISSING)
    # Verbatim: the bundled file is the original's first lines, cut after a sentence.
    original = path.read_bytes()
    sample = bundled_bytes(split)
    assert original.startswith(sample) and sample.endswith(b"\n\n")
    assert original[len(sample):].startswith(b"# sent_id = ")
    shared = read_shared_conllu(path)[:UD_SENTENCES]
    ud = load_ud_pos(split)
    assert list(ud.sent_id) == [sent_id for sent_id, _ in shared]
    for (words, i), tag, group in zip(ud.data, ud.target, ud.groups):
        assert (words[i], tag) == shared[group][1][i]
    assert [tuple(form for form, _ in words) for _, words in shared] == ud.sentences


@pytest.mark.parametrize("split", ["dev", "test"])
def test_read_conllu_reads_the_full_shared_split(split):
    path = SHARED_DATA / "ud_ewt" / f"en_ewt-ud-{split}.conllu"
    if not path.exists():
        pytest.skip(SHARED_MISSING)
    samples, upos, groups, sent_ids = read_conllu(path)
    n_sentences, n_words = UD_FULL[split]
    assert len(samples) == upos.shape[0] == groups.shape[0] == n_words
    assert sent_ids.shape == (n_sentences,) and groups[-1] == n_sentences - 1
    assert len(set(upos)) == 17
    shared = read_shared_conllu(path)
    assert [words[i] for words, i in samples] == [form for _, ws in shared for form, _ in ws]
    _, deprel, _, _ = read_conllu(path, label="deprel")
    by_hand = [rel.split(":")[0] for _, ws in read_shared_conllu(path, 7) for _, rel in ws]
    assert list(deprel) == by_hand
    assert len(set(deprel)) == UD_FULL_RELATIONS[split]
    assert set(deprel) <= set(UD_RELATIONS) and "clf" not in set(deprel)


def bundled_word_fields(split):
    """The 10 fields of each word line (integer ID) of a bundled sample, by plain splitting."""
    lines = bundled_bytes(split).decode("utf-8").split("\n")
    fields = [line.split("\t") for line in lines if line and not line.startswith("#")]
    return [f for f in fields if f[0].isdigit()]


@pytest.mark.parametrize("split", ["dev", "test"])
def test_ud_deprel_is_the_universal_relation_of_the_file(split):
    fields = bundled_word_fields(split)
    ud = load_ud_pos(split, label="deprel")
    assert [words[i] for words, i in ud.data] == [f[1] for f in fields]
    assert list(ud.target) == [f[7].split(":")[0] for f in fields]
    assert ud.target.dtype == object and not any(":" in rel for rel in ud.target)
    # Only the labels change with label: the words, sentences and groups stay.
    upos = load_ud_pos(split)
    assert ud.data == upos.data and ud.sentences == upos.sentences
    np.testing.assert_array_equal(ud.groups, upos.groups)
    np.testing.assert_array_equal(ud.sent_id, upos.sent_id)
    data, target = load_ud_pos(split, label="deprel", return_X_y=True)
    assert data == ud.data
    np.testing.assert_array_equal(target, ud.target)


def test_ud_deprel_of_known_words():
    lines = bundled_bytes("test").decode("utf-8").split("\n")
    ud = load_ud_pos("test", label="deprel")
    # (sample, line of the file): "What", "Google" of the first sentence, "its" of the second.
    for sample, number, form, deprel, relation in [
        (0, 5, "What", "root", "root"),
        (2, 7, "Google", "nsubj", "nsubj"),
        (12, 20, "its", "nmod:poss", "nmod"),
        (16, 24, "(", "punct", "punct"),
    ]:
        fields = lines[number - 1].split("\t")
        assert (fields[1], fields[7]) == (form, deprel)
        words, i = ud.data[sample]
        assert (words[i], ud.target[sample]) == (form, relation)


@pytest.mark.parametrize("split", ["dev", "test"])
def test_ud_deprel_target_names(split):
    ud = load_ud_pos(split, label="deprel")
    assert list(ud.target_names) == UD_RELATIONS == sorted(UD_RELATIONS)
    assert len(ud.target_names) == 37 and ud.target_names.dtype == object
    # Both samples use the same 33 relations.
    assert set(ud.target) == set(UD_RELATIONS) - UD_RELATIONS_NOT_IN_SAMPLES
    assert len(set(ud.target)) == 33
    assert list(load_ud_pos(split, label="upos").target_names) == UPOS_TAGS


@pytest.mark.parametrize("split", ["dev", "test"])
def test_ud_descr_counts_the_relations(split):
    descr = load_ud_pos().DESCR
    table = descr[descr.index("| relation "):]
    rows = re.findall(r"^\| ([a-z]+) +\| ([\d,]+) +\| ([\d,]+) +\|", table, re.M)
    assert [name for name, _, _ in rows] == UD_RELATIONS
    column = 1 if split == "dev" else 2
    counts = Counter(f[7].split(":")[0] for f in bundled_word_fields(split))
    assert {row[0]: int(row[column].replace(",", "")) for row in rows} == {
        name: counts[name] for name in UD_RELATIONS
    }


def test_ud_license_is_verbatim():
    path = SHARED_DATA / "ud_ewt" / "LICENSE.txt"
    if not path.exists():
        pytest.skip(SHARED_MISSING)
    bundled = resources.files("skbert.datasets").joinpath("data", "ud_ewt_LICENSE.txt")
    assert bundled.read_bytes() == path.read_bytes()


# A multi-word token (3-4), an empty node (8.1), a comment-only block and a sentence
# without a sent_id.
TINY_CONLLU = """\
# sent_id = tiny-1
# text = Sue thinks she'll win and Bill too.
1	Sue	Sue	PROPN	NNP	Number=Sing	2	nsubj	2:nsubj	_
2	thinks	think	VERB	VBZ	_	0	root	0:root	_
3-4	she'll	_	_	_	_	_	_	_	_
3	she	she	PRON	PRP	_	5	nsubj	5:nsubj	_
4	'll	will	AUX	MD	_	5	aux	5:aux	_
5	win	win	VERB	VB	_	2	ccomp	2:ccomp	_
6	and	and	CCONJ	CC	_	7	cc	7:cc	_
7	Bill	Bill	PROPN	NNP	_	5	conj	5:conj	_
8	too	too	ADV	RB	_	7	advmod	7:advmod	SpaceAfter=No
8.1	win	win	VERB	VB	_	_	_	5:conj	_
9	.	.	PUNCT	.	_	2	punct	2:punct	_

# note = a block of comments only

1	Yes	yes	INTJ	UH	_	0	root	0:root	SpaceAfter=No
2	!	!	PUNCT	.	_	1	punct	1:punct	_
"""
TINY_WORDS = ("Sue", "thinks", "she", "'ll", "win", "and", "Bill", "too", ".")


def check_tiny(samples, upos, groups, sent_ids):
    assert samples == [(TINY_WORDS, i) for i in range(9)] + [(("Yes", "!"), 0), (("Yes", "!"), 1)]
    assert "she'll" not in TINY_WORDS and TINY_WORDS.count("win") == 1
    assert list(upos) == ["PROPN", "VERB", "PRON", "AUX", "VERB", "CCONJ", "PROPN", "ADV",
                          "PUNCT", "INTJ", "PUNCT"]
    assert upos.dtype == object and groups.dtype == np.int64
    np.testing.assert_array_equal(groups, [0] * 9 + [1, 1])
    assert list(sent_ids) == ["tiny-1", None]
    assert sent_ids[groups][0] == "tiny-1"


def test_read_conllu_skips_multiword_tokens_and_empty_nodes(tmp_path):
    path = tmp_path / "tiny.conllu"
    path.write_text(TINY_CONLLU, encoding="utf-8")
    check_tiny(*read_conllu(path))
    check_tiny(*read_conllu(str(path)))


def test_read_conllu_reads_open_files_and_gzip(tmp_path):
    check_tiny(*read_conllu(io.StringIO(TINY_CONLLU)))
    check_tiny(*read_conllu(io.BytesIO(TINY_CONLLU.encode("utf-8"))))
    check_tiny(*read_conllu(io.StringIO(TINY_CONLLU.replace("\n", "\r\n"))))
    path = tmp_path / "tiny.conllu.gz"
    path.write_bytes(gzip.compress(TINY_CONLLU.encode("utf-8")))
    check_tiny(*read_conllu(path))


def test_read_conllu_of_an_empty_file():
    samples, upos, groups, sent_ids = read_conllu(io.StringIO(""))
    assert samples == [] and upos.shape == groups.shape == sent_ids.shape == (0,)
    assert groups.dtype == np.int64


@pytest.mark.parametrize(
    "old, new, line, conllu_says",
    [
        # Single spaces: conllu sees one field.
        ("2\tthinks\tthink\tVERB\tVBZ\t_\t0\troot\t0:root\t_",
         "2 thinks think VERB VBZ _ 0 root 0:root _", 4,
         "Invalid line format, line must contain either tabs or two spaces."),
        ("6\tand", "six\tand", 9, "Failed parsing field 'id': 'six' is not a valid ID."),
        ("2\t!\t!\tPUNCT\t.\t_\t1", "2\t!\t!\tPUNCT\t.\t_\tone", 18,
         "Failed parsing field 'head': 'one' is not a valid value for parse_int_value."),
    ],
)
def test_read_conllu_names_the_malformed_line(tmp_path, old, new, line, conllu_says):
    assert TINY_CONLLU.count(old) == 1
    path = tmp_path / "bad.conllu"
    path.write_text(TINY_CONLLU.replace(old, new), encoding="utf-8")
    message = f"Malformed CoNLL-U in {str(path)!r}, line {line}: {conllu_says}"
    with pytest.raises(ValueError, match=re.escape(message)) as caught:
        read_conllu(path)
    assert type(caught.value.__cause__).__name__ == "ParseException"


def test_read_conllu_needs_form_and_upos():
    text = TINY_CONLLU.replace("7\tBill\tBill\tPROPN\tNNP\t_\t5\tconj\t5:conj\t_", "7\tBill")
    message = ("Malformed CoNLL-U in '<file>', line 10: a word line needs ID, FORM and UPOS "
               "(the 1st, 2nd and 4th of the 10 tab-separated fields); got 2 field(s) with ID 7.")
    with pytest.raises(ValueError, match=re.escape(message)):
        read_conllu(io.StringIO(text))


# Ellipsis: "Sue 's cat" stands for "Sue 's cat won't bark", the elided verb an empty node.
DEPREL_CONLLU = """\
# sent_id = deprel-1
# text = Bill's dog won't bark, and Sue's cat too.
1	Bill	Bill	PROPN	NNP	Number=Sing	3	nmod:poss	3:nmod:poss	SpaceAfter=No
2	's	's	PART	POS	_	1	case	1:case	_
3	dog	dog	NOUN	NN	Number=Sing	6	nsubj	6:nsubj	_
4-5	won't	_	_	_	_	_	_	_	_
4	wo	will	AUX	MD	VerbForm=Fin	6	aux	6:aux	_
5	n't	not	PART	RB	_	6	advmod	6:advmod	_
6	bark	bark	VERB	VB	VerbForm=Inf	0	root	0:root	SpaceAfter=No
7	,	,	PUNCT	,	_	11	punct	11:punct	_
8	and	and	CCONJ	CC	_	11	cc	11:cc	_
9	Sue	Sue	PROPN	NNP	Number=Sing	11	nmod:poss	11:nmod:poss	SpaceAfter=No
10	's	's	PART	POS	_	9	case	9:case	_
11	cat	cat	NOUN	NN	Number=Sing	6	conj	11.1:nsubj	_
11.1	bark	bark	VERB	VB	_	_	_	6:conj	_
12	too	too	ADV	RB	_	11	advmod	11.1:advmod	SpaceAfter=No
13	.	.	PUNCT	.	_	6	punct	6:punct	_
"""


def test_read_conllu_reads_deprel_as_the_universal_relation():
    samples, deprel, groups, sent_ids = read_conllu(io.StringIO(DEPREL_CONLLU), label="deprel")
    words = ("Bill", "'s", "dog", "wo", "n't", "bark", ",", "and", "Sue", "'s", "cat", "too", ".")
    assert samples == [(words, i) for i in range(13)]
    assert list(deprel) == ["nmod", "case", "nsubj", "aux", "advmod", "root", "punct", "cc",
                            "nmod", "case", "conj", "advmod", "punct"]
    assert deprel.dtype == object
    np.testing.assert_array_equal(groups, [0] * 13)
    assert list(sent_ids) == ["deprel-1"]
    # The default label is unchanged: UPOS of the same words.
    samples_upos, upos, _, _ = read_conllu(io.StringIO(DEPREL_CONLLU))
    assert samples_upos == samples and list(upos[:3]) == ["PROPN", "PART", "NOUN"]
    check_tiny(*read_conllu(io.StringIO(TINY_CONLLU), label="upos"))


def test_read_conllu_needs_deprel_where_asked():
    text = DEPREL_CONLLU.replace("3\tdog\tdog\tNOUN\tNN\tNumber=Sing\t6\tnsubj\t6:nsubj\t_",
                                 "3\tdog\tdog\tNOUN\tNN\tNumber=Sing\t6")
    assert text != DEPREL_CONLLU
    message = ("Malformed CoNLL-U in '<file>', line 5: a word line needs ID, FORM and DEPREL "
               "(the 1st, 2nd and 8th of the 10 tab-separated fields); got 7 field(s) with ID 3.")
    with pytest.raises(ValueError, match=re.escape(message)):
        read_conllu(io.StringIO(text), label="deprel")
    # UPOS is all the default reading needs.
    assert len(read_conllu(io.StringIO(text))[0]) == 13


@pytest.mark.parametrize("label", ["xpos", "DEPREL", "", None, 7])
def test_read_conllu_rejects_other_labels(label):
    message = (f"The 'label' parameter of read_conllu must be one of ['upos', 'deprel']; "
               f"got {label!r}.")
    with pytest.raises(ValueError, match=re.escape(message)):
        read_conllu(io.StringIO(TINY_CONLLU), label=label)


def test_read_conllu_rejects_other_input():
    with pytest.raises(TypeError, match=r"read_conllu expects a path or an open file; got list"):
        read_conllu(TINY_CONLLU.splitlines())


# Errors


@pytest.mark.parametrize(
    "load, kwargs, bad",
    [
        (load_trec, {"split": "dev"}, "'dev'"),
        (load_trec, {"split": "Train"}, "'Train'"),
        (load_trec, {"split": None}, "None"),
        (load_trec, {"label": "medium"}, "'medium'"),
        (load_stsb, {"split": "validation"}, "'validation'"),
        (load_ud_pos, {"split": "train"}, "'train'"),
        (load_ud_pos, {"label": "xpos"}, "'xpos'"),
        (load_ud_pos, {"label": "DEPREL"}, "'DEPREL'"),
        (load_ud_pos, {"label": None}, "None"),
    ],
)
def test_bad_option_raises(load, kwargs, bad):
    (name,) = kwargs
    accepted = {
        ("load_trec", "split"): "['train', 'test']",
        ("load_trec", "label"): "['coarse', 'fine']",
        ("load_stsb", "split"): "['train', 'dev', 'test']",
        ("load_ud_pos", "split"): "['dev', 'test']",
        ("load_ud_pos", "label"): "['upos', 'deprel']",
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
