"""Loaders for the small data sets bundled in ``skbert/datasets/data/``."""

import csv
import gzip
from importlib import resources

import numpy as np
from sklearn.utils import Bunch

from skbert.datasets._conllu import LABEL_FIELDS, _read_sentences, _word_samples

TREC_SPLITS = ("train", "test")
TREC_LABELS = ("coarse", "fine")
STSB_SPLITS = ("train", "dev", "test")
UD_SPLITS = ("dev", "test")
UD_LABELS = tuple(LABEL_FIELDS)
# The 17 universal part-of-speech tags of Universal Dependencies, sorted.
UPOS_TAGS = (
    "ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM",
    "PART", "PRON", "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X",
)
# The 37 universal dependency relations of Universal Dependencies, sorted
# (https://universaldependencies.org/u/dep/).
UD_RELATIONS = (
    "acl", "advcl", "advmod", "amod", "appos", "aux", "case", "cc", "ccomp", "clf",
    "compound", "conj", "cop", "csubj", "dep", "det", "discourse", "dislocated", "expl",
    "fixed", "flat", "goeswith", "iobj", "list", "mark", "nmod", "nsubj", "nummod", "obj",
    "obl", "orphan", "parataxis", "punct", "reparandum", "root", "vocative", "xcomp",
)


def _data_file(name):
    return resources.files("skbert.datasets").joinpath("data", name)


def _read_rows(name):
    """Rows of a bundled gzip TSV file, read verbatim (no quote handling)."""
    with _data_file(name).open("rb") as raw:
        with gzip.open(raw, "rt", encoding="utf-8", newline="") as text:
            return list(csv.reader(text, delimiter="\t", quoting=csv.QUOTE_NONE))


def _strings(values):
    # Object dtype holds plain Python str, as sklearn's text loaders do.
    return np.array(values, dtype=object)


def _read_descr(name):
    return _data_file(name).read_text(encoding="utf-8")


def _check_option(name, value, accepted, function):
    if not isinstance(value, str) or value not in accepted:
        raise ValueError(
            f"The {name!r} parameter of {function} must be one of {list(accepted)}; got {value!r}."
        )


def load_trec(split="train", *, label="coarse", return_X_y=False):
    """Load the TREC question classification data set (Li & Roth).

    English questions labelled with the type of answer they ask for:
    5,452 training and 500 test questions, 6 coarse or 50 fine classes.
    Bundled in the package; no download.

    Parameters
    ----------
    split : {"train", "test"}, default="train"
        Which split to load.
    label : {"coarse", "fine"}, default="coarse"
        ``"coarse"``: 6 classes such as ``"ABBR"`` or ``"HUM"``.
        ``"fine"``: 50 classes in the full ``"COARSE:fine"`` form, such as
        ``"ABBR:abb"`` or ``"HUM:ind"``.
    return_X_y : bool, default=False
        If True, return ``(data, target)`` instead of a Bunch.

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        Dictionary-like object with attributes:

        data : list of str
            The questions.
        target : ndarray of str (object dtype), shape (n_samples,)
            The label of each question.
        target_names : ndarray of str (object dtype)
            Every class of the data set, sorted; the same for both splits
            (the test split uses 42 of the 50 fine classes).
        DESCR : str
            Origin, counts, license and citation of the data set.

    (data, target) : tuple if ``return_X_y`` is True

    Raises
    ------
    ValueError
        If ``split`` or ``label`` is not one of the accepted values.

    Notes
    -----
    Cite Xin Li and Dan Roth, "Learning Question Classifiers", COLING 2002.

    Examples
    --------
    >>> from skbert.datasets import load_trec
    >>> trec = load_trec()
    >>> len(trec.data), trec.target.shape
    (5452, (5452,))
    >>> trec.data[0], trec.target[0]
    ('How did serfdom develop in and then leave Russia ?', 'DESC')
    >>> list(trec.target_names)
    ['ABBR', 'DESC', 'ENTY', 'HUM', 'LOC', 'NUM']
    >>> questions, labels = load_trec("test", label="fine", return_X_y=True)
    >>> questions[0], labels[0]
    ('How far is it from Denver to Aspen ?', 'NUM:dist')
    """
    _check_option("split", split, TREC_SPLITS, "load_trec")
    _check_option("label", label, TREC_LABELS, "load_trec")
    column = TREC_LABELS.index(label)
    # Header: coarse_label, fine_label, question.
    rows = {name: _read_rows(f"trec_{name}.tsv.gz")[1:] for name in TREC_SPLITS}
    data = [row[2] for row in rows[split]]
    target = _strings([row[column] for row in rows[split]])
    if return_X_y:
        return data, target
    all_labels = [row[column] for name in TREC_SPLITS for row in rows[name]]
    target_names = np.unique(_strings(all_labels))
    return Bunch(data=data, target=target, target_names=target_names, DESCR=_read_descr("trec.md"))


def load_stsb(split="train", *, return_X_y=False):
    """Load the STS Benchmark (STS-B) sentence similarity data set.

    English sentence pairs scored by people from 0 (unrelated) to 5 (same
    meaning): 5,749 training, 1,500 development and 1,379 test pairs.
    Bundled in the package; no download.

    Parameters
    ----------
    split : {"train", "dev", "test"}, default="train"
        Which split to load.
    return_X_y : bool, default=False
        If True, return ``(data, target)`` instead of a Bunch.

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        Dictionary-like object with attributes:

        data : list of tuple of (str, str)
            The sentence pairs ``(sentence1, sentence2)``.
        target : ndarray of float64, shape (n_samples,)
            The similarity score of each pair, from 0 to 5.
        genre, filename, year : ndarray of str (object dtype), shape (n_samples,)
            Where each pair comes from, as written in the release
            (e.g. ``"main-news"``, ``"headlines"``, ``"2016"``).
        DESCR : str
            Origin, counts, license and citation of the data set.

    (data, target) : tuple if ``return_X_y`` is True

    Raises
    ------
    ValueError
        If ``split`` is not one of the accepted values.

    Notes
    -----
    The scores are licensed CC BY-SA 4.0; the sentences carry the licenses
    of their sources (see ``DESCR`` and the bundled ``stsb_LICENSE.txt``).
    Cite Cer et al., "SemEval-2017 Task 1: Semantic Textual Similarity
    Multilingual and Crosslingual Focused Evaluation", SemEval 2017.

    Examples
    --------
    >>> from skbert.datasets import load_stsb
    >>> stsb = load_stsb("test")
    >>> len(stsb.data), stsb.target.shape
    (1379, (1379,))
    >>> stsb.data[0], float(stsb.target[0])
    (('A girl is styling her hair.', 'A girl is brushing her hair.'), 2.5)
    >>> round(float(stsb.target.mean()), 2)
    2.61
    >>> pairs, scores = load_stsb("dev", return_X_y=True)
    >>> len(pairs), float(scores.min()), float(scores.max())
    (1500, 0.0, 5.0)
    """
    _check_option("split", split, STSB_SPLITS, "load_stsb")
    # Fields: genre, filename, year, id, score, sentence1, sentence2, then on
    # some rows attribution fields, which stay in the bundled file.
    rows = _read_rows(f"sts-{split}.csv.gz")
    data = [(row[5], row[6]) for row in rows]
    target = np.array([float(row[4]) for row in rows])
    if return_X_y:
        return data, target
    genre, filename, year = (_strings([row[i] for row in rows]) for i in range(3))
    return Bunch(
        data=data,
        target=target,
        genre=genre,
        filename=filename,
        year=year,
        DESCR=_read_descr("stsb.md"),
    )


def load_ud_pos(split="test", *, label="upos", return_X_y=False):
    """Load a sample of UD English EWT: words in context with their UPOS tags or relations.

    The first 500 sentences of the development and of the test split of the
    Universal Dependencies English Web Treebank (web text: e-mails and blog
    posts), 7,621 and 7,275 words, one sample per word occurrence, labelled
    with their part of speech or with their dependency relation. Bundled in
    the package; no download.

    Parameters
    ----------
    split : {"dev", "test"}, default="test"
        Which split to load.
    label : {"upos", "deprel"}, default="upos"
        ``"upos"``: the universal part-of-speech tag of each word (17 tags such
        as ``"NOUN"`` or ``"PUNCT"``). ``"deprel"``: the dependency relation
        of each word to its head (the CoNLL-U DEPREL), as the universal
        relation, subtypes such as ``nmod:poss`` folded into ``nmod`` (37
        relations such as ``"nsubj"`` or ``"obj"``).
    return_X_y : bool, default=False
        If True, return ``(data, target)`` instead of a Bunch, as scikit-learn's
        loaders do; the sentence of each word, which cross-validation needs to
        keep a sentence in one fold, is then ``load_ud_pos(split).groups``.

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        Dictionary-like object with attributes:

        data : list of tuple of (tuple of str, int)
            One ``(words, i)`` per word occurrence: the word forms of its
            sentence (multi-word token lines such as ``3-4`` and empty nodes
            such as ``8.1`` left out, as in the CoNLL-U format) and the index
            of the word in them.
        target : ndarray of str (object dtype), shape (n_samples,)
            The label of each word: its UPOS tag, such as ``"NOUN"``, or its
            universal relation, such as ``"nsubj"``.
        groups : ndarray of int64, shape (n_samples,)
            The sentence of each word, numbered from 0: the ``groups`` of
            :class:`~sklearn.model_selection.GroupKFold`.
        sentences : list of tuple of str
            The word forms of each sentence: ``sentences[groups[k]]`` is
            ``data[k][0]``.
        sent_id : ndarray of str (object dtype), shape (n_sentences,)
            The CoNLL-U ``sent_id`` of each sentence.
        target_names : ndarray of str (object dtype)
            Every label of Universal Dependencies for ``label``, sorted; the
            same for both splits. ``"upos"``: the 17 UPOS tags; both splits use
            all of them. ``"deprel"``: the 37 universal relations; each split
            uses 33 of them, the same 33: ``clf`` (not used in English),
            ``dep``, ``dislocated`` and ``orphan`` do not occur in the sample.
        DESCR : str
            Origin, counts, license and citation of the sample.

    (data, target) : tuple if ``return_X_y`` is True

    Raises
    ------
    ValueError
        If ``split`` or ``label`` is not one of the accepted values.

    Notes
    -----
    Licensed CC BY-SA 4.0 (the bundled ``ud_ewt_LICENSE.txt``). Cite Silveira
    et al., "A Gold Standard Dependency Corpus for English", LREC 2014, and
    the Universal Dependencies release.

    ``(words, i)`` samples are the input of ``skbert.BertWordVectorizer``.
    The bundled files are CoNLL-U, read with the ``conllu`` package, as
    ``skbert.datasets._conllu.read_conllu`` reads a file of your own.

    Examples
    --------
    >>> from skbert.datasets import load_ud_pos
    >>> ud = load_ud_pos()
    >>> len(ud.data), len(ud.sentences), ud.groups.shape
    (7275, 500, (7275,))
    >>> words, i = ud.data[2]
    >>> words
    ('What', 'if', 'Google', 'Morphed', 'Into', 'GoogleOS', '?')
    >>> words[i], ud.target[2]
    ('Google', 'PROPN')
    >>> ud.sent_id[ud.groups[2]]
    'weblog-blogspot.com_zentelligence_20040423000200_ENG_20040423_000200-0001'
    >>> from sklearn.model_selection import GroupKFold
    >>> folds = GroupKFold(n_splits=5).split(ud.data, ud.target, groups=ud.groups)
    >>> train, test = next(folds)
    >>> set(ud.groups[train]) & set(ud.groups[test])
    set()
    >>> X, y = load_ud_pos("dev", return_X_y=True)
    >>> len(X), y[:4].tolist()
    (7621, ['ADP', 'DET', 'PROPN', 'VERB'])

    The dependency relations of the same words; "its" is ``nmod:poss`` in the
    file:

    >>> deprel = load_ud_pos(label="deprel")
    >>> deprel.target[2], len(deprel.target_names), len(set(deprel.target))
    ('nsubj', 37, 33)
    >>> words, i = deprel.data[12]
    >>> words[i], deprel.target[12]
    ('its', 'nmod')
    """
    _check_option("split", split, UD_SPLITS, "load_ud_pos")
    _check_option("label", label, UD_LABELS, "load_ud_pos")
    name = f"ud_ewt_{split}.conllu.gz"
    with _data_file(name).open("rb") as raw:
        with gzip.open(raw, "rt", encoding="utf-8") as text:
            sentences = _read_sentences(text, name=name, label=label)
    data, target, groups, sent_id = _word_samples(sentences)
    if return_X_y:
        return data, target
    return Bunch(
        data=data,
        target=target,
        groups=groups,
        sentences=[words for _, words, _ in sentences],
        sent_id=sent_id,
        target_names=_strings(UPOS_TAGS if label == "upos" else UD_RELATIONS),
        DESCR=_read_descr("ud_ewt.md"),
    )
