"""BM25Vectorizer: words, not meaning, as sparse rows whose dot product is the BM25 score.

Documents become rows of BM25 term weights (idf times the saturated,
length-normalized term frequency) and queries rows of term counts, so that a
query row times a document row is the document's BM25 score for the query:
bm25s's eager scoring (its variants and formulas, Kamphuis et al. 2020), laid
out as scikit-learn's sparse features so that ``SimilaritySearch`` ranks by it
and ``HybridSearch`` fuses it with a dense first stage. The words come from
scikit-learn's ``CountVectorizer`` analyzer; bm25s's order is kept: lowercase,
split, drop stop words, then stem.
"""

import functools
import numbers

import numpy as np
from scipy import sparse
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.utils.validation import check_is_fitted

from skbert._compat import Interval, StrOptions, _fit_context, check_count_vectorizer
from skbert._validation import check_corpus_not_empty, check_single_texts

# method -> idf(df, n_documents), as bm25s computes each variant's
IDF = {
    "lucene": lambda df, n: np.log1p((n - df + 0.5) / (df + 0.5)),
    "robertson": lambda df, n: np.log(np.maximum((n - df + 0.5) / (df + 0.5), 1.0)),
    "atire": lambda df, n: np.log(n / df),
    "bm25l": lambda df, n: np.log((n + 1) / (df + 0.5)),
    "bm25+": lambda df, n: np.log((n + 1) / df),
}


def term_frequency_component(tf, lengths, average_length, k1, b, delta, method):
    """The term-frequency factor of a BM25 weight for counts ``tf`` in documents of
    ``lengths`` words (bm25s's formula of each ``method``)."""
    norm = 1 - b + b * lengths / average_length
    if method == "atire":
        return tf * (k1 + 1) / (tf + k1 * norm)
    if method == "bm25l":
        c = tf / norm
        return (k1 + 1) * (c + delta) / (k1 + c + delta)
    plain = tf / (k1 * norm + tf)
    if method == "bm25+":
        return plain * (k1 + 1) + delta
    return plain  # "lucene", "robertson"


def bm25_weights(counts, lengths, idf, average_length, k1, b, delta, method):
    """``counts`` (CSR, documents x terms) as BM25 term weights, CSR float64.

    For "bm25l" and "bm25+", which give a term absent from a document a score
    too, each weight has that absent-term score (at the average length, as
    bm25s computes it) taken off: a query's dot product then differs from
    bm25s's score by the same constant for every document.
    """
    counts = counts.tocsr()
    rows = np.repeat(np.arange(counts.shape[0]), np.diff(counts.indptr))
    tf = counts.data.astype(np.float64)
    weights = idf[counts.indices] * term_frequency_component(
        tf, np.asarray(lengths, dtype=np.float64)[rows], average_length, k1, b, delta, method)
    if method in ("bm25l", "bm25+"):
        weights -= idf[counts.indices] * term_frequency_component(
            0.0, average_length, average_length, k1, b, delta, method)
    return sparse.csr_matrix((weights, counts.indices.copy(), counts.indptr.copy()),
                             shape=counts.shape)


def _stemmed_words(text, tokenize, stems):
    """The words of ``text`` as bm25s takes them: split, stop words out (their entry in
    ``stems`` is None), then stemmed."""
    return [stem for stem in map(stems.__getitem__, tokenize(text)) if stem is not None]


class _Stems(dict):
    """word -> its stem (the word itself without a stemmer), computed on first lookup: each
    distinct word is stemmed once per analyzer, a dictionary lookup after that."""

    def __init__(self, stem):
        super().__init__()
        self.stem = stem

    def __missing__(self, word):
        self[word] = stem = word if self.stem is None else self.stem(word)
        return stem


def snowball_stemmer(language):
    """PyStemmer's Snowball stemmer for ``language``, with the extra to install where it is
    missing and the languages it knows where it does not know this one."""
    try:
        import Stemmer
    except ImportError as exc:
        raise ImportError(f"stemmer={language!r} needs PyStemmer: pip install "
                          "'skbert[stemmer]'.") from exc
    try:
        return Stemmer.Stemmer(language, 0)  # no cache of its own: _Stems is one
    except KeyError:
        raise ValueError(f"stemmer={language!r} is not a Snowball language; PyStemmer knows "
                         f"{sorted(Stemmer.algorithms())}.") from None


def _as_is(tokens):
    return tokens


# auto_wrap_output_keys=None: no set_output, as CountVectorizer has none, so that
# set_config(transform_output="pandas") leaves the sparse rows alone instead of refusing them.
class BM25Vectorizer(TransformerMixin, BaseEstimator, auto_wrap_output_keys=None):
    """BM25 as sparse rows: ``transform`` for documents, ``transform_queries`` for queries.

    The two sides differ, and the BM25 score is their product:
    :meth:`transform` gives documents as rows of BM25 term weights,
    :meth:`transform_queries` gives queries as rows of term counts, and
    ``transform_queries(queries) @ transform(documents).T`` holds the BM25
    scores (a repeated query word counts twice, as in bm25s and Lucene).
    Queries given to ``transform`` come out weighted as documents, and their
    product with the documents is not BM25: no error says so.
    ``SimilaritySearch(BM25Vectorizer()).fit(corpus)`` calls each side where
    it belongs and searches by BM25; :class:`~skbert.HybridSearch` fuses it
    with a dense search.

    ``fit(corpus)`` learns the vocabulary, each term's document frequency and
    the average document length: the lexical first stage, beside the encoder.

    The words are those of scikit-learn's ``CountVectorizer`` with the same
    parameters, with stop words dropped before stemming (bm25s's order). On
    SciFact (BEIR test, nDCG@10), at ``k1=1.5, b=0.75``: 0.6613 with the
    defaults (no stop words, no stemmer), 0.6685 with ``stop_words="english"``
    (scikit-learn's 318 words), 0.6840 with ``stemmer="english"``, 0.6863 with
    the stemmer and Lucene's 33 English stop words (bm25s's "en"), 0.6882 with
    the stemmer and ``"english"``; the all-MiniLM-L6-v2 bi-encoder scores
    0.6451 there. Stemming is the larger gain: try ``stemmer="english"``
    first.

    Parameters
    ----------
    k1 : float, default=1.5
        Term-frequency saturation: how much a word's repeats add.
    b : float, default=0.75
        Length normalization, from 0 (none) to 1 (full).
    method : {"lucene", "robertson", "atire", "bm25l", "bm25+"}, default="lucene"
        The BM25 variant (idf and term-frequency formulas), as bm25s names and
        computes them. "bm25l" and "bm25+" score words a document lacks too;
        that score is the same for every document (bm25s takes it at the
        average length), so the dot products leave it out: rankings equal
        bm25s's, and each query's scores are bm25s's less one constant.
    delta : float, default=0.5
        The lower bound that "bm25l" and "bm25+" give a term's frequency part;
        unused by the other methods.
    stemmer : str or None, default=None
        A Snowball language ("english", "french", ...) whose stemmer
        (PyStemmer: ``pip install 'skbert[stemmer]'``) reduces words to their
        stems after the stop words are dropped, or None. Only with
        ``analyzer="word"``.
    lowercase : bool, default=True
        As in ``CountVectorizer``.
    stop_words : {"english"}, list or None, default=None
        As in ``CountVectorizer``: "english" is scikit-learn's list of 318
        words; compared with the lowercased words before stemming.
    token_pattern : str or None, default=r"(?u)\\b\\w\\w+\\b"
        As in ``CountVectorizer``: what a word is, unless ``tokenizer`` is set.
    ngram_range : tuple (min_n, max_n), default=(1, 1)
        As in ``CountVectorizer``. A document's length counts its n-grams.
    analyzer : {"word", "char", "char_wb"} or callable, default="word"
        As in ``CountVectorizer``; a callable takes a raw text and returns its
        terms (neither stop words, stemmer nor ``lowercase`` then apply).
    tokenizer : callable or None, default=None
        As in ``CountVectorizer``: splits a lowercased text into words.
    dtype : {"float32", "float64"}, default="float32"
        Of the rows that come out.

    Attributes
    ----------
    vocabulary_ : dict
        Term -> column index, in sorted order (as ``CountVectorizer``'s).
    idf_ : ndarray of shape (n_features,), float64
        The inverse document frequency of each term, by ``method``.
    average_length_ : float
        Mean number of terms of a fitted document.
    n_documents_ : int
        Documents seen at ``fit``.

    See Also
    --------
    sklearn.feature_extraction.text.TfidfVectorizer : tf-idf rows, cosine-compared.
    skbert.SimilaritySearch : search by these rows.
    skbert.HybridSearch : BM25 fused with a dense first stage.

    Examples
    --------
    >>> from skbert import BM25Vectorizer
    >>> corpus = ["the cat sat on the mat", "dogs chase cats", "stock markets fell"]
    >>> bm25 = BM25Vectorizer().fit(corpus)
    >>> scores = bm25.transform_queries(["cat on a mat"]) @ bm25.transform(corpus).T
    >>> int(scores.toarray().argmax())
    0
    """

    _parameter_constraints: dict = {
        "k1": [Interval(numbers.Real, 0, None, closed="left")],
        "b": [Interval(numbers.Real, 0, 1, closed="both")],
        "method": [StrOptions(set(IDF))],
        "delta": [Interval(numbers.Real, 0, None, closed="left")],
        "stemmer": [str, None],
        "lowercase": ["boolean"],
        "stop_words": [StrOptions({"english"}), list, None],
        "token_pattern": [str, None],
        "ngram_range": [tuple],
        "analyzer": [StrOptions({"word", "char", "char_wb"}), callable],
        "tokenizer": [callable, None],
        "dtype": [StrOptions({"float32", "float64"})],
    }

    def __init__(self, *, k1=1.5, b=0.75, method="lucene", delta=0.5, stemmer=None,
                 lowercase=True, stop_words=None, token_pattern=r"(?u)\b\w\w+\b",
                 ngram_range=(1, 1), analyzer="word", tokenizer=None, dtype="float32"):
        self.k1 = k1
        self.b = b
        self.method = method
        self.delta = delta
        self.stemmer = stemmer
        self.lowercase = lowercase
        self.stop_words = stop_words
        self.token_pattern = token_pattern
        self.ngram_range = ngram_range
        self.analyzer = analyzer
        self.tokenizer = tokenizer
        self.dtype = dtype


    def build_analyzer(self):
        """The callable that turns a raw text into its terms, as every method here reads it.

        Returns
        -------
        analyzer : callable
        """
        if self.stemmer is not None and self.analyzer != "word":
            raise ValueError(f"stemmer={self.stemmer!r} stems words: it needs analyzer='word', "
                             f"not {self.analyzer!r}.")
        counter = self._count_vectorizer()
        if self.analyzer != "word":
            return counter.build_analyzer()
        # Stop words are dropped before stemming (bm25s's order), by the tokenizer.
        stems = _Stems(None if self.stemmer is None else snowball_stemmer(self.stemmer).stemWord)
        stems.update(dict.fromkeys(counter.get_stop_words() or ()))
        words = functools.partial(_stemmed_words, tokenize=counter.build_tokenizer(),
                                  stems=stems)
        return CountVectorizer(lowercase=self.lowercase, tokenizer=words, token_pattern=None,
                               ngram_range=self.ngram_range).build_analyzer()

    def _count_vectorizer(self):
        """The CountVectorizer whose words these are: its parameters are this one's."""
        return CountVectorizer(lowercase=self.lowercase, stop_words=self.stop_words,
                               token_pattern=self.token_pattern, ngram_range=self.ngram_range,
                               analyzer=self.analyzer, tokenizer=self.tokenizer)

    def _counts(self, X, vocabulary=None):
        """Term counts of the texts ``X`` (CSR) and each one's number of terms, in one pass."""
        analyze, lengths = self.build_analyzer(), []

        def analyzed(texts):
            for text in texts:
                terms = list(analyze(text))  # a callable analyzer may give any iterable
                lengths.append(len(terms))
                yield terms

        counter = CountVectorizer(analyzer=_as_is, vocabulary=vocabulary, lowercase=False,
                                  dtype=np.int64)
        counts = counter.fit_transform(analyzed(X))
        return counts, np.asarray(lengths, dtype=np.float64), counter.vocabulary_

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Learn the vocabulary, the document frequencies and the average length.

        Parameters
        ----------
        X : iterable of str
            The corpus.
        y : None
            Ignored.

        Returns
        -------
        self : BM25Vectorizer
        """
        self._fit(X)
        return self

    def _fit(self, X):
        # CountVectorizer.fit's checks of these parameters, and its warnings, once per fit.
        check_count_vectorizer(self._count_vectorizer())
        texts = check_single_texts(X, "BM25Vectorizer")
        check_corpus_not_empty(len(texts), "BM25Vectorizer.fit")
        counts, lengths, vocabulary = self._counts(texts)  # CountVectorizer refuses no terms
        document_frequency = np.bincount(counts.indices, minlength=counts.shape[1])
        self.n_documents_ = counts.shape[0]
        self.idf_ = IDF[self.method](document_frequency.astype(np.float64), self.n_documents_)
        self.average_length_ = float(lengths.mean())
        self.vocabulary_ = vocabulary
        return counts, lengths

    def _weights(self, counts, lengths):
        # A fitted vocabulary has a term, so the average length is above 0.
        weights = bm25_weights(counts, lengths, self.idf_, self.average_length_, self.k1,
                               self.b, self.delta, self.method)
        return weights.astype(self.dtype)

    def transform(self, X):
        """Documents as rows of BM25 term weights; queries go to :meth:`transform_queries`.

        A document's weights use its own length and the fitted idf and
        average length, so documents outside the fitted corpus score as if
        they had been in it, with the corpus's statistics. Queries given
        here come out weighted as documents, whose product with document
        rows is not the BM25 score: :meth:`transform_queries` gives the
        query side.

        Parameters
        ----------
        X : iterable of str

        Returns
        -------
        weights : sparse matrix (CSR) of shape (n_samples, n_features)
        """
        check_is_fitted(self)
        return self._weights(*self._counts(check_single_texts(X, "BM25Vectorizer"),
                                           self.vocabulary_)[:2])

    @_fit_context(prefer_skip_nested_validation=True)
    def fit_transform(self, X, y=None):
        """Fit on the corpus and give its document rows (:meth:`transform`'s), reading X once.

        Parameters
        ----------
        X : iterable of str
        y : None
            Ignored.

        Returns
        -------
        weights : sparse matrix (CSR) of shape (n_samples, n_features)
        """
        return self._weights(*self._fit(X))

    def transform_queries(self, X):
        """Queries as rows of term counts; documents go to :meth:`transform`.

        A query row times a document row of :meth:`transform` is the
        document's BM25 score for the query. Documents given here come out
        as counts, without BM25's weights: :meth:`transform` gives the
        document side.

        Parameters
        ----------
        X : iterable of str

        Returns
        -------
        counts : sparse matrix (CSR) of shape (n_queries, n_features)
        """
        check_is_fitted(self)
        return self._counts(check_single_texts(X, "BM25Vectorizer"),
                            self.vocabulary_)[0].astype(self.dtype)

    def get_feature_names_out(self, input_features=None):
        """The terms, one per column.

        Parameters
        ----------
        input_features : None
            Ignored.

        Returns
        -------
        feature_names_out : ndarray of str objects
        """
        check_is_fitted(self)
        return np.asarray(sorted(self.vocabulary_, key=self.vocabulary_.get), dtype=object)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = False
        tags.transformer_tags.preserves_dtype = []
        return tags

