"""The `mcp` agent this capability runs itself: one tool-server call per node."""

from __future__ import annotations

from pathlib import Path

from agents.registry import AgentEntry
from host.features.mcp.environ import MCP_FILE

NOT_CONFIGURED = "no tool servers are configured (RAVEN_HOME/mcp.json)"


def mcp_agent(home: Path) -> AgentEntry:
    """The entry; off, saying why, when RAVEN_HOME has no mcp.json."""
    configured = (home / MCP_FILE).is_file()
    return AgentEntry(
        name="mcp",
        description="Runs one call of a team tool server (RAVEN_HOME/mcp.json) as its task, "
        'written `SERVER TOOL {"json": "arguments"}`; the call passes the permission gate '
        "like any tool call.",
        backend="feature",
        stateful=False,
        file_capable=False,
        progress=False,
        enabled=configured,
        role="raven",
        timeout_seconds=600,
        # Its task is run exactly as approved: no context, skills or continuation is added.
        runs_commands=True,
        disabled_reason=""
        if configured
        else "no tool servers are configured (RAVEN_HOME/mcp.json)",
    )
