"""BertReranker (a cross-encoder) and SimilaritySearch's reranking and mining, on tiny models."""

import json
import pickle
import shutil
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import GridSearchCV

from skbert import BertReranker, BertVectorizer, FineTunedVectorizer, SimilaritySearch
from skbert._train import _losses

PAIRS = [("the cat sat", "a cat sat on the mat"), ("what river", "the river is long"),
         ("red house", "a big red house"), ("the cat sat", "the film was awful")]
TUPLES = [("the cat sat", "a cat sat on the mat", "the river is long", "what is the time"),
          ("red house", "a big red house", "people run fast", "the film was awful"),
          ("what river", "the river is long", "a good movie", "the small blue car"),
          ("a dog ran", "the dog runs fast", "a big red house", "what is the time")]
CORPUS = ["a cat sat on the mat", "the dog runs fast", "the river is long", "a big red house",
          "what is the time", "people run fast", "the small blue car", "a good movie",
          "the film was awful", "a long river in the city"]


@pytest.fixture(scope="module")
def cross_encoder_dir(tiny_model_dir, tmp_path_factory):
    """A tiny random BertForSequenceClassification with one output: a cross-encoder folder."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    directory = tmp_path_factory.mktemp("tiny-cross-encoder")
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(directory)
    config = BertConfig.from_pretrained(tiny_model_dir, num_labels=1)
    torch.manual_seed(1)
    model = BertForSequenceClassification(config).eval()
    with torch.no_grad():  # a head whose scores spread, not all near 0.5
        model.classifier.weight.normal_(0, 1.0)
        model.classifier.bias.fill_(0.3)
    model.save_pretrained(directory)
    return str(directory)


def _reference_logits(folder, pairs):
    """transformers' own forward of the folder's BertForSequenceClassification."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    inputs = tokenizer([q for q, _ in pairs], [d for _, d in pairs], padding=True,
                       truncation=True, return_tensors="pt")
    with torch.no_grad():
        return model(**inputs).logits[:, 0].double().numpy()


def test_fit_reads_a_cross_encoder_folder_as_it_is(cross_encoder_dir):
    reranker = BertReranker(cross_encoder_dir).fit()
    logits = _reference_logits(cross_encoder_dir, PAIRS)
    np.testing.assert_allclose(reranker.decision_function(PAIRS), logits, atol=1e-5)
    np.testing.assert_allclose(reranker.predict(PAIRS), 1 / (1 + np.exp(-logits)), atol=1e-6)
    assert reranker.activation_ == "sigmoid" and reranker.loss_ is None
    assert reranker.loss_curve_ == []


def test_scores_equal_sentence_transformers_cross_encoder(cross_encoder_dir):
    st = pytest.importorskip("sentence_transformers")
    expected = st.CrossEncoder(cross_encoder_dir, device="cpu").predict(PAIRS)
    np.testing.assert_allclose(BertReranker(cross_encoder_dir).fit().predict(PAIRS), expected,
                               atol=1e-5)


def test_the_activation_a_folder_names_is_applied(cross_encoder_dir, tmp_path):
    folder = tmp_path / "identity"
    shutil.copytree(cross_encoder_dir, folder)
    (folder / "config_sentence_transformers.json").write_text(json.dumps(
        {"activation_fn": "torch.nn.modules.linear.Identity"}))
    reranker = BertReranker(folder).fit()
    assert reranker.activation_ == "identity"
    np.testing.assert_allclose(reranker.predict(PAIRS), _reference_logits(folder, PAIRS),
                               atol=1e-5)
    (folder / "config_sentence_transformers.json").write_text(json.dumps(
        {"activation_fn": "mypackage.Evil"}))
    with pytest.raises(ValueError, match="mypackage.Evil"):
        BertReranker(folder).fit()


def test_pointwise_bce_equals_a_hand_written_reference():
    import torch

    torch.manual_seed(0)
    scores, targets = torch.randn(6, 1), torch.tensor([[1.0], [0.0], [0.5], [1.0], [0.0], [0.2]])
    probability = torch.sigmoid(scores)
    expected = -(targets * probability.log() + (1 - targets) * (1 - probability).log()).mean()
    torch.testing.assert_close(_losses.pointwise_bce(scores, targets), expected)


def test_listwise_equals_a_hand_written_reference():
    import torch

    torch.manual_seed(0)
    scores = torch.randn(5, 4)  # 5 tuples: the positive, then 3 negatives
    expected = -torch.stack([row[0].exp() / row.exp().sum() for row in scores]).log().mean()
    torch.testing.assert_close(_losses.listwise(scores, None), expected)


@pytest.mark.parametrize("loss", ["bce", "listwise"])
def test_training_ranks_the_positives_first(tiny_model_dir, loss):
    reranker = BertReranker(tiny_model_dir, loss=loss, epochs=30, batch_size=4,
                            learning_rate=5e-3, random_state=0).fit(TUPLES)
    assert reranker.loss_ == loss
    assert reranker.loss_curve_[-1] < reranker.loss_curve_[0] / 2
    scores = reranker.predict([(q, d) for q, *docs in TUPLES for d in docs]).reshape(4, 3)
    assert (scores.argmax(axis=1) == 0).all()
    assert reranker.score(TUPLES) == pytest.approx(1.0)


def test_bce_on_tuples_is_bce_on_their_labelled_pairs(tiny_model_dir):
    pairs = [(q, d) for q, *docs in TUPLES for d in docs]
    labels = [1.0, 0.0, 0.0] * len(TUPLES)
    # The same rows in the same order: the same batches, the same model.
    params = dict(loss="bce", epochs=2, batch_size=4, random_state=0)
    on_tuples = BertReranker(tiny_model_dir, **params).fit(TUPLES)
    on_pairs = BertReranker(tiny_model_dir, **params).fit(pairs, labels)
    np.testing.assert_allclose(on_tuples.predict(PAIRS), on_pairs.predict(PAIRS), atol=1e-6)


@pytest.fixture(scope="module")
def still_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model without dropout (the head's too): a batch trains alike in one forward
    pass and in mini-batches."""
    from transformers import AutoTokenizer, BertModel

    directory = tmp_path_factory.mktemp("still-bert")
    BertModel.from_pretrained(tiny_model_dir, hidden_dropout_prob=0.0,
                              attention_probs_dropout_prob=0.0).save_pretrained(directory)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(directory)
    return str(directory)


def _recorded(monkeypatch):
    """Record each step's gradients (before clipping) and the pairs of each forward pass."""
    import torch

    from skbert._train import _training

    recorded = {"gradients": [], "pairs": []}
    clip, pooled = torch.nn.utils.clip_grad_norm_, _training.pooled

    def clip_recording(parameters, *args, **kwargs):
        parameters = list(parameters)
        recorded["gradients"].append([p.grad.clone() for p in parameters if p.grad is not None])
        return clip(parameters, *args, **kwargs)

    def pooled_recording(encoder, inputs, *args):
        recorded["pairs"].append(len(inputs["input_ids"]))
        return pooled(encoder, inputs, *args)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip_recording)
    monkeypatch.setattr(_training, "pooled", pooled_recording)
    return recorded


@pytest.mark.parametrize("loss, batch_size, n_pairs", [("listwise", 2, 6), ("bce", 8, 8)])
def test_mini_batches_train_as_the_whole_batch(still_dir, monkeypatch, loss, batch_size,
                                               n_pairs):
    import torch

    params = dict(loss=loss, epochs=2, batch_size=batch_size, learning_rate=1e-3,
                  random_state=0)
    recorded = _recorded(monkeypatch)
    whole = BertReranker(still_dir, mini_batch_size=None, **params).fit(TUPLES)
    expected, recorded["gradients"] = recorded["gradients"], []
    assert max(recorded["pairs"]) == n_pairs
    recorded["pairs"] = []
    # 5 pairs a forward pass: a listwise tuple's 3 pairs are split between chunks.
    chunked = BertReranker(still_dir, mini_batch_size=5, **params).fit(TUPLES)
    assert max(recorded["pairs"]) == 5
    assert len(recorded["gradients"]) == len(expected) == 4
    # The first step's gradients, from the same weights (AdamW's later steps are compared
    # through the weights they reach).
    step, gradients = expected[0], recorded["gradients"][0]
    assert len(gradients) == len(step) > 10
    largest = max(float(gradient.abs().max()) for gradient in step)
    for found, wanted in zip(gradients, step):
        torch.testing.assert_close(found, wanted, atol=1e-4 * largest, rtol=1e-4)
    np.testing.assert_allclose(chunked.loss_curve_, whole.loss_curve_, atol=1e-6)
    np.testing.assert_allclose(chunked.coef_, whole.coef_, atol=1e-6)
    # The listwise loss does not move the head's bias (a shift of every score): its gradient
    # is float noise, which AdamW's normalized steps turn into steps of learning_rate.
    np.testing.assert_allclose(chunked.decision_function(PAIRS) - chunked.intercept_,
                               whole.decision_function(PAIRS) - whole.intercept_, atol=1e-5)
    if loss == "bce":
        np.testing.assert_allclose(chunked.predict(PAIRS), whole.predict(PAIRS), atol=1e-6)


def test_auto_mini_batches_hold_a_token_budget(still_dir, monkeypatch):
    from skbert._retrieval import _reranker

    recorded = _recorded(monkeypatch)
    params = dict(loss="listwise", epochs=1, batch_size=4, random_state=0)
    # Short pairs: the whole batch (4 tuples of 3 pairs) in one forward pass.
    BertReranker(still_dir, **params).fit(TUPLES)
    assert max(recorded["pairs"]) == 12
    # A budget of 3 pairs' tokens at the batch's longest: chunks of 3 pairs.
    recorded["pairs"] = []
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(still_dir)
    longest = max(len(tokenizer(q, d)["input_ids"]) for q, *docs in TUPLES for d in docs)
    monkeypatch.setattr(_reranker, "AUTO_MINI_BATCH_TOKENS", 3 * longest + 1)
    BertReranker(still_dir, **params).fit(TUPLES)
    assert max(recorded["pairs"]) == 3


def test_fine_tuning_a_cross_encoder_starts_from_its_head(cross_encoder_dir):
    start = BertReranker(cross_encoder_dir).fit()
    # A learning rate too small to move anything: the head it starts from is the folder's.
    tuned = BertReranker(cross_encoder_dir, learning_rate=1e-12, random_state=0).fit(TUPLES)
    np.testing.assert_allclose(tuned.predict(PAIRS), start.predict(PAIRS), atol=1e-5)


def test_a_fresh_head_is_seeded(tiny_model_dir):
    first = BertReranker(tiny_model_dir, random_state=3).fit(TUPLES)
    again = BertReranker(tiny_model_dir, random_state=3).fit(TUPLES)
    np.testing.assert_array_equal(first.predict(PAIRS), again.predict(PAIRS))


@pytest.mark.parametrize("freeze", [None, "all"])
def test_save_cross_encoder_round_trips(tiny_model_dir, tmp_path, freeze):
    reranker = BertReranker(tiny_model_dir, freeze=freeze, epochs=2, learning_rate=1e-3,
                            random_state=0).fit(TUPLES)
    folder = reranker.save_cross_encoder(tmp_path / "saved")
    expected = reranker.predict(PAIRS)
    np.testing.assert_allclose(BertReranker(folder).fit().predict(PAIRS), expected, atol=1e-6)
    st = pytest.importorskip("sentence_transformers")
    np.testing.assert_allclose(st.CrossEncoder(str(folder), device="cpu").predict(PAIRS),
                               expected, atol=1e-5)
    with pytest.raises(FileExistsError, match="not empty; save_cross_encoder writes"):
        reranker.save_cross_encoder(folder)


def test_a_sentence_transformers_folder_reads_back(cross_encoder_dir, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    model = st.CrossEncoder(cross_encoder_dir, device="cpu")
    model.save(str(tmp_path / "st"))
    np.testing.assert_allclose(BertReranker(tmp_path / "st").fit().predict(PAIRS),
                               model.predict(PAIRS), atol=1e-5)


@pytest.fixture(scope="module")
def wide_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny BERT with 512 positions, as BERT-base has."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    directory = tmp_path_factory.mktemp("wide-bert")
    AutoTokenizer.from_pretrained(tiny_model_dir, model_max_length=512).save_pretrained(
        directory)
    torch.manual_seed(0)
    config = BertConfig.from_pretrained(tiny_model_dir, max_position_embeddings=512)
    BertModel(config).eval().save_pretrained(directory)
    return str(directory)


def test_a_folder_saved_at_128_tokens_reads_at_320(wide_model_dir, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    reranker = BertReranker(wide_model_dir, max_length=128, freeze="all", random_state=0)
    reranker.fit(TUPLES).coef_ *= 100  # scores that spread, not all near 0.5
    folder = reranker.save_cross_encoder(tmp_path / "at-128")
    long_pairs = [("the cat sat", " ".join(["a cat sat on the mat by the river"] * 30)),
                  *PAIRS]
    # The tokenizer's model_max_length (128) is the default window; the limit is the 512
    # positions, as sentence-transformers' CrossEncoder reads the folder.
    default = BertReranker(folder).fit()
    assert default._vectorizer._window_length() == 128
    np.testing.assert_allclose(default.predict(long_pairs),
                               st.CrossEncoder(str(folder), device="cpu").predict(long_pairs),
                               atol=1e-5)
    wider = BertReranker(folder, max_length=320).fit()
    assert wider._vectorizer._window_length() == 320
    expected = st.CrossEncoder(str(folder), max_length=320, device="cpu").predict(long_pairs)
    np.testing.assert_allclose(wider.predict(long_pairs), expected, atol=1e-5)
    assert abs(wider.predict(long_pairs)[0] - default.predict(long_pairs)[0]) > 1e-4
    with pytest.raises(ValueError, match="max_length=513 exceeds the model's limit of 512"):
        BertReranker(folder, max_length=513).fit()


def test_lora_reranker_pickles_light_and_saves(tiny_model_dir, tmp_path):
    pytest.importorskip("peft")
    reranker = BertReranker(tiny_model_dir, freeze="lora", epochs=2, learning_rate=1e-2,
                            persist_weights=False, random_state=0).fit(TUPLES)
    expected = reranker.predict(PAIRS)
    np.testing.assert_allclose(pickle.loads(pickle.dumps(reranker)).predict(PAIRS), expected,
                               atol=1e-6)
    folder = reranker.save_cross_encoder(tmp_path / "lora")
    np.testing.assert_allclose(BertReranker(folder).fit().predict(PAIRS), expected, atol=1e-6)


def test_pickles(cross_encoder_dir, tiny_model_dir):
    read = BertReranker(cross_encoder_dir, persist_weights=False).fit()
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(read)).predict(PAIRS),
                                  read.predict(PAIRS))
    trained = BertReranker(tiny_model_dir, random_state=0).fit(TUPLES)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(trained)).predict(PAIRS),
                                  trained.predict(PAIRS))
    with pytest.raises(ValueError, match="persist_weights=False"):
        BertReranker(tiny_model_dir, persist_weights=False).fit(TUPLES)


def test_a_reranker_computes_and_caches_the_pooler_alone(cross_encoder_dir, monkeypatch):
    """A freeze="all" reranker (the only one the OpenVINO and int8 engines run) computes and
    caches its vectorizer's pooler output alone, never the means, maxima and [CLS] of every
    layer that no setting of it reads, under a layout a user's vectorizer never takes."""
    import copy

    import skbert
    from skbert._encoder import _encoding
    from skbert._encoder._features import Layout, parts_for_cache
    from tests.conftest import count_forward_rows

    layouts, compute = [], _encoding.compute_parts

    def spied(*args, **kwargs):
        layouts.append(args[4].keys)
        return compute(*args, **kwargs)

    monkeypatch.setattr(_encoding, "compute_parts", spied)
    skbert.clear_cache()
    try:
        reranker = BertReranker(cross_encoder_dir, persist_weights=False).fit()
        vectorizer = reranker._vectorizer
        vectorizer.model_ = copy.deepcopy(vectorizer.model_)  # private: hooks do not leak
        counter = count_forward_rows(vectorizer)
        scores = reranker.predict(PAIRS)
        assert layouts and set(layouts) == {(("pooler",),)}  # no layer's parts
        assert counter["rows"] == len(PAIRS)
        layouts.clear()
        np.testing.assert_array_equal(reranker.predict(PAIRS), scores)
        assert counter["rows"] == len(PAIRS) and not layouts  # served by the cache
        # A light pickle keeps a clone of the vectorizer: it still reads the pooler records.
        np.testing.assert_array_equal(pickle.loads(pickle.dumps(reranker)).predict(PAIRS),
                                      scores)
        assert not layouts

        # A user's pooler vectorizer stores full records, which a later mean setting reads.
        user = BertVectorizer(cross_encoder_dir, pooling="pooler", prompt="").fit()
        user.model_ = copy.deepcopy(user.model_)
        assert user._loaded.fingerprint == vectorizer._loaded.fingerprint  # the same keys
        user_counter = count_forward_rows(user)
        full = user.transform(PAIRS)
        assert user_counter["rows"] == len(PAIRS)  # not served by the reranker's records
        record = Layout.of(parts_for_cache(user.n_layers_, True), user._config.hidden_size)
        assert set(layouts) == {record.keys}
        logits = (full.astype(np.float64) @ reranker.coef_.T + reranker.intercept_)[:, 0]
        np.testing.assert_allclose(scores, 1 / (1 + np.exp(-logits)), rtol=0, atol=1e-6)
        means = user.set_params(pooling="mean").transform(PAIRS)
        assert user_counter["rows"] == len(PAIRS)  # served by the full records
        expected = BertVectorizer(cross_encoder_dir, pooling="mean", prompt="",
                                  cache=False).fit().transform(PAIRS)
        np.testing.assert_allclose(means, expected, rtol=0, atol=1e-6)
    finally:
        skbert.clear_cache()


def test_rank(cross_encoder_dir):
    reranker = BertReranker(cross_encoder_dir).fit()
    documents = [d for _, d in PAIRS]
    scores = reranker.predict([("the cat sat", d) for d in documents])
    ranking = reranker.rank("the cat sat", documents, return_documents=True)
    assert [entry["corpus_id"] for entry in ranking] == list(np.argsort(-scores, kind="stable"))
    assert [entry["text"] for entry in ranking] == [documents[i] for i in np.argsort(-scores)]
    assert len(reranker.rank("the cat sat", documents, top_k=2)) == 2


def test_score_is_mean_ndcg_at_10_over_queries(cross_encoder_dir):
    from skbert.metrics import ndcg_at_k

    reranker = BertReranker(cross_encoder_dir).fit()
    pairs = [(q, d) for q, *docs in TUPLES for d in docs]
    y = np.tile([2.0, 1.0, 0.0], len(TUPLES))
    scores = reranker.predict(pairs)
    qrels = {q: {d: r for (p, d), r in zip(pairs, y) if p == q} for q, *_ in TUPLES}
    run = {q: {d: s for (p, d), s in zip(pairs, scores) if p == q} for q, *_ in TUPLES}
    assert reranker.score(pairs, y) == pytest.approx(ndcg_at_k(qrels, run, k=10))


def test_grid_over_loss_and_head_learning_rate(tiny_model_dir):
    grid = GridSearchCV(BertReranker(tiny_model_dir, freeze="all", epochs=3, random_state=0),
                        {"loss": ["bce", "listwise"], "head_learning_rate": [1e-5, 1e-2]}, cv=2)
    grid.fit(TUPLES)
    assert len(grid.cv_results_["mean_test_score"]) == 4
    assert np.isfinite(grid.cv_results_["mean_test_score"]).all()
    assert grid.best_estimator_.loss_ in ("bce", "listwise")


@pytest.mark.parametrize("X, y, match", [
    (PAIRS, None, "need their relevance y"),
    (TUPLES, [1, 0, 1, 0], "carry their labels"),
    ([], [], "Found 0 pairs"),
    (PAIRS, [1, 0, 1, 2], r"in \[0, 1\]"),
    (PAIRS, [1, 0], "4 pairs and 2 relevance labels"),
    (["the cat", "a dog"], [1, 0], "single texts"),
])
def test_bad_training_input_names_the_problem(tiny_model_dir, X, y, match):
    with pytest.raises(ValueError, match=match):
        BertReranker(tiny_model_dir).fit(X, y)


def test_bad_input_names_the_problem(tiny_model_dir, cross_encoder_dir, tmp_path):
    with pytest.raises(ValueError, match="loss='listwise' ranks each tuple"):
        BertReranker(tiny_model_dir, loss="listwise").fit(PAIRS, [1, 0, 1, 0])
    with pytest.raises(ValueError, match="no sequence-classification head"):
        BertReranker(tiny_model_dir).fit()
    reranker = BertReranker(cross_encoder_dir).fit()
    with pytest.raises(ValueError, match="documents is empty"):
        reranker.rank("the cat", [])
    with pytest.raises(ValueError, match="pairs"):
        reranker.predict(["the cat"])
    with pytest.raises(ValueError, match="train with backend='torch'"):
        BertReranker(tiny_model_dir, backend="onnx").fit(TUPLES)
    three = tmp_path / "three"
    shutil.copytree(cross_encoder_dir, three)
    config = json.loads((three / "config.json").read_text())
    config["id2label"] = {"0": "a", "1": "b", "2": "c"}
    (three / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="3 outputs"):
        BertReranker(three).fit()
    config["architectures"] = ["RobertaForSequenceClassification"]
    (three / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="RobertaForSequenceClassification"):
        BertReranker(three).fit()


@pytest.fixture(scope="module")
def search(tiny_model_dir):
    return SimilaritySearch(BertVectorizer(tiny_model_dir, pooling="mean")).fit(CORPUS)


def test_mined_negatives_are_never_a_positive_of_their_query(search):
    queries = ["the cat sat", "the cat sat", "a river", "what time"]
    positives = ["a cat sat on the mat", "the dog runs fast", "a long river in the city",
                 "what is the time"]
    tuples = search.mine_negatives(queries, positives, n_negatives=3, range_max=8)
    assert [t[:2] for t in tuples] == list(zip(queries, positives))
    own = {q: {p for q2, p in zip(queries, positives) if q2 == q} for q in queries}
    for query, _, *negatives in tuples:
        assert len(negatives) == 3 == len(set(negatives))
        assert not own[query] & set(negatives)
    # Ranks: the negatives are the query's best-ranked non-positive candidates.
    scores, indices = search.search(["the cat sat"], k=len(CORPUS))
    expected = [CORPUS[i] for i in indices[0] if CORPUS[i] not in own["the cat sat"]][:3]
    assert list(tuples[0][2:]) == expected


def test_mining_controls(search):
    scores, indices = search.search(["the cat sat"], k=len(CORPUS))
    ranked = [CORPUS[i] for i in indices[0]]
    positive = ranked[0]
    skipped = search.mine_negatives(["the cat sat"], [positive], 2, range_min=3, range_max=6)
    assert list(skipped[0][2:]) == ranked[3:5]
    drawn = search.mine_negatives(["the cat sat"], [positive], 2, range_max=8, sampling="random",
                                  random_state=0)
    assert set(drawn[0][2:]) <= set(ranked[1:8])
    assert drawn == search.mine_negatives(["the cat sat"], [positive], 2, range_max=8,
                                          sampling="random", random_state=0)
    cap = float(scores[0][4])
    capped = search.mine_negatives(["the cat sat"], [positive], 2, max_score=cap)
    assert list(capped[0][2:]) == ranked[4:6]
    with pytest.warns(UserWarning, match="1 of 1 .* fewer than 2"):
        assert search.mine_negatives(["the cat sat"], [positive], 2, max_score=-2.0) == []
    # A margin of 0 keeps only candidates scored below the positive.
    below = search.mine_negatives(["the cat sat"], [ranked[5]], 2, margin=0.0)
    assert set(below[0][2:]) <= set(ranked[6:])
    with pytest.raises(ValueError, match="range_max"):
        search.mine_negatives(["the cat sat"], [positive], 4, range_min=3, range_max=5)
    with pytest.raises(ValueError, match="one positive per query"):
        search.mine_negatives(["the cat sat"], [], 2)


def test_mined_tuples_train_the_reranker_and_the_vectorizer(search, tiny_model_dir):
    tuples = search.mine_negatives([q for q, *_ in TUPLES], [p for _, p, *_ in TUPLES], 4)
    assert {len(t) for t in tuples} == {6}
    assert BertReranker(tiny_model_dir, random_state=0).fit(tuples).loss_ == "listwise"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a batch of 4 tuples holds repeated texts
        tuned = FineTunedVectorizer(BertVectorizer(tiny_model_dir), random_state=0).fit(tuples)
    assert len(tuned.loss_curve_) == tuned.epochs_ == 100  # one batch a pass, 100 steps


def test_search_is_reranked(tiny_model_dir, cross_encoder_dir):
    reranker = BertReranker(cross_encoder_dir).fit()
    first = SimilaritySearch(BertVectorizer(tiny_model_dir, pooling="mean")).fit(CORPUS)
    reranked = SimilaritySearch(BertVectorizer(tiny_model_dir, pooling="mean"),
                                reranker=FrozenEstimator(reranker), rerank_k=5).fit(CORPUS)
    queries = ["the cat sat", "a river"]
    _, candidates = first.search(queries, k=5)
    scores, indices = reranked.search(queries, k=3)
    for query, row, got, got_scores in zip(queries, candidates, indices, scores):
        expected = reranker.predict([(query, CORPUS[j]) for j in row])
        order = np.argsort(-expected, kind="stable")[:3]
        assert list(got) == list(row[order])
        np.testing.assert_allclose(got_scores, expected[order], atol=1e-6)
    distances, neighbors = reranked.kneighbors(queries, n_neighbors=3)
    np.testing.assert_array_equal(neighbors, indices)
    np.testing.assert_allclose(distances, 1 - scores, atol=1e-6)
    own = reranked.kneighbors(n_neighbors=2, return_distance=False)
    assert not (own == np.arange(len(CORPUS))[:, None]).any()
    # A clone keeps the frozen reranker; an unfitted reranker is cloned and reads its folder.
    cloned = clone(reranked).fit(CORPUS)
    np.testing.assert_array_equal(cloned.search(queries, k=3)[1], indices)
    unfitted = SimilaritySearch(BertVectorizer(tiny_model_dir, pooling="mean"),
                                reranker=BertReranker(cross_encoder_dir), rerank_k=5).fit(CORPUS)
    np.testing.assert_array_equal(unfitted.search(queries, k=3)[1], indices)
    np.testing.assert_array_equal(
        pickle.loads(pickle.dumps(unfitted)).search(queries, k=3)[1], indices)
    with pytest.raises(ValueError, match="set vectorizer"):
        SimilaritySearch(reranker=reranker).fit(np.eye(3))


def test_int8_reranker_calibrates_on_pairs(cross_encoder_dir):
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    calibration = [(q, d) for q, *docs in TUPLES for d in docs]
    int8 = BertReranker(cross_encoder_dir, backend="openvino", dtype="int8",
                        calibration=calibration).fit()
    assert int8._vectorizer._engine.calibration == tuple(calibration)
    torch_scores = BertReranker(cross_encoder_dir).fit().predict(PAIRS)
    np.testing.assert_allclose(int8.predict(PAIRS), torch_scores, atol=0.1)
