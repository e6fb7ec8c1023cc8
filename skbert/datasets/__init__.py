"""Small real data sets bundled with skbert, loaded as scikit-learn Bunches.

Reading TREC and STS-B needs only the standard library, numpy and scikit-learn;
the UD English EWT sample of :func:`load_ud_pos` is CoNLL-U, read with the
``conllu`` package (imported when it is loaded).
:func:`load_beir` reads larger retrieval sets in the BEIR layout from disk.
"""

from skbert.datasets._base import load_stsb, load_trec, load_ud_pos
from skbert.datasets._beir import load_beir

__all__ = ["load_beir", "load_stsb", "load_trec", "load_ud_pos"]
