"""The estimators' modules as they were named before they moved into wings (issue 72).

A pickle names each class by the module that defines it, so one written before
the move asks for ``skbert._finetune.BertClassifier``: each old path stays
importable, as a module that finds every name in the modules that hold it now.
``skbert._words`` was a module and is the words wing now: no pickle names it,
as no fitted estimator keeps a word sample or an alignment.
"""

import importlib
import sys
import types

# {old module: the modules that hold its names now}
MOVED = {
    "skbert._finetune": ("skbert._classification._classifier",
                         "skbert._train._tuned_persistence", "skbert._train._linear_head"),
    "skbert._hybrid": ("skbert._retrieval._hybrid",),
    "skbert._index": ("skbert._retrieval._index",),
    "skbert._lexical": ("skbert._retrieval._bm25",),
    "skbert._reranker": ("skbert._retrieval._reranker",),
    "skbert._search": ("skbert._retrieval._search", "skbert._embeddings._pair_similarity",
                       "skbert._fitted_state"),
    "skbert._static": ("skbert._embeddings._static_vectorizer",),
    "skbert._tuned": ("skbert._embeddings._finetuned_vectorizer",),
    "skbert._word_classifier": ("skbert._words._word_classifier",),
    "skbert._word_vectorizer": ("skbert._words._word_vectorizer",),
}


def _old_module(old, new):
    """A module named ``old`` whose attributes are those of the modules ``new``, in order."""
    modules = [importlib.import_module(name) for name in new]

    def __getattr__(name):
        for module in modules:
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    module = types.ModuleType(old, f"{old}, moved to {', '.join(new)}.")
    module.__getattr__ = __getattr__
    return module


for old, new in MOVED.items():
    sys.modules[old] = _old_module(old, new)
