"""A server's life after its start, against the loopback fake: reconnection with backoff (a
stdio server killed while idle or mid-call, an HTTP server gone and back on its port), close()
during reconnection, tools followed through `notifications/tools/list_changed`, and the
initialize time and tool count the state records."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from mcp_client import Backoff, McpCallError, McpServers
from tests.helpers import eventually, processes_with
from tests.mcp_client.test_servers import FAKE, ready, servers, stdio

# Quick enough for a test, slow enough to watch the state between attempts.
FAST = Backoff(first=0.05, cap=0.2)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@asynccontextmanager
async def http_fake(port: int, *flags: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """The fake over streamable HTTP on 127.0.0.1:port, once it accepts connections; killed
    on exit if still running."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        FAKE,
        "--http",
        str(port),
        *flags,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )

    async def accepts() -> bool:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return False
        writer.close()
        return True

    try:
        await eventually(accepts, within=30, what=f"the HTTP MCP server on port {port}")
        yield process
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


def http_entry(port: int) -> dict[str, object]:
    return {"type": "http", "url": f"http://127.0.0.1:{port}/mcp", "allow_private_network": True}


def tool_names(manager: McpServers, server: str) -> set[str]:
    return {tool.name for tool in manager.tools(server)}


async def test_a_stdio_server_killed_while_idle_is_started_again() -> None:
    token = f"mcp-idle-{uuid.uuid4().hex}"
    # A second before the first attempt: time to see the state while reconnecting.
    async with servers({"fake": stdio(token)}, backoff=Backoff(first=1.0)) as manager:
        await ready(manager, "fake")
        [first] = processes_with(token)
        os.kill(first, signal.SIGKILL)

        await eventually(lambda: manager.state("fake").status == "reconnecting", within=30)
        state = manager.state("fake")
        assert (state.error, state.attempt) == ("the server closed the connection", 1)
        with pytest.raises(McpCallError, match=r"is reconnecting \(attempt 1, last error: the"):
            await manager.call("fake", "echo", {"text": "x"})

        await eventually(lambda: manager.state("fake").status == "ready", within=30)
        assert processes_with(token) != [first]
        assert (manager.state("fake").error, manager.state("fake").attempt) == (None, 0)
        assert (await manager.call("fake", "echo", {"text": "again"})).text == "again"


async def test_an_http_server_gone_is_retried_until_it_is_back_on_its_port() -> None:
    port = free_port()
    # Pinged often: nothing else tells an idle HTTP session that its server is gone.
    manager = servers({"web": http_entry(port)}, backoff=FAST, health_interval=0.1)
    async with http_fake(port) as first:
        await manager.start()
        await ready(manager, "web")
        first.kill()
        await first.wait()
    try:
        await eventually(lambda: manager.state("web").attempt >= 3, within=30)
        state = manager.state("web")
        assert state.status == "reconnecting"
        assert state.error == "ConnectError: All connection attempts failed"
        assert manager.tools("web") == []
        with pytest.raises(McpCallError, match=r"^MCP server web is reconnecting \(attempt \d+"):
            await manager.call("web", "echo", {"text": "x"})

        async with http_fake(port):
            await eventually(lambda: manager.state("web").status == "ready", within=30)
            assert (await manager.call("web", "echo", {"text": "back"})).text == "back"
            assert manager.state("web").tool_count == 8
    finally:
        await manager.close()
    assert manager.state("web").status == "closed"


async def test_an_http_server_restarted_on_its_port_is_given_a_new_session() -> None:
    port = free_port()
    # No ping in this test: what finds the new server is its HTTP 404 to the old session.
    manager = servers({"web": http_entry(port)}, backoff=FAST, health_interval=600)

    async def echo_answers() -> bool:
        try:
            return (await manager.call("web", "echo", {"text": "back"})).text == "back"
        except McpCallError as exc:
            # Failing while it reconnects, for the right reason (not "Session not found"
            # forever).
            assert "the server no longer knows this session (HTTP 404)" in str(exc), exc
            return False

    try:
        async with http_fake(port) as first:
            await manager.start()
            await ready(manager, "web")
            first.kill()
            await first.wait()
        async with http_fake(port):
            await eventually(echo_answers, within=30, every=0.2)
            assert manager.state("web").status == "ready"
    finally:
        await manager.close()


async def test_close_stops_a_server_waiting_to_reconnect() -> None:
    token = f"mcp-waiting-{uuid.uuid4().hex}"
    manager = servers({"fake": stdio(token)}, backoff=Backoff(first=600, cap=600))
    await manager.start()
    await ready(manager, "fake")
    os.kill(processes_with(token)[0], signal.SIGKILL)
    await eventually(lambda: manager.state("fake").status == "reconnecting", within=30)
    # A hang guard: close must not sit out the ten-minute backoff.
    async with asyncio.timeout(10):
        await manager.close()
    assert manager.state("fake").status == "closed"
    assert processes_with(token) == []
    with pytest.raises(McpCallError, match="MCP server fake is closed, not ready"):
        await manager.call("fake", "echo", {"text": "x"})


async def test_close_stops_an_http_server_being_retried() -> None:
    port = free_port()
    manager = servers({"web": http_entry(port)}, backoff=FAST, health_interval=0.1)
    async with http_fake(port) as server:
        await manager.start()
        await ready(manager, "web")
        server.kill()
        await server.wait()
    await eventually(lambda: manager.state("web").attempt >= 2, within=30)
    async with asyncio.timeout(10):
        await manager.close()
    state = manager.state("web")
    assert state.status == "closed"
    # Its task is over: no attempt is left to count up.
    assert not [task for task in asyncio.all_tasks() if task.get_name() == "mcp-server-web"]


async def test_changed_tools_are_listed_again_over_stdio() -> None:
    async with servers({"fake": stdio("--probes")}) as manager:
        await ready(manager, "fake")
        assert "extra" not in tool_names(manager, "fake")
        assert manager.state("fake").tool_count == 11

        assert (await manager.call("fake", "toggle_extra", {})).text == "added"
        await eventually(lambda: "extra" in tool_names(manager, "fake"))
        assert manager.state("fake").tool_count == 12
        assert (await manager.call("fake", "extra", {})).text == "extra here"

        assert (await manager.call("fake", "toggle_extra", {})).text == "removed"
        await eventually(lambda: "extra" not in tool_names(manager, "fake"))
        with pytest.raises(McpCallError, match="MCP server fake offers no tool 'extra'"):
            await manager.call("fake", "extra", {})


async def test_changed_tools_are_listed_again_over_http() -> None:
    port = free_port()
    async with http_fake(port, "--probes"), servers({"web": http_entry(port)}) as manager:
        await ready(manager, "web")
        assert (await manager.call("web", "toggle_extra", {})).text == "added"
        await eventually(lambda: "extra" in tool_names(manager, "web"))
        assert (await manager.call("web", "extra", {})).text == "extra here"


async def test_the_state_records_initialize_time_and_tool_count() -> None:
    async with servers({"fake": stdio(tools={"exclude": ["hang", "crash"]})}) as manager:
        state = await asyncio.wait_for(manager.settled("fake"), 30)
    assert state.status == "ready"
    assert state.initialize_seconds is not None and 0 < state.initialize_seconds < 30
    assert state.tool_count == 6
