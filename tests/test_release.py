"""What a release carries: a license that matches the metadata, one version, a changelog entry."""

import importlib.metadata
import re
from pathlib import Path

import skbert

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = (ROOT / "pyproject.toml").read_text(encoding="utf-8")  # tomllib needs Python 3.11


def project(key):
    """A string or list of strings of pyproject.toml's [project] table."""
    value = re.search(rf"^{key} = (.+)$", PYPROJECT, re.M).group(1)
    return re.findall(r'"([^"]*)"', value) if value.startswith("[") else value.strip('"')


def test_license_file_matches_the_declared_license():
    assert project("license") == "BSD-3-Clause"
    assert "LICENSE" in project("license-files")
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("BSD 3-Clause License")
    assert "Neither the name of the copyright holder nor the names of its" in text


def test_version_comes_from_the_package_metadata():
    assert skbert.__version__ == importlib.metadata.version("skbert") == project("version")


def test_changelog_has_an_entry_for_this_version():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## [{project('version')}] - " in changelog
