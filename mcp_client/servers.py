"""The MCP servers of mcp.json, connected in the background: each server's session lives in a
task of its own (the SDK's anyio contexts are entered and left in the same task), its state is
connecting, ready or failed, and a call to it is bounded by the server's timeout (starting,
by the manager's connect timeout). A server
that fails or misbehaves fails its own calls, never the manager or the other servers.

Not yet here: reconnecting with backoff, following `tools/list_changed`, the bubblewrap
sandbox for stdio servers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx2
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types.jsonrpc import CONNECTION_CLOSED

from mcp_client.config import HttpServerEntry, McpConfig, ServerEntry, StdioServerEntry
from mcp_client.guard import refuse_private_network
from mcp_client.results import McpCallResult, result_text
from mcp_client.stderr import StderrTail

RESULT_CAP = 100_000
# How long a failed server's stderr may take to reach us (a grandchild may hold the pipe).
STDERR_SETTLE = 2.0
# Bounds the pages of tools/list a server may send (a hostile one could page forever).
MAX_TOOL_PAGES = 50
CLOSE_GRACE = 10.0
# Starting is not a call: `npx -y some-server` may download packages first.
CONNECT_TIMEOUT = 60.0

Status = Literal["connecting", "ready", "failed", "closed"]


class McpCallError(RuntimeError):
    """A tool call failed: unknown server or tool, server not ready, no answer in time, the
    connection broke. The message says which and is safe to show."""


@dataclass(frozen=True)
class McpTool:
    """One tool a server offers (after the server's include/exclude filter)."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    # The server's own hint; trusted only where an admin chose `approval: smart`.
    read_only: bool


@dataclass(frozen=True)
class ServerState:
    status: Status
    error: str | None = None
    # The last lines a stdio server wrote to stderr (why it would not start, usually).
    stderr_tail: str = ""


@dataclass
class _Connection:
    """One server's session, owned by its task."""

    name: str
    entry: ServerEntry
    status: Status = "connecting"
    error: str | None = None
    session: ClientSession | None = None
    tools: list[McpTool] = field(default_factory=list)
    stderr: StderrTail | None = None
    task: asyncio.Task[None] | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    settled: asyncio.Event = field(default_factory=asyncio.Event)

    def state(self) -> ServerState:
        tail = self.stderr.text() if self.stderr is not None else ""
        return ServerState(status=self.status, error=self.error, stderr_tail=tail)

    def fail(self, error: str) -> None:
        # The first failure is the one worth reporting (later ones are its echoes).
        if self.status != "failed":
            self.status, self.error = "failed", error
        self.session = None
        self.settled.set()


class McpServers:
    """Every configured server: `start()` begins connecting (never waits), `tools()` and
    `call()` use the servers that are ready, `close()` ends every session and child process."""

    def __init__(
        self,
        config: McpConfig,
        *,
        result_cap: int = RESULT_CAP,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        self._result_cap = result_cap
        self._connect_timeout = connect_timeout
        self._connections = {
            name: _Connection(name, entry) for name, entry in config.servers.items()
        }

    def names(self) -> list[str]:
        return list(self._connections)

    def entry(self, server: str) -> ServerEntry:
        return self._connection(server).entry

    async def start(self) -> None:
        for connection in self._connections.values():
            if connection.task is None:
                connection.task = asyncio.create_task(
                    self._run(connection), name=f"mcp-server-{connection.name}"
                )

    async def settled(self, server: str) -> ServerState:
        """Wait until the server is ready or failed (for the CLI and doctor)."""
        connection = self._connection(server)
        await connection.settled.wait()
        return connection.state()

    def state(self, server: str) -> ServerState:
        return self._connection(server).state()

    def tools(self, server: str) -> list[McpTool]:
        connection = self._connection(server)
        return list(connection.tools) if connection.status == "ready" else []

    def all_tools(self) -> list[McpTool]:
        return [tool for name in self._connections for tool in self.tools(name)]

    async def call(self, server: str, tool: str, arguments: dict[str, Any]) -> McpCallResult:
        connection = self._connections.get(server)
        if connection is None:
            raise McpCallError(f"no MCP server named {server!r}")
        if connection.stop.is_set() and connection.status == "ready":  # closing
            raise McpCallError(f"MCP server {server} is closed")
        session = connection.session
        if session is None or connection.status != "ready":
            raise McpCallError(f"MCP server {server} is {connection.status}, not ready")
        if not any(offered.name == tool for offered in connection.tools):
            raise McpCallError(f"MCP server {server} offers no tool {tool!r}")
        timeout = connection.entry.timeout
        try:
            async with asyncio.timeout(timeout):
                result = await session.call_tool(tool, arguments)
        except TimeoutError:
            raise McpCallError(f"{server}/{tool} did not answer within {timeout:g} s") from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED and connection.stop.is_set():
                raise McpCallError(f"{server}/{tool} failed: the server was closed") from None
            if exc.code == CONNECTION_CLOSED:
                # The server died (or hung up) mid-call: end its session and say so.
                connection.fail(f"connection lost during a call to {tool}")
                connection.stop.set()
                raise McpCallError(
                    f"{server}/{tool} failed: the server closed the connection"
                ) from None
            raise McpCallError(f"{server}/{tool} failed: {exc.message}") from None
        except Exception as exc:  # a broken server fails its call, not the caller's loop
            raise McpCallError(f"{server}/{tool} failed: {_describe(exc)}") from None
        return result_text(result, self._result_cap)

    async def close(self) -> None:
        tasks = []
        for connection in self._connections.values():
            connection.stop.set()
            if connection.task is None:
                continue
            if connection.status == "connecting":
                # Still starting (maybe never will): no reason to wait for it. The SDK's
                # shutdown is shielded, so cancelling still ends the child process.
                connection.task.cancel()
            tasks.append(connection.task)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=CLOSE_GRACE)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        for connection in self._connections.values():
            if connection.stderr is not None:
                await connection.stderr.close()

    async def __aenter__(self) -> McpServers:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def _connection(self, server: str) -> _Connection:
        try:
            return self._connections[server]
        except KeyError:
            raise KeyError(f"no MCP server named {server!r}") from None

    async def _run(self, connection: _Connection) -> None:
        """The session's whole life, in this one task: connect, list tools, wait for close."""
        try:
            async with (
                self._transport(connection) as (read, write),
                ClientSession(read, write) as session,
            ):
                async with asyncio.timeout(self._connect_timeout):
                    await session.initialize()
                    connection.tools = await _list_tools(connection, session)
                connection.session, connection.status = session, "ready"
                connection.settled.set()
                await connection.stop.wait()
                connection.session = None
        except asyncio.CancelledError:
            connection.fail("closed before it finished")
            raise
        except Exception as exc:  # one server's failure stays its own
            if connection.stderr is not None:
                # Its last words are why it failed: read them before reporting.
                await connection.stderr.finished(STDERR_SETTLE)
            if connection.status == "ready":
                connection.fail(f"connection lost: {_describe(exc)}")
            else:
                connection.fail(_start_failure(exc, self._connect_timeout))
        else:
            # A call may have failed the connection meanwhile (a server that died mid-call).
            connection.status = "closed" if connection.error is None else "failed"
            connection.session = None
            connection.settled.set()

    @contextlib.asynccontextmanager
    async def _transport(self, connection: _Connection) -> AsyncIterator[tuple[Any, Any]]:
        entry = connection.entry
        if isinstance(entry, StdioServerEntry):
            connection.stderr = tail = StderrTail()
            await tail.open()
            # An explicit env: the SDK adds only its safe defaults (HOME, PATH, ...), never
            # the bot's own environment.
            params = StdioServerParameters(
                command=entry.command, args=entry.args, env=dict(entry.env)
            )
            async with stdio_client(params, errlog=tail.writer) as streams:
                tail.spawned()
                yield streams
            return
        assert isinstance(entry, HttpServerEntry)
        if not entry.allow_private_network:
            await refuse_private_network(entry.url)
        async with (
            httpx2.AsyncClient(headers=entry.headers) as http,
            streamable_http_client(entry.url, http_client=http) as streams,
        ):
            yield streams


async def _list_tools(connection: _Connection, session: ClientSession) -> list[McpTool]:
    tools: list[McpTool] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(
            _tool(connection.name, tool)
            for tool in page.tools
            if connection.entry.tools.allows(tool.name)
        )
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _tool(server: str, tool: types.Tool) -> McpTool:
    hints = tool.annotations
    return McpTool(
        server=server,
        name=tool.name,
        description=tool.description or "",
        input_schema=tool.input_schema,
        read_only=bool(hints and hints.read_only_hint),
    )


def _start_failure(exc: BaseException, timeout: float) -> str:
    inner = _innermost(exc)
    if isinstance(inner, TimeoutError):
        return f"no answer to initialize within {timeout:g} s"
    if isinstance(inner, MCPError) and inner.code == CONNECTION_CLOSED:
        return "the server closed the connection while starting (see its stderr)"
    return _describe(inner)


def _innermost(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    """The innermost meaningful message of an exception (task groups wrap them)."""
    exc = _innermost(exc)
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if str(exc) else text


__all__ = [
    "McpCallError",
    "McpCallResult",
    "McpServers",
    "McpTool",
    "ServerState",
]
