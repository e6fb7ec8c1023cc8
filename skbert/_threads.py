"""BLAS threads for the small models skbert fits itself.

A logistic regression on a few thousand rows of a few hundred features
makes BLAS calls too small to share between threads: on 2 cores, lbfgs on
2,000 x 384 TREC features took 0.77 s with OpenBLAS's 2 threads and 0.07 s
with one. :func:`one_blas_thread` scopes a limit of one BLAS thread to such a
fit. Torch's own thread pool is not BLAS's, but a torch that links the BLAS of
numpy (MKL or OpenBLAS: conda builds, aarch64) runs its matrix products on it:
so the limit wraps the scikit-learn fit alone, never an encoding or a
fine-tuning.
"""

import contextlib
import os

# The variables through which a user sets BLAS threads: when one is set, theirs applies.
_SET_BY_USER = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                "OMP_NUM_THREADS")


def one_blas_thread():
    """A context in which the BLAS libraries of the process (numpy's and scipy's OpenBLAS,
    MKL, BLIS) use one thread; nothing changes when the environment sets BLAS threads.

    The limit holds for the whole process while the context is open
    (threadpoolctl, scikit-learn's own dependency, sets it and restores the
    previous counts on exit).
    """
    if any(os.environ.get(name) for name in _SET_BY_USER):
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")
