"""edit_file, search_files, run_python and check_artifact: confined to the workspace (`..`,
absolute paths and symlinks leading out refused), the Python runner sandboxed with a
scrubbed environment, and artifacts that must parse."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agents.models.types import ToolCall
from agents.more_tools import EDIT_FILE, SEARCH_FILES, artifact_tool, check_text, python_tool
from agents.tools import ToolRegistry
from agents.workspace_tools import ShellPolicy, ToolContext
from core.secret_names import SecretNames
from tests.sandboxing import real_sandbox

GOOD_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10"><rect width="5" height="5"/></svg>'
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root.resolve()


def _registry() -> ToolRegistry[ToolContext]:
    policy = ShellPolicy(sandbox=real_sandbox(), timeout_seconds=30, secret_names=SecretNames())
    return ToolRegistry([EDIT_FILE, SEARCH_FILES, python_tool(policy), artifact_tool(policy)])


async def _call(workspace: Path, name: str, **args: object) -> tuple[str, bool]:
    result = await _registry().dispatch(
        ToolCall(id="t", name=name, input=dict(args)), ToolContext(workspace=workspace)
    )
    return result.content, result.is_error


async def test_edit_replaces_one_exact_occurrence(workspace: Path) -> None:
    (workspace / "app.py").write_text("x = 1\ny = 2\n")
    out, err = await _call(workspace, "edit_file", path="app.py", old="y = 2", new="y = 3")
    assert not err and "replaced 1" in out
    assert (workspace / "app.py").read_text() == "x = 1\ny = 3\n"


async def test_edit_refuses_missing_and_ambiguous_text(workspace: Path) -> None:
    (workspace / "a.txt").write_text("same\nsame\n")
    out, err = await _call(workspace, "edit_file", path="a.txt", old="other", new="x")
    assert err and "not found" in out
    out, err = await _call(workspace, "edit_file", path="a.txt", old="same", new="x")
    assert err and "2 times" in out
    out, err = await _call(
        workspace, "edit_file", path="a.txt", old="same", new="x", replace_all=True
    )
    assert not err and (workspace / "a.txt").read_text() == "x\nx\n"
    out, err = await _call(workspace, "edit_file", path="new.txt", old="a", new="b")
    assert err and "write_file" in out


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/hostname", "link/outside.txt"])
async def test_edit_and_search_never_leave_the_workspace(workspace: Path, path: str) -> None:
    outside = workspace.parent / "outside.txt"
    outside.write_text("secret value\n")
    (workspace / "link").symlink_to(workspace.parent)
    out, err = await _call(workspace, "edit_file", path=path, old="secret", new="x")
    assert err and "outside the workspace" in out
    assert outside.read_text() == "secret value\n"
    out, err = await _call(workspace, "search_files", pattern="secret", path=path)
    assert err and "outside the workspace" in out


async def test_search_finds_lines_and_skips_symlinks_leading_out(workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / "src" / "a.py").write_text("def handler():\n    return 42\n")
    (workspace / "notes.md").write_text("the handler is in src\n")
    (workspace.parent / "secret.py").write_text("def handler_secret(): ...\n")
    (workspace / "src" / "leak.py").symlink_to(workspace.parent / "secret.py")
    out, err = await _call(workspace, "search_files", pattern=r"def \w+", glob="*.py")
    assert not err and out == "src/a.py:1: def handler():"
    out, _ = await _call(workspace, "search_files", pattern="handler")
    assert "notes.md:1:" in out and "secret" not in out
    out, err = await _call(workspace, "search_files", pattern="(")
    assert err and "not a valid regular expression" in out


async def test_python_runs_sandboxed_without_secrets(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-in-parent")
    monkeypatch.setenv("DISCORD_TOKEN", "discord-secret-in-parent")
    code = (
        "import os, pathlib\n"
        "print(sorted(k for k in os.environ if 'KEY' in k or 'TOKEN' in k))\n"
        "print(pathlib.Path.cwd().name)\n"
    )
    out, err = await _call(workspace, "run_python", code=code)
    assert not err and out.startswith("exit code 0")
    assert "secret-in-parent" not in out and "ANTHROPIC_API_KEY" not in out
    assert "[]" in out and "ws" in out
    assert not list((workspace / ".raven").glob("*.py"))  # the snippet is removed


async def test_python_failure_and_timeout_are_reported(workspace: Path) -> None:
    out, _ = await _call(workspace, "run_python", code="raise SystemExit(3)\n")
    assert "3" in out.splitlines()[0]
    out, _ = await _call(
        workspace, "run_python", code="import time\ntime.sleep(30)\n", timeout_seconds=0.5
    )
    assert "timed out" in out.lower() or "time" in out.splitlines()[0].lower()


def test_artifact_checks() -> None:
    assert check_text("chart.svg", GOOD_SVG) == []
    assert check_text("chart.svg", "<svg><rect></svg>")[0].startswith("not well-formed XML")
    no_box = check_text("c.svg", '<svg xmlns="http://www.w3.org/2000/svg"/>')
    assert no_box == ["the <svg> element has no viewBox (it will not scale)"]
    assert check_text("p.html", "<html><body><div><p>hi</body></html>") == ["<div> is never closed"]
    assert check_text("p.html", "<!doctype html><html><body><br><p>ok</p></body></html>") == []
    assert check_text("d.json", "{bad")[0].startswith("invalid JSON")
    assert "cannot check" in check_text("notes.txt", "x")[0]


async def test_check_artifact_tool(workspace: Path) -> None:
    (workspace / "chart.svg").write_text(GOOD_SVG)
    out, err = await _call(workspace, "check_artifact", path="chart.svg", screenshot=False)
    assert not err and "parses cleanly" in out
    (workspace / "bad.svg").write_text("<svg>")
    out, _ = await _call(workspace, "check_artifact", path="bad.svg", screenshot=False)
    assert "has problems" in out
    out, err = await _call(workspace, "check_artifact", path="../x.svg")
    assert err and "outside the workspace" in out


@pytest.mark.skipif(
    not any(shutil.which(b) for b in ("chromium", "chromium-browser")),
    reason="Chromium is not installed (apt-get install chromium to run this test)",
)
async def test_check_artifact_screenshot_with_chromium(workspace: Path) -> None:
    (workspace / "chart.svg").write_text(GOOD_SVG)
    out, _ = await _call(workspace, "check_artifact", path="chart.svg")
    assert "Screenshot: chart.svg.png" in out
    assert (workspace / "chart.svg.png").read_bytes()[:4] == b"\x89PNG"
