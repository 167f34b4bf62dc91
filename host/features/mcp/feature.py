"""The team's tool servers (MCP) as a capability: RAVEN_HOME/mcp.json read at start (a broken
file stops the start with one line naming it), every server connected in the background once
the bot runs and closed at shutdown, the `mcp` agent's one-call nodes, the server names a
node's `mcp` override may use, and the tools each node is granted."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from agents.backends.base import AgentBackend
from agents.registry import AgentEntry, AgentRegistry
from core.errors import ConfigError
from host.agent.host_agent import ContextSource
from host.features.feature import (
    BaseFeature,
    DoctorCheck,
    DoctorParts,
    HostParts,
    StatusSource,
)
from host.features.mcp.agent import mcp_agent
from host.features.mcp.environ import MCP_FILE, read_mcp_config
from host.graph.executor import NodeTools

if TYPE_CHECKING:
    from mcp_client import McpConfig, McpServers

log = logging.getLogger(__name__)
# How long a node waits for a tool server still connecting after a start.
SETTLE_SECONDS = 30.0


@dataclass(frozen=True)
class McpSection:
    """No settings: RAVEN_HOME/mcp.json is this capability's configuration."""


class McpFeature(BaseFeature):
    """Tool servers for nodes: connected in the background, granted per node."""

    Section: ClassVar[type[McpSection]] = McpSection

    @classmethod
    def agents(cls, home: Path) -> Sequence[AgentEntry]:
        return (mcp_agent(home),)

    @classmethod
    def preflight(cls, home: Path) -> None:
        """A broken mcp.json stops the start before anything is built."""
        read_mcp_config(home, Path.cwd())

    @classmethod
    async def doctor(cls, parts: DoctorParts, section: McpSection) -> Sequence[DoctorCheck]:
        """Each server connected at once: its tools and initialize time, or why it did not
        start (a wrong file fails as `run` would refuse it). No server is waited for longer
        than the doctor's limit."""
        from host.features.mcp.probe import DOCTOR_WAIT, doctor_line, probe_servers, team_servers
        from host.features.mcp.sandboxed import sandboxed_launcher, server_workspaces
        from mcp_client import McpConfigError

        path = parts.home / MCP_FILE
        if not path.exists():
            return (DoctorCheck("mcp", "ok", f"no tool servers ({path} absent)"),)
        try:
            config, secrets = team_servers(
                parts.home, parts.cwd, parts.secret_values, parts.environ
            )
        except McpConfigError as exc:
            return (DoctorCheck("mcp", "fail", str(exc)),)
        if not config.servers:
            return (DoctorCheck("mcp", "ok", f"no tool servers ({path} lists none)"),)
        launcher = sandboxed_launcher(parts.sandbox(), server_workspaces(parts.home))
        reports = await probe_servers(config, secrets, wait_cap=DOCTOR_WAIT, launcher=launcher)
        all_ready, detail = doctor_line(reports)
        # A server that does not start leaves the bot serving without its tools: a warning.
        return (DoctorCheck("mcp", "ok" if all_ready else "warn", detail),)

    def __init__(self, parts: HostParts, section: McpSection) -> None:
        self._names: frozenset[str] = frozenset()
        self._defaults: dict[str, list[str]] = {}
        self.servers: McpServers | None = None
        config = read_mcp_config(parts.home, parts.cwd)
        _check_agent_defaults(parts.registry, config, parts.home / "agents.toml")
        if config is None:
            return  # no tool servers: the MCP SDK is not even imported (start-up stays fast)
        from host.features.mcp.sandboxed import sandboxed_launcher, server_workspaces
        from mcp_client import McpServers

        _check_readable(config, parts.hidden)
        self._names = frozenset(config.servers)
        self._defaults = {
            server: [
                e.name
                for e in parts.registry.entries()
                if e.enabled and (server in e.mcp or e.name in entry.agents)
            ]
            for server, entry in config.servers.items()
        }
        launcher = sandboxed_launcher(parts.sandbox, server_workspaces(parts.home))
        self.servers = McpServers(config, launcher=launcher)

    def tool_server_names(self) -> Callable[[], Awaitable[frozenset[str]]] | None:
        names = self._names

        async def known() -> frozenset[str]:
            return names

        return known

    def agent_backends(self) -> Mapping[str, Callable[[AgentEntry], AgentBackend]]:
        if self.servers is None or not self._names:
            return {}
        from host.features.mcp.node import McpCallBackend

        backend = McpCallBackend(self.servers, settle_seconds=SETTLE_SECONDS)
        return {"mcp": lambda entry: backend}

    def context_sources(self, host_tools: Sequence[str]) -> Sequence[ContextSource]:
        if self.servers is None or not self._names:
            return ()
        from host.features.mcp.context import ToolServersContext

        return (ToolServersContext(self.servers, self._defaults),)

    def status_sources(self) -> Sequence[StatusSource]:
        if self.servers is None or not self._names:
            return ()
        from host.features.mcp.status import ToolServerStatus

        return (ToolServerStatus(self.servers),)

    def node_tools(self) -> NodeTools | None:
        if self.servers is None or not self._names:
            return None
        from host.features.mcp.grants import McpGrants

        return McpGrants(self.servers, settle_seconds=SETTLE_SECONDS)

    async def start(self, stack: AsyncExitStack) -> None:
        if self.servers is None or not self._names:
            return
        # Connecting never delays the start: each server connects in a task of its own.
        await self.servers.start()
        stack.push_async_callback(self.servers.close)
        reporter = asyncio.create_task(_report_starts(self.servers), name="mcp-start-report")
        stack.callback(reporter.cancel)


def _check_agent_defaults(
    registry: AgentRegistry, config: McpConfig | None, agents_file: Path
) -> None:
    """agents.toml's `mcp` defaults and mcp.json's `agents` name what exists."""
    servers = config.servers if config is not None else {}
    shown = ", ".join(f"`{n}`" for n in sorted(servers)) or "none: mcp.json is absent or empty"
    for entry in registry.entries():
        unknown = [n for n in entry.mcp if n not in servers]
        if unknown:
            raise ConfigError(
                f"{agents_file}: [agents.{entry.name}] mcp: no tool server named "
                f"{', '.join(f'`{n}`' for n in unknown)} in mcp.json (servers: {shown})"
            )
    agents = {e.name for e in registry.entries()}
    for server, server_entry in servers.items():
        strangers = [a for a in server_entry.agents if a not in agents]
        if strangers:
            raise ConfigError(
                f"mcp.json: mcpServers.{server}.agents: no agent named "
                f"{', '.join(f'`{a}`' for a in strangers)} (agents.toml and the built-in "
                "roster name the agents)"
            )


def _check_readable(config: McpConfig, hidden: Sequence[Path]) -> None:
    """A server's `readonly` directories never show what the sandbox hides (the data
    directory, the bot's own directory with its .env): not them, nothing in them. (One that
    holds them is fine: the sandbox covers a hidden directory inside a bind.)"""
    from mcp_client import StdioServerEntry

    for server, entry in config.servers.items():
        if not isinstance(entry, StdioServerEntry):
            continue
        for raw in entry.readonly:
            path = Path(raw).resolve()
            for secret in (h.resolve() for h in hidden):
                if path == secret or secret in path.parents:
                    raise ConfigError(
                        f"mcp.json: mcpServers.{server}.readonly: {raw} would show {secret}, "
                        "which no sandboxed process may see; name the directory the server "
                        "is installed in instead"
                    )


async def _report_starts(servers: McpServers) -> None:
    """Say in the log (once, for the operator) how each server's first start went: a server
    that does not start is named with its reason and last stderr line; the others serve."""
    states = await asyncio.gather(*(servers.settled(name) for name in servers.names()))
    for name, state in zip(servers.names(), states, strict=True):
        if state.status == "ready":
            log.info("MCP server %s ready: %d tool(s)", name, state.tool_count)
            continue
        tail = state.stderr_tail.strip().splitlines()[-1:] if state.stderr_tail else []
        said = f"; its stderr ended: {tail[0][:300]}" if tail else ""
        log.warning(
            "MCP server %s did not start (%s)%s; the other tool servers keep working "
            "(`raven-bot mcp list` shows each one's state)",
            name,
            state.error or state.status,
            said,
        )
