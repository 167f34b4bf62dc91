"""Which tool servers a node's task gets, and their tools for its agent.

A node names its servers (`[mcp a, b]`, `[mcp none]`), or gets its agent's defaults (agents.toml
`mcp`, and each server's `agents` in mcp.json). A scheduled task's firing is unattended: its
nodes get only the servers its plan names, which the task's owner approved with it, and no
agent defaults nobody approved. An in-process agent gets the tools; an ACP agent gets them
served on loopback for its session (every call still passes this node's gate)."""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from agents.backends.base import McpEndpoint, NodeToolset, Permit
from agents.models.types import ToolCall
from agents.registry import AgentEntry
from agents.tools import Tool, ToolOutput, ToolRegistry, ToolTrust
from agents.workspace_tools import Permission, ToolContext
from host.features.mcp.settle import settled_within
from host.features.mcp.tools import mcp_tool, mcp_tools
from host.graph.run_store import RunRecord
from mcp_client import McpServers
from mcp_client.proxy import ProxiedResult, ProxiedTool, serve_tools
from mcp_client.results import McpImage


class McpGrants:
    """The `NodeTools` of the bot's tool servers."""

    def __init__(self, servers: McpServers, *, settle_seconds: float) -> None:
        self._servers = servers
        self._settle_seconds = settle_seconds

    def servers_for(
        self, run: RunRecord, entry: AgentEntry, granted: Sequence[str] | None
    ) -> list[str]:
        """The servers this node's task gets (in mcp.json's order)."""
        if granted is not None:
            wanted = set(granted)
        elif run.for_task is not None:
            wanted = set()
        else:
            wanted = set(entry.mcp) | {
                name
                for name in self._servers.names()
                if entry.name in self._servers.entry(name).agents
            }
        return [name for name in self._servers.names() if name in wanted]

    @contextlib.asynccontextmanager
    async def open(
        self,
        run: RunRecord,
        entry: AgentEntry,
        granted: Sequence[str] | None,
        permit: Permit | None,
    ) -> AsyncIterator[NodeToolset]:
        names = self.servers_for(run, entry, granted)
        if not names or entry.runs_commands or entry.backend not in ("inproc", "acp"):
            yield NodeToolset()
            return
        for name in names:  # a node right after a start waits for its servers, boundedly
            await settled_within(self._servers, name, self._settle_seconds)
        if permit is not None and run.for_task is not None:
            permit = _approved_with_task(permit, names)
        if entry.backend == "inproc":
            tools = mcp_tools(self._servers, names)
            if permit is not None and run.for_task is not None:
                tools = tuple(_gated_by(tool, permit) for tool in tools)
            yield NodeToolset(tools=tools)
            return
        async with contextlib.AsyncExitStack() as stack:
            endpoints = [
                await stack.enter_async_context(self._served(name, permit)) for name in names
            ]
            yield NodeToolset(endpoints=tuple(endpoints))

    @contextlib.asynccontextmanager
    async def _served(self, server: str, permit: Permit | None) -> AsyncIterator[McpEndpoint]:
        """One server's tools served on loopback for an ACP agent's session: each call is
        the in-process tool's call (the same gate, audit, fence and caps)."""
        agent_tools = {t.name: mcp_tool(self._servers, t) for t in self._servers.tools(server)}
        registry = ToolRegistry(list(agent_tools.values()))
        by_name = {name: tool.name for name, tool in agent_tools.items()}
        # Tool-server calls touch no workspace: the context carries the node's gate only.
        ctx = ToolContext(workspace=Path(), permit=permit)

        async def call(name: str, arguments: dict[str, Any]) -> ProxiedResult:
            result = await registry.dispatch(
                ToolCall(id=f"acp_{uuid.uuid4().hex[:12]}", name=by_name[name], input=arguments),
                ctx,
            )
            images = tuple(McpImage(i.media_type, i.data) for i in result.images)
            return ProxiedResult(result.content, is_error=result.is_error, images=images)

        offered = [
            ProxiedTool(name, tool.spec.description, tool.spec.input_schema)
            for name, tool in agent_tools.items()
        ]
        async with serve_tools(offered, call, name=server) as endpoint:
            yield McpEndpoint(server, endpoint.url, endpoint.headers)


def _gated_by(tool: Tool[ToolContext], permit: Permit) -> Tool[ToolContext]:
    """`tool` passing `permit` instead of the gate its agent's context carries."""
    handler = tool.handler

    async def gated(ctx: ToolContext, args: Any) -> str | ToolOutput:
        return await handler(dataclasses.replace(ctx, permit=permit), args)

    return dataclasses.replace(tool, handler=gated)


def _approved_with_task(permit: Permit, servers: Sequence[str]) -> Permit:
    """The gate of an unattended firing whose plan names `servers`: their calls count as
    approved with the task (deny rules still apply first)."""
    named = frozenset(servers)

    async def gate(
        tool: str, subject: str, detail: str = "", *, trust: ToolTrust | None = None
    ) -> Permission:
        if tool == "mcp" and trust is not None and subject.partition(":")[0] in named:
            trust = replace(trust, approved_with_task=True)
        return await permit(tool, subject, detail, trust=trust)

    return gate
