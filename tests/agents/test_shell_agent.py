"""The `shell` default agent: its task is one command, run in the sandboxed workspace after the
requester approves it (or when agents.toml allows it), end to end through the console."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from pathlib import Path

import pytest

from agents.backends.base import AgentTask
from agents.backends.cli import CommandLineBackend
from agents.registry import (
    AgentEntry,
    RegistryError,
    command_allowed,
    default_registry,
    load_registry,
)
from core.secret_names import SecretNames
from host.prompts.clarify import command_question
from tests.bot.cli.test_cli_end_to_end import RAVEN, _env, _run
from tests.helpers import write_agents
from tests.sandboxing import real_sandbox

ALLOW = ("ls", "ls *", "echo *", "python3 -m pytest*")


def _shell_entry(**changes: object) -> AgentEntry:
    return dataclasses.replace(default_registry().require("shell"), **changes)  # type: ignore[arg-type]


def _task(entry: AgentEntry, workspace: Path, command: str, **kw: object) -> AgentTask:
    return AgentTask(node_id="s1", agent=entry, prompt=command, workspace=workspace, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("command", "allowed"),
    [
        ("ls", True),
        ("  ls  ", True),
        ("ls -la", True),
        ("echo hello world", True),
        ("python3 -m pytest -q tests", True),
        ("lsblk", False),  # `ls` is the whole command, not a prefix
        ("cat secrets.txt", False),
        ("echo hi; rm -rf data", False),  # chaining always asks
        ("echo hi && rm -rf data", False),
        ("echo hi | sh", False),
        ("echo $(id)", False),
        ("echo `id`", False),
        ("echo hi > file", False),
        ("echo hi\nrm x", False),
        ("", False),
    ],
)
def test_allow_patterns(command: str, allowed: bool) -> None:
    assert command_allowed(command, ALLOW) is allowed


def test_allow_list_loads_from_agents_toml(tmp_path: Path) -> None:
    path = tmp_path / "agents.toml"
    path.write_text('[agents.shell]\nallow = ["ls", "echo *"]\n')
    shell = load_registry(path, secret_names=SecretNames()).require("shell")
    assert shell.allow == ("ls", "echo *") and shell.runs_commands
    path.write_text('[agents.code]\nallow = ["ls"]\n')
    with pytest.raises(RegistryError, match="allow"):
        load_registry(path, secret_names=SecretNames())


def test_the_approval_question_shows_the_exact_command_fenced() -> None:
    question = command_question("s1", "echo ``` && ls")
    assert "\n````\necho ``` && ls\n````\n" in question


async def test_without_an_approver_nothing_runs(tmp_path: Path) -> None:
    entry = _shell_entry()
    outcome = await CommandLineBackend(
        entry, sandbox=real_sandbox(), secret_names=SecretNames()
    ).run(_task(entry, tmp_path, "touch ran.txt"))
    assert outcome.error is not None and "not approved" in outcome.error
    assert not (tmp_path / "ran.txt").exists()  # the run has returned: it never started


async def test_a_denied_command_does_not_run_and_an_approved_one_does(tmp_path: Path) -> None:
    asked: list[str] = []

    async def deny(command: str) -> bool:
        asked.append(command)
        return False

    async def approve(command: str) -> bool:
        asked.append(command)
        return True

    entry = _shell_entry()
    backend = CommandLineBackend(entry, sandbox=real_sandbox(), secret_names=SecretNames())
    outcome = await backend.run(_task(entry, tmp_path, "touch ran.txt", approve=deny))
    assert outcome.error is not None and "not approved" in outcome.error
    assert not (tmp_path / "ran.txt").exists()
    outcome = await backend.run(
        _task(entry, tmp_path, "touch ran.txt && echo done", approve=approve)
    )
    assert outcome.error is None and outcome.output == "done"
    assert (tmp_path / "ran.txt").exists()
    assert asked == ["touch ran.txt", "touch ran.txt && echo done"]


async def test_allow_listed_commands_run_without_asking(tmp_path: Path) -> None:
    async def never(command: str) -> bool:
        raise AssertionError(f"asked about an allow-listed command: {command}")

    entry = _shell_entry(allow=ALLOW)
    outcome = await CommandLineBackend(
        entry, sandbox=real_sandbox(), secret_names=SecretNames()
    ).run(_task(entry, tmp_path, "echo hello", approve=never))
    assert outcome.error is None and outcome.output == "hello"


async def test_builtin_deny_rules_apply_even_when_approved(tmp_path: Path) -> None:
    async def approve(command: str) -> bool:
        return True

    entry = _shell_entry()
    outcome = await CommandLineBackend(
        entry, sandbox=real_sandbox(), secret_names=SecretNames()
    ).run(_task(entry, tmp_path, "rm -rf /", approve=approve))
    assert outcome.error is not None and "never run here" in outcome.error


# -- end to end through the console ----------------------------------------------------------


async def _chat(env: dict[str, str], plan: bytes, answer: bytes | None) -> str:
    """Send a plan; answer the approval prompt once it is shown (if `answer`); return stdout."""
    proc = await asyncio.create_subprocess_exec(
        RAVEN,
        "chat",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(plan + b"\n")  # a blank line submits the plan in the console
    await proc.stdin.drain()
    seen = b""
    if answer is not None:
        while b"Reply with a number" not in seen:
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            assert line, seen.decode()
            seen += line
        proc.stdin.write(answer)
        await proc.stdin.drain()
    proc.stdin.close()
    rest = await asyncio.wait_for(proc.stdout.read(), 120)
    assert await proc.wait() == 0
    return (seen + rest).decode()


def _node(db: Path, node_id: str) -> tuple[str, str | None]:
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT state, error FROM graph_nodes WHERE node_id = ?", (node_id,)
        ).fetchone()
    return str(row[0]), row[1]


@pytest.mark.slow
async def test_console_shell_node_runs_after_approval(isolated_env: Path) -> None:
    out = await _chat(
        _env(isolated_env), b's1: shell: echo "hello from the sandbox"\n', answer=b"1\n"
    )
    assert "[approval] The `s1` node wants to run this command" in out
    # Piped, a code block is indented four spaces: the exact command, no fence markers.
    assert '\n    echo "hello from the sandbox"\n' in out
    after = out.split("Reply with a number or an option", 1)[1]
    assert "completed" in after and "hello from the sandbox" in after
    assert _node(isolated_env / "raven.db", "s1")[0] == "completed"


@pytest.mark.slow
async def test_console_shell_node_denied_does_not_run(isolated_env: Path) -> None:
    out = await _chat(_env(isolated_env), b"s1: shell: touch ran.txt\n", answer=b"2\n")
    assert "Deny" in out
    state, error = _node(isolated_env / "raven.db", "s1")
    assert state == "failed" and error is not None and "not approved" in error
    assert not list((isolated_env / "workspaces").glob("*/ran.txt"))


@pytest.mark.slow
async def test_console_allow_listed_shell_node_runs_without_a_prompt(isolated_env: Path) -> None:
    write_agents(isolated_env, '[agents.shell]\nallow = ["echo *"]\n')
    out = await _chat(_env(isolated_env), b"s1: shell: echo allowed here\n", answer=None)
    assert "[approval]" not in out
    assert "allowed here" in out
    assert _node(isolated_env / "raven.db", "s1")[0] == "completed"


@pytest.mark.slow
async def test_an_approval_answered_after_a_restart_runs_nothing_and_says_so(
    isolated_env: Path,
) -> None:
    env = _env(isolated_env)
    proc = await asyncio.create_subprocess_exec(
        RAVEN,
        "chat",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"s1: shell: touch ran.txt\n\n")
    await proc.stdin.drain()
    seen = b""
    while b"Reply with a number" not in seen:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line, seen.decode()
        seen += line
    proc.kill()
    await proc.wait()
    # The next session shows the stored prompt again; approving it cannot run the interrupted
    # node, and the answer is told so instead of silently doing nothing.
    code, out, _ = await _run("chat", stdin=b"1\n", env=env)
    assert code == 0
    assert "Nothing ran: node `s1` is no longer waiting" in out
    assert not list((isolated_env / "workspaces").glob("*/ran.txt"))
