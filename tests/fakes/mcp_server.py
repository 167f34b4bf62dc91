"""A loopback MCP server for tests, written with the SDK's server side: stdio by default,
streamable HTTP with `--http PORT` (on 127.0.0.1). `--fail-start` writes to stderr and exits
before speaking MCP, as a misconfigured server does. `--probes` adds `read_file` and
`list_dir` (what a sandboxed server can see) and `toggle_extra`, which adds or removes a tool
and sends `notifications/tools/list_changed` as a server whose tools change does (behind a flag
so the default tool list, which other tests count, stays as it is). `--dotted` adds a tool
named `issues.search` (a name no model accepts as it is)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("raven-test")
READ_ONLY = ToolAnnotations(read_only_hint=True)


@server.tool(annotations=READ_ONLY)
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers (a write tool for the filters: no read-only hint)."""
    return a + b


@server.tool(annotations=READ_ONLY)
def environment() -> dict[str, str]:
    """The server process's environment."""
    return dict(os.environ)


@server.tool(annotations=READ_ONLY)
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


def read_file(path: str) -> str:
    """A file's text, or why it cannot be read (what a sandboxed server may see)."""
    try:
        return Path(path).read_text()
    except OSError as exc:
        return f"unreadable: {type(exc).__name__}"


def list_dir(path: str) -> str:
    """A directory's entries, one a line, or why it cannot be listed."""
    try:
        return "\n".join(sorted(entry.name for entry in Path(path).iterdir()))
    except OSError as exc:
        return f"unlistable: {type(exc).__name__}"


def extra() -> str:
    """A tool that comes and goes."""
    return "extra here"


async def toggle_extra(ctx: Context) -> str:
    """Add the `extra` tool, or remove it if present, and tell the client the list changed."""
    if any(tool.name == "extra" for tool in await server.list_tools()):
        server.remove_tool("extra")
        state = "removed"
    else:
        server.add_tool(extra)
        state = "added"
    await ctx.session.send_tool_list_changed()
    return state


def add_probes() -> None:
    server.add_tool(read_file, annotations=READ_ONLY)
    server.add_tool(list_dir, annotations=READ_ONLY)
    server.add_tool(toggle_extra)


def issues_search(query: str) -> str:
    """A tool whose name has a dot, as some servers name theirs (`--dotted`)."""
    return f"no issue matches {query}"


def add_flagged_tools() -> None:
    """The tools only some tests want (the default list is counted by others)."""
    if "--probes" in sys.argv:
        add_probes()
    if "--dotted" in sys.argv:
        server.add_tool(issues_search, name="issues.search", annotations=READ_ONLY)


def main() -> None:
    add_flagged_tools()
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
