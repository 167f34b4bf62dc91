"""How a stdio server's process is started: a `StdioLauncher` turns a server's name and entry
into the SDK's `StdioServerParameters`. The default runs the command as configured; the bot
injects one that wraps it in its sandbox (host/features/mcp/sandboxed.py), which this package
cannot import (capabilities are independent of each other).

Whatever a launcher returns, the SDK starts it in its own process group (a new session), with
`get_default_environment()` (HOME, PATH, ...) under the entry's declared `env`: never the bot's
whole environment."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from mcp import StdioServerParameters

from mcp_client.config import StdioServerEntry

StdioLauncher = Callable[[str, StdioServerEntry], Awaitable[StdioServerParameters]]


async def plain_launcher(name: str, entry: StdioServerEntry) -> StdioServerParameters:
    """The command as configured, unconfined (tests, tools without a sandbox)."""
    return StdioServerParameters(command=entry.command, args=list(entry.args), env=dict(entry.env))
