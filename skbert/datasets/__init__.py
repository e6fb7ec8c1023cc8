"""Small real data sets bundled with skbert, loaded as scikit-learn Bunches.

Reading them needs only the standard library, numpy and scikit-learn.
:func:`load_beir` reads larger retrieval sets in the BEIR layout from disk.
"""

from skbert.datasets._base import load_stsb, load_trec
from skbert.datasets._beir import load_beir

__all__ = ["load_beir", "load_stsb", "load_trec"]
