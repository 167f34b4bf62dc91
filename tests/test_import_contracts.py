"""The import contracts cover a new feature folder or bot module without an edit to them.

Each test copies the packages and the contracts into a scratch directory, adds one new
module that breaks a rule, and runs `lint-imports` there: the contract must name it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("bot", "host", "agents", "memory", "oncall", "skills", "mcp_client", "core")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A scratch copy of the packages and pyproject.toml the contracts are read from."""
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    # The contract types of our own the configuration names.
    (tmp_path / "tests").mkdir()
    for name in ("__init__.py", "architecture.py"):
        shutil.copy(ROOT / "tests" / name, tmp_path / "tests" / name)
    return tmp_path


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    linter = Path(sys.executable).parent / "lint-imports"
    return subprocess.run(
        [str(linter), "--no-cache"],
        check=False,
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_copied_tree_keeps_every_contract(tree: Path) -> None:
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout


def test_a_new_feature_folder_importing_another_feature_breaks_independence(tree: Path) -> None:
    folder = tree / "host" / "features" / "newcap"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "feature.py").write_text(
        "from host.features.feature import BaseFeature\nimport host.features.memory.feature\n"
    )
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "host.features.newcap is not allowed to import host.features.memory" in result.stdout
    # Building on the shared protocol is allowed: only the other feature is named.
    assert "import host.features.feature" not in result.stdout


def test_a_new_bot_module_importing_an_adapter_or_its_library_breaks_the_contracts(
    tree: Path,
) -> None:
    (tree / "bot" / "newthing.py").write_text("import bot.slack.adapter\nimport discord\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "bot.newthing is not allowed to import bot.slack" in result.stdout
    assert "bot.newthing is not allowed to import discord" in result.stdout


def test_a_new_adapter_folder_importing_another_adapter_breaks_independence(tree: Path) -> None:
    folder = tree / "bot" / "matrix"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "adapter.py").write_text("import bot.console.screen\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "bot.matrix is not allowed to import bot.console" in result.stdout
