"""The package's import graph has no circle: a lower module never imports an estimator."""

import ast
from pathlib import Path

import skbert

PACKAGE = Path(skbert.__file__).parent


def _module_name(path, package):
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package=PACKAGE):
    """Module -> the modules of ``package`` it imports anywhere in it (in functions too)."""
    paths = {_module_name(path, package): path for path in package.rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # "from skbert import _words" imports a module; "from skbert import X", a name
                # of the package's __init__.
                imported.update(f"{node.module}.{alias.name}"
                                if f"{node.module}.{alias.name}" in paths else node.module
                                for alias in node.names)
        graph[name] = sorted(imported & paths.keys() - {name})
    return graph


def cycles(graph):
    """One circle per back edge met in a depth-first walk, each as a list of modules."""
    found, state, path = [], {}, []

    def visit(node):
        state[node] = "open"
        path.append(node)
        for target in graph[node]:
            if state.get(target) == "open":
                found.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target)
        path.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_cycles_finds_a_circle_and_names_it():
    graph = {"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": ["b"], "b": [], "c": ["a", "b"]}) == []


def test_the_import_graph_reads_every_form_of_import(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from pkg.a import A\n")
    (package / "a.py").write_text("import os\nA = 1\n\ndef f():\n    from pkg import b, A\n")
    (package / "b.py").write_text("import pkg.sub.c as c\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "c.py").write_text("from pkg.sub import __name__\n")
    assert import_graph(package) == {"pkg": ["pkg.a"], "pkg.a": ["pkg", "pkg.b"],
                                     "pkg.b": ["pkg.sub.c"], "pkg.sub": [],
                                     "pkg.sub.c": ["pkg.sub"]}
    assert cycles(import_graph(package)) == [["pkg", "pkg.a", "pkg"]]


def test_the_package_imports_have_no_circle():
    circles = [" -> ".join(circle) for circle in cycles(import_graph())]
    assert not circles, "import circles in skbert: " + "; ".join(circles)


# The estimators' wings by task (issue 72), and what one wing takes from another: none takes
# another's estimator module; PairSimilarity reads word samples, and two estimators of
# embeddings (FineTunedVectorizer's score in _centroid_scores) scale rows to unit length as the
# indexes do.
WINGS = ("_classification", "_embeddings", "_retrieval", "_words")
ACROSS = {("skbert._embeddings._pair_similarity", "skbert._words._samples"),
          ("skbert._embeddings._pair_similarity", "skbert._retrieval._index"),
          ("skbert._embeddings._finetuned_vectorizer", "skbert._retrieval._index"),
          ("skbert._embeddings._centroid_scores", "skbert._retrieval._index")}
# Above the wings: the package's names, the old module paths, and what uses the estimators.
ABOVE = ("skbert", "skbert._moved", "skbert.probe", "skbert.dask", "skbert._cli")


def _wing(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in WINGS else None


def test_the_wings_stand_side_by_side_over_what_they_share():
    graph = import_graph()
    across, lower_up = set(), set()
    for module, imported in graph.items():
        above = module in ABOVE or module.startswith("skbert._cli.")
        for target in imported:
            if _wing(module) and _wing(target) and _wing(target) != _wing(module):
                across.add((module, target))
            elif not above and not _wing(module) and (_wing(target) or target in ABOVE):
                lower_up.add((module, target))
    assert across == ACROSS
    assert not lower_up, f"modules below the wings import above them: {sorted(lower_up)}"
