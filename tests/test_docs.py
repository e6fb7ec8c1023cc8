"""The documentation's sources list every public name, and the examples fit the gallery.

Cheap checks on text only: nothing is imported from skbert and no Sphinx build
runs (the build is ``python -m sphinx -W --keep-going -b html docs
docs/_build/html``).
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api.rst"

# module -> the file whose __all__ lists its public names
PUBLIC_MODULES = {
    "skbert": "skbert/__init__.py",
    "skbert.pooling": "skbert/pooling.py",
    "skbert.metrics": "skbert/metrics.py",
    "skbert.probe": "skbert/probe.py",
    "skbert.datasets": "skbert/datasets/__init__.py",
    "skbert.dask": "skbert/dask.py",
}


def declared_all(path):
    """The names of a module's ``__all__``, read from its source."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{path} has no __all__")


def autosummary_entries(text):
    """Fully qualified names listed in the autosummary directives of an rst file."""
    entries = set()
    module = None
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        current = re.match(r"\.\. currentmodule:: (\S+)", line)
        if current:
            module = current.group(1)
        if line.startswith(".. autosummary::"):
            index += 1
            while index < len(lines) and (not lines[index].strip() or lines[index][0] == " "):
                item = lines[index].strip()
                if item and not item.startswith(":"):
                    entries.add(f"{module}.{item}")
                index += 1
            continue
        index += 1
    return entries


@pytest.mark.parametrize("module", sorted(PUBLIC_MODULES))
def test_api_reference_lists_every_public_name(module):
    entries = autosummary_entries(API.read_text(encoding="utf-8"))
    missing = [name for name in declared_all(PUBLIC_MODULES[module])
               if f"{module}.{name}" not in entries]
    assert not missing, f"docs/api.rst has no autosummary entry for {module}: {missing}"


def test_api_reference_lists_only_existing_names():
    public = {f"{module}.{name}" for module, path in PUBLIC_MODULES.items()
              for name in declared_all(path)}
    extra = autosummary_entries(API.read_text(encoding="utf-8")) - public
    assert not extra, f"docs/api.rst lists names that no __all__ declares: {sorted(extra)}"


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "examples").glob("*.py")))
def test_example_docstring_opens_with_an_rst_title(script):
    # sphinx-gallery makes the docstring's first paragraph the page title: it
    # must be a title line underlined with "=" at least as long as the title.
    docstring = ast.get_docstring(ast.parse((ROOT / "examples" / script).read_text("utf-8")),
                                  clean=False)
    assert docstring, f"examples/{script} has no docstring"
    title, underline, *rest = docstring.split("\n") + ["", ""]
    assert title.strip() and title == title.lstrip(), f"examples/{script}: no title line"
    assert re.fullmatch(r"=+", underline) and len(underline) >= len(title), (
        f"examples/{script}: the first line must be underlined with '=' "
        f"(at least {len(title)} characters), found {underline!r}"
    )
    assert not rest or not rest[0].strip(), (
        f"examples/{script}: leave a blank line after the title's underline"
    )
