"""Every docstring example runs as written, and uses no deprecated name (issue 66, item 10).

A user copies examples: one that raises a FutureWarning (``max_epochs=``) or no
longer gives what it shows is a defect. Each module of skbert is a case; its
examples run in a temporary working directory, FutureWarning and
DeprecationWarning raised by skbert as errors.
"""

import doctest
import importlib
import pkgutil
import warnings

import pytest

import skbert

MODULES = sorted(name for _, name, _ in pkgutil.walk_packages(skbert.__path__, "skbert.")
                 if not name.endswith("__main__"))


@pytest.mark.parametrize("name", ["skbert", *MODULES])
def test_docstring_examples_run(name, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = []
    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=FutureWarning)
        warnings.filterwarnings("error", category=DeprecationWarning, module="skbert")
        for test in doctest.DocTestFinder().find(module, name):
            runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


def test_the_examples_are_found():
    # A finder that found nothing would pass every case above.
    examples = sum(len(test.examples) for name in MODULES
                   for test in doctest.DocTestFinder().find(importlib.import_module(name), name))
    assert examples > 100
