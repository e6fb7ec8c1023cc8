"""Issue 57: MRR without self-matches, fit_transform keeps the pandas index, FrozenEstimator as
the way to pass a fitted FineTunedVectorizer through clones, batches of repeated texts (warned,
near-linear), and the vectorizer's set_output carried to FineTunedVectorizer."""

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.exceptions import NotFittedError
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import KFold, TunedThresholdClassifierCV, cross_val_score
from sklearn.pipeline import make_pipeline

from skbert import (
    BertVectorizer,
    BertWordVectorizer,
    FineTunedVectorizer,
    PairSimilarity,
    SimilaritySearch,
)
from skbert._embeddings._finetuned_vectorizer import _distinct_batches

WORDS = ["cat", "dog", "house", "river", "city", "movie", "film", "year", "day", "time",
         "people", "word", "text", "question", "answer", "country"]
PAIRS = [(f"the {adjective} {word}", f"a {word} is {adjective}")
         for word in WORDS for adjective in ("red", "blue")]
TEXTS = [a for a, _ in PAIRS]
LABELS = np.arange(len(TEXTS)) % 3
INDEX = list(range(100, 100 + len(PAIRS)))


def tuner(model_dir, vectorizer=None, **params):
    return FineTunedVectorizer(vectorizer or BertVectorizer(model_dir),
                               **{"batch_size": 8, "learning_rate": 1e-3, "random_state": 0,
                                  **params})


@pytest.fixture(scope="module")
def tuned(tiny_model_dir):
    return tuner(tiny_model_dir).fit(PAIRS)


# 4. score: a query is not its own candidate.

def test_score_of_pairs_given_both_ways_leaves_each_query_out_of_its_candidates(tuned):
    # Near-duplicates, one way: every anchor finds its positive first.
    duplicates = [(" ".join([word] * 3), " ".join([word] * 4)) for word in WORDS]
    assert tuned.score(duplicates) == 1.0
    # Both ways, each anchor is also a candidate: it ranked itself first (0.5 before).
    both = duplicates + [(b, a) for a, b in duplicates]
    assert tuned.score(both) == 1.0
    # MRR@10 by hand on PAIRS both ways: the candidates are every text but the query's own.
    both = PAIRS + [(b, a) for a, b in PAIRS]
    texts = list(dict.fromkeys(text for pair in both for text in pair))
    unit = tuned.transform(texts).astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    vector = dict(zip(texts, unit))
    reciprocal = []
    for a, b in both:
        rank = 1 + sum(vector[a] @ vector[other] > vector[a] @ vector[b]
                       for other in texts if other != a)
        reciprocal.append(1 / rank if rank <= 10 else 0.0)
    assert tuned.score(both) == pytest.approx(np.mean(reciprocal), abs=1e-6)


# 5. fit_transform equals fit, then transform, the pandas index included.

def _word_samples():
    return pd.DataFrame({"words": [["the", "cat", "sat"], ["a", "big", "dog"]] * 2,
                         "index": [1, 2, 0, 1]}, index=[10, 11, 12, 13])


@pytest.mark.parametrize("make, X, y", [
    (lambda d: BertVectorizer(d), lambda: pd.Series(TEXTS, index=INDEX), None),
    (lambda d: BertWordVectorizer(d), _word_samples, None),
    (lambda d: tuner(d), lambda: pd.Series(TEXTS, index=INDEX), LABELS),
    (lambda d: tuner(d), lambda: pd.DataFrame({"text": TEXTS}, index=INDEX), LABELS),
    (lambda d: PairSimilarity(BertVectorizer(d)),
     lambda: pd.DataFrame(PAIRS, columns=["a", "b"], index=INDEX), None),
], ids=["BertVectorizer", "BertWordVectorizer", "FineTunedVectorizer-Series",
        "FineTunedVectorizer-DataFrame", "PairSimilarity"])
def test_fit_transform_is_fit_then_transform_with_the_index(tiny_model_dir, make, X, y):
    first = make(tiny_model_dir).set_output(transform="pandas").fit_transform(X(), y)
    estimator = make(tiny_model_dir).set_output(transform="pandas").fit(X(), y)
    second = estimator.transform(X())
    pd.testing.assert_frame_equal(first, second)
    assert first.index.tolist() == X().index.tolist()


def test_fine_tuned_vectorizer_in_a_column_transformer_with_pandas_output(tiny_model_dir):
    frame = pd.DataFrame({"text": TEXTS, "length": [len(text) for text in TEXTS]},
                         index=INDEX)
    columns = ColumnTransformer([("tune", tuner(tiny_model_dir), "text")],
                                remainder="passthrough").set_output(transform="pandas")
    out = columns.fit_transform(frame, LABELS)
    assert out.index.tolist() == INDEX
    assert out.shape == (len(TEXTS), 33)


# 6. FrozenEstimator: a fitted vectorizer through clones.

def test_pair_similarity_over_a_frozen_tuned_vectorizer_under_cloning(tiny_model_dir, tuned):
    X = PAIRS[:16] + [(PAIRS[i][0], PAIRS[(i + 7) % 32][1]) for i in range(16, 32)]
    y = np.r_[np.ones(16, dtype=int), np.zeros(16, dtype=int)]
    before = tuned.transform(TEXTS)
    # The recipe of PairSimilarity's docstring, with a fine-tuned encoder.
    threshold = TunedThresholdClassifierCV(
        make_pipeline(PairSimilarity(FrozenEstimator(tuned)), LogisticRegression()),
        cv=KFold(2, shuffle=True, random_state=0)).fit(X, y)
    assert threshold.predict(X[:4]).shape == (4,)
    similarity = threshold.estimator_.steps[0][1]
    assert similarity.vectorizer_.estimator is tuned
    scores = cross_val_score(PairSimilarity(FrozenEstimator(tuned)), X, y.astype(float),
                             cv=KFold(2, shuffle=True, random_state=0), error_score="raise")
    assert np.isfinite(scores).all()
    np.testing.assert_array_equal(tuned.transform(TEXTS), before)  # never refitted
    # Without the wrapper the clone is unfitted: the error names the way out.
    with pytest.raises(NotFittedError, match="wrapped in sklearn.frozen.FrozenEstimator"):
        cross_val_score(PairSimilarity(tuned), X, y.astype(float), cv=2, error_score="raise")
    with pytest.raises(NotFittedError,
                       match=r"FrozenEstimator\(FineTunedVectorizer\) is used as it is"):
        PairSimilarity(FrozenEstimator(tuner(tiny_model_dir))).fit(PAIRS)


def test_similarity_search_uses_a_frozen_vectorizer_as_it_is(tiny_model_dir, tuned):
    corpus = [b for _, b in PAIRS]
    for vectorizer in (tuned, BertVectorizer(tiny_model_dir).fit()):
        search = SimilaritySearch(FrozenEstimator(vectorizer)).fit(corpus)
        assert search.vectorizer_.estimator is vectorizer
        expected = SimilaritySearch().fit(vectorizer.transform(corpus))
        np.testing.assert_array_equal(
            search.kneighbors(TEXTS[:3], 4, return_distance=False),
            expected.kneighbors(vectorizer.transform(TEXTS[:3]), 4, return_distance=False))
    with pytest.raises(NotFittedError, match="FrozenEstimator"):
        SimilaritySearch(FrozenEstimator(BertVectorizer(tiny_model_dir))).fit(corpus)


def test_pair_similarity_reads_word_samples_through_a_frozen_pipeline(tiny_model_dir):
    samples = [(["the", "cat", "sat"], 1), (["a", "big", "dog"], 2)]
    words = make_pipeline(BertWordVectorizer(tiny_model_dir)).fit(samples)
    pairs = [(samples[0], samples[1]), (samples[1], samples[1])]
    similarity = PairSimilarity(FrozenEstimator(words)).fit(pairs)
    np.testing.assert_allclose(similarity.predict(pairs),
                               PairSimilarity(words).fit(pairs).predict(pairs))


# 8. Batches of repeated texts: warned, first fit, near-linear.

def _first_fit(texts, rows, batch_size, rng):
    """The naive loop: each shuffled row into the first batch with room and none of its
    texts."""
    batches, taken = [], []
    for row in rng.permutation(rows):
        for batch, seen in zip(batches, taken):
            if len(batch) < batch_size and seen.isdisjoint(texts[row]):
                break
        else:
            batch, seen = [], set()
            batches.append(batch)
            taken.append(seen)
        batch.append(row)
        seen.update(texts[row])
    return batches


def test_batches_are_the_naive_first_fit():
    rng = np.random.RandomState(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(100):
            n_rows, width = rng.randint(0, 80), rng.randint(1, 4)
            texts = rng.randint(0, rng.randint(1, 50), size=(n_rows, width))
            batch_size, seed = rng.randint(1, 12), rng.randint(1000)
            ours = _distinct_batches(texts, np.arange(n_rows), batch_size,
                                     np.random.RandomState(seed))
            naive = _first_fit(texts, np.arange(n_rows), batch_size,
                               np.random.RandomState(seed))
            assert [batch.tolist() for batch in ours] == naive


def test_few_anchors_batch_without_duplicates_and_short_only_where_texts_repeat():
    # 10 anchors with 2,000 positives each: a batch holds one row of each anchor at most.
    rows = np.arange(20_000)
    texts = np.stack([rows % 10, 10 + rows], axis=1)
    with pytest.warns(UserWarning, match=r"2000 of the 2000 batches of in-batch negatives hold "
                                         r"fewer than batch_size=32 items: texts repeat \(one "
                                         r"is in 2000 of the 20000 items\)"):
        batches = _distinct_batches(texts, rows, 32, np.random.RandomState(0))
    assert sorted(np.concatenate(batches).tolist()) == rows.tolist()
    assert all(len(set(texts[batch].ravel())) == texts[batch].size for batch in batches)
    assert [len(batch) for batch in batches] == [10] * 2000
    # Random: another seed, other batches; the anchors of a batch in no fixed order.
    with pytest.warns(UserWarning, match="texts repeat"):
        other = _distinct_batches(texts, rows, 32, np.random.RandomState(1))
    assert [batch.tolist() for batch in other] != [batch.tolist() for batch in batches]
    # 10 anchors with 200 positives each and 1,000 rows of distinct texts: a short batch
    # shares a text with every row after it (so short batches are the last ones).
    texts = np.r_[texts[:2_000], np.stack([30_000 + rows[:1_000], 40_000 + rows[:1_000]], 1)]
    with pytest.warns(UserWarning, match="texts repeat"):
        batches = _distinct_batches(texts, np.arange(3_000), 32, np.random.RandomState(0))
    assert min(len(batch) for batch in batches) < 32 <= max(len(batch) for batch in batches)
    for position, batch in enumerate(batches):
        if len(batch) < 32:
            seen = set(texts[batch].ravel())
            later = np.concatenate(batches[position + 1:] or [np.array([], dtype=int)])
            assert all(not seen.isdisjoint(texts[row]) for row in later)


def test_no_warning_where_batches_are_full_but_the_last():
    texts = np.arange(200).reshape(100, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batches = _distinct_batches(texts, np.arange(100), 32, np.random.RandomState(0))
    assert [len(batch) for batch in batches] == [32, 32, 32, 4]


def test_fit_warns_that_one_anchor_trains_in_batches_of_one(tiny_model_dir):
    pairs = [("the cat", f"a {word}") for word in WORDS]
    with pytest.warns(UserWarning, match=r"16 of the 16 batches of in-batch negatives hold "
                                         r"fewer than batch_size=8 items, 16 of them one item "
                                         r"\(no negatives: it trains nothing\): texts repeat"):
        tuned = tuner(tiny_model_dir).fit(pairs)
    assert set(tuned.loss_curve_) == {0.0}  # in every pass


# 9. set_output: the vectorizer's carried, the FineTunedVectorizer's own first.

def test_the_vectorizers_set_output_is_carried_and_its_own_wins(tiny_model_dir):
    series = pd.Series(TEXTS, index=INDEX)
    plain = tuner(tiny_model_dir).fit(PAIRS).transform(TEXTS)
    tuned = tuner(tiny_model_dir, BertVectorizer(tiny_model_dir).set_output(
        transform="pandas")).fit(PAIRS)
    out = tuned.transform(series)
    assert isinstance(out, pd.DataFrame)
    assert out.index.tolist() == INDEX
    assert out.columns.tolist() == tuned.get_feature_names_out().tolist()
    np.testing.assert_array_equal(out.to_numpy(), plain)
    # The estimator's own setting wins over the vectorizer's.
    assert isinstance(tuned.set_output(transform="default").transform(series), np.ndarray)
    own = tuner(tiny_model_dir).set_output(transform="pandas").fit(PAIRS)
    assert own.transform(series).index.tolist() == INDEX
    # fit_transform as transform.
    carried = tuner(tiny_model_dir, BertVectorizer(tiny_model_dir).set_output(
        transform="pandas"))
    first = carried.fit_transform(series, LABELS)
    pd.testing.assert_frame_equal(first, carried.transform(series))
    assert first.index.tolist() == INDEX


def test_the_vectorizers_polars_output_is_carried(tiny_model_dir):
    polars = pytest.importorskip("polars")
    tuned = tuner(tiny_model_dir, BertVectorizer(tiny_model_dir).set_output(
        transform="polars")).fit(PAIRS)
    out = tuned.transform(TEXTS)
    assert isinstance(out, polars.DataFrame)
    assert out.columns == tuned.get_feature_names_out().tolist()


def test_sets_own_output_reads_sklearns_record_and_falls_back_to_false():
    from sklearn.preprocessing import StandardScaler

    from skbert import _compat

    assert not _compat.sets_own_output(StandardScaler())
    assert _compat.sets_own_output(StandardScaler().set_output(transform="pandas"))
    assert not _compat.sets_own_output(object())  # no such record where sklearn moved it
