"""MCP tool servers: the team's trackers, code hosts and docs as tools, through the official
`mcp` SDK (client side). `config` reads RAVEN_HOME/mcp.json; `servers` keeps one session per
server alive and calls its tools. Not yet wired into the Host or agents."""

from mcp_client.config import (
    HttpServerEntry,
    McpConfig,
    McpConfigError,
    ServerEntry,
    StdioServerEntry,
    ToolFilter,
    load_mcp_config,
    parse_mcp_config,
)
from mcp_client.servers import McpCallError, McpCallResult, McpServers, McpTool, ServerState

__all__ = [
    "HttpServerEntry",
    "McpCallError",
    "McpCallResult",
    "McpConfig",
    "McpConfigError",
    "McpServers",
    "McpTool",
    "ServerEntry",
    "ServerState",
    "StdioServerEntry",
    "ToolFilter",
    "load_mcp_config",
    "parse_mcp_config",
]
