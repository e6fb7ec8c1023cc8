"""The one training skeleton of every fine-tuner (issue 57, items 1-3, 7, 10 and 14): a failed
fit keeps the last fit, seeded fits in threads give what they give alone, torch's global random
state is left as it was, ``freeze`` is refused where nothing read would train, one ``freeze``
constraint and one vocabulary of training parameters."""

import pickle

import numpy as np
import pytest
import torch
from joblib import Parallel, delayed

from skbert import (
    BertClassifier,
    BertRegressor,
    BertVectorizer,
    BertWordClassifier,
    FineTunedVectorizer,
)
from skbert._train import _training

QUESTIONS = ["who wrote the book", "where is the city", "when did it start", "who is he",
             "where is the river", "when is the movie", "who sang it", "where was the dog",
             "when was it"]
LABELS = ["who", "where", "when"] * 3
SENTENCES = [s.split() for s in ["the cat sat", "a dog ran fast", "the big house",
                                  "a red river ran"]]
TAGS = {"the": "DET", "a": "DET", "cat": "NOUN", "dog": "NOUN", "house": "NOUN",
        "river": "NOUN", "sat": "VERB", "ran": "VERB", "fast": "ADJ", "big": "ADJ", "red": "ADJ"}
WORDS = [(tuple(words), i) for words in SENTENCES for i in range(len(words))]
WORD_TAGS = [TAGS[words[i]] for words, i in WORDS]
PAIRS = [(f"the {a} {w}", f"a {w} is {a}") for w in ["cat", "dog", "house", "river", "city"]
         for a in ["red", "big", "good"]]


def classifier(model_dir, **params):
    return BertClassifier(model_dir, **{"epochs": 1, "random_state": 0, "device": "cpu",
                                        **params})


def word_classifier(model_dir, **params):
    return BertWordClassifier(model_dir, **{"epochs": 1, "learning_rate": 1e-3,
                                            "random_state": 0, "device": "cpu", **params})


def tuner(model_dir, **params):
    return FineTunedVectorizer(BertVectorizer(model_dir, device="cpu"),
                               **{"batch_size": 4, "random_state": 0, **params})


# --- item 1: a fit that fails keeps the last fit ---------------------------------------------

def fitted_state(estimator):
    return {name: value for name, value in vars(estimator).items() if name.endswith("_")
            or name in ("_vectorizer", "_fitted")}


@pytest.mark.parametrize("make, X, y", [
    (classifier, QUESTIONS, LABELS),
    (word_classifier, WORDS, WORD_TAGS),
], ids=["BertClassifier", "BertWordClassifier"])
def test_a_fit_refused_at_freeze_keeps_the_last_fit(tiny_model_dir, make, X, y):
    estimator = make(tiny_model_dir).fit(X, y)
    before, proba = fitted_state(estimator), estimator.predict_proba(X)
    other = [f"label {i % 4}" for i in range(len(X))]
    with pytest.raises(ValueError, match="freeze=5 freezes the embeddings and the bottom 5"):
        estimator.set_params(freeze=5).fit(X, other)
    after = fitted_state(estimator)
    assert after.keys() == before.keys()
    assert all(after[name] is before[name] for name in before)
    np.testing.assert_array_equal(estimator.classes_, sorted(set(y)))
    np.testing.assert_array_equal(estimator.predict_proba(X), proba)


@pytest.mark.parametrize("make, X, y", [
    (classifier, QUESTIONS, LABELS),
    (lambda model_dir: BertRegressor(model_dir, epochs=1, random_state=0), QUESTIONS,
     np.arange(9.0)),
    (word_classifier, WORDS, WORD_TAGS),
    (tuner, PAIRS, None),
], ids=["BertClassifier", "BertRegressor", "BertWordClassifier", "FineTunedVectorizer"])
def test_a_fit_failing_in_training_keeps_the_last_fit(tiny_model_dir, monkeypatch, make, X, y):
    estimator = make(tiny_model_dir).fit(X, y)
    before = fitted_state(estimator)
    first = QUESTIONS[:3] if not isinstance(X[0][0], tuple) else WORDS[:3]
    output = estimator.transform(first)

    def broken(*args, **kwargs):
        raise RuntimeError("out of memory in the third epoch")

    monkeypatch.setattr(_training, "train", broken)
    with pytest.raises(RuntimeError, match="out of memory"):
        estimator.set_params(random_state=1).fit(X, y)
    after = fitted_state(estimator)
    assert after.keys() == before.keys()
    assert all(after[name] is before[name] for name in before)
    np.testing.assert_array_equal(estimator.transform(first), output)


# --- item 2: seeded fits in threads ----------------------------------------------------------

@pytest.mark.parametrize("params", [{}, {"mini_batch_size": 2}], ids=["plain", "gradcache"])
def test_seeded_fits_in_threads_give_what_they_give_alone(tiny_model_dir, params):
    def fit():
        return tuner(tiny_model_dir, epochs=3, **params).fit(PAIRS).transform(QUESTIONS)

    alone = fit()
    together = Parallel(n_jobs=4, backend="threading")(delayed(fit)() for _ in range(4))
    for features in together:
        np.testing.assert_array_equal(features, alone)


def test_seeded_classifier_fits_in_threads_give_what_they_give_alone(tiny_model_dir):
    def fit():
        return classifier(tiny_model_dir, epochs=3).fit(QUESTIONS, LABELS).predict_proba(
            QUESTIONS)

    alone = fit()
    for proba in Parallel(n_jobs=3, backend="threading")(delayed(fit)() for _ in range(3)):
        np.testing.assert_array_equal(proba, alone)


def test_gradient_caching_replays_the_dropout_its_loss_saw(tiny_model_dir, monkeypatch):
    """Each chunk's second pass (with a graph) draws the dropout masks of its first (without),
    whatever another fit in another thread does meanwhile: the gradient is the loss's."""
    from skbert._train import _losses

    calls, cached = [], _losses.cached

    def recording(embed, chunks, loss_of, device):
        passes = {False: [], True: []}  # by whether the pass builds a graph
        calls.append(passes)

        def recorded(chunk):
            embeddings = embed(chunk)
            passes[torch.is_grad_enabled()].append(embeddings.detach().clone())
            return embeddings

        return cached(recorded, chunks, loss_of, device)

    monkeypatch.setattr(_losses, "cached", recording)
    Parallel(n_jobs=2, backend="threading")(
        delayed(tuner(tiny_model_dir, mini_batch_size=2, epochs=2, random_state=seed).fit)(PAIRS)
        for seed in range(2))
    assert len(calls) > 10
    for passes in calls:
        assert len(passes[False]) == len(passes[True]) > 1
        for first, replay in zip(passes[False], passes[True]):
            torch.testing.assert_close(replay, first, rtol=0, atol=1e-6)


# --- item 3: torch's global random state -----------------------------------------------------

@pytest.mark.parametrize("make, X, y", [
    (lambda model_dir: classifier(model_dir, freeze="lora"), QUESTIONS, LABELS),
    (lambda model_dir: word_classifier(model_dir, freeze="lora"), WORDS, WORD_TAGS),
    (lambda model_dir: tuner(model_dir, freeze="lora"), PAIRS, None),
    (lambda model_dir: tuner(model_dir), PAIRS, None),
], ids=["BertClassifier", "BertWordClassifier", "FineTunedVectorizer", "full"])
def test_fits_and_light_pickles_leave_torch_random_state_alone(tiny_model_dir, make, X, y):
    pytest.importorskip("peft")
    make(tiny_model_dir).fit(X, y)  # the model loaded once, as every later fit finds it
    state = torch.get_rng_state()
    estimator = make(tiny_model_dir).fit(X, y)
    assert torch.equal(torch.get_rng_state(), state)
    if estimator.freeze == "lora":
        light = pickle.dumps(estimator.set_params(persist_weights=False))
        pickle.loads(light)
        assert torch.equal(torch.get_rng_state(), state)


# --- item 7: freeze where nothing read would train -------------------------------------------

@pytest.mark.parametrize("params, message", [
    ({"freeze": 2}, r"freeze=2 freezes the embeddings and the bottom 2 layers \(.* has 2\), "
                    r"and the estimator reads hidden state\(s\) \[2\] of .*: nothing that is "
                    r"read would train. Use an int from 0 to 1, 'embeddings', 'lora' or "
                    r"None\.$"),
    ({"freeze": 1, "layer": 1}, r"reads hidden state\(s\) \[1\] .* Use 'embeddings', 'lora' "
                                r"or None\.$"),
    ({"freeze": 1, "layer": [1, 2]}, None),  # layer 2 trains: accepted
    ({"freeze": 5}, r"freeze=5 freezes the embeddings and the bottom 5 layers"),
])
def test_fine_tuned_vectorizer_refuses_a_freeze_that_trains_nothing(tiny_model_dir, params,
                                                                     message):
    freeze = params.pop("freeze")
    tuned = FineTunedVectorizer(BertVectorizer(tiny_model_dir, **params), freeze=freeze,
                                batch_size=4, random_state=0)
    if message is None:
        assert tuned.fit(PAIRS).loss_curve_[0] > 0
        return
    with pytest.raises(ValueError, match=message) as caught:
        tuned.fit(PAIRS)
    assert "'all'" not in str(caught.value)  # FineTunedVectorizer refuses it


def test_word_classifier_refuses_a_freeze_that_trains_nothing(tiny_model_dir):
    with pytest.raises(ValueError, match=r"freeze=2 .* reads hidden state\(s\) \[2\] .* or "
                                         r"'all' to train the head alone"):
        word_classifier(tiny_model_dir, freeze=2).fit(WORDS, WORD_TAGS)
    with pytest.raises(ValueError, match=r"freeze='lora' adapts the attention .* reads hidden "
                                         r"state\(s\) \[0\] .* Use None, or 'all'"):
        word_classifier(tiny_model_dir, freeze="lora", layer=0).fit(WORDS, WORD_TAGS)


# --- item 10: one freeze constraint ----------------------------------------------------------

@pytest.mark.parametrize("Estimator", [BertClassifier, BertRegressor, BertWordClassifier,
                                       FineTunedVectorizer])
def test_one_freeze_constraint(Estimator):
    assert Estimator._parameter_constraints["freeze"] is _training.FREEZE_CONSTRAINT


def test_bert_classifier_takes_freeze_none_as_none(tiny_model_dir):
    none = classifier(tiny_model_dir, freeze="none").fit(QUESTIONS, LABELS)
    default = classifier(tiny_model_dir, freeze=None).fit(QUESTIONS, LABELS)
    np.testing.assert_array_equal(none.predict_proba(QUESTIONS),
                                  default.predict_proba(QUESTIONS))


# --- item 14: one name per training parameter ------------------------------------------------

@pytest.mark.parametrize("Estimator", [BertClassifier, BertRegressor, BertWordClassifier,
                                       FineTunedVectorizer])
def test_every_fine_tuner_names_its_training_parameters_alike(Estimator):
    params = Estimator().get_params()
    assert {"epochs", "learning_rate", "warmup", "batch_size"} <= params.keys()


@pytest.mark.parametrize("old, new, value", [("max_epochs", "epochs", 2),
                                             ("warmup_ratio", "warmup", 0.5)])
def test_old_names_warn_and_train_as_the_new_ones(tiny_model_dir, old, new, value):
    renamed = classifier(tiny_model_dir, **{old: value})
    with pytest.warns(FutureWarning, match=f"{old} was renamed {new} .* use {new}={value!r}"):
        renamed.fit(QUESTIONS, LABELS)
    expected = classifier(tiny_model_dir, **{new: value}).fit(QUESTIONS, LABELS)
    assert renamed.loss_curve_ == expected.loss_curve_
    np.testing.assert_array_equal(renamed.predict_proba(QUESTIONS),
                                  expected.predict_proba(QUESTIONS))


def test_a_pickle_with_the_old_names_loads_with_the_new(tiny_model_dir):
    fitted = classifier(tiny_model_dir, epochs=2, warmup=0.2).fit(QUESTIONS, LABELS)
    state = fitted.__getstate__()
    # As 0.1.0 pickled it: max_epochs and warmup_ratio, no epochs and warmup.
    state["max_epochs"], state["warmup_ratio"] = state.pop("epochs"), state.pop("warmup")
    old = object.__new__(BertClassifier)
    old.__setstate__(state)
    params = old.get_params()
    assert (params["epochs"], params["warmup"]) == (2, 0.2)
    assert (params["max_epochs"], params["warmup_ratio"]) == ("deprecated", "deprecated")
    np.testing.assert_array_equal(old.predict_proba(QUESTIONS), fitted.predict_proba(QUESTIONS))


def test_a_word_classifier_pickle_without_warmup_loads(tiny_model_dir):
    fitted = word_classifier(tiny_model_dir).fit(WORDS, WORD_TAGS)
    state = fitted.__getstate__()
    del state["warmup"]  # a 0.1.0 BertWordClassifier had none
    old = object.__new__(BertWordClassifier)
    old.__setstate__(state)
    assert old.get_params()["warmup"] == 0.1
