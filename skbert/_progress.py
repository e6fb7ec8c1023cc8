"""Progress bars that suit where they are written: a terminal, a notebook, or a log."""

import sys

# Seconds between updates where every update stays (a file, a CI log): a line each.
LOG_INTERVAL = 30.0


def progress_bar(verbose, **kwargs):
    """A tqdm bar on standard error, drawn when ``verbose`` is true.

    On a terminal (or in a notebook) it updates as tqdm does; written to a
    file or a pipe, where each update is kept, at most every
    :data:`LOG_INTERVAL` seconds (and once at the end).
    """
    from tqdm.auto import tqdm

    if not ("notebook" in tqdm.__module__ or is_terminal(sys.stderr)):
        # maxinterval too: tqdm's monitor thread otherwise redraws a stalled bar every 10 s.
        kwargs = {"mininterval": LOG_INTERVAL, "maxinterval": LOG_INTERVAL, **kwargs}
    return tqdm(file=sys.stderr, disable=not verbose, **kwargs)


def is_terminal(stream):
    """Whether ``stream`` is an open terminal (a closed or replaced stream is not)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False
