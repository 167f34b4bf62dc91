"""A loopback MCP server for tests, written with the SDK's server side: stdio by default,
streamable HTTP with `--http PORT` (on 127.0.0.1). `--fail-start` writes to stderr and exits
before speaking MCP, as a misconfigured server does."""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("raven-test")


@server.tool(annotations={"readOnlyHint": True})
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers (a write tool for the filters: no read-only hint)."""
    return a + b


@server.tool(annotations={"readOnlyHint": True})
def environment() -> dict[str, str]:
    """The server process's environment."""
    return dict(os.environ)


@server.tool(annotations={"readOnlyHint": True})
def header(name: str, ctx: Context) -> str:
    """One header of the HTTP request that carried this call (empty over stdio)."""
    return (ctx.headers or {}).get(name.lower(), "")


@server.tool()
async def hang() -> str:
    """Never answers (says on stderr that it started)."""
    print("fake-mcp: hanging", file=sys.stderr, flush=True)
    await asyncio.Event().wait()
    return "unreachable"


@server.tool()
def huge(size: int) -> str:
    """A result of `size` characters."""
    return "x" * size


@server.tool()
def crash() -> str:
    """The server dies mid-call."""
    os._exit(3)


@server.tool()
def fails() -> str:
    """A tool that reports an error."""
    raise ToolError("the tracker is down")


def main() -> None:
    if "--silent" in sys.argv:  # reads requests, never answers
        for _ in sys.stdin:
            pass
        return
    if "--garbage" in sys.argv:  # not JSON-RPC at all
        for _ in sys.stdin:
            print("this is not json {", flush=True)
        return
    if "--flood" in sys.argv:  # 20 MB of stderr, then a last word
        for n in range(200_000):
            print(f"noise {n} " + "." * 90, file=sys.stderr)
        print("fake-mcp: giving up", file=sys.stderr, flush=True)
        sys.exit(2)
    if "--fail-start" in sys.argv:
        print("fake-mcp: cannot read credentials file /nowhere", file=sys.stderr, flush=True)
        sys.exit(2)
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        server.run(transport="streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()


if __name__ == "__main__":
    main()
