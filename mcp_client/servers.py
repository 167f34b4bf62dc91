"""The MCP servers of mcp.json, connected in the background: each server's session lives in a
task of its own (the SDK's anyio contexts are entered and left in the same task), its state is
connecting, ready, reconnecting, failed or closed, and a call to it is bounded by the server's
timeout (starting, by the manager's connect timeout). A server that fails or misbehaves fails
its own calls, never the manager or the other servers.

A server that fails to start stays failed (a misconfigured one would only fail again). One that
was ready and lost its connection (it exited, crashed mid-call, its HTTP server went away) is
reconnected in the background with capped exponential backoff until `close()`; its calls fail
meanwhile, saying so. A server's `notifications/tools/list_changed` makes its task list the
tools again, so agents see the current tools at their next turn."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx2
from mcp import ClientSession, types
from mcp.client.session import IncomingMessage
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import MCP_SESSION_ID, streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types.jsonrpc import CONNECTION_CLOSED, METHOD_NOT_FOUND

from mcp_client.backoff import Backoff
from mcp_client.config import HttpServerEntry, McpConfig, ServerEntry, StdioServerEntry
from mcp_client.guard import refuse_private_network
from mcp_client.launch import StdioLauncher, plain_launcher
from mcp_client.results import McpCallResult, result_text
from mcp_client.stderr import StderrTail
from mcp_client.watch import WatchedReadStream

_log = logging.getLogger(__name__)

RESULT_CAP = 100_000
# How long a failed server's stderr may take to reach us (a grandchild may hold the pipe).
STDERR_SETTLE = 2.0
# Bounds the pages of tools/list a server may send (a hostile one could page forever).
MAX_TOOL_PAGES = 50
CLOSE_GRACE = 10.0
# Starting is not a call: `npx -y some-server` may download packages first.
CONNECT_TIMEOUT = 60.0
# An idle HTTP session has no stream end to watch: a ping this often finds a server gone.
HEALTH_INTERVAL = 30.0
# A session lost sooner than this after it was ready keeps the backoff growing, so a server
# that dies at every start is not restarted at the first delay forever.
STABLE_SECONDS = 60.0

Status = Literal["connecting", "ready", "reconnecting", "failed", "closed"]


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
    # Why it failed; while reconnecting, the latest reason (the loss, then each attempt's).
    error: str | None = None
    # The last lines a stdio server wrote to stderr (why it would not start, usually).
    stderr_tail: str = ""
    # Reconnection attempts since the connection was lost (0 unless reconnecting).
    attempt: int = 0
    # Seconds from starting the connection (spawning, connecting) to the answer to
    # `initialize`, for the last connection that got one.
    initialize_seconds: float | None = None
    # Tools offered (after the filter) at the last listing.
    tool_count: int = 0


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
    # Something for the session's task to do: close, a lost connection, changed tools.
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    lost: str | None = None
    tools_stale: bool = False
    attempt: int = 0
    # Consecutive sessions lost within STABLE_SECONDS of being ready.
    flaps: int = 0
    ready_at: float = 0.0
    initialize_seconds: float | None = None
    calls_in_flight: int = 0

    def state(self) -> ServerState:
        tail = self.stderr.text() if self.stderr is not None else ""
        return ServerState(
            status=self.status,
            error=self.error,
            stderr_tail=tail,
            attempt=self.attempt,
            initialize_seconds=self.initialize_seconds,
            tool_count=len(self.tools),
        )

    def ready(self, session: ClientSession) -> None:
        self.session, self.status, self.error, self.attempt = session, "ready", None, 0
        self.ready_at = time.monotonic()
        self.settled.set()

    def lose(self, reason: str) -> None:
        """The ready session ended (first reason wins): calls fail from now on, and the task
        wakes to reconnect. Nothing to do while closing or not ready."""
        if self.status != "ready" or self.stop.is_set():
            return
        self.status, self.error, self.lost, self.session = "reconnecting", reason, reason, None
        self.attempt = 1  # the first reconnection, about to be waited for
        self.wake.set()

    def tools_changed(self) -> None:
        self.tools_stale = True
        self.wake.set()

    def fail(self, error: str) -> None:
        # The first failure is the one worth reporting (later ones are its echoes).
        if self.status != "failed":
            self.status, self.error = "failed", error
        self.session = None
        self.settled.set()

    def closed(self) -> None:
        if self.status != "failed":
            self.status = "closed"
        self.session = None
        self.settled.set()

    async def on_message(self, message: IncomingMessage) -> None:
        """The session's message handler: runs in the session's read loop, so it only flags
        the change; the server's own task lists the tools again."""
        if isinstance(message, types.ToolListChangedNotification):
            self.tools_changed()


class McpServers:
    """Every configured server: `start()` begins connecting (never waits), `tools()` and
    `call()` use the servers that are ready, `close()` ends every session and child process.

    `launcher` starts stdio servers (the bot passes its sandboxed one); `backoff` paces
    reconnection; `health_interval` is how often an idle HTTP session is pinged."""

    def __init__(
        self,
        config: McpConfig,
        *,
        result_cap: int = RESULT_CAP,
        connect_timeout: float = CONNECT_TIMEOUT,
        launcher: StdioLauncher = plain_launcher,
        backoff: Backoff | None = None,
        health_interval: float = HEALTH_INTERVAL,
    ) -> None:
        self._result_cap = result_cap
        self._connect_timeout = connect_timeout
        self._launcher = launcher
        self._backoff = backoff or Backoff()
        self._health_interval = health_interval
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
        """Wait until the server's first start is ready or failed (for the CLI and doctor)."""
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
        connection, session = self._ready_for(server, tool)
        timeout = connection.entry.timeout
        connection.calls_in_flight += 1
        try:
            async with asyncio.timeout(timeout):
                result = await session.call_tool(tool, arguments)
        except TimeoutError:
            raise McpCallError(f"{server}/{tool} did not answer within {timeout:g} s") from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED and connection.stop.is_set():
                raise McpCallError(f"{server}/{tool} failed: the server was closed") from None
            if connection.lost is not None:  # the session ended under this call; why
                raise McpCallError(f"{server}/{tool} failed: {connection.lost}") from None
            if exc.code == CONNECTION_CLOSED:
                # The server died (or hung up) mid-call: its task reconnects.
                connection.lose(f"connection lost during a call to {tool}")
                raise McpCallError(
                    f"{server}/{tool} failed: the server closed the connection"
                ) from None
            raise McpCallError(f"{server}/{tool} failed: {exc.message}") from None
        except Exception as exc:  # a broken server fails its call, not the caller's loop
            raise McpCallError(f"{server}/{tool} failed: {_describe(exc)}") from None
        finally:
            connection.calls_in_flight -= 1
        return result_text(result, self._result_cap)

    def _ready_for(self, server: str, tool: str) -> tuple[_Connection, ClientSession]:
        """The server's connection and live session, or the `McpCallError` saying why not."""
        connection = self._connections.get(server)
        if connection is None:
            raise McpCallError(f"no MCP server named {server!r}")
        if connection.stop.is_set() and connection.status in ("ready", "reconnecting"):
            raise McpCallError(f"MCP server {server} is closed")
        if connection.status == "reconnecting":
            raise McpCallError(
                f"MCP server {server} is reconnecting (attempt {connection.attempt}, last error:"
                f" {connection.error}); try again shortly"
            )
        session = connection.session
        if session is None or connection.status != "ready":
            raise McpCallError(f"MCP server {server} is {connection.status}, not ready")
        if not any(offered.name == tool for offered in connection.tools):
            raise McpCallError(f"MCP server {server} offers no tool {tool!r}")
        return connection, session

    async def close(self) -> None:
        tasks = []
        for connection in self._connections.values():
            connection.stop.set()
            connection.wake.set()
            if connection.task is None:
                continue
            if connection.status in ("connecting", "reconnecting"):
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
        """The server's whole life, in this one task: connect, serve, reconnect when lost."""
        try:
            try:
                lost = await self._attempt(connection)
            except Exception as exc:  # one server's failure stays its own
                connection.fail(_start_failure(exc, self._connect_timeout))
                return
            while lost is not None and not connection.stop.is_set():
                lost = await self._reconnect(connection, lost)
        except asyncio.CancelledError:
            if connection.status == "connecting":
                connection.fail("closed before it finished")
            else:
                connection.closed()
            raise
        connection.closed()

    async def _attempt(self, connection: _Connection) -> str | None:
        """One connection: start it and list its tools (raising if that fails), then serve
        it until closed (None) or lost (why)."""
        began = time.monotonic()
        connection.lost, connection.tools_stale = None, False
        connection.wake.clear()
        became_ready = False
        try:
            async with self._transport(connection) as (read, write):
                watched = WatchedReadStream(
                    read, lambda: connection.lose("the server closed the connection")
                )
                async with ClientSession(
                    watched, write, message_handler=connection.on_message
                ) as session:
                    async with asyncio.timeout(self._connect_timeout):
                        await session.initialize()
                        initialized = time.monotonic() - began
                        tools = await _list_tools(connection, session)
                    connection.tools, connection.initialize_seconds = tools, initialized
                    connection.ready(session)
                    became_ready = True
                    return await self._serve(connection, session)
        except Exception as exc:
            if not became_ready:
                raise
            connection.lose(f"connection lost: {_describe(exc)}")
            return connection.lost or f"connection lost: {_describe(exc)}"

    async def _serve(self, connection: _Connection, session: ClientSession) -> str | None:
        """Wait on the ready session: list the tools again when the server says they changed,
        ping an idle HTTP session; until closed (None) or lost (why)."""
        http = isinstance(connection.entry, HttpServerEntry)
        while True:
            if connection.stop.is_set():
                return None
            if connection.lost is not None:
                return connection.lost
            if connection.tools_stale:
                connection.tools_stale = False
                await self._relist(connection, session)
                continue
            woke = True
            try:
                async with asyncio.timeout(self._health_interval if http else None):
                    await connection.wake.wait()
            except TimeoutError:
                woke = False
            connection.wake.clear()
            if not woke and connection.calls_in_flight == 0:
                await self._ping(connection, session)

    async def _relist(self, connection: _Connection, session: ClientSession) -> None:
        timeout = connection.entry.timeout
        try:
            async with asyncio.timeout(timeout):
                connection.tools = await _list_tools(connection, session)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                connection.lose("connection lost while listing its changed tools")
            else:  # keep the tools it had: they were valid a moment ago
                _log.warning(
                    "MCP server %s: listing changed tools failed: %s", connection.name, exc
                )
        except TimeoutError:
            _log.warning(
                "MCP server %s: no answer to tools/list within %g s", connection.name, timeout
            )

    async def _ping(self, connection: _Connection, session: ClientSession) -> None:
        timeout = connection.entry.timeout
        try:
            async with asyncio.timeout(timeout):
                await session.send_ping()
        except TimeoutError:
            connection.lose(f"no answer to a ping within {timeout:g} s")
        except MCPError as exc:
            # A server that does not know ping is alive all the same.
            if exc.code != METHOD_NOT_FOUND:
                connection.lose(f"connection lost: {exc.message}")

    async def _reconnect(self, connection: _Connection, reason: str) -> str | None:
        """Reconnect a lost session, waiting longer before each attempt, until it is ready
        again (then return how that session ended) or the manager closes (None)."""
        if time.monotonic() - connection.ready_at < STABLE_SECONDS:
            connection.flaps += 1
        else:
            connection.flaps = 0
        connection.status, connection.error, connection.session = "reconnecting", reason, None
        connection.attempt = 0  # counted up just below, without a pause in between
        _log.warning("MCP server %s: %s; reconnecting", connection.name, reason)
        while not connection.stop.is_set():
            connection.attempt += 1
            delay = self._backoff.delay(connection.attempt + max(connection.flaps - 1, 0))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await connection.stop.wait()
            if connection.stop.is_set():
                return None
            try:
                lost = await self._attempt(connection)
            except Exception as exc:
                connection.error = _start_failure(exc, self._connect_timeout)
                _log.info(
                    "MCP server %s: reconnect attempt %d failed: %s",
                    connection.name,
                    connection.attempt,
                    connection.error,
                )
                continue
            _log.info("MCP server %s: reconnected", connection.name)
            return lost
        return None

    @contextlib.asynccontextmanager
    async def _transport(self, connection: _Connection) -> AsyncIterator[tuple[Any, Any]]:
        entry = connection.entry
        if isinstance(entry, StdioServerEntry):
            async with self._stdio(connection, entry) as streams:
                yield streams
            return
        assert isinstance(entry, HttpServerEntry)
        if not entry.allow_private_network:
            await refuse_private_network(entry.url)

        async def forgotten(response: httpx2.Response) -> None:
            # HTTP 404 to a request in a session: the server (restarted, say) no longer knows
            # it, and the spec says to start a new one. The SDK passes on only the body's
            # error, whose wording is each server's own, so the status is read here.
            request = response.request
            if (
                response.status_code == 404
                and request.method != "DELETE"
                and MCP_SESSION_ID in request.headers
            ):
                connection.lose("the server no longer knows this session (HTTP 404)")

        async with (
            httpx2.AsyncClient(
                headers=entry.headers, event_hooks={"response": [forgotten]}
            ) as http,
            streamable_http_client(entry.url, http_client=http) as streams,
        ):
            yield streams

    @contextlib.asynccontextmanager
    async def _stdio(
        self, connection: _Connection, entry: StdioServerEntry
    ) -> AsyncIterator[tuple[Any, Any]]:
        """The server's process, with a fresh stderr tail for this run of it (the last run's
        stays readable until the next one starts)."""
        params = await self._launcher(connection.name, entry)
        if connection.stderr is not None:
            await connection.stderr.close()
        connection.stderr = tail = StderrTail()
        await tail.open()
        failed = False
        try:
            async with stdio_client(params, errlog=tail.writer) as streams:
                tail.spawned()
                yield streams
        except Exception:
            failed = True
            raise
        finally:
            if failed and not connection.stop.is_set():
                # Its last words are why it failed: read them before anyone reports.
                await tail.finished(STDERR_SETTLE)
            tail.spawned()


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
