"""What a Host turn is told of the team's tool servers: which exist, whether they are up,
their tools (by the names agents call them: model-safe, no server text) and which agents
have them by default, so the Host hands work that needs a tracker to an agent that has it."""

from __future__ import annotations

from host.features.mcp.tools import agent_tool_name
from host.runtime.turn import TurnContext
from mcp_client import McpServers

# Enough to tell what a server is for without filling the prompt.
SHOWN_TOOLS = 12


class ToolServersContext:
    """The Host's block about the tool servers, read fresh each turn."""

    def __init__(self, servers: McpServers, defaults: dict[str, list[str]]) -> None:
        self._servers = servers
        # server -> the agents that have it by default (mcp.json `agents`, agents.toml `mcp`)
        self._defaults = defaults

    async def context(self, ctx: TurnContext) -> str:
        lines = [self._line(name) for name in self._servers.names()]
        if not lines:
            return ""
        return "\n".join(
            [
                "## Team tool servers (MCP)",
                "Agents call these servers' tools themselves; the bot asks people before calls "
                "that need approval. Give work that needs one to an agent that has it.",
                *lines,
            ]
        )

    def _line(self, name: str) -> str:
        state = self._servers.state(name)
        agents = ", ".join(f"`{a}`" for a in self._defaults.get(name, [])) or "no agent"
        if state.status != "ready":
            return f"- `{name}` ({state.status}: no tools from it right now), for {agents}"
        tools = [agent_tool_name(name, t.name) for t in self._servers.tools(name)]
        shown = ", ".join(f"`{t}`" for t in tools[:SHOWN_TOOLS])
        more = f" and {len(tools) - SHOWN_TOOLS} more" if len(tools) > SHOWN_TOOLS else ""
        return f"- `{name}`: {shown or 'no tools'}{more}; agents that have it: {agents}"
