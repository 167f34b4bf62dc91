"""The loopback MCP endpoint the bot serves an ACP agent for one task (mcp_client/proxy.py),
driven by the SDK's own streamable-HTTP client: it lists exactly the tools given, hands each
call to the bot's callback, refuses requests without its token, binds loopback only, and
leaves nothing behind when its context ends, a held connection and a waiting call included."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

from mcp_client.proxy import (
    ProxiedResult,
    ProxiedTool,
    ProxyEndpoint,
    serve_tools,
)
from mcp_client.results import McpImage
from tests.helpers import eventually

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
TOOLS = (
    ProxiedTool("search", "Search the tracker", SCHEMA),
    ProxiedTool("get_issue", "One issue by number", {"type": "object"}),
)
PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()


class Calls:
    """The bot's side of the endpoint: records each call and answers as told."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, name: str, arguments: dict[str, Any]) -> ProxiedResult:
        self.seen.append((name, arguments))
        if name == "get_issue":
            return ProxiedResult("refused by the gate: not allowed here", is_error=True)
        return ProxiedResult(f"found {arguments.get('q')}", images=(McpImage("image/png", PIXEL),))


@asynccontextmanager
async def client(
    endpoint: ProxyEndpoint, headers: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session on the endpoint (its own headers unless given)."""
    sent = dict(endpoint.headers) if headers is None else headers
    async with (
        httpx2.AsyncClient(headers=sent) as http,
        streamable_http_client(endpoint.url, http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        yield session


async def test_an_agent_lists_exactly_the_tools_given_and_its_calls_reach_the_callback() -> None:
    calls = Calls()
    async with serve_tools(TOOLS, calls) as endpoint, client(endpoint) as session:
        listed = await session.list_tools()
        assert [(t.name, t.description, t.input_schema) for t in listed.tools] == [
            ("search", "Search the tracker", SCHEMA),
            ("get_issue", "One issue by number", {"type": "object"}),
        ]
        found = await session.call_tool("search", {"q": "flaky test"})
        refused = await session.call_tool("get_issue", {"n": 7})
        unknown = await session.call_tool("delete_repo", {})
    assert calls.seen == [("search", {"q": "flaky test"}), ("get_issue", {"n": 7})]
    assert not found.is_error
    text, image = found.content
    assert isinstance(text, types.TextContent) and text.text == "found flaky test"
    assert isinstance(image, types.ImageContent)
    assert (image.data, image.mime_type) == (PIXEL, "image/png")
    assert refused.is_error
    assert isinstance(refused.content[0], types.TextContent)
    assert refused.content[0].text == "refused by the gate: not allowed here"
    # A tool that was not granted never reaches the bot's callback.
    assert unknown.is_error
    assert isinstance(unknown.content[0], types.TextContent)
    assert "No tool `delete_repo`" in unknown.content[0].text


async def test_a_tool_offered_twice_is_refused_before_anything_is_served() -> None:
    with pytest.raises(ValueError, match="tools offered twice: search"):
        async with serve_tools((*TOOLS, TOOLS[0]), Calls()):
            pass


async def test_a_failing_callback_fails_that_call_and_the_endpoint_keeps_serving() -> None:
    async def call(name: str, arguments: dict[str, Any]) -> ProxiedResult:
        if arguments.get("q") == "boom":
            raise RuntimeError("the server went away")
        return ProxiedResult("fine")

    async with serve_tools(TOOLS, call) as endpoint, client(endpoint) as session:
        broken = await session.call_tool("search", {"q": "boom"})
        after = await session.call_tool("search", {"q": "again"})
    assert broken.is_error
    assert isinstance(broken.content[0], types.TextContent)
    assert broken.content[0].text == "The call to `search` failed in the bot (RuntimeError)."
    assert not after.is_error


async def test_requests_without_the_endpoints_token_are_refused() -> None:
    calls = Calls()
    async with serve_tools(TOOLS, calls) as endpoint:
        (header, value), *_ = endpoint.headers
        assert header == "Authorization" and value.startswith("Bearer ")
        async with serve_tools(TOOLS, calls) as other:
            assert other.headers != endpoint.headers  # a token per endpoint
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        accept = {"Accept": "application/json, text/event-stream"}
        async with httpx2.AsyncClient() as http:
            for sent in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": value[7:]}):
                answer = await http.post(endpoint.url, json=body, headers={**accept, **sent})
                assert answer.status_code == 401, sent
                assert answer.headers["www-authenticate"] == "Bearer"
        # The SDK's client with a wrong token gets no session at all.
        with pytest.raises(Exception):  # noqa: B017  (the SDK wraps the 401 in task groups)
            async with client(endpoint, {"Authorization": "Bearer wrong"}):
                pass
    assert calls.seen == []


async def test_the_endpoint_is_on_loopback_only() -> None:
    async with serve_tools(TOOLS, Calls()) as endpoint:
        where = urlsplit(endpoint.url)
        assert where.hostname == "127.0.0.1" and where.path == "/mcp"
        assert where.port is not None
        outward = _outward_address()
        if outward is not None:
            with pytest.raises(ConnectionRefusedError):
                await asyncio.open_connection(outward, where.port)


def _outward_address() -> str | None:
    """This machine's address on its default route (no packet is sent), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if address.startswith("127.") else address


async def test_closing_ends_a_held_connection_and_a_waiting_call_and_frees_the_port() -> None:
    entered = asyncio.Event()
    ended: list[str] = []

    async def waits_for_a_person(name: str, arguments: dict[str, Any]) -> ProxiedResult:
        entered.set()
        try:
            await asyncio.Event().wait()  # an approval nobody gives
        except asyncio.CancelledError:
            ended.append(name)
            raise
        raise AssertionError("an event nobody sets was set")

    tasks_before = asyncio.all_tasks()
    threads_before = threading.active_count()
    proxy = AsyncExitStack()
    endpoint = await proxy.enter_async_context(serve_tools(TOOLS, waits_for_a_person))
    port = urlsplit(endpoint.url).port
    assert port is not None
    # A raw connection that sent half a request, and a call waiting on the callback.
    _, held = await asyncio.open_connection("127.0.0.1", port)
    held.write(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    await held.drain()
    # The agent's client lives in its own task (in life, its own process).
    leave = asyncio.Event()
    outcome: list[str] = []

    async def agent() -> None:
        async with client(endpoint) as session:
            try:
                await session.call_tool("search", {"q": "x"})
            except Exception as exc:  # whatever the client makes of a server that went away
                outcome.append(type(exc).__name__)
            await leave.wait()

    agent_task = asyncio.create_task(agent())
    await entered.wait()
    started = time.monotonic()
    await proxy.aclose()  # the node's task ends with both still open
    took = time.monotonic() - started
    assert ended == ["search"]
    await eventually(lambda: outcome, what="the waiting call to fail")
    leave.set()
    with contextlib.suppress(Exception):  # its own goodbye to a closed port may fail
        await asyncio.wait_for(agent_task, 10)
    held.close()
    assert took < 2, took
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", port)
    assert asyncio.all_tasks() <= tasks_before | {asyncio.current_task()}
    assert threading.active_count() == threads_before


async def test_a_node_stopped_while_a_call_waits_still_closes_its_endpoint() -> None:
    entered = asyncio.Event()
    ended: list[str] = []
    opened: list[ProxyEndpoint] = []

    async def never_answers(name: str, arguments: dict[str, Any]) -> ProxiedResult:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            ended.append(name)
            raise
        raise AssertionError("an event nobody sets was set")

    async def node() -> None:
        async with serve_tools(TOOLS, never_answers) as endpoint:
            opened.append(endpoint)
            await asyncio.Event().wait()  # the node's turn, until it is stopped

    async def agent(endpoint: ProxyEndpoint) -> None:
        async with client(endpoint) as session:
            with contextlib.suppress(Exception):
                await session.call_tool("search", {"q": "x"})

    tasks_before = asyncio.all_tasks()
    running = asyncio.create_task(node())
    await eventually(lambda: opened, what="the endpoint to open")
    port = urlsplit(opened[0].url).port
    calling = asyncio.create_task(agent(opened[0]))
    await entered.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert ended == ["search"]
    with contextlib.suppress(Exception):
        await asyncio.wait_for(calling, 10)
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", port)
    assert asyncio.all_tasks() <= tasks_before | {asyncio.current_task()}
