"""Stdio tool servers under the real bubblewrap: a server sees only its declared variables,
cannot read RAVEN_HOME, runs outside the bot's process group, is gone after close() and after
a kill -9 of the bot; without a sandbox it does not start, and the opt-out still ties it to
the bot's life."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agents.sandbox import Bubblewrap, Refusing, Sandbox, Unsandboxed, select_sandbox
from host.features.mcp.sandboxed import sandboxed_launcher, server_workspaces
from mcp_client import McpServers, StdioServerEntry, parse_mcp_config
from tests.helpers import REPO, eventually, processes_with

FAKES = REPO / "tests" / "fakes"
FAKE = str(FAKES / "mcp_server.py")
# The SDK's safe defaults, plus what Python (LC_CTYPE) and bwrap (PWD) set on their own.
DEFAULTS = {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LC_CTYPE", "PWD"}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A fake RAVEN_HOME with a secret in it."""
    home = tmp_path / "raven-home"
    home.mkdir()
    (home / "secret.txt").write_text("bot-only")
    return home


@pytest.fixture
def bwrap(home: Path) -> Bubblewrap:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    sandbox = select_sandbox(hidden=[home], unsandboxed=False)
    if not isinstance(sandbox, Bubblewrap):
        pytest.skip(f"bubblewrap does not work here: {sandbox.description}")
    return sandbox


def manager(
    sandbox: Sandbox, home: Path, entries: dict[str, Any], environ: dict[str, str] | None = None
) -> McpServers:
    config = parse_mcp_config(json.dumps({"mcpServers": entries}), environ or {}, source="mcp.json")
    # The fake's script lives in the repository, which the sandbox does not show.
    launcher = sandboxed_launcher(sandbox, server_workspaces(home), readonly=[FAKES])
    return McpServers(config, launcher=launcher)


def fake(*extra: str, **fields: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [FAKE, "--probes", *extra], **fields}


@pytest.fixture
async def running(
    bwrap: Bubblewrap, home: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[McpServers]:
    """The fake, sandboxed, started while the bot's environment holds a secret of its own."""
    monkeypatch.setenv("RAVEN_TEST_BOT_SECRET", "bot-secret-value")
    servers = manager(
        bwrap, home, {"fake": fake(env={"API_TOKEN": "${UPSTREAM}"})}, {"UPSTREAM": "declared"}
    )
    async with servers:
        state = await asyncio.wait_for(servers.settled("fake"), 60)
        assert state.status == "ready", state
        yield servers


async def text(servers: McpServers, tool: str, **arguments: Any) -> str:
    return (await servers.call("fake", tool, arguments)).text


async def test_a_sandboxed_server_sees_only_its_declared_variables(running: McpServers) -> None:
    seen = await text(running, "environment")
    assert "bot-secret-value" not in seen
    variables = json.loads(seen)
    assert variables["API_TOKEN"] == "declared"
    assert set(variables) - {"API_TOKEN"} <= DEFAULTS


async def test_a_sandboxed_server_cannot_read_raven_home(running: McpServers, home: Path) -> None:
    assert await text(running, "read_file", path=str(home / "secret.txt")) == (
        "unreadable: FileNotFoundError"
    )
    # RAVEN_HOME is an empty cover but for the server's own workspace inside it.
    assert await text(running, "list_dir", path=str(home)) == "mcp-servers"
    assert await text(running, "list_dir", path=str(home / "mcp-servers")) == "fake"
    # The bot's own checkout (its .env lives in its working directory) is not there either.
    assert await text(running, "read_file", path=str(REPO / "pyproject.toml")) == (
        "unreadable: FileNotFoundError"
    )


async def test_a_sandboxed_server_runs_in_its_workspace(running: McpServers, home: Path) -> None:
    workspace = (server_workspaces(home) / "fake").resolve()
    (workspace / "notes.txt").write_text("kept")
    assert await text(running, "read_file", path="notes.txt") == "kept"


async def test_a_sandboxed_server_has_its_own_process_group_and_is_gone_after_close(
    bwrap: Bubblewrap, home: Path
) -> None:
    token = f"mcp-sandboxed-{uuid.uuid4().hex}"
    servers = manager(bwrap, home, {"fake": fake(token)})
    await servers.start()
    try:
        assert (await asyncio.wait_for(servers.settled("fake"), 60)).status == "ready"
        pids = processes_with(token)
        assert len(pids) >= 2  # bwrap, and the server inside its PID namespace
        assert all(os.getpgid(pid) != os.getpgid(0) for pid in pids)
    finally:
        await servers.close()
    assert processes_with(token) == []


BOT = """
import asyncio, json, sys
from pathlib import Path
from agents.sandbox import select_sandbox
from host.features.mcp.sandboxed import sandboxed_launcher, server_workspaces
from mcp_client import McpServers, parse_mcp_config

async def main() -> None:
    home, fakes, unsandboxed, token = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    sandbox = select_sandbox(hidden=[home], unsandboxed=unsandboxed == "1")
    # A server that outlives its stdin: a well-behaved one exits when the dead bot's pipe
    # closes, so only this shows the sandbox itself ending it. Network on: the opt-out cannot
    # cut it, and refuses an entry that asks it to.
    py, script = sys.executable, fakes / "mcp_server.py"
    linger = f"exec {py} -c 'import time; time.sleep(600)' {token}"
    entry = {"command": "sh", "args": ["-c", f"{py} {script} {token}; {linger}"], "network": True}
    config = parse_mcp_config(json.dumps({"mcpServers": {"fake": entry}}), {}, source="mcp.json")
    launcher = sandboxed_launcher(sandbox, server_workspaces(home), readonly=[fakes])
    servers = McpServers(config, launcher=launcher)
    await servers.start()
    print((await servers.settled("fake")).status, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


@pytest.mark.parametrize("unsandboxed", [False, True], ids=["bwrap", "unsandboxed"])
async def test_a_kill_9_of_the_bot_takes_the_server_with_it(
    home: Path, unsandboxed: bool, request: pytest.FixtureRequest
) -> None:
    if not unsandboxed:
        request.getfixturevalue("bwrap")
    elif shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed")
    token = f"mcp-orphan-{uuid.uuid4().hex}"
    bot = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        BOT,
        str(home),
        str(FAKES),
        "1" if unsandboxed else "0",
        token,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert bot.stdout is not None
        line = await asyncio.wait_for(bot.stdout.readline(), 60)
        assert line.decode().strip() == "ready"
        assert processes_with(token)
        bot.send_signal(signal.SIGKILL)
        await bot.wait()
        await eventually(lambda: processes_with(token) == [], within=10, what="the server ends")
    finally:
        if bot.returncode is None:
            bot.kill()
            await bot.wait()
        for pid in processes_with(token):  # a failed test leaves nothing behind
            os.kill(pid, signal.SIGKILL)


async def test_without_a_sandbox_the_server_does_not_start(home: Path) -> None:
    refusing = Refusing("bubblewrap (`bwrap`) is not installed")
    async with manager(refusing, home, {"fake": fake()}) as servers:
        state = await asyncio.wait_for(servers.settled("fake"), 30)
    assert state.status == "failed"
    assert (state.error or "").startswith(
        "SandboxUnavailable: Refused: no sandbox is available to run agent commands"
    )


async def test_network_follows_the_entry(bwrap: Bubblewrap, home: Path) -> None:
    launcher = sandboxed_launcher(bwrap, server_workspaces(home))
    closed = await launcher("a", StdioServerEntry(command="srv"))
    opened = await launcher("b", StdioServerEntry(command="srv", network=True))
    assert "--unshare-net" in closed.args
    assert "--unshare-net" not in opened.args
    assert closed.command == bwrap.bwrap
    assert closed.args[-2:] == ["--", "srv"]
    assert closed.cwd == (server_workspaces(home) / "a").resolve()


async def test_the_opt_out_ties_the_server_to_the_bot_with_setpriv(home: Path) -> None:
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed")
    launcher = sandboxed_launcher(Unsandboxed(), server_workspaces(home))
    params = await launcher("a", StdioServerEntry(command="srv", args=["x"], network=True))
    assert Path(params.command).name == "setpriv"
    assert params.args == ["--pdeathsig", "KILL", "--", "srv", "x"]
