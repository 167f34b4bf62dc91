"""`raven-bot mcp list|tools`: the team's tool servers of RAVEN_HOME/mcp.json, each connected
once (all at a time, each bounded by its own timeout) to say whether it starts, what it
offers and why not. `doctor` reports the same probe in one line.

Nothing printed here holds a resolved secret: `${VAR}` values of `env` and `headers` are
never shown, and what a server says (its errors, stderr, tool descriptions) is scrubbed of
them, cut to one line and stripped of terminal control characters (it is untrusted)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from bot.settings import Settings
from core.errors import did_you_mean
from host.features.mcp import probe
from host.features.mcp.environ import MCP_FILE
from host.features.mcp.probe import probe_servers, shown
from host.features.mcp.tools import agent_tool_name
from mcp_client import McpConfig, McpConfigError, StdioLauncher

DESCRIPTION_CAP = 100

CREATE_HINT = (
    'Create it in the mcpServers shape Claude Code and Cursor use, e.g. {"mcpServers": '
    '{"github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"], '
    '"env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_TOKEN}"}}}} '
    "(${VAR} is read from the bot's environment and .env)."
)


def mcp_path(settings: Settings) -> Path:
    return settings.home / MCP_FILE


def team_servers(settings: Settings) -> tuple[McpConfig, list[str]]:
    """RAVEN_HOME/mcp.json filled as the bot fills it, and the values never to print."""
    return probe.team_servers(settings.home, Path.cwd(), settings.secret_values())


def mcp_command(
    args: argparse.Namespace,
    settings: Settings,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`mcp list` or `mcp tools SERVER`: 0 when listed, 1 when the server asked for failed,
    2 for a broken mcp.json or an unknown server."""
    # Looked up now, not at import: whoever called may have redirected them since.
    out, err = out or sys.stdout, err or sys.stderr
    path = mcp_path(settings)
    try:
        config, secrets = team_servers(settings)
    except McpConfigError as exc:
        err.write(f"raven-bot: {exc}\n")
        return 2
    launcher = bot_launcher(settings)
    if args.mcp_command == "list":
        return _list(config, path, secrets, launcher, args.json, out, err)
    return _tools(config, path, secrets, launcher, args.server, args.json, out, err)


def bot_launcher(settings: Settings) -> StdioLauncher:
    """Stdio servers started as the bot starts them: in its sandbox, each in its workspace."""
    from bot.app import build_sandbox  # the sandbox probe: only when servers are started
    from host.features.mcp.sandboxed import sandboxed_launcher, server_workspaces

    return sandboxed_launcher(build_sandbox(settings), server_workspaces(settings.home))


def _list(
    config: McpConfig,
    path: Path,
    secrets: Sequence[str],
    launcher: StdioLauncher,
    as_json: bool,
    out: TextIO,
    err: TextIO,
) -> int:
    if not config.servers:
        absent = not path.exists()
        note = (
            f"No tool servers: {path} does not exist. {CREATE_HINT}\n"
            if absent
            else f"No tool servers: {path} lists none under mcpServers.\n"
        )
        if as_json:
            out.write("[]\n")
            err.write(note)
        else:
            out.write(note)
        return 0
    reports = asyncio.run(probe_servers(config, secrets, launcher=launcher))
    if as_json:
        out.write(json.dumps([r.as_json() for r in reports], indent=1) + "\n")
        return 0
    rows = [("SERVER", "TRANSPORT", "STATE", "TOOLS", "INIT", "ERROR")]
    for r in reports:
        ready = r.state == "ready"
        rows.append(
            (
                r.name,
                r.transport,
                r.state,
                str(len(r.tools)) if ready else "-",
                f"{r.initialize_seconds:.2f} s" if r.initialize_seconds is not None else "-",
                "" if ready else r.reason(),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:5], widths, strict=True)]
        out.write(("  ".join(cells) + "  " + row[5]).rstrip() + "\n")
    return 0


def _tools(
    config: McpConfig,
    path: Path,
    secrets: Sequence[str],
    launcher: StdioLauncher,
    server: str,
    as_json: bool,
    out: TextIO,
    err: TextIO,
) -> int:
    entry = config.servers.get(server)
    if entry is None:
        names = sorted(config.servers)
        if not path.exists():
            err.write(
                f"raven-bot: no MCP server `{server}`: {path} does not exist. {CREATE_HINT}\n"
            )
            return 2
        known = f"its servers: {', '.join(names)}" if names else "it lists no servers"
        err.write(
            f"raven-bot: no MCP server named `{server}` in {path}"
            f"{did_you_mean(server, names)}; {known}\n"
        )
        return 2
    (report,) = asyncio.run(
        probe_servers(McpConfig(servers={server: entry}), secrets, launcher=launcher)
    )
    if report.state != "ready":
        err.write(
            f"raven-bot: MCP server `{server}` did not start ({report.state}): {report.reason()}\n"
        )
        return 1
    listed: list[dict[str, Any]] = [
        {
            "name": agent_tool_name(tool.server, tool.name),
            "tool": tool.name,
            "read_only": tool.read_only,
            "description": _first_line(tool.description, secrets),
        }
        for tool in report.tools
    ]
    if as_json:
        out.write(json.dumps(listed, indent=1) + "\n")
        return 0
    if not listed:
        out.write(f"`{server}` offers no tools (after its include/exclude filter in {path}).\n")
        return 0
    width = max(len(t["name"]) for t in listed)
    for t in listed:
        hint = "read-only" if t["read_only"] else "-"
        out.write(f"{t['name'].ljust(width)}  {hint:<9}  {t['description']}".rstrip() + "\n")
    return 0


def _first_line(description: str, secrets: Sequence[str]) -> str:
    first = description.strip().splitlines()[:1]
    return shown(first[0], secrets, DESCRIPTION_CAP) if first else ""
