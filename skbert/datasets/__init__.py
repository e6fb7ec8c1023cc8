"""Small real data sets bundled with skbert, loaded as scikit-learn Bunches.

Reading them needs only the standard library, numpy and scikit-learn.
"""

from skbert.datasets._base import load_stsb, load_trec

__all__ = ["load_stsb", "load_trec"]
