"""Stdio tool servers run in the bot's sandbox, as ACP agents do: a `StdioLauncher` for
`McpServers` that wraps the server's command with `Sandbox.launch`.

- **Workspace**: RAVEN_HOME/mcp-servers/<server>, the one writable path, kept across restarts
  (a server's own cache or database survives them). RAVEN_HOME itself is one of the sandbox's
  hidden paths, covered by an empty tmpfs: the server sees its own directory inside an
  otherwise empty RAVEN_HOME, never mcp.json, the database or another server's files. The same
  layout ACP agents get for their per-conversation workspaces.
- **Environment**: the SDK's safe defaults (HOME, PATH, ...; HOME is a fresh tmpfs inside)
  under the variables the server's entry declares; nothing else of the bot's.
- **Process group and lifetime**: the SDK starts every stdio server in a new session, so
  closing it signals the whole group. bubblewrap's `--die-with-parent` (always on in
  `Bubblewrap`) plus its PID namespace end the server and everything it started when the bot
  dies, SIGKILL included. The SDK takes no preexec hook, so the opt-out sandbox's
  parent-death hook (RAVEN_UNSANDBOXED=1) becomes `setpriv --pdeathsig KILL` in front of the
  command, which the kernel keeps across exec.
- **Network**: the entry's `network` (off by default) is the sandbox's `network`."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Sequence
from pathlib import Path

from mcp import StdioServerParameters
from mcp.client.stdio import get_default_environment

from agents.sandbox import Launch, Sandbox
from mcp_client import StdioLauncher, StdioServerEntry

WORKSPACES = "mcp-servers"


def server_workspaces(home: Path) -> Path:
    """Where each stdio server's workspace lives: RAVEN_HOME/mcp-servers/<server>."""
    return home / WORKSPACES


def sandboxed_launcher(
    sandbox: Sandbox, workspaces: Path, *, readonly: Sequence[Path] = ()
) -> StdioLauncher:
    """Start each stdio server confined by `sandbox` in `workspaces/<server>`. `readonly`:
    extra directories every server may read (where a team installs its servers, say).
    A sandbox that refuses (no bubblewrap) fails that server's start with its reason."""

    async def launch(name: str, entry: StdioServerEntry) -> StdioServerParameters:
        workspace = await asyncio.to_thread(_prepared, workspaces / name)
        # What the SDK hands the process: its safe defaults under the declared variables.
        env = get_default_environment() | dict(entry.env)
        confined = sandbox.launch(
            [entry.command, *entry.args],
            workspace=workspace,
            env=env,
            network=entry.network,
            readonly=[*readonly, *(Path(p) for p in entry.readonly)],
        )
        argv = _dying_with_the_bot(confined)
        return StdioServerParameters(
            command=argv[0], args=list(argv[1:]), env=dict(entry.env), cwd=workspace
        )

    return launch


def _dying_with_the_bot(launch: Launch) -> tuple[str, ...]:
    """The argv, with the sandbox's parent-death hook (if any) done by `setpriv` instead."""
    if launch.preexec is None:  # bubblewrap: --die-with-parent is in the argv already
        return launch.argv
    setpriv = shutil.which("setpriv")
    if setpriv is None:  # the operator's unsafe opt-out on a host without util-linux
        return launch.argv
    return (setpriv, "--pdeathsig", "KILL", "--", *launch.argv)


def _prepared(workspace: Path) -> Path:
    workspace.mkdir(parents=True, exist_ok=True)
    return workspace.resolve()
