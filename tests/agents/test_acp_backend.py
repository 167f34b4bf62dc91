"""The `acp` backend against a loopback agent built on the SDK's own agent side
(tests/fakes/acp_agent.py), run in the real bubblewrap sandbox: streaming and tool calls,
sessions kept across turns and processes, permission requests through the gate, cancel,
crashes, malformed frames, empty turns and an agent that never answers."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agents.backends import AcpProcesses, AgentTask
from agents.backends.acp.backend import AcpBackend, session_of
from agents.registry import AgentEntry
from core.secret_names import SecretNames
from host.graph.executor.shelf import RecordShelf
from host.graph.records import RunFiles
from host.graph.render import Artifact
from tests.helpers import eventually
from tests.sandboxing import real_sandbox

FAKE = Path(__file__).resolve().parent.parent / "fakes" / "acp_agent.py"
# The sandbox shows the agent its workspace, not this repository: the script is copied there.
AGENT_DIR = "agent"


def _entry(**changes: Any) -> AgentEntry:
    base = AgentEntry(
        name="fake",
        description="a loopback ACP agent",
        backend="acp",
        stateful=True,
        file_capable=True,
        progress=True,
        enabled=True,
        role="raven",
        command=(sys.executable, f"{AGENT_DIR}/acp_agent.py"),
        timeout_seconds=30,
        init_timeout_seconds=10,
    )
    return dataclasses.replace(base, **changes)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str


@dataclass
class Gate:
    """A permission gate that answers as told and records what it was asked."""

    answer: bool = True
    asked: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    details: list[str] = dataclasses.field(default_factory=list)

    async def __call__(self, tool: str, subject: str, detail: str = "") -> Decision:
        self.asked.append((tool, subject))
        self.details.append(detail)
        return Decision(self.answer, "as the test says")


@pytest.fixture
async def pool() -> AsyncIterator[AcpProcesses]:
    processes = AcpProcesses(real_sandbox(), secret_names=SecretNames())
    yield processes
    await processes.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    where = (tmp_path / "workspace").resolve()
    (where / AGENT_DIR).mkdir(parents=True)
    shutil.copy(FAKE, where / AGENT_DIR / "acp_agent.py")
    return where


def _task(workspace: Path, prompt: str, **kw: Any) -> AgentTask:
    return AgentTask(node_id="n1", agent=_entry(), prompt=prompt, workspace=workspace, **kw)


async def test_a_turn_streams_its_answer_plan_and_tool_calls(
    pool: AcpProcesses, workspace: Path
) -> None:
    seen: list[str] = []

    async def progress(line: str) -> None:
        seen.append(line)

    outcome = await AcpBackend(_entry(), pool).run(_task(workspace, "hello", on_progress=progress))
    assert outcome.error is None, outcome.error
    assert outcome.output == "echo: hello"
    kinds = [item["type"] for item in outcome.transcript]
    assert kinds[0] == "acp" and "plan" in kinds and "tool_call" in kinds
    assert outcome.transcript[0]["agent"] == "fake-acp"
    assert any(line.startswith("plan 1/2") for line in seen), seen
    assert session_of(outcome.history) is not None


async def test_a_stateful_instance_keeps_its_session_across_turns_and_processes(
    pool: AcpProcesses, workspace: Path
) -> None:
    backend = AcpBackend(_entry(), pool)
    first = await backend.run(_task(workspace, "remember the blue door"))
    assert first.output == "noted"
    second = await backend.run(_task(workspace, "recall", history=first.history))
    assert second.output == "you said: the blue door"
    assert session_of(second.history) == session_of(first.history)
    # A new process (after a restart or an idle reap) loads the session.
    await pool.close()
    again = AcpProcesses(real_sandbox(), secret_names=SecretNames())
    try:
        third = await AcpBackend(_entry(), again).run(
            _task(workspace, "recall", history=second.history)
        )
    finally:
        await again.close()
    assert third.output == "you said: the blue door", third.error
    # A stateless agent starts a fresh session each time.
    fresh = await AcpBackend(
        _entry(stateful=False), AcpProcesses(real_sandbox(), secret_names=SecretNames())
    ).run(_task(workspace, "recall", history=second.history))
    assert fresh.output != "you said: the blue door"


async def test_a_permission_request_goes_through_the_gate(
    pool: AcpProcesses, workspace: Path
) -> None:
    backend = AcpBackend(_entry(), pool)
    gate = Gate(answer=True)
    outcome = await backend.run(_task(workspace, "write note.txt hello there", permit=gate))
    assert outcome.output == "wrote note.txt", outcome.error
    assert (workspace / "note.txt").read_text() == "hello there"
    # Inside the workspace, the path is given as the bot's own file tools give theirs.
    assert gate.asked == [("edit_file", "note.txt")]
    assert "+hello there" in gate.details[0] and "Write note.txt" in gate.details[0]
    (call,) = [t for t in outcome.transcript if t["type"] == "tool_call"]
    assert call["permission"].startswith("allowed") and call["diffs"][0]["new"] == "hello there"

    no = Gate(answer=False)
    outcome = await backend.run(_task(workspace, "write other.txt nope", permit=no))
    assert outcome.output == "not allowed to write other.txt"
    assert not (workspace / "other.txt").exists()
    outcome = await backend.run(_task(workspace, "run rm -rf build", permit=no))
    assert no.asked[-1] == ("run_shell", "rm -rf build")
    assert "```\nrm -rf build\n```" in no.details[-1]
    assert outcome.output == "not allowed to run rm -rf build"
    # Nobody to ask (an unattended run): rejected, and the agent still got its answer.
    outcome = await backend.run(_task(workspace, "write third.txt x"))
    assert outcome.output == "not allowed to write third.txt"


async def test_an_agent_reads_the_run_records_its_prompt_names_through_the_bot(
    pool: AcpProcesses, workspace: Path, tmp_path: Path
) -> None:
    """Paper Eq. 32: the prompt names upstream records by path; they live under the bot's
    runs/, which the sandbox does not show. The agent asks the bot (`fs/read_text_file`) and
    gets exactly those records, by the names given, and nothing else from there."""
    files = RunFiles(tmp_path / "home" / "runs")
    artifacts = {
        "a": Artifact("a", "output of a", files.output_path("r2", "a")),
        "b": Artifact("b", "output of b", files.output_path("r2", "b")),
    }
    memory = {"a": "line one\nline two\nline three\n"}
    shelf = RecordShelf(frozenset({"a"}), artifacts, files=files, in_run=memory.get)
    backend = AcpBackend(_entry(), pool)

    async def read(args: str) -> str:
        outcome = await backend.run(_task(workspace, f"read {args}", records=shelf))
        assert outcome.error is None, outcome.error
        return outcome.output

    memory_path = files.memory_path("r2", "a")
    # (The node's output is stripped of its trailing newline.)
    assert await read(str(memory_path)) == "read: line one\nline two\nline three"
    assert await read(f"{memory_path} 2 1") == "read: line two"  # ACP's line and limit
    assert await read(str(files.output_path("r2", "a"))) == "read: output of a"
    # `b` is not upstream of this node, and nothing else under runs/ is served either.
    for other in (files.output_path("r2", "b"), files.journal_path("r2")):
        assert (await read(str(other))).startswith("read refused: "), other
        assert "outside the workspace" in await read(str(other))


async def test_workspace_reads_go_through_the_gate_and_never_follow_a_link(
    pool: AcpProcesses, workspace: Path, tmp_path: Path
) -> None:
    """The agent's process runs beside the bot's read and may plant links: none is followed,
    whether it is the file or a folder on the way."""
    (workspace / "notes.txt").write_text("plan: ship it")
    secret = tmp_path / "secret.txt"
    secret.write_text("TOKEN=hunter2")
    (workspace / "leak.txt").symlink_to(secret)
    (workspace / "outside").symlink_to(tmp_path)
    (workspace / "pipe").mkdir()
    os.mkfifo(workspace / "pipe" / "fifo")
    backend = AcpBackend(_entry(), pool)
    gate = Gate(answer=True)

    async def read(path: str, permit: Gate | None = gate) -> str:
        outcome = await backend.run(_task(workspace, f"read {path}", permit=permit))
        assert outcome.error is None, outcome.error
        return outcome.output

    assert await read("notes.txt") == "read: plan: ship it"
    assert await read(str(workspace / "notes.txt")) == "read: plan: ship it"
    assert gate.asked[:2] == [("read_file", "notes.txt")] * 2
    for planted in ("leak.txt", "outside/secret.txt"):
        answer = await read(planted)
        assert answer.startswith("read refused: ") and "link" in answer, answer
        assert "hunter2" not in answer
    assert "not a regular file" in await read("pipe/fifo")  # never waited on
    assert "outside the workspace" in await read("../secret.txt")
    assert "outside the workspace" in await read(str(secret))
    refused = await read("notes.txt", permit=Gate(answer=False))
    assert refused == "read refused: Refused by the permission gate: as the test says"


async def test_stop_cancels_the_turn_and_the_agent_settles(
    pool: AcpProcesses, workspace: Path
) -> None:
    backend = AcpBackend(_entry(), pool)
    seen: list[str] = []

    async def progress(line: str) -> None:
        seen.append(line)

    turn = asyncio.create_task(backend.run(_task(workspace, "slow", on_progress=progress)))
    await eventually(lambda: any("working" in line for line in seen))
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    # It ended its turn when asked; then its process group ended too (nothing it started
    # outlives a stop), and the next turn starts a fresh one.
    assert pool.running() == 0
    outcome = await backend.run(_task(workspace, "hello again"))
    assert outcome.output == "echo: hello again"
    assert pool.running() == 1


async def test_an_agent_that_ignores_cancel_is_ended(pool: AcpProcesses, workspace: Path) -> None:
    backend = AcpBackend(_entry(timeout_seconds=1), pool, settle_seconds=0.5)
    outcome = await backend.run(_task(workspace, "hang"))
    assert outcome.error is not None and "did not finish within 1 s" in outcome.error
    assert pool.running() == 0


@pytest.mark.parametrize(
    ("prompt", "said"),
    [
        ("crash", ["its process exited with 3", "crashing on purpose"]),
        ("malformed", ["malformed frame", "this is not json"]),
        ("empty", ["ended its turn with no answer", "auth failed: token expired"]),
    ],
)
async def test_a_broken_turn_fails_the_node_with_what_the_agent_said_fenced(
    pool: AcpProcesses, workspace: Path, prompt: str, said: list[str]
) -> None:
    outcome = await AcpBackend(_entry(), pool).run(_task(workspace, prompt))
    assert outcome.error is not None
    for words in said:
        assert words in outcome.error, outcome.error
    assert "<untrusted-data" in outcome.error  # the agent's own words, fenced


async def test_an_agent_that_never_answers_initialize_fails_clearly(workspace: Path) -> None:
    pool = AcpProcesses(
        real_sandbox(),
        environ={"FAKE_ACP_SILENT_INIT": "1", "PATH": "/usr/bin:/bin"},
        secret_names=SecretNames(),
    )
    entry = _entry(init_timeout_seconds=1, env_allow=("FAKE_ACP_SILENT_INIT",))
    try:
        outcome = await AcpBackend(entry, pool).run(_task(workspace, "hello"))
    finally:
        await pool.close()
    assert outcome.error is not None
    assert "did not answer `initialize` within 1 s" in outcome.error
    assert pool.running() == 0


async def test_a_missing_program_says_how_to_fix_it(pool: AcpProcesses, workspace: Path) -> None:
    entry = _entry(command=("no-such-acp-agent",))
    outcome = await AcpBackend(entry, pool).run(_task(workspace, "hello"))
    assert (
        outcome.error is not None and "`no-such-acp-agent` was not found on PATH" in outcome.error
    )


async def test_the_configured_model_is_chosen_through_the_sessions_model_option(
    pool: AcpProcesses, workspace: Path
) -> None:
    outcome = await AcpBackend(_entry(model="large"), pool).run(_task(workspace, "model"))
    assert outcome.output == "model: large", outcome.error
    wrong = await AcpBackend(_entry(model="huge"), pool).run(_task(workspace, "model"))
    assert wrong.error is not None and "huge" in wrong.error


async def test_an_instance_keeps_its_session_id_and_only_its_last_exchanges(
    pool: AcpProcesses, workspace: Path
) -> None:
    backend = AcpBackend(_entry(), pool)
    outcome = await backend.run(_task(workspace, "remember one"))
    session = session_of(outcome.history)
    for n in range(30):
        outcome = await backend.run(_task(workspace, f"turn {n}", history=outcome.history))
    assert session_of(outcome.history) == session
    assert len(outcome.history) <= 41  # the marker and the last 20 exchanges
    outcome = await backend.run(_task(workspace, "recall", history=outcome.history))
    assert outcome.output == "you said: one"  # the agent's session kept everything


async def test_a_stop_keeps_the_process_another_turn_still_uses(
    pool: AcpProcesses, workspace: Path
) -> None:
    backend = AcpBackend(_entry(stateful=False), pool)
    seen: list[str] = []

    async def progress(line: str) -> None:
        seen.append(line)

    first = asyncio.create_task(backend.run(_task(workspace, "slow", on_progress=progress)))
    second = asyncio.create_task(backend.run(_task(workspace, "slow", on_progress=progress)))
    await eventually(lambda: sum("working" in line for line in seen) >= 2)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert pool.running() == 1 and not second.done()
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    assert pool.running() == 0
