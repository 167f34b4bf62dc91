"""The `status` line of the team's tool servers: each server's state and tool count. Errors
stay on the bot's host (`raven-bot mcp list`): they may name its paths."""

from __future__ import annotations

from core.ids import ConversationRef
from mcp_client import McpServers


class ToolServerStatus:
    """One line for `status`, read fresh each time."""

    def __init__(self, servers: McpServers) -> None:
        self._servers = servers

    async def __call__(self, conv: ConversationRef) -> str:
        parts = [self._part(name) for name in self._servers.names()]
        return "Tool servers: " + ", ".join(parts) + "." if parts else ""

    def _part(self, name: str) -> str:
        state = self._servers.state(name)
        if state.status == "ready":
            tools = f"{state.tool_count} tool{'' if state.tool_count == 1 else 's'}"
            return f"`{name}` ready ({tools})"
        if state.status == "reconnecting":
            return f"`{name}` reconnecting (attempt {state.attempt})"
        if state.status == "failed":
            return f"`{name}` failed (`raven-bot mcp list` on the bot's host says why)"
        return f"`{name}` {state.status}"
