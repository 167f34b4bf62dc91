"""Upstream records a node's prompt names by path (paper Eq. 32) are readable by its agent:
served to the in-process file tools by exact name, and shown read-only to a sandboxed CLI."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from agents.backends import AgentTask, CommandLineBackend
from agents.workspace_tools import ReadFileInput, ToolContext, WorkspaceError, read_file
from core.secret_names import SecretNames
from host.graph.executor.shelf import RecordShelf
from host.graph.records import RunFiles
from host.graph.render import Artifact
from tests.fakes.graph_kit import SCRIBE
from tests.sandboxing import real_sandbox


@pytest.fixture
def files(tmp_path: Path) -> RunFiles:
    return RunFiles(tmp_path / "home" / "runs")


def _artifact(files: RunFiles, run_id: str, node_id: str, output: str) -> Artifact:
    return Artifact(node_id, output, files.output_path(run_id, node_id))


def _shelf(files: RunFiles, upstream: set[str]) -> tuple[RecordShelf, dict[str, Artifact]]:
    artifacts = {
        "a": _artifact(files, "r2", "a", "output of a"),
        "b": _artifact(files, "r2", "b", "output of b"),
        "old": _artifact(files, "r1", "old", "output of old"),
    }
    in_run = {"a": "memory of a", "b": "memory of b"}
    shelf = RecordShelf(frozenset(upstream), artifacts, files=files, in_run=in_run.get)
    return shelf, artifacts


async def test_upstream_outputs_and_memory_records_are_served_by_the_names_given(
    files: RunFiles,
) -> None:
    # An earlier run's memory record comes from its journal (its file is not there).
    journal = files.journal_path("r1")
    journal.parent.mkdir(parents=True)
    journal.write_text(
        json.dumps({"kind": "memory", "node": "old", "attempt": 1, "text": "memory of old"}) + "\n"
    )
    shelf, _ = _shelf(files, {"a", "old"})
    assert await shelf.read(str(files.output_path("r2", "a"))) == "output of a"
    assert await shelf.read(str(files.memory_path("r2", "a"))) == "memory of a"
    assert await shelf.read(str(files.memory_path("r1", "old"))) == "memory of old"
    # The same name spelled with `..` is the same record; the lookup never opens it.
    detour = files.memory_dir("r2") / ".." / "memory" / "a.md"
    assert await shelf.read(str(detour)) == "memory of a"


async def test_nothing_else_is_served(files: RunFiles) -> None:
    shelf, _ = _shelf(files, {"a"})
    # A completed node that is not upstream of this one, another run's folder with the
    # right name, the bot's database, a relative name: none is on the shelf.
    assert await shelf.read(str(files.memory_path("r2", "b"))) is None
    assert await shelf.read(str(files.memory_path("r9", "a"))) is None
    assert await shelf.read(str(files.root.parent / "raven.db")) is None
    assert await shelf.read("a.md") is None
    assert set(shelf.folders()) == {files.outputs_dir("r2"), files.memory_dir("r2")}


async def test_read_file_serves_a_record_and_still_refuses_other_outside_paths(
    files: RunFiles, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.md").write_text("workspace notes")
    shelf, _ = _shelf(files, {"a"})
    ctx = ToolContext(workspace=workspace, records=shelf)
    named = str(files.memory_path("r2", "a"))
    assert await read_file(ctx, ReadFileInput(path=named)) == "memory of a"
    assert await read_file(ctx, ReadFileInput(path=named, offset=10)) == "a"
    assert await read_file(ctx, ReadFileInput(path="notes.md")) == "workspace notes"
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        await read_file(ctx, ReadFileInput(path=str(files.memory_path("r2", "b"))))
    # Without a shelf a record is outside the workspace like any other path.
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        await read_file(ToolContext(workspace=workspace), ReadFileInput(path=named))


async def test_a_sandboxed_cli_agent_sees_the_record_folders_read_only(
    files: RunFiles, tmp_path: Path
) -> None:
    memory = files.memory_path("r2", "a")
    memory.parent.mkdir(parents=True)
    memory.write_text("memory of a")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    home = files.root.parent
    script = (
        "import sys\n"
        "path = sys.stdin.read().strip()\n"
        "print(open(path).read())\n"
        "try:\n"
        "    open(path, 'a').write('tampered')\n"
        "except OSError as exc:\n"
        "    print('write refused:', exc.strerror)\n"
    )
    entry = dataclasses.replace(SCRIBE, command=(sys.executable, "-c", script), prompt_via="stdin")
    # The bot's home is hidden from sandboxed commands, as in the assembled bot.
    backend = CommandLineBackend(
        entry, sandbox=real_sandbox(hidden=(home,)), secret_names=SecretNames()
    )
    shelf, _ = _shelf(files, {"a"})
    task = AgentTask("n1", entry, str(memory), workspace, readable=shelf.folders())
    outcome = await backend.run(task)
    assert outcome.output.splitlines() == [
        "memory of a",
        "write refused: Read-only file system",
    ]
    assert memory.read_text() == "memory of a"
    hidden = await backend.run(AgentTask("n1", entry, str(memory), workspace))
    assert hidden.error is not None and "memory of a" not in hidden.output
