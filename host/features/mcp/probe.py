"""Connecting to the team's tool servers once, without a running bot: what `doctor` and
`raven-bot mcp list|tools` report (each server's state, tools and initialize time, or why it
did not start), with every secret masked and an untrusted server's text made printable."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.url_secrets import url_credentials
from host.features.mcp.environ import MCP_FILE, referenced_values, server_environ
from mcp_client import (
    HttpServerEntry,
    McpConfig,
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
ERROR_CAP = 300
# C0/C1 controls and DEL: an untrusted server must not move the cursor or recolour a terminal.
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Shorter values are too common to scrub from text (a port, "1", "on").
_MIN_SECRET = 4


def team_servers(
    home: Path, cwd: Path, bot_secrets: Sequence[str], environ: Mapping[str, str] | None = None
) -> tuple[McpConfig, list[str]]:
    """RAVEN_HOME/mcp.json with its `${VAR}`s filled as the bot fills them, and the values
    never to print; `McpConfigError` (one line naming the file and key) when it is wrong."""
    path = home / MCP_FILE
    # The very mapping the bot's McpFeature fills them from (.env here, then the environment).
    mapping = server_environ(cwd, environ)
    config = load_mcp_config(path, mapping)
    return config, secrets_of(config, path, mapping, bot_secrets)


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
