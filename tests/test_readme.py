"""README.md runs as written: every Python block, in order, and the shell commands.

Blocks run in one namespace, as a reader would paste them one after another,
in a temporary directory, with the offline all-MiniLM-L6-v2. A block may run
on a subset: an HTML comment right above it, ``<!-- test: OLD -> NEW -->``,
replaces the text OLD (which must be in the block) by NEW for the test only,
so the README says in place what the test changes.
"""

import ast
import doctest
import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import substituted

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"(?P<tests>(?:<!-- test: .+? -> .+? -->\n)*)```(?P<language>\w*)\n"
                   r"(?P<code>.*?)^```$", re.S | re.M)
SUBSTITUTION = re.compile(r"<!-- test: (.+?) -> (.+?) -->")


def readme_blocks(language):
    """The code of every ``language`` block of README.md, with its test substitutions made."""
    blocks = []
    for match in BLOCK.finditer(README.read_text(encoding="utf-8")):
        if match["language"] != language:
            continue
        blocks.append(substituted(match["code"], SUBSTITUTION.findall(match["tests"]),
                                  "README.md"))
    return blocks


def test_readme_has_the_blocks_this_test_runs():
    python = readme_blocks("python")
    assert len(python) >= 5 and any(block.startswith(">>>") for block in python)
    assert any("skbert probe" in block for block in readme_blocks("bash"))


def test_every_python_block_imports_the_skbert_names_it_uses():
    # A reader copies one block: a class that an earlier block imported is a NameError there.
    import skbert

    for number, code in enumerate(readme_blocks("python"), start=1):
        if code.startswith(">>>"):
            code = "".join(example.source for example in doctest.DocTestParser().get_examples(code))
        tree = ast.parse(code)
        used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        imported = {alias.asname or alias.name for node in ast.walk(tree)
                    if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
        missing = sorted((used & set(skbert.__all__)) - imported)
        assert not missing, f"README.md python block {number} uses {missing} without importing them"


@pytest.mark.slow
def test_every_python_block_of_the_readme_runs(minilm_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__readme__"}
    for number, code in enumerate(readme_blocks("python"), start=1):
        name = f"README.md python block {number}"
        if code.startswith(">>>"):
            test = doctest.DocTestParser().get_doctest(code, namespace, name, str(README), 0)
            runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
            runner.run(test, clear_globs=False)
            assert runner.failures == 0, name
            namespace.update(test.globs)  # a DocTest runs in a copy of the namespace
        else:
            exec(compile(code, name, "exec"), namespace)
    assert (tmp_path / "model.joblib").exists() and (tmp_path / "model.skops").exists()
    assert (tmp_path / "embeddings").is_dir()


@pytest.mark.slow
def test_the_readme_shell_commands_run_offline(minilm_dir, tmp_path):
    commands = [block for block in readme_blocks("bash") if "skbert probe" in block]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    for script in commands:
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path,
                                env=env, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "trec.npy").exists() and (tmp_path / "trec_probe.csv").exists()
