"""FineTunedVectorizer on the tiny model: losses against their formulas, gradient caching,
batches, persistence, search and grid integration, and every bad input."""

import pickle

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline

from skbert import BertVectorizer, FineTunedVectorizer, PairSimilarity, SimilaritySearch
from skbert._embeddings._finetuned_vectorizer import _distinct_batches
from skbert._encoder._encoding import _model_inputs, tokenize
from skbert._train import _losses, _training

WORDS = ["cat", "dog", "house", "river", "city", "movie", "film", "year", "day", "time",
         "people", "word", "text", "question", "answer", "country"]
ADJECTIVES = ["red", "blue", "green", "big", "small", "fast", "slow", "good", "bad", "long"]
PAIRS = [(f"the {adjective} {word}", f"a {word} is {adjective}")
         for word in WORDS for adjective in ADJECTIVES[:2]]
# Scored pairs: the matching pairs near 5, pairs about two different things near 0.
SCORED = PAIRS[:16] + [(PAIRS[i][0], PAIRS[(i + 7) % 32][1]) for i in range(16, 32)]
SCORES = np.r_[np.linspace(4, 5, 16), np.linspace(0, 1, 16)]
TEXTS = [f"the {adjective} {word}" for word in WORDS[:8] for adjective in ADJECTIVES[:3]]
LABELS = np.array([index % 3 for index in range(len(TEXTS))])


@pytest.fixture(scope="module")
def still_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model without dropout: one forward pass gives the same vectors in training
    mode as in eval mode, so cached and uncached gradients can be compared exactly."""
    from transformers import AutoTokenizer, BertModel

    directory = tmp_path_factory.mktemp("still-bert")
    model = BertModel.from_pretrained(tiny_model_dir, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0)
    model.save_pretrained(directory)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(directory)
    return str(directory)


def tuner(model_dir, **params):
    vectorizer = params.pop("vectorizer", None) or BertVectorizer(model_dir)
    defaults = dict(batch_size=8, learning_rate=1e-3, random_state=0)
    return FineTunedVectorizer(vectorizer, **{**defaults, **params})


# The formulas, written out with loops over the batch.

def _cos(u, v):
    return torch.nn.functional.cosine_similarity(u, v, dim=0)


def reference_in_batch(anchors, positives, negatives, scale):
    documents = [*positives, *negatives]
    forward = backward = 0.0
    for i in range(len(anchors)):
        logits = torch.stack([scale * _cos(anchors[i], d) for d in documents])
        forward = forward - torch.log_softmax(logits, dim=0)[i]
        logits = torch.stack([scale * _cos(positives[i], a) for a in anchors])
        backward = backward - torch.log_softmax(logits, dim=0)[i]
    return (forward + backward) / (2 * len(anchors))


def reference_cosent(left, right, y, scale):
    cosines = [scale * _cos(a, b) for a, b in zip(left, right)]
    total = torch.tensor(1.0, dtype=torch.float64)
    for i in range(len(y)):
        for j in range(len(y)):
            if y[i] < y[j]:
                total = total + torch.exp((cosines[i] - cosines[j]).double())
    return torch.log(total)


def reference_supcon(vectors, labels, scale):
    losses = []
    for i in range(len(vectors)):
        others = [a for a in range(len(vectors)) if a != i]
        positives = [p for p in others if labels[p] == labels[i]]
        if not positives:
            continue
        denominator = torch.logsumexp(
            torch.stack([scale * _cos(vectors[i], vectors[a]) for a in others]), dim=0)
        losses.append(-torch.stack([scale * _cos(vectors[i], vectors[p]) - denominator
                                    for p in positives]).mean())
    return torch.stack(losses).mean()


def test_each_loss_equals_its_formula_on_one_batch():
    generator = torch.Generator().manual_seed(0)
    a, p, n = (torch.randn(6, 5, generator=generator) for _ in range(3))
    y = torch.tensor([3.0, 1.0, 4.0, 1.5, 5.0, 0.0])
    labels = torch.tensor([0, 1, 0, 2, 1, 0])
    torch.testing.assert_close(_losses.in_batch([a, p], None, 20.0),
                               reference_in_batch(a, p, [], 20.0))
    torch.testing.assert_close(_losses.in_batch([a, p, n], None, 20.0),
                               reference_in_batch(a, p, n, 20.0))
    torch.testing.assert_close(_losses.cosent([a, p], y, 20.0).double(),
                               reference_cosent(a, p, y, 20.0), rtol=1e-5, atol=1e-5)
    cosines = torch.stack([_cos(u, v) for u, v in zip(a, p)])
    torch.testing.assert_close(_losses.cosine([a, p], y / 5, 20.0),
                               ((cosines - y / 5) ** 2).mean())
    torch.testing.assert_close(_losses.supcon([a], labels, 20.0),
                               reference_supcon(a, labels, 20.0))
    # No two texts of a label in the batch: no positive, a zero loss that still backpropagates.
    alone = _losses.supcon([a.requires_grad_()], torch.arange(6), 20.0)
    assert alone.item() == 0.0 and alone.requires_grad


@pytest.mark.parametrize("loss, X, y", [
    ("in_batch", PAIRS, None),
    ("in_batch", [(a, b, PAIRS[(i + 5) % len(PAIRS)][1]) for i, (a, b) in enumerate(PAIRS)],
     None),
    ("cosent", SCORED, SCORES),
    ("cosine", SCORED, SCORES),
    ("supcon", TEXTS, LABELS),
])
def test_each_loss_falls_on_a_toy_set(tiny_model_dir, loss, X, y):
    tuned = tuner(tiny_model_dir, loss=loss, epochs=6, learning_rate=2e-3).fit(X, y)
    assert tuned.loss_ == loss
    assert len(tuned.loss_curve_) == 6
    assert tuned.loss_curve_[-1] < 0.9 * tuned.loss_curve_[0]


@pytest.mark.parametrize("X, y, loss", [
    (PAIRS, None, "in_batch"),
    ([(a, b, b) for a, b in PAIRS], None, "in_batch"),
    (SCORED, SCORES, "cosent"),
    (TEXTS, LABELS, "supcon"),
])
def test_auto_picks_the_loss_from_the_input(tiny_model_dir, X, y, loss):
    assert tuner(tiny_model_dir, epochs=1).fit(X, y).loss_ == loss


def test_batches_never_hold_a_text_twice():
    rng = np.random.RandomState(0)
    # Few distinct texts: many rows share an anchor or a positive.
    texts = rng.randint(0, 30, size=(200, 3))
    with pytest.warns(UserWarning, match="texts repeat"):
        batches = _distinct_batches(texts, np.arange(200), 16, rng)
    assert sorted(np.concatenate(batches).tolist()) == list(range(200))
    for batch in batches:
        members = texts[batch].ravel()
        rows_of = [set(texts[row]) for row in batch]
        assert len(batch) <= 16
        assert sum(len(row) for row in rows_of) == len(set(members))
    assert np.mean([len(batch) for batch in batches]) > 4


def test_in_batch_fit_draws_batches_without_duplicates(tiny_model_dir, monkeypatch):
    seen = []
    original = _losses.in_batch

    def spy(columns, targets, scale):
        stacked = torch.cat(columns).detach()
        seen.append(len(torch.unique(stacked, dim=0)) == len(stacked))
        return original(columns, targets, scale)

    monkeypatch.setitem(_losses.LOSSES, "in_batch", spy)
    repeated = PAIRS + [(PAIRS[0][0], PAIRS[5][1]), (PAIRS[3][0], PAIRS[3][1] + " too")]
    tuner(tiny_model_dir, epochs=2).fit(repeated)
    assert seen and all(seen)


def _embedder(model_dir, texts):
    vectorizer = BertVectorizer(model_dir).fit()
    windows = tokenize(vectorizer.tokenizer_, texts, vectorizer._window_length())
    encoder = vectorizer.model_
    import copy

    encoder = copy.deepcopy(encoder).train()
    extraction = vectorizer._extraction()

    def embed(chunk):
        inputs, special = _model_inputs(vectorizer.tokenizer_, windows, chunk, torch.device("cpu"))
        return _training.pooled(encoder, inputs, special, extraction)

    return encoder, embed


def _gradients(encoder):
    return {name: parameter.grad.clone() for name, parameter in encoder.named_parameters()
            if parameter.grad is not None}


@pytest.mark.parametrize("dropout", [False, True])
def test_gradient_caching_gives_the_uncached_loss_and_gradients(tiny_model_dir, still_dir,
                                                                 dropout):
    texts = [text for pair in PAIRS[:6] for text in pair]
    encoder, embed = _embedder(tiny_model_dir if dropout else still_dir, texts)
    chunks = [np.arange(start, start + 3) for start in range(0, 12, 3)]

    def loss_of(embeddings):
        return _losses.in_batch([embeddings[0::2], embeddings[1::2]], None, 20.0)

    torch.manual_seed(1)
    state = torch.get_rng_state()
    # Uncached, from the same random state: the same dropout, chunk by chunk.
    reference = loss_of(torch.cat([embed(chunk) for chunk in chunks]))
    reference.backward()
    expected = _gradients(encoder)
    encoder.zero_grad(set_to_none=True)
    torch.set_rng_state(state)
    loss = _losses.cached(embed, chunks, loss_of, torch.device("cpu"))
    after = torch.get_rng_state()
    (loss * 4.0).backward()  # a loss scale passes through
    torch.testing.assert_close(loss.detach(), reference.detach(), atol=1e-5, rtol=0)
    cached = _gradients(encoder)
    assert cached.keys() == expected.keys() and len(cached) > 10
    for name in expected:
        torch.testing.assert_close(cached[name], 4.0 * expected[name], atol=1e-5, rtol=1e-4)
    assert torch.equal(torch.get_rng_state(), after)  # the replay leaves the stream alone


def test_mini_batches_train_as_the_whole_batch(still_dir):
    plain = tuner(still_dir, epochs=2).fit(PAIRS)
    cached = tuner(still_dir, epochs=2, mini_batch_size=3).fit(PAIRS)
    np.testing.assert_allclose(cached.loss_curve_, plain.loss_curve_, atol=1e-5)
    np.testing.assert_allclose(cached.transform(TEXTS), plain.transform(TEXTS), atol=1e-5)


@pytest.mark.parametrize("setting", [
    dict(pooling="mean"), dict(pooling="cls"), dict(pooling="max"), dict(pooling="last"),
    dict(pooling="mean_sqrt_len"), dict(pooling="mean_max"), dict(pooling="pooler"),
    dict(layer=[1, 2], layer_combine="concat"), dict(layer=[0, -1], pooling="max"),
    dict(layer=1, include_special_tokens=False), dict(prompt="how many "),
    dict(layer="all", layer_combine="sum", pooling="max", include_special_tokens=False),
])
def test_the_vector_that_trains_is_the_vectorizers(tiny_model_dir, setting):
    vectorizer = BertVectorizer(tiny_model_dir, cache=False, **setting).fit()
    windows = tokenize(vectorizer.tokenizer_, TEXTS, vectorizer._window_length(),
                       prompt=vectorizer.prompt_)
    inputs, special = _model_inputs(vectorizer.tokenizer_, windows, np.arange(len(TEXTS)),
                                    torch.device("cpu"))
    with torch.no_grad():
        trained = _training.pooled(vectorizer.model_, inputs, special, vectorizer._extraction())
    np.testing.assert_allclose(trained.numpy(), vectorizer.transform(TEXTS), atol=1e-5)


def test_transform_is_the_tuned_vectorizers_and_the_shared_model_is_unchanged(tiny_model_dir):
    frozen = BertVectorizer(tiny_model_dir, norm="l2").fit()
    before = frozen.transform(TEXTS)
    tuned = tuner(tiny_model_dir, vectorizer=BertVectorizer(tiny_model_dir, norm="l2"),
                  epochs=2).fit(PAIRS)
    assert isinstance(tuned.vectorizer_, BertVectorizer)
    after = tuned.transform(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(after, axis=1), 1.0, rtol=1e-5)
    assert np.abs(after - before).max() > 1e-3  # the weights trained
    np.testing.assert_array_equal(frozen.transform(TEXTS), before)  # the shared ones did not
    np.testing.assert_array_equal(tuned.vectorizer_.transform(TEXTS), after)
    assert tuned.get_feature_names_out()[0] == "finetunedvectorizer0"
    frame = clone(tuned).set_output(transform="pandas").fit(PAIRS).transform(TEXTS[:3])
    assert frame.shape == (3, 32)


@pytest.mark.parametrize("freeze", ["none", "lora", 1])
def test_reruns_are_bit_for_bit(tiny_model_dir, freeze):
    first = tuner(tiny_model_dir, freeze=freeze, epochs=2).fit(PAIRS).transform(TEXTS)
    second = tuner(tiny_model_dir, freeze=freeze, epochs=2).fit(PAIRS).transform(TEXTS)
    np.testing.assert_array_equal(first, second)


def test_freeze_keeps_the_frozen_layers(tiny_model_dir):
    base = BertVectorizer(tiny_model_dir).fit().model_
    tuned = tuner(tiny_model_dir, freeze=1, epochs=2).fit(PAIRS).vectorizer_.model_
    for name, parameter in tuned.named_parameters():
        if name.startswith("pooler."):  # mean pooling does not read it: no gradient
            continue
        same = torch.equal(parameter, base.get_parameter(name))
        frozen = name.startswith(("embeddings.", "encoder.layer.0."))
        assert same == frozen, name


def test_pickles_full_and_light(tiny_model_dir):
    full = tuner(tiny_model_dir, epochs=2).fit(PAIRS)
    expected = full.transform(TEXTS)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(full)).transform(TEXTS), expected)
    lora = tuner(tiny_model_dir, freeze="lora", epochs=2, persist_weights=False).fit(PAIRS)
    light = pickle.dumps(lora)
    assert len(light) < 1_000_000
    assert len(light) < len(pickle.dumps(lora.set_params(persist_weights=True))) / 5
    np.testing.assert_array_equal(pickle.loads(light).transform(TEXTS), lora.transform(TEXTS))
    with pytest.raises(ValueError, match="persist_weights=False"):
        tuner(tiny_model_dir, persist_weights=False).fit(PAIRS)


def test_clone_and_grid_search(tiny_model_dir):
    template = tuner(tiny_model_dir, epochs=1)
    assert clone(template).get_params()["vectorizer"] is not template.vectorizer
    search = GridSearchCV(template, {"freeze": ["none", "lora"],
                                     "vectorizer__pooling": ["mean", "cls"]}, cv=2)
    search.fit(PAIRS)
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    assert 0 <= search.best_score_ <= 1
    scored = GridSearchCV(tuner(tiny_model_dir, loss="cosent"),
                          {"learning_rate": [1e-4, 1e-3]}, cv=2).fit(PAIRS, SCORES)
    assert -1 <= scored.best_score_ <= 1


def test_score_on_each_kind_of_input(tiny_model_dir):
    from scipy.stats import spearmanr

    tuned = tuner(tiny_model_dir, epochs=1).fit(PAIRS)
    vectors = {text: tuned.transform([text])[0] for pair in PAIRS for text in pair}

    def cos(a, b):
        return vectors[a] @ vectors[b] / np.linalg.norm(vectors[a]) / np.linalg.norm(vectors[b])

    cosines = [cos(a, b) for a, b in PAIRS]
    assert tuned.score(PAIRS, SCORES) == pytest.approx(spearmanr(cosines, SCORES).statistic)
    # MRR@10 by hand: the rank of each anchor's positive among every positive.
    positives = [b for _, b in PAIRS]
    reciprocal = []
    for a, b in PAIRS:
        rank = 1 + sum(cos(a, other) > cos(a, b) for other in positives)
        reciprocal.append(1 / rank if rank <= 10 else 0.0)
    assert tuned.score(PAIRS) == pytest.approx(np.mean(reciprocal), abs=1e-6)
    # Leave-one-out nearest centroid on labelled texts.
    unit = np.array([tuned.transform([text])[0] for text in TEXTS], dtype=np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    right = 0
    for i in range(len(TEXTS)):
        others = np.arange(len(TEXTS)) != i
        centroids = [unit[others & (LABELS == label)].sum(axis=0) for label in range(3)]
        centroids = [c / np.linalg.norm(c) for c in centroids]
        right += int(np.argmax([unit[i] @ c for c in centroids]) == LABELS[i])
    assert tuned.score(TEXTS, LABELS) == pytest.approx(right / len(TEXTS))


@pytest.mark.filterwarnings("ignore:.*batches of in-batch negatives hold fewer")
def test_score_and_grid_search_take_the_mined_tuples_fit_takes(tiny_model_dir):
    corpus = [b for _, b in PAIRS]
    tuples = SimilaritySearch(BertVectorizer(tiny_model_dir)).fit(corpus).mine_negatives(
        [a for a, _ in PAIRS], corpus, n_negatives=4)
    assert {len(t) for t in tuples} == {6}
    tuned = tuner(tiny_model_dir, epochs=1).fit(tuples)
    unit = {text: vector / np.linalg.norm(vector) for text, vector in zip(
        dict.fromkeys(t for row in tuples for t in row),
        tuned.transform(list(dict.fromkeys(t for row in tuples for t in row))))}
    # MRR@10 by hand: each anchor's positive among every distinct positive and negative.
    candidates = set(t for row in tuples for t in row[1:])
    reciprocal = []
    for anchor, positive, *_ in tuples:
        rank = 1 + sum(unit[anchor] @ unit[other] > unit[anchor] @ unit[positive]
                       for other in candidates - {anchor})
        reciprocal.append(1 / rank if rank <= 10 else 0.0)
    assert tuned.score(tuples) == pytest.approx(np.mean(reciprocal), abs=1e-6)
    search = GridSearchCV(tuner(tiny_model_dir, epochs=1),
                          {"vectorizer__pooling": ["mean", "cls"]}, cv=2,
                          error_score="raise").fit(tuples)
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    with pytest.raises(ValueError, match="fit_transform embeds the texts it trains on, and X "
                                         "holds 6-tuples"):
        tuned.fit_transform(tuples)


def test_setfit_pipeline_and_search_use_the_tuned_vectorizer(tiny_model_dir):
    pipeline = Pipeline([("tune", tuner(tiny_model_dir, epochs=1)),
                         ("clf", LogisticRegression(max_iter=200))]).fit(TEXTS, LABELS)
    assert pipeline.predict(TEXTS[:4]).shape == (4,)
    assert pipeline.named_steps["tune"].loss_ == "supcon"
    tuned = tuner(tiny_model_dir, epochs=1).fit(PAIRS)
    corpus = [b for _, b in PAIRS]
    search = SimilaritySearch(vectorizer=tuned).fit(corpus)
    assert search.vectorizer_ is tuned
    _, indices = search.kneighbors([PAIRS[0][0]], 3)
    expected = tuned.transform(corpus) @ tuned.transform([PAIRS[0][0]])[0]
    norms = np.linalg.norm(tuned.transform(corpus), axis=1)
    assert indices[0][0] == np.argmax(expected / norms)
    similarity = PairSimilarity(tuned).fit(PAIRS)
    assert similarity.vectorizer_ is tuned
    assert similarity.predict(PAIRS[:2]).shape == (2,)
    with pytest.raises(NotFittedError, match="fit it first"):
        SimilaritySearch(vectorizer=tuner(tiny_model_dir)).fit(corpus)


def test_the_tuned_weights_run_on_openvino_int8(tiny_model_dir):
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    vectorizer = BertVectorizer(tiny_model_dir, backend="openvino", dtype="int8")
    tuned = tuner(tiny_model_dir, vectorizer=vectorizer, epochs=1).fit(PAIRS)
    assert tuned.vectorizer_._engine.backend == "openvino"
    torch_tuned = tuner(tiny_model_dir, epochs=1).fit(PAIRS)
    int8, float32 = tuned.transform(TEXTS), torch_tuned.transform(TEXTS)
    cosines = (int8 * float32).sum(1) / np.linalg.norm(int8, axis=1) / np.linalg.norm(
        float32, axis=1)
    assert cosines.min() > 0.95


@pytest.mark.parametrize("X, y, message", [
    ([("a cat", 3)], None, r"second text of the pair at index 0 is int"),
    (["the cat", None], [0, 1], r"Text at index 1 is NoneType"),
    ([("the cat", "a dog"), ("the cat", "a dog", "a day")], None,
     r"Item at index 1 has 3 texts where the first item has 2"),
    ([("the cat", "a dog", "red")] * 3, [1.0, 2.0, 3.0], r"'in_batch' trains on pairs, "
                                                          r"triplets or wider tuples without y"),
    (PAIRS, SCORES[:-1], rf"y has {len(PAIRS) - 1} values for the {len(PAIRS)} items"),
    (TEXTS, np.zeros(len(TEXTS)), r"at least 2 classes"),
    (TEXTS, None, r"'supcon' trains on texts with y, and got texts without y"),
    ([("the cat", "the cat")] * 4, None, r"at least two distinct texts"),
    ([], None, r"Found 0 items"),
])
def test_bad_input_is_named_and_leaves_nothing_half_trained(tiny_model_dir, X, y, message):
    estimator = tuner(tiny_model_dir)
    with pytest.raises(ValueError, match=message):
        estimator.fit(X, y)
    with pytest.raises(NotFittedError):
        estimator.transform(["the cat"])
    fitted = tuner(tiny_model_dir, epochs=1).fit(PAIRS)
    vectorizer = fitted.vectorizer_
    with pytest.raises(ValueError, match=message):
        fitted.fit(X, y)
    assert fitted.vectorizer_ is vectorizer  # the last fit stands


@pytest.mark.parametrize("params, X, y, message", [
    (dict(loss="cosent"), PAIRS, None, r"'cosent' trains on pairs with y"),
    (dict(loss="supcon"), PAIRS, SCORES, r"'supcon' trains on texts with y"),
    (dict(loss="cosine"), PAIRS, np.full(len(PAIRS), 3.0), r"every score of y is 3.0"),
    (dict(freeze="all"), PAIRS, None, r"freeze='all' trains nothing"),
    (dict(vectorizer=BertVectorizer(truncation="chunks")), PAIRS, None,
     r"truncation='chunks'"),
])
def test_bad_settings_are_named(tiny_model_dir, params, X, y, message):
    if "vectorizer" in params:
        params["vectorizer"] = clone(params["vectorizer"]).set_params(model=tiny_model_dir)
    with pytest.raises(ValueError, match=message):
        tuner(tiny_model_dir, **params).fit(X, y)


def test_cosine_scales_scores_to_the_unit_interval(tiny_model_dir, monkeypatch):
    seen = []
    original = _losses.cosine

    def spy(columns, targets, scale):
        seen.append(targets.clone())
        return original(columns, targets, scale)

    monkeypatch.setitem(_losses.LOSSES, "cosine", spy)
    tuner(tiny_model_dir, loss="cosine", batch_size=len(PAIRS), epochs=1).fit(PAIRS, SCORES)
    scaled = torch.cat(seen)
    assert scaled.min() == 0.0 and scaled.max() == 1.0
    seen.clear()
    unit = np.linspace(0.2, 0.7, len(PAIRS))
    tuner(tiny_model_dir, loss="cosine", batch_size=len(PAIRS), epochs=1).fit(PAIRS, unit)
    np.testing.assert_allclose(torch.sort(torch.cat(seen)).values.numpy(), unit)


def test_fit_transform_embeds_labelled_texts_and_refuses_pairs(tiny_model_dir):
    tuned = tuner(tiny_model_dir, epochs=1)
    np.testing.assert_array_equal(tuned.fit_transform(TEXTS, LABELS), tuned.transform(TEXTS))
    with pytest.raises(ValueError, match="fit_transform embeds the texts it trains on"):
        tuned.fit_transform(PAIRS)


def test_pandas_and_polars_frames(tiny_model_dir):
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame(PAIRS, columns=["query", "passage"], index=range(100, 132))
    first = tuner(tiny_model_dir, epochs=1).fit(frame).transform(TEXTS)
    second = tuner(tiny_model_dir, epochs=1).fit(PAIRS).transform(TEXTS)
    np.testing.assert_array_equal(first, second)
    scores = tuner(tiny_model_dir, epochs=1).fit(frame, pandas.Series(SCORES))
    assert scores.loss_ == "cosent"
    polars = pytest.importorskip("polars")
    triplets = polars.DataFrame({"a": [a for a, _ in PAIRS], "p": [b for _, b in PAIRS],
                                 "n": [b for _, b in PAIRS[1:] + PAIRS[:1]]})
    assert tuner(tiny_model_dir, epochs=1).fit(triplets).loss_ == "in_batch"
    bad = pandas.DataFrame({"a": ["the cat", 4]})
    with pytest.raises(ValueError, match="index 1"):
        tuner(tiny_model_dir).fit(bad, [0, 1])


def test_the_tuned_encoder_saves_as_a_sentence_transformers_folder(tiny_model_dir, tmp_path):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    tuned = tuner(tiny_model_dir, vectorizer=BertVectorizer(tiny_model_dir, norm="l2"),
                  epochs=2).fit(PAIRS)
    path = tuned.save_sentence_transformer(tmp_path / "tuned")
    loaded = sentence_transformers.SentenceTransformer(str(path), device="cpu")
    np.testing.assert_allclose(loaded.encode(TEXTS, convert_to_numpy=True),
                               tuned.transform(TEXTS), atol=1e-5)
    with pytest.raises(ValueError, match="layer"):
        tuner(tiny_model_dir, vectorizer=BertVectorizer(tiny_model_dir, layer=1),
              epochs=1).fit(PAIRS).save_sentence_transformer(tmp_path / "inner")


@pytest.mark.parametrize("freeze, rate", [("none", 2e-5), ("lora", 5e-4)])
def test_auto_learning_rate_by_freeze(tiny_model_dir, freeze, rate):
    auto = tuner(tiny_model_dir, freeze=freeze, learning_rate="auto", epochs=1).fit(PAIRS)
    same = tuner(tiny_model_dir, freeze=freeze, learning_rate=rate, epochs=1).fit(PAIRS)
    other = tuner(tiny_model_dir, freeze=freeze, learning_rate=rate * 10, epochs=1).fit(PAIRS)
    np.testing.assert_array_equal(auto.transform(TEXTS), same.transform(TEXTS))
    assert not np.allclose(auto.transform(TEXTS), other.transform(TEXTS))
    assert FineTunedVectorizer().learning_rate == "auto"
