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
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from bot.settings import Settings, url_credentials
from core.errors import did_you_mean
from host.features.mcp.environ import MCP_FILE, referenced_values, server_environ
from host.features.mcp.tools import agent_tool_name
from mcp_client import (
    HttpServerEntry,
    McpConfig,
    McpConfigError,
    McpServers,
    McpTool,
    ServerEntry,
    StdioLauncher,
    load_mcp_config,
    plain_launcher,
)

# Where the doctor's wait for one server ends even if mcp.json allows it longer (doctor
# checks everything in one run; a CLI listing waits each server's own timeout).
DOCTOR_WAIT = 30.0
DESCRIPTION_CAP = 100
ERROR_CAP = 300
# C0/C1 controls and DEL: an untrusted server must not move the cursor or recolour a terminal.
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Shorter values are too common to scrub from text (a port, "1", "on").
_MIN_SECRET = 4

CREATE_HINT = (
    'Create it in the mcpServers shape Claude Code and Cursor use, e.g. {"mcpServers": '
    '{"github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"], '
    '"env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_TOKEN}"}}}} '
    "(${VAR} is read from the bot's environment and .env)."
)


def mcp_path(settings: Settings) -> Path:
    return settings.home / MCP_FILE


def team_servers(
    settings: Settings, environ: Mapping[str, str] | None = None
) -> tuple[McpConfig, list[str]]:
    """RAVEN_HOME/mcp.json with its `${VAR}`s filled as the bot fills them, and the values
    never to print; `McpConfigError` (one line naming the file and key) when it is wrong."""
    path = mcp_path(settings)
    # The very mapping the bot's McpFeature fills them from (.env here, then the environment).
    mapping = server_environ(Path.cwd(), environ)
    config = load_mcp_config(path, mapping)
    return config, secrets_of(config, path, mapping, settings.secret_values())


@dataclass(frozen=True)
class ServerReport:
    """What one connection attempt found: shown by `mcp list`, `mcp tools` and doctor."""

    name: str
    transport: str  # stdio | http
    # ready | failed | timeout (no answer within its wait) | closed
    state: str
    tools: tuple[McpTool, ...]
    initialize_seconds: float | None
    error: str | None  # scrubbed, one line
    stderr: str | None  # a failed stdio server's last stderr line, scrubbed

    def reason(self) -> str:
        """Why it is not ready, in one line (its stderr's last words included)."""
        why = self.error or self.state
        return f"{why}; stderr: {self.stderr}" if self.stderr else why

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "transport": self.transport,
            "state": self.state,
            "tools": len(self.tools) if self.state == "ready" else None,
            "initialize_seconds": self.initialize_seconds,
            "error": self.error,
            "stderr": self.stderr,
        }


async def probe_servers(
    config: McpConfig,
    secrets: Sequence[str],
    *,
    wait_cap: float | None = None,
    launcher: StdioLauncher = plain_launcher,
) -> list[ServerReport]:
    """Connect to every server of `config` at once, wait for each (its own timeout, at most
    `wait_cap`), report, and close them all. `launcher`: how stdio servers are started, the
    bot's own way."""
    servers = McpServers(config, launcher=launcher)
    await servers.start()
    try:
        return list(
            await asyncio.gather(
                *(
                    _settle(servers, name, entry, secrets, wait_cap)
                    for name, entry in config.servers.items()
                )
            )
        )
    finally:
        await servers.close()


async def _settle(
    servers: McpServers,
    name: str,
    entry: ServerEntry,
    secrets: Sequence[str],
    wait_cap: float | None,
) -> ServerReport:
    transport = "http" if isinstance(entry, HttpServerEntry) else "stdio"
    capped = wait_cap is not None and wait_cap < entry.timeout
    wait = wait_cap if wait_cap is not None and capped else entry.timeout
    try:
        state = await asyncio.wait_for(servers.settled(name), wait)
    except TimeoutError:
        # Say which bound it was, so the fix is clear (a slow first `npx` download, say).
        bound = "doctor's limit" if capped else 'raise its "timeout" in mcp.json to wait longer'
        why = f"no answer within {wait:g} s ({bound})"
        return ServerReport(name, transport, "timeout", (), None, why, None)
    if state.status == "ready":
        seconds = state.initialize_seconds
        shown_seconds = round(seconds, 3) if seconds is not None else None
        return ServerReport(
            name, transport, "ready", tuple(servers.tools(name)), shown_seconds, None, None
        )
    last = state.stderr_tail.strip().splitlines()[-1:] if state.stderr_tail else []
    return ServerReport(
        name,
        transport,
        state.status,
        (),
        None,
        shown(state.error or state.status, secrets, ERROR_CAP),
        shown(last[0], secrets, ERROR_CAP) if last else None,
    )


def secrets_of(
    config: McpConfig, path: Path, environ: Mapping[str, str], extra: Sequence[str]
) -> list[str]:
    """Every value that must never be printed: what mcp.json's `${VAR}`s resolve to, every
    env and header value of its servers, and the bot's own secrets."""
    try:
        values = referenced_values(path.read_text(encoding="utf-8"), environ)
    except (OSError, UnicodeDecodeError):
        values = []
    for entry in config.servers.values():
        if isinstance(entry, HttpServerEntry):
            values += [*entry.headers.values(), *url_credentials(entry.url)]
        else:
            values += entry.env.values()
    values += extra
    # Longest first: a header `Bearer X` is replaced whole before `X` alone.
    return sorted({v for v in values if len(v) >= _MIN_SECRET}, key=len, reverse=True)


def shown(text: str, secrets: Sequence[str], cap: int) -> str:
    """Untrusted text as one printable line: secrets masked, controls gone, capped."""
    for secret in secrets:
        text = text.replace(secret, "****")
    line = " ".join(_CONTROLS.sub(" ", text).split())
    return line if len(line) <= cap else line[: cap - 1] + "…"


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


def doctor_line(reports: Sequence[ServerReport]) -> tuple[bool, str]:
    """(every server ready, one line per the doctor's `mcp` check)."""
    parts = []
    for r in reports:
        if r.state == "ready":
            parts.append(
                f"{r.name}: {len(r.tools)} tool(s), initialize {r.initialize_seconds:.2f} s"
            )
        else:
            parts.append(f"{r.name}: {r.state} ({r.reason()})")
    return all(r.state == "ready" for r in reports), "; ".join(parts)
