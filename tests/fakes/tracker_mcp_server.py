"""The README's `tracker` tool server, for the acceptance tests: a small issue tracker written
with the SDK's server side. `search_issues` and `get_issue` are marked read-only (what
`approval: smart` runs without asking), `create_issue` and `delete_issue` are not (the
README's `exclude` hides `delete_issue`). It needs `TRACKER_TOKEN`, as a real tracker needs
its credential, and says so when the variable is missing: the test proves mcp.json's
`${TRACKER_TOKEN}` reached it. stdio by default; `--http PORT` serves streamable HTTP on
127.0.0.1 (the README's `docs` entry), where `whoami` shows the fingerprint of the request's
bearer token. `variable_names` shows which variables the server sees (names, never values)."""

from __future__ import annotations

import hashlib
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("tracker")
READ_ONLY = ToolAnnotations(read_only_hint=True)

# A fixed backlog: results are the same on every run.
ISSUES: dict[str, str] = {
    "TRK-101": "flaky test_upload times out on CI",
    "TRK-102": "login page slow on mobile",
    "TRK-103": "flaky integration suite after the cache change",
    "TRK-104": "docs: typo in the install guide",
}
# Issues created from here on get these ids (each server process starts its own backlog).
FIRST_NEW = 200


def _token() -> str:
    """The tracker credential, or a clear error saying which variable is missing."""
    token = os.environ.get("TRACKER_TOKEN", "")
    if not token:
        raise ToolError("TRACKER_TOKEN is not set: the tracker refuses unauthenticated calls")
    return token


@server.tool(annotations=READ_ONLY)
def search_issues(query: str) -> str:
    """Issues whose title contains the query (case-insensitive), one a line."""
    _token()
    found = [f"{key} {title}" for key, title in ISSUES.items() if query.lower() in title.lower()]
    return "\n".join(found) or f"no issue matches {query!r}"


@server.tool(annotations=READ_ONLY)
def get_issue(id: str) -> str:
    """One issue by id."""
    _token()
    if id not in ISSUES:
        raise ToolError(f"no issue {id}")
    return f"{id} {ISSUES[id]} (state: open)"


@server.tool()
def create_issue(title: str) -> str:
    """Open an issue; its id."""
    _token()
    key = f"TRK-{FIRST_NEW + len(ISSUES) - 4}"
    ISSUES[key] = title
    return f"created {key}: {title}"


@server.tool()
def delete_issue(id: str) -> str:
    """Delete an issue (mcp.json's `exclude` keeps this from agents)."""
    _token()
    return f"deleted {id}" if ISSUES.pop(id, None) else f"no issue {id}"


@server.tool(annotations=READ_ONLY)
def whoami(ctx: Context) -> str:
    """Who the HTTP request says it is: its bearer token's fingerprint (`sha256:` and 12 hex
    digits), never the token itself; `anonymous` without one (and over stdio)."""
    auth = (ctx.headers or {}).get("authorization", "")
    token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else ""
    return f"sha256:{hashlib.sha256(token.encode()).hexdigest()[:12]}" if token else "anonymous"


@server.tool(annotations=READ_ONLY)
def variable_names() -> str:
    """The names (never the values) of the environment variables this server sees."""
    return " ".join(sorted(os.environ))


def main() -> None:
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        server.run(transport="streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()


if __name__ == "__main__":
    main()
