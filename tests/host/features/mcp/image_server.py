"""A loopback MCP server (stdio) whose one tool answers with a caption and a PNG, for the
image path from a tool server to the model."""

from __future__ import annotations

from mcp import types
from mcp.server.mcpserver import MCPServer

# A 1x1 transparent PNG.
PNG_BASE64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5Er"
    "kJggg=="
)

server = MCPServer("raven-test-images")


@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def screenshot() -> list[types.ContentBlock]:
    """A caption, then a PNG."""
    return [
        types.TextContent(text="the dashboard"),
        types.ImageContent(data=PNG_BASE64, mime_type="image/png"),
    ]


if __name__ == "__main__":
    server.run()
