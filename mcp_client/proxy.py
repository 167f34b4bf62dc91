"""A loopback MCP endpoint the bot serves for one node's task, so an ACP agent (a third-party
coding agent in its sandbox) can use the team's tools without ever holding their secrets.

The agent is given a URL on 127.0.0.1 (a fresh port) and a bearer token made for this one
endpoint; it sees exactly the tools it was granted, and every call it makes is handed to the
bot's callback, which runs the permission gate and the real call. The endpoint is the SDK's
own streamable-HTTP server side (stateless, JSON responses: nothing is held between
requests), served by uvicorn without its signal handling (the bot owns its signals). Leaving
the context closes the port and ends every request still open, an agent's held connection
and a call waiting on its callback included.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from mcp_client.results import McpImage

PATH = "/mcp"
HOST = "127.0.0.1"
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProxiedTool:
    """A tool the endpoint offers, as the agent sees it (name, description, JSON schema)."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True)
class ProxiedResult:
    """What the bot's callback answers a call with: text (a refusal by the gate is an error
    result saying why), whether it is an error, and any images."""

    text: str
    is_error: bool = False
    images: tuple[McpImage, ...] = ()


ProxiedCall = Callable[[str, dict[str, Any]], Awaitable[ProxiedResult]]


@dataclass(frozen=True)
class ProxyEndpoint:
    """Where the agent reaches the endpoint: its URL and the headers that authenticate it."""

    url: str
    headers: tuple[tuple[str, str], ...]


@contextlib.asynccontextmanager
async def serve_tools(
    tools: Sequence[ProxiedTool], call: ProxiedCall, *, name: str = "raven-bot"
) -> AsyncIterator[ProxyEndpoint]:
    """Serve `tools` on a fresh loopback port until the context exits; each call goes to
    `call(tool_name, arguments)`. A call to a tool not in `tools` never reaches `call`."""
    names = [tool.name for tool in tools]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"tools offered twice: {', '.join(twice)}; give each name once")
    token = secrets.token_urlsafe(32)
    manager = StreamableHTTPSessionManager(
        app=_mcp_server(tools, call, name),
        json_response=True,
        stateless=True,
        security_settings=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[f"{HOST}:*"],
            allowed_origins=[f"http://{HOST}:*"],
        ),
    )
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((HOST, 0))
        listener.listen(16)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        async with manager.run():
            server = uvicorn.Server(
                uvicorn.Config(
                    _Guarded(manager, token),
                    lifespan="off",
                    log_config=None,
                    access_log=False,
                    ws="none",  # MCP over streamable HTTP is plain HTTP
                )
            )
            server.config.load()
            server.lifespan = server.config.lifespan_class(server.config)
            # `startup`, not `serve`: `serve` would take over the process's signal handlers.
            await server.startup(sockets=[listener])
            try:
                yield ProxyEndpoint(
                    url=f"http://{HOST}:{port}{PATH}",
                    headers=(("Authorization", f"Bearer {token}"),),
                )
            finally:
                await _stop_even_if_cancelled(server)
    finally:
        listener.close()


async def _stop_even_if_cancelled(server: uvicorn.Server) -> None:
    """`_stop`, seen through to its end even when the task leaving the context is cancelled
    meanwhile (the cancellation is raised once it is done)."""
    stopping = asyncio.ensure_future(_stop(server))
    try:
        await asyncio.shield(stopping)
    except asyncio.CancelledError:
        await stopping
        raise


async def _stop(server: uvicorn.Server) -> None:
    """Close the port, then end every connection and request still open (the agent may hold
    one, or wait on a call): nothing of the endpoint outlives its context."""
    for listening in server.servers:
        listening.close()
    state = server.server_state
    for connection in list(state.connections):
        connection.shutdown()
    tasks = list(state.tasks)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for connection in list(state.connections):
        transport = getattr(connection, "transport", None)
        if transport is not None:
            transport.abort()
    for listening in server.servers:
        await listening.wait_closed()


class _Guarded:
    """The ASGI app: only requests to `PATH` carrying the endpoint's token reach the SDK."""

    def __init__(self, manager: StreamableHTTPSessionManager, token: str) -> None:
        self._manager = manager
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != PATH:
            await JSONResponse({"error": "not found"}, status_code=404)(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"authorization", b"")
        if not hmac.compare_digest(given, self._expected):
            refused = JSONResponse(
                {"error": "this endpoint needs the bearer token it was given with"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
            await refused(scope, receive, send)
            return
        await self._manager.handle_request(scope, receive, send)


def _mcp_server(tools: Sequence[ProxiedTool], call: ProxiedCall, name: str) -> Server[Any]:
    listed = types.ListToolsResult(
        tools=[
            types.Tool(name=t.name, description=t.description, input_schema=dict(t.input_schema))
            for t in tools
        ]
    )
    offered = {t.name for t in tools}

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return listed

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name not in offered:
            return _error(f"No tool `{params.name}` here; the tools offered are in tools/list.")
        try:
            result = await call(params.name, dict(params.arguments or {}))
        except Exception as exc:  # the callback's failure is this call's, never the endpoint's
            # Only its type leaves: the callback answers its own errors as results, and an
            # unexpected one's text (a server's words, a path) is not the agent's to read.
            kind = type(exc).__name__
            _log.warning("a proxied call to %s failed: %s", params.name, kind)
            return _error(f"The call to `{params.name}` failed in the bot ({kind}).")
        content: list[types.ContentBlock] = [types.TextContent(type="text", text=result.text)]
        content += [
            types.ImageContent(type="image", data=image.data, mime_type=image.mime_type)
            for image in result.images
        ]
        return types.CallToolResult(content=content, is_error=result.is_error)

    return Server(name, on_list_tools=list_tools, on_call_tool=call_tool)


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
