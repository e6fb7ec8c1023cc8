"""skbert: BERT-family encoders as scikit-learn feature steps and models.

Layer, pooling and normalization are ordinary hyperparameters of
:class:`BertVectorizer`, so ``Pipeline`` and ``GridSearchCV`` tune them like any
other preprocessing choice. Importing skbert does not import torch or
transformers; they load when a model does.
"""

import importlib.metadata

from skbert import _moved  # noqa: F401  (old module paths, for pickles made before)
from skbert._classification._classifier import BertClassifier, BertRegressor
from skbert._embeddings._finetuned_vectorizer import FineTunedVectorizer
from skbert._embeddings._pair_similarity import PairSimilarity
from skbert._embeddings._static_vectorizer import StaticVectorizer
from skbert._encoder._cache import clear_cache, set_cache_limit
from skbert._retrieval._bm25 import BM25Vectorizer
from skbert._retrieval._hybrid import HybridSearch
from skbert._retrieval._reranker import BertReranker
from skbert._retrieval._search import SimilaritySearch
from skbert._vectorizer import BertVectorizer
from skbert._words._word_classifier import BertWordClassifier
from skbert._words._word_vectorizer import BertWordVectorizer

try:  # the installed distribution's version: one number, in pyproject.toml
    __version__ = importlib.metadata.version("skbert")
except importlib.metadata.PackageNotFoundError:  # the source tree, not installed
    __version__ = "unknown"

__all__ = [
    "BM25Vectorizer",
    "BertClassifier",
    "BertRegressor",
    "BertReranker",
    "BertVectorizer",
    "BertWordClassifier",
    "BertWordVectorizer",
    "FineTunedVectorizer",
    "HybridSearch",
    "PairSimilarity",
    "SimilaritySearch",
    "StaticVectorizer",
    "__version__",
    "clear_cache",
    "set_cache_limit",
]
