"""The `mcp` agent: a node whose task is one tool-server call (`SERVER TOOL {json}`), run
as `shell` runs a command. The call passes the permission gate as `mcp:<server>:<tool>`
(its question shows the exact call); the node's output is the server's answer."""

from __future__ import annotations

import time

from agents.backends.base import AgentOutcome, AgentTask, failed
from agents.models.types import Message, Usage
from agents.tools import ToolTrust
from host.features.mcp.call_text import CallTextError, ToolCallText, parse_call
from host.features.mcp.settle import settled_within
from mcp_client import McpCallError, McpServers


class McpCallBackend:
    """Runs `mcp` nodes against the bot's tool servers."""

    def __init__(self, servers: McpServers, *, settle_seconds: float) -> None:
        self._servers = servers
        self._settle_seconds = settle_seconds

    async def run(self, task: AgentTask) -> AgentOutcome:
        """Parse the call, have it allowed, make it; failures come back as the outcome."""
        started = time.monotonic()
        try:
            call = parse_call(task.message)
        except CallTextError as exc:
            return failed(task, f"The `mcp` node's task is not a tool call: {exc}.")
        problem = await self._unknown(call)
        if problem is not None:
            return failed(task, problem)
        refusal = await self._refusal(task, call)
        if refusal is not None:
            return failed(task, refusal, not_approved=True)
        try:
            result = await self._servers.call(call.server, call.tool, call.arguments)
        except McpCallError as exc:
            return failed(task, str(exc), seconds=time.monotonic() - started)
        output = result.text
        return AgentOutcome(
            output=output,
            transcript=[
                {
                    "type": "tool_server_call",
                    "call": call.shown(),
                    "is_error": result.is_error,
                    "truncated": result.truncated,
                }
            ],
            usage=Usage(),
            model_calls=0,
            seconds=time.monotonic() - started,
            history=[
                *task.history,
                Message.user_text(task.message),
                Message.assistant_text(output or "(no output)"),
            ],
            truncated=result.truncated,
            error=f"{call.server} {call.tool} reported an error" if result.is_error else None,
        )

    async def _unknown(self, call: ToolCallText) -> str | None:
        """Why the call names no tool that exists (after its server settled), or None."""
        names = self._servers.names()
        if call.server not in names:
            known = ", ".join(f"`{n}`" for n in names)
            return f"No tool server named `{call.server}` (mcp.json has {known})."
        state = await settled_within(self._servers, call.server, self._settle_seconds)
        if state.status != "ready":
            why = f": {state.error}" if state.error else ""
            return f"The tool server `{call.server}` is {state.status}{why}."
        offered = [t.name for t in self._servers.tools(call.server)]
        if call.tool not in offered:
            some = ", ".join(f"`{n}`" for n in offered[:20]) or "none"
            return (
                f"The tool server `{call.server}` offers no tool `{call.tool}` (it offers "
                f"{some}; `raven-bot mcp tools {call.server}` lists them)."
            )
        return None

    async def _refusal(self, task: AgentTask, call: ToolCallText) -> str | None:
        """Why the call may not run, or None once it is allowed.

        The gate decides (rules, remembered allows, the server's approval mode; it asks the
        requester with the exact call). A run nobody can be asked in (a scheduled firing)
        falls back to the approvals given with its task, as a `shell` command does."""
        tool = next(t for t in self._servers.tools(call.server) if t.name == call.tool)
        trust = ToolTrust(self._servers.entry(call.server).approval, tool.read_only)
        shown = call.shown()
        if task.permit is not None:
            decision = await task.permit(
                "mcp", f"{call.server}:{call.tool}", f"The call:\n{shown}", trust=trust
            )
            if decision.allowed:
                return None
            # Only "nobody can be asked" falls back: a deny rule stays a deny.
            if getattr(decision, "tier", None) != "unattended" or task.approve is None:
                return f"Tool call not approved: {decision.reason}"
        if task.approve is None:
            return "Tool call not approved: nobody can approve tool calls here."
        # The task's text, byte for byte: what a scheduled task's approval covers.
        if await task.approve(task.message.strip()):
            return None
        return f"Tool call not approved by the requester: {shown}"
