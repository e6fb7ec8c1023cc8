"""The user guides whose code runs as written: every Python block, in order, in one namespace.

As README.md's blocks (tests/test_readme.py): a block may run on a subset, an rst comment
right above it, ``.. test: OLD -> NEW``, replacing the text OLD (which must be in the block)
by NEW for the test only, so that the guide's source says in place what the test changes.
"""

import re
import textwrap
from pathlib import Path

import pytest
from conftest import substituted

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(?P<tests>(?:^\.\. test: .+? -> .+?\n)*)^\.\. code-block:: python\n\n"
                   r"(?P<code>(?:(?: {4}.*)?\n)+)", re.M)
SUBSTITUTION = re.compile(r"\.\. test: (.+?) -> (.+?)\n")

# Guides that define every name their code uses (a setup block first).
RUNNABLE = ["hybrid_search.rst", "few_labels.rst"]


def guide_blocks(name):
    """The Python blocks of ``docs/user_guide/name``, dedented, test substitutions made."""
    blocks = []
    for match in BLOCK.finditer((ROOT / "docs" / "user_guide" / name).read_text("utf-8")):
        blocks.append(substituted(textwrap.dedent(match["code"]),
                                  SUBSTITUTION.findall(match["tests"]), name))
    return blocks


def test_the_hybrid_guide_has_the_blocks_this_test_runs():
    blocks = guide_blocks("hybrid_search.rst")
    assert len(blocks) >= 4 and "load_beir" in blocks[0] and "[:60]" in blocks[0]


@pytest.mark.slow
@pytest.mark.parametrize("name", RUNNABLE)
def test_every_python_block_of_the_guide_runs(name, minilm_dir, monkeypatch):
    monkeypatch.chdir(ROOT)  # the guides read the data bundled in examples/data
    namespace = {"__name__": "__guide__"}
    for number, code in enumerate(guide_blocks(name), start=1):
        exec(compile(code, f"docs/user_guide/{name} python block {number}", "exec"), namespace)
