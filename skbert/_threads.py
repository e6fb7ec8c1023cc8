"""Thread limits scoped to one call: BLAS threads for the small models skbert fits itself
(:func:`one_blas_thread`), torch's threads beside a CPU engine (:func:`one_openmp_thread`).

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
import functools
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


@functools.cache
def _openmp():
    """threadpoolctl's view of the OpenMP libraries loaded now (torch's among them), and of
    nothing else: leaving a limit restores these only."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController().select(user_api="openmp")


def one_openmp_thread():
    """A context in which OpenMP (torch's CPU operations) runs one thread in the calling
    thread; other threads, and those started meanwhile, keep their own count.

    Around a CPU engine's batches (:func:`skbert._encoder._encoding.run_batches`): torch's
    OpenMP threads spin for a while after each operation, on the cores that the
    engine's next batch needs. With this limit, cache=False transforms took
    0.84x-0.89x the time on OpenVINO int8, 0.85x bf16, 0.94x float32 and 0.91x
    on ONNX Runtime, default-cache ones 0.91x-1.00x (benchmarks/README.md,
    2026-12-02 (Zen 5)). Without an OpenMP torch it changes nothing.
    """
    return _openmp().limit(limits=1)
