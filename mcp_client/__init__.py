"""MCP tool servers: the team's trackers, code hosts and docs as tools, through the official
`mcp` SDK (client side). `config` reads RAVEN_HOME/mcp.json; `servers` keeps one session per
server alive (reconnecting a lost one, following its tool list) and calls its tools; `launch`
is how a stdio server's process is started (the bot injects its sandbox there)."""

from mcp_client.backoff import Backoff
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
from mcp_client.launch import StdioLauncher, plain_launcher
from mcp_client.servers import McpCallError, McpCallResult, McpServers, McpTool, ServerState

__all__ = [
    "Backoff",
    "HttpServerEntry",
    "McpCallError",
    "McpCallResult",
    "McpConfig",
    "McpConfigError",
    "McpServers",
    "McpTool",
    "ServerEntry",
    "ServerState",
    "StdioLauncher",
    "StdioServerEntry",
    "ToolFilter",
    "load_mcp_config",
    "parse_mcp_config",
    "plain_launcher",
]
