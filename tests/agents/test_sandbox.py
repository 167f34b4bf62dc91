"""The agent sandbox with real bubblewrap: secrets stay out of reach, writes stay in the
workspace, commands refuse without a sandbox unless RAVEN_UNSANDBOXED=1, and agent processes
die with the bot, even on kill -9."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import signal
import sqlite3
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from agents.backends.base import AgentTask
from agents.backends.cli import CommandLineBackend
from agents.models.types import ToolCall
from agents.process import run_process
from agents.registry import AgentEntry
from agents.sandbox import (
    Bubblewrap,
    Refusing,
    Sandbox,
    SandboxUnavailable,
    Unsandboxed,
    select_sandbox,
)
from agents.tools import ToolRegistry
from agents.workspace_tools import ShellPolicy, ToolContext, shell_tool
from bot.app import build_sandbox
from bot.cli.doctor import run_checks
from bot.settings import load_settings
from core.secret_names import SecretNames
from tests.agents.test_backends import pids_running, sleeper_token
from tests.bot.cli.test_cli_end_to_end import RAVEN, _env
from tests.helpers import cancel_while_spawning, eventually
from tests.sandboxing import real_sandbox

FAKE_ANTHROPIC = "sk-ant-FAKE-" + "a1" * 12
FAKE_SLACK = "xoxb-FAKE-" + "b2" * 12
FAKE_DB_SECRET = "DB-SECRET-" + "c3" * 12
SECRETS = (FAKE_ANTHROPIC, FAKE_SLACK, FAKE_DB_SECRET)


def _cli_entry(*command: str) -> AgentEntry:
    return AgentEntry(
        name="spy",
        description="test agent",
        backend="cli",
        stateful=False,
        file_capable=True,
        progress=False,
        enabled=True,
        role="raven",
        command=command,
        timeout_seconds=60,
    )


def _probe_script(*, env_file: Path, db: Path, host_tmp: Path, outside: Path, kind: str) -> str:
    """Tries every way out the issue lists; prints markers for anything that worked."""
    return textwrap.dedent(
        f"""\
        echo "ppid=$PPID"
        for f in /proc/$PPID/environ /proc/1/environ /proc/[0-9]*/environ; do
          tr '\\0' '\\n' < "$f" 2>/dev/null
        done
        cat ../../.env 2>/dev/null && echo RELATIVE_ENV_VISIBLE
        cat {env_file} 2>/dev/null && echo ENV_VISIBLE
        test -e {db} && echo DB_VISIBLE
        cat {db} 2>/dev/null
        echo leak > {host_tmp} 2>/dev/null && echo WROTE_TMP
        echo leak > {outside} 2>/dev/null && echo WROTE_OUTSIDE
        echo ok > inside-{kind}.txt && echo WROTE_INSIDE
        """
    )


# Bot-side code in its own process, so "the parent's environment" is a real one: it builds the
# sandbox and the backends exactly as the assembly root does, from Settings read from .env.
_BOT_SIDE = textwrap.dedent(
    """\
    import asyncio, json, sys
    from pathlib import Path

    from agents.backends.base import AgentTask
    from agents.models.offline import OfflineProvider
    from agents.models.types import ToolCall
    from agents.registry import AgentEntry
    from agents.specialists import default_specialists
    from agents.workspace_tools import ShellPolicy, ToolContext
    from agents.backends import AcpProcesses
    from bot.app import backend_factory, build_sandbox
    from host.evaluation.evolution.runtime import ActiveHarnesses
    from bot.home import workspace_for
    from bot.settings import declared_secret_names, load_settings
    from core.ids import ConversationRef

    async def main() -> None:
        cli_script, shell_script = sys.argv[1], sys.argv[2]
        settings = load_settings()
        assert settings.anthropic_api_key is not None  # the secrets really are loaded
        sandbox = build_sandbox(settings)
        conv = ConversationRef("console", "local", "c1", "t1")
        workspace = workspace_for(settings.home)(conv)
        entry = AgentEntry(
            name="spy", description="probe", backend="cli", stateful=False,
            file_capable=True, progress=False, enabled=True, role="raven",
            command=("sh", "-c", cli_script),
        )
        processes = AcpProcesses(sandbox, secret_names=declared_secret_names())
        backend = backend_factory(
            OfflineProvider(), settings, sandbox, processes, ActiveHarnesses()
        )(entry)
        outcome = await backend.run(
            AgentTask(node_id="n1", agent=entry, prompt="go", workspace=workspace)
        )
        policy = ShellPolicy(sandbox=sandbox, secret_names=declared_secret_names())
        tools = default_specialists(shell=policy)["code"].tools(workspace)
        # From a script file, as an agent would hide it: the permission gate (which refuses
        # these paths when they are spelled out) cannot see inside; the sandbox must hold.
        (workspace / "probe.sh").write_text(shell_script)
        shell = await tools.dispatch(
            ToolCall(id="t", name="run_shell", input={"command": "sh probe.sh"}),
            ToolContext(workspace=workspace),
        )
        print(json.dumps({
            "sandbox": sandbox.kind,
            "workspace": str(workspace),
            "cli": outcome.output + "\\n" + (outcome.error or ""),
            "shell": shell.content,
        }))

    asyncio.run(main())
    """
)


@pytest.mark.slow
async def test_commands_cannot_read_the_bots_secrets_or_write_outside(tmp_path: Path) -> None:
    # The worst layout: the data dir is the working directory that holds .env.
    botdir = tmp_path / "bot"
    botdir.mkdir()
    env_file = botdir / ".env"
    env_file.write_text(f"ANTHROPIC_API_KEY={FAKE_ANTHROPIC}\nSLACK_BOT_TOKEN={FAKE_SLACK}\n")
    db = botdir / "raven.db"
    db.write_text(f"not really sqlite: {FAKE_DB_SECRET}\n")
    paths = {
        kind: {
            "host_tmp": Path("/tmp") / f"raven-outside-{uuid.uuid4().hex}",
            "outside": botdir / f"outside-{kind}.txt",
        }
        for kind in ("cli", "shell")
    }
    scripts = {
        kind: _probe_script(env_file=env_file, db=db, kind=kind, **where)
        for kind, where in paths.items()
    }
    env = _env(
        botdir,
        ANTHROPIC_API_KEY=FAKE_ANTHROPIC,
        SLACK_BOT_TOKEN=FAKE_SLACK,
        SLACK_APP_TOKEN="xapp-FAKE-" + "d4" * 12,
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _BOT_SIDE,
        scripts["cli"],
        scripts["shell"],
        cwd=botdir,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert result["sandbox"] == "bwrap"
    workspace = Path(result["workspace"])
    assert workspace.is_relative_to(botdir)  # so ../../.env really is the bot's .env
    for kind in ("cli", "shell"):
        text = result[kind]
        for secret in SECRETS:
            assert secret not in text, f"{kind} read a secret: {text}"
        for marker in ("RELATIVE_ENV_VISIBLE", "ENV_VISIBLE", "DB_VISIBLE"):
            assert marker not in text, f"{kind}: {marker}\n{text}"
        assert "WROTE_OUTSIDE" not in text, text
        # Its parent is inside the sandbox's own PID namespace (the init, or the `sh` that
        # runs the shell's script file), never the bot.
        assert re.search(r"^ppid=[12]$", text, re.M), text
        assert "WROTE_INSIDE" in text, text
        assert (workspace / f"inside-{kind}.txt").read_text() == "ok\n"
        # Writes to /tmp land in the sandbox's own /tmp, never on the host.
        assert not paths[kind]["host_tmp"].exists()
        assert not paths[kind]["outside"].exists()


def _shell(sandbox: Sandbox) -> ToolRegistry[ToolContext]:
    return ToolRegistry([shell_tool(ShellPolicy(sandbox=sandbox, secret_names=SecretNames()))])


async def _run_shell(sandbox: Sandbox, workspace: Path, command: str) -> str:
    result = await _shell(sandbox).dispatch(
        ToolCall(id="t", name="run_shell", input={"command": command}),
        ToolContext(workspace=workspace),
    )
    return result.content


async def test_without_bwrap_agents_and_shell_refuse(tmp_path: Path) -> None:
    sandbox = select_sandbox(hidden=(), unsandboxed=False, which=lambda name: None)
    assert isinstance(sandbox, Refusing)
    ws = tmp_path / "ws"
    ws.mkdir()
    out = await _run_shell(sandbox, ws, "echo ran > ran.txt")
    assert "Refused" in out and "apt-get install bubblewrap" in out
    assert "RAVEN_UNSANDBOXED=1" in out and "unsafe" in out
    entry = _cli_entry("sh", "-c", "echo ran > ran.txt")
    outcome = await CommandLineBackend(entry, sandbox=sandbox, secret_names=SecretNames()).run(
        AgentTask(node_id="n1", agent=entry, prompt="go", workspace=ws)
    )
    assert outcome.error is not None and "apt-get install bubblewrap" in outcome.error
    # Both calls have returned: had anything started, the file would be there by now.
    assert not (ws / "ran.txt").exists()


def test_a_bwrap_that_fails_its_startup_check_refuses(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: no permission to create namespaces' >&2\nexit 1\n")
    fake.chmod(0o755)
    sandbox = select_sandbox(hidden=(), unsandboxed=False, which=lambda name: str(fake))
    assert isinstance(sandbox, Refusing)
    assert "startup check" in sandbox.reason and "namespaces" in sandbox.reason


async def test_opt_out_runs_unsandboxed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAVEN_UNSANDBOXED", "1")
    sandbox = build_sandbox(load_settings())
    assert isinstance(sandbox, Unsandboxed)
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside.txt"
    out = await _run_shell(sandbox, ws, f"echo unsafe > {outside} && pwd")
    assert out.splitlines() == ["exit code 0", str(ws.resolve())]
    assert outside.read_text() == "unsafe\n"  # nothing confines it: that is the opt-out


async def test_doctor_reports_the_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    checks = {c.name: c for c in await run_checks(load_settings())}
    assert checks["sandbox"].level == "ok" and "bubblewrap" in checks["sandbox"].detail
    monkeypatch.setenv("RAVEN_UNSANDBOXED", "1")
    checks = {c.name: c for c in await run_checks(load_settings())}
    assert checks["sandbox"].level == "warn"
    assert "RAVEN_UNSANDBOXED" in checks["sandbox"].detail
    assert "unsafe" in checks["sandbox"].detail


async def test_sandbox_keeps_a_hidden_dir_hidden_around_the_workspace(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ws = home / "workspaces" / "w"
    ws.mkdir(parents=True)
    (home / "raven.db").write_text(FAKE_DB_SECRET)
    sandbox = real_sandbox(hidden=(home,))
    out = await _run_shell(sandbox, ws, "ls -a ../..; echo x > ../../new.txt; echo made > in.txt")
    assert "raven.db" not in out and "Read-only file system" in out
    assert not (home / "new.txt").exists()
    assert (ws / "in.txt").read_text() == "made\n"


# -- lifetime: agents die with the bot -------------------------------------------------------

_HOLDER = textwrap.dedent(
    """\
    import asyncio, sys
    from pathlib import Path
    from agents.process import run_process
    from agents.sandbox import Unsandboxed

    async def main() -> None:
        await run_process(
            ["sleep", sys.argv[1]], cwd=Path.cwd(), env={"PATH": "/usr/bin:/bin"},
            sandbox=Unsandboxed(), timeout=600, output_cap=1000,
        )

    asyncio.run(main())
    """
)


@pytest.mark.slow
async def test_unsandboxed_child_dies_when_the_bot_is_killed(tmp_path: Path) -> None:
    token = sleeper_token()
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _HOLDER, token, cwd=tmp_path
    )
    await eventually(lambda: bool(pids_running("sleep", token)), within=30)
    holder.send_signal(signal.SIGKILL)
    await holder.wait()
    # PR_SET_PDEATHSIG: the kernel kills it when its parent dies.
    await eventually(lambda: not pids_running("sleep", token), within=10)


async def test_run_process_refuses_before_starting_anything(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailable):
        await run_process(
            ["sh", "-c", "echo ran > ran.txt"],
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin"},
            sandbox=Refusing("test"),
            timeout=10,
            output_cap=100,
        )
    assert not (tmp_path / "ran.txt").exists()


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _node_state(db: Path, node_id: str) -> str | None:
    if not db.exists():
        return None
    try:
        with sqlite3.connect(db) as conn:
            row = conn.execute(
                "SELECT state FROM graph_nodes WHERE node_id = ?", (node_id,)
            ).fetchone()
    except sqlite3.OperationalError:  # not migrated yet
        return None
    return None if row is None else str(row[0])


@pytest.mark.slow
async def test_agent_processes_die_with_the_bot_on_kill_9(isolated_env: Path) -> None:
    token = sleeper_token()
    _write(
        isolated_env / "agents.toml",
        textwrap.dedent(
            f"""\
            [agents.sleeper]
            backend = "cli"
            description = "Starts a child that sleeps, then sleeps itself (test agent)."
            command = ["sh", "-c", "sleep {token} & sleep {token}; wait"]
            """
        ),
    )
    proc = await asyncio.create_subprocess_exec(
        RAVEN,
        "chat",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        env=_env(isolated_env),
    )
    assert proc.stdin is not None
    proc.stdin.write(b"z1: sleeper: wait a long time\n\n")  # a blank line submits the plan
    await proc.stdin.drain()
    db = isolated_env / "raven.db"
    await eventually(
        lambda: _node_state(db, "z1") == "running" and len(pids_running("sleep", token)) == 2,
        within=60,
    )
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    # The whole sandboxed tree (the agent and its own child) is gone, not just the leader.
    await eventually(lambda: not pids_running("sleep", token), within=15)


async def test_a_venv_inside_the_hidden_working_dir_stays_usable(tmp_path: Path) -> None:
    # The usual layout: the bot runs from its checkout, whose .venv holds the interpreter.
    botdir = tmp_path / "checkout"
    venv = botdir / ".venv"
    venv.mkdir(parents=True)
    (venv / "tool.sh").write_text("echo tool ran\n")
    (botdir / ".env").write_text(f"ANTHROPIC_API_KEY={FAKE_ANTHROPIC}\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    bwrap = real_sandbox()
    assert isinstance(bwrap, Bubblewrap)
    sandbox = Bubblewrap(bwrap.bwrap, hidden=(botdir, Path("/")), readonly=(venv,))
    # A script file, so the permission gate (which refuses `.env` when it is spelled out in a
    # command) does not stop it first: the sandbox itself must hide the file.
    script = f"sh {venv}/tool.sh; cat {botdir}/.env; echo x > /tmp/t\n"
    await asyncio.to_thread((ws / "probe.sh").write_text, script)
    out = await _run_shell(sandbox, ws, "sh probe.sh")
    assert "tool ran" in out and FAKE_ANTHROPIC not in out
    assert "No such file" in out  # .env is not there at all
    assert "Read-only" not in out  # /tmp stays writable


@pytest.mark.parametrize("after", range(4))
async def test_a_stop_while_the_sandboxed_command_starts_ends_the_attempt(
    tmp_path: Path, after: int
) -> None:
    # Regression: cancelled before asyncio had connected the child's pipes, the start killed
    # bwrap alone and then waited for the pipes to close, which the processes inside still
    # held: the attempt hung for good (CPython gh-103847), and with it `stop` and shutdown.
    token = sleeper_token()
    task = asyncio.create_task(
        run_process(
            ["sh", "-c", f"sleep {token} & sleep {token}"],
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin"},
            sandbox=real_sandbox(),
            timeout=600,
            output_cap=1000,
        )
    )
    await cancel_while_spawning(task, after)
    async with asyncio.timeout(30):  # a hang guard: the bug never returned
        await asyncio.wait({task})
    assert task.cancelled()
    # Not asserted here: that the command inside is gone. A kill that lands while bwrap is
    # still setting up (before --die-with-parent holds, after --new-session) can leave it
    # running to its end (1 run in ~40 under load): a known gap, to be closed by killing
    # the sandbox's child by the pid bwrap reports (--info-fd).
    for pid in pids_running("sleep", token):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def test_an_agent_without_network_reaches_nothing_not_even_loopback(
    tmp_path: Path,
) -> None:
    served = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served.set()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    ws = tmp_path / "ws"
    ws.mkdir()
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)"
    entry = _cli_entry(sys.executable, "-c", probe)
    sandbox = real_sandbox()
    try:
        reached = await CommandLineBackend(entry, sandbox=sandbox, secret_names=SecretNames()).run(
            AgentTask(node_id="n1", agent=entry, prompt="", workspace=ws)
        )
        assert reached.error is None, reached.error
        await asyncio.wait_for(served.wait(), 10)
        served.clear()
        cut = dataclasses.replace(entry, network=False)
        refused = await CommandLineBackend(cut, sandbox=sandbox, secret_names=SecretNames()).run(
            AgentTask(node_id="n2", agent=cut, prompt="", workspace=ws)
        )
        assert refused.error is not None and "exited with" in refused.error, refused.error
        assert not served.is_set()  # the process ended having reached nothing
    finally:
        server.close()
        await server.wait_closed()
    # Without the sandbox, `network = false` cannot be kept: the agent is refused.
    with pytest.raises(SandboxUnavailable, match="network = false"):
        Unsandboxed().launch(["true"], workspace=ws, env={}, network=False)
