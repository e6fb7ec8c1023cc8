"""BertWordClassifier on the tiny random BERT: training by sentence, the loss, persistence,
scikit-learn conventions and errors."""

import pickle
from unittest import mock

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn import clone
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV
from sklearn.utils import estimator_checks

from skbert import BertWordClassifier, BertWordVectorizer
from skbert._encoder import _loading
from skbert._train import _training
from tests.conftest import DATA_FREE_CHECKS

SENTENCES = [s.split() for s in [
    "the cat sat on the mat", "a dog ran to the river", "the big dog runs fast",
    "a small cat is slow", "the red house is big", "an awful film was long",
    "the city is good", "a blue river ran", "the people ran to the city",
    "a good movie is short",
]]
TAGS = {"the": "DET", "a": "DET", "an": "DET", "cat": "NOUN", "dog": "NOUN", "mat": "NOUN",
        "river": "NOUN", "house": "NOUN", "film": "NOUN", "city": "NOUN", "people": "NOUN",
        "movie": "NOUN", "sat": "VERB", "ran": "VERB", "runs": "VERB", "is": "AUX",
        "was": "AUX", "on": "ADP", "to": "ADP", "big": "ADJ", "small": "ADJ", "red": "ADJ",
        "awful": "ADJ", "long": "ADJ", "good": "ADJ", "blue": "ADJ", "short": "ADJ",
        "fast": "ADJ", "slow": "ADJ"}
FAST = {"epochs": 2, "learning_rate": 1e-3, "random_state": 0}


def word_samples(sentences=SENTENCES):
    X = [(tuple(words), i) for words in sentences for i in range(len(words))]
    return X, np.array([TAGS[words[i]] for words, i in X], dtype=object)


@pytest.fixture(scope="module")
def data():
    return word_samples()


@pytest.fixture(scope="module")
def classifier(tiny_model_dir, data):
    return BertWordClassifier(tiny_model_dir, **FAST).fit(*data)


@pytest.fixture(scope="module")
def no_dropout_dir(tmp_path_factory, tiny_model_dir):
    """The tiny model without dropout: its loss is a function of the weights alone."""
    model, tokenizer = _loading.from_pretrained(tiny_model_dir, None, "float32")
    model.config.hidden_dropout_prob = model.config.attention_probs_dropout_prob = 0.0
    directory = tmp_path_factory.mktemp("tiny-bert-no-dropout")
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


def test_fit_predict_shapes_and_labels(classifier, data):
    X, y = data
    assert classifier.classes_.tolist() == sorted(set(y))
    proba = classifier.predict_proba(X)
    assert proba.shape == (len(X), len(classifier.classes_))
    np.testing.assert_allclose(proba.sum(axis=1), 1, rtol=1e-6)
    assert set(classifier.predict(X)) <= set(classifier.classes_)
    assert classifier.decision_function(X).shape == proba.shape
    assert 0 <= classifier.score(X, y) <= 1
    assert classifier.transform(X).shape == (len(X), 32)


def test_one_forward_pass_per_sentence_per_step(tiny_model_dir, data):
    X, y = data
    calls = []
    real = _training.token_states

    def counted(encoder, inputs, *args):
        calls.append(inputs["input_ids"].shape[0])
        return real(encoder, inputs, *args)

    with mock.patch.object(_training, "token_states", counted):
        BertWordClassifier(tiny_model_dir, epochs=3, batch_size=4, random_state=0).fit(X, y)
    # 10 sentences of 4 to 6 labelled words: 3 steps an epoch of at most 4 sentences each.
    assert len(calls) == 3 * 3
    assert sum(calls) == 3 * len(SENTENCES) and max(calls) <= 4


def hand_written_loss(model_dir, X, y, classes, head, class_weight=None):
    """Cross-entropy of the head over every word's first-subword vector, written with
    transformers alone: each sentence tokenized with is_split_into_words, the last layer."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(model_dir), AutoModel.from_pretrained(
        model_dir).eval()
    vectors = []
    with torch.no_grad():
        for words, i in X:
            encoding = tokenizer(list(words), is_split_into_words=True, return_tensors="pt")
            states = model(**encoding).last_hidden_state[0]
            vectors.append(states[encoding.word_ids().index(i)])
        logits = head(torch.stack(vectors))
    targets = torch.as_tensor(np.searchsorted(classes, y))
    weight = None if class_weight is None else torch.tensor(
        [class_weight.get(c, 1.0) for c in classes], dtype=torch.float32)
    return torch.nn.functional.cross_entropy(logits, targets, weight=weight).item()


@pytest.mark.parametrize("class_weight", [None, {"NOUN": 4.0, "DET": 0.5}])
def test_the_loss_is_the_words_cross_entropy(no_dropout_dir, data, class_weight):
    X, y = data
    heads = []
    real = _training.linear_head

    def kept(*args):  # the head as initialized, before any step
        heads.append(real(*args))
        heads.append(pickle.loads(pickle.dumps(heads[-1])))
        return heads[0]

    with mock.patch.object(_training, "linear_head", kept):
        clf = BertWordClassifier(no_dropout_dir, epochs=1, batch_size=len(SENTENCES),
                                 class_weight=class_weight, random_state=0).fit(X, y)
    # One batch of every sentence: the epoch's loss is the loss before the only step.
    expected = hand_written_loss(no_dropout_dir, X, y, clf.classes_, heads[1].eval(),
                                 class_weight)
    assert clf.loss_curve_[0] == pytest.approx(expected, rel=1e-5)


def test_same_random_state_same_weights_bit_for_bit(classifier, data):
    X, y = data
    again = clone(classifier).fit(X, y)
    np.testing.assert_array_equal(again.coef_, classifier.coef_)
    np.testing.assert_array_equal(again.predict_proba(X), classifier.predict_proba(X))
    other = clone(classifier).set_params(random_state=1).fit(X, y)
    assert not np.array_equal(other.coef_, classifier.coef_)


def test_fine_tuning_never_modifies_the_shared_model(tiny_model_dir, data):
    vectorizer = BertWordVectorizer(tiny_model_dir).fit()
    before = {k: v.clone() for k, v in vectorizer.model_.state_dict().items()}
    clf = BertWordClassifier(tiny_model_dir, **FAST).fit(*data)
    after = vectorizer.model_.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    tuned = clf.vectorizer_.model_.state_dict()
    assert any(not torch.equal(before[k], tuned[k]) for k in before)


def test_freeze_all_reads_the_vectorizer_features_and_its_cache(tiny_model_dir, data):
    X, y = data
    setting = {"layer": [1, 2], "layer_combine": "concat", "subword_pooling": "first_last"}
    clf = BertWordClassifier(tiny_model_dir, freeze="all", **setting, **FAST).fit(X, y)
    expected = BertWordVectorizer(tiny_model_dir, **setting, cache=False).fit().transform(X)
    np.testing.assert_allclose(clf.transform(X), expected, rtol=0, atol=1e-5)
    assert clf.coef_.shape == (len(clf.classes_), 4 * 32)


def test_a_grid_over_the_head_forwards_each_sentence_once(tiny_model_dir, monkeypatch):
    from skbert import clear_cache
    from skbert._words import _samples

    X, y = word_samples(SENTENCES + [["a", "cat", "ran", "to", "the", "big", "house"]])
    clear_cache()
    windows = []
    real = _samples.forward_windows

    def counted(runner, tokenizer, batch, *args):
        windows.append(len(batch))
        return real(runner, tokenizer, batch, *args)

    monkeypatch.setattr(_samples, "forward_windows", counted)
    grid = {"head_learning_rate": [1e-2, 1e-3], "layer": [1, 2],
            "subword_pooling": ["first", "mean"]}
    GridSearchCV(BertWordClassifier(tiny_model_dir, freeze="all", epochs=1, random_state=0),
                 grid, cv=2).fit(X, y)
    assert sum(windows) == len(SENTENCES) + 1


@pytest.mark.parametrize("freeze, frozen", [("embeddings", ("embeddings.",)),
                                            (1, ("embeddings.", "encoder.layer.0."))])
def test_partial_freeze_trains_the_rest(tiny_model_dir, data, freeze, frozen):
    base = BertWordVectorizer(tiny_model_dir).fit().model_.state_dict()
    tuned = BertWordClassifier(tiny_model_dir, freeze=freeze, **FAST).fit(
        *data).vectorizer_.model_.state_dict()
    for name, tensor in tuned.items():  # the pooler reads no word: it gets no gradient
        assert torch.equal(tensor, base[name]) == name.startswith((*frozen, "pooler.")), name


def test_long_sentences_train_in_windows_centred_on_their_words(tiny_model_dir):
    X, y = word_samples([SENTENCES[0] * 4, SENTENCES[1]])
    clf = BertWordClassifier(tiny_model_dir, max_length=12, **FAST).fit(X, y)
    expected = BertWordVectorizer(tiny_model_dir, subword_pooling="first", max_length=12,
                                  cache=False).fit()
    expected.model_ = clf.vectorizer_.model_
    np.testing.assert_allclose(clf.transform(X), expected.transform(X), rtol=0, atol=1e-5)


@pytest.mark.parametrize("freeze", ["none", "all"])
def test_a_word_longer_than_a_window_trains_and_predicts(tiny_model_dir, data, freeze):
    """A URL of 92 subwords with the default window of 64 tokens: read from its first 62
    subwords (its first among them, the one the head reads) in fit and predict, with one
    warning per call, as BertWordVectorizer reads it."""
    url = "https://example.com/" + "a1b2c3" * 12
    X, y = data
    X, y = X + [(("see", url, "now"), 1)], np.append(y, "X")
    message = (r"^1 target word\(s\) take more than the 62 text tokens of a window of "
               rf"max_length=64 \(the first is the sample at index {len(X) - 1}, of 92 "
               r"tokens\) and are read from their first 62 subwords\.$")
    with pytest.warns(UserWarning, match=message) as caught:
        clf = BertWordClassifier(tiny_model_dir, freeze=freeze, **FAST).fit(X, y)
    assert len(caught) == 1
    alone = message.replace(f"index {len(X) - 1}", "index 0")  # predicted alone
    with pytest.warns(UserWarning, match=alone) as caught:
        proba = clf.predict_proba(X[-1:])
    assert len(caught) == 1 and proba.shape == (1, len(clf.classes_))
    expected = BertWordVectorizer(tiny_model_dir, subword_pooling="first", cache=False).fit()
    expected.model_ = clf.vectorizer_.model_
    with pytest.warns(UserWarning, match="1 target word"):
        np.testing.assert_allclose(clf.transform(X[-1:]), expected.transform(X[-1:]), rtol=0,
                                   atol=1e-5)


def test_dataframe_with_a_label_column_and_span_samples(tiny_model_dir, data):
    X, y = data
    frame = pd.DataFrame({"tag": y, "index": [i for _, i in X], "words": [w for w, _ in X]})
    clf = BertWordClassifier(tiny_model_dir, **FAST).fit(frame, frame["tag"])
    np.testing.assert_array_equal(clf.predict_proba(frame), clf.predict_proba(X))
    text = "the cat sat on the mat"
    spans = [(text, 4, 7), (text, 8, 11)]
    assert clf.predict(spans).shape == (2,)


# --- persistence and fitted state ------------------------------------------------------------

def test_pickles_give_identical_predictions(classifier, data):
    X, _ = data
    expected = classifier.predict_proba(X)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(classifier)).predict_proba(X),
                                  expected)


@pytest.mark.parametrize("freeze", ["all", "lora"])
def test_light_pickles_are_small_and_equal(tiny_model_dir, data, freeze):
    pytest.importorskip("peft")
    X, y = data
    clf = BertWordClassifier(tiny_model_dir, freeze=freeze, persist_weights=False,
                             **FAST).fit(X, y)
    light = pickle.dumps(clf)
    full = pickle.dumps(clone(clf).set_params(persist_weights=True).fit(X, y))
    assert len(light) < 0.2 * len(full)
    np.testing.assert_allclose(pickle.loads(light).predict_proba(X), clf.predict_proba(X),
                               rtol=0, atol=1e-6)
    if freeze == "lora":
        assert all(np.abs(b).max() > 0 for _, b, _ in clf._fitted.lora_factors.values())


def test_a_light_pickle_of_a_tuned_encoder_is_refused(tiny_model_dir, data):
    with pytest.raises(ValueError, match=r"persist_weights=False pickles a reference to the base "
                                         r"model, which a fit with freeze=None changes"):
        BertWordClassifier(tiny_model_dir, persist_weights=False, **FAST).fit(*data)


def test_predictions_read_the_fit_not_parameters_set_since(classifier, data):
    X, _ = data
    expected = classifier.predict_proba(X)
    clf = pickle.loads(pickle.dumps(classifier)).set_params(
        freeze="all", layer=0, subword_pooling="max", layer_combine="sum", max_length=4,
        dtype="bfloat16")
    np.testing.assert_array_equal(clf.predict_proba(X), expected)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(clf)).predict_proba(X), expected)


# --- options and errors ----------------------------------------------------------------------

def test_auto_epochs_and_learning_rates(tiny_model_dir, data):
    X, y = data
    clf = BertWordClassifier(tiny_model_dir, freeze="all", random_state=0).fit(X, y)
    # 10 sentences in batches of 16: one step an epoch, so 300 epochs for 300 steps.
    assert (clf.epochs_, clf.head_learning_rate_) == (300, 1e-2)
    assert len(clf.loss_curve_) == 300
    rates = {freeze: BertWordClassifier(tiny_model_dir, freeze=freeze, epochs=1).fit(
        X, y).learning_rate_ for freeze in ["none", 1]}
    assert rates == {"none": 1e-4, 1: 1e-4}


def test_binary_has_one_decision(tiny_model_dir, data):
    X, y = data
    binary = np.where(y == "NOUN", "noun", "other")
    clf = BertWordClassifier(tiny_model_dir, **FAST).fit(X, binary)
    assert clf.coef_.shape == (1, 32) and clf.decision_function(X).shape == (len(X),)
    np.testing.assert_array_equal(clf.predict(X), np.where(clf.decision_function(X) > 0,
                                                           "other", "noun"))


def test_errors(tiny_model_dir, classifier, data):
    X, y = data
    with pytest.raises(ValueError, match=r"got 51 word samples and 50 labels"):
        BertWordClassifier(tiny_model_dir).fit(X, y[:-1])
    with pytest.raises(ValueError, match=r"at least 2 classes .* only one class: 'DET'"):
        BertWordClassifier(tiny_model_dir).fit(X[:1], y[:1])
    with pytest.raises(ValueError, match=r"Found 0 word samples"):
        BertWordClassifier(tiny_model_dir).fit([], [])
    with pytest.raises(ValueError, match=r"y has labels that fit never saw, so none of them "
                                         r"can be predicted: \['PRON'\]"):
        classifier.score(X[:2], ["DET", "PRON"])
    with pytest.raises(ValueError, match=r"Sample at index 0 is str"):
        BertWordClassifier(tiny_model_dir).fit(["the cat"], ["DET"])
    with pytest.raises(ValueError, match=r"The 'subword_pooling' parameter"):
        BertWordClassifier(tiny_model_dir, subword_pooling="sum").fit(X, y)
    with pytest.raises(ValueError, match=r"layer=9 is out of range"):
        BertWordClassifier(tiny_model_dir, layer=9).fit(X, y)
    with pytest.raises(NotFittedError):
        BertWordClassifier(tiny_model_dir).predict(X)


# --- scikit-learn conventions ------------------------------------------------------------------

@pytest.mark.parametrize("check", DATA_FREE_CHECKS)
def test_sklearn_data_free_check(tiny_model_dir, check):
    getattr(estimator_checks, check)("BertWordClassifier", BertWordClassifier(tiny_model_dir))


def test_fit_returns_self_and_leaves_params_unchanged(tiny_model_dir, data):
    clf = BertWordClassifier(tiny_model_dir, class_weight="balanced", **FAST)
    before = clf.get_params()
    assert clf.fit(*data) is clf
    assert clf.get_params() == before
    tags = clf.__sklearn_tags__()
    assert tags.estimator_type == "classifier" and not tags.input_tags.two_d_array


def test_grid_search_over_freeze(tiny_model_dir, data):
    X, y = data
    search = GridSearchCV(BertWordClassifier(tiny_model_dir, **FAST),
                          {"freeze": ["none", "all"]}, cv=2).fit(X, y)
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    assert search.predict(X).shape == (len(X),)


# --- the learning curve over sentences ---------------------------------------------------------

FITS = []


class _Recorder(ClassifierMixin, BaseEstimator):
    """Keeps what fit got (the words and their groups) in FITS; predicts the commonest label."""

    def fit(self, X, y, groups=None):
        FITS.append((list(X), None if groups is None else list(groups)))
        self.classes_, counts = np.unique(y, return_counts=True)
        self.label_ = self.classes_[counts.argmax()]
        return self

    def predict(self, X):
        return np.full(len(X), self.label_, dtype=object)


def test_learning_curve_draws_whole_sentences(tiny_model_dir):
    from skbert.probe import learning_curve

    X, y = word_samples()
    groups = np.repeat(np.arange(len(SENTENCES)), [len(words) for words in SENTENCES])
    test_X, test_y = word_samples(SENTENCES[:4])
    FITS.clear()
    curve = learning_curve(tiny_model_dir, X, y, test_X, test_y, sizes=[3, 6, None],
                           groups=groups, estimators={"recorder": _Recorder()})
    fits = list(FITS)
    assert list(curve.index) == [3, 6, 10] and curve.index.name == "n_sentences"
    assert curve.attrs["scoring"] == "accuracy"
    previous = set()
    for (words, its_groups), n in zip(fits, [3, 6, 10]):
        sentences = set(its_groups)
        assert len(sentences) == n and previous <= sentences  # nested draws
        # Every word of each drawn sentence, with its own group.
        assert words == [X[row] for row in np.flatnonzero(np.isin(groups, list(sentences)))]
        assert its_groups == [groups[X.index(sample)] for sample in words]
        previous = sentences
    assert curve.attrs["n_words"].tolist() == [len(words) for words, _ in fits]


def test_learning_curve_default_word_strategies(tiny_model_dir):
    from sklearn.metrics import accuracy_score

    from skbert.probe import learning_curve

    X, y = word_samples()
    groups = np.repeat(np.arange(len(SENTENCES)), [len(words) for words in SENTENCES])
    test_X, test_y = word_samples(SENTENCES[:4])
    curve = learning_curve(tiny_model_dir, X, y, test_X, test_y, sizes=[None], groups=groups)
    assert list(curve.columns) == ["frozen best layer + logistic regression", "LoRA",
                                   "full fine-tuning"]
    full = BertWordClassifier(tiny_model_dir, random_state=0).fit(X, y)
    assert curve.loc[10, "full fine-tuning"] == accuracy_score(test_y, full.predict(test_X))
    with pytest.raises(ValueError, match="groups has 3 values for the 51 word samples"):
        learning_curve(tiny_model_dir, X, y, test_X, test_y, groups=[0, 1, 2])
