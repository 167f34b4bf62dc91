"""McpServers against loopback servers written with the SDK's server side
(tests/fakes/mcp_server.py), over stdio and streamable HTTP: listing, calls, filters, secrets,
hostile servers, failed starts, the private-network guard, and a clean close."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from mcp_client import Backoff, McpCallError, McpServers, ServerState, parse_mcp_config
from mcp_client.guard import PrivateNetworkRefused, refuse_private_network
from tests.helpers import REPO, eventually, processes_with

FAKE = str(REPO / "tests" / "fakes" / "mcp_server.py")


def stdio(*extra: str, **fields: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [FAKE, *extra], **fields}


def servers(
    entries: dict[str, Any], environ: dict[str, str] | None = None, **options: Any
) -> McpServers:
    config = parse_mcp_config(json.dumps({"mcpServers": entries}), environ or {}, source="mcp.json")
    return McpServers(config, **options)


async def ready(manager: McpServers, name: str) -> None:
    state = await asyncio.wait_for(manager.settled(name), 30)
    assert state.status == "ready", state


@pytest.fixture
async def http_url() -> AsyncIterator[str]:
    """The fake server over streamable HTTP on 127.0.0.1, once it accepts connections."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        FAKE,
        "--http",
        str(port),
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
        await eventually(accepts, within=30, what="the HTTP MCP server accepts connections")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        await process.wait()


async def test_a_stdio_server_lists_filtered_tools_and_answers_calls() -> None:
    manager = servers({"fake": stdio(tools={"include": ["e*", "add"], "exclude": ["environment"]})})
    async with manager:
        assert manager.state("fake").status == "connecting"  # start() never waits
        await ready(manager, "fake")

        tools = {tool.name: tool for tool in manager.tools("fake")}
        assert sorted(tools) == ["add", "echo"]
        assert tools["echo"].read_only and not tools["add"].read_only
        assert tools["echo"].description == "Return the text unchanged."
        assert tools["add"].input_schema["properties"].keys() == {"a", "b"}
        assert [tool.name for tool in manager.all_tools()] == [t for t in tools]

        result = await manager.call("fake", "add", {"a": 2, "b": 40})
        assert (result.text, result.is_error, result.truncated) == ("42", False, False)
        with pytest.raises(McpCallError, match="MCP server fake offers no tool 'environment'"):
            await manager.call("fake", "environment", {})
        with pytest.raises(McpCallError, match="no MCP server named 'nope'"):
            await manager.call("nope", "echo", {})


async def test_a_stdio_server_sees_only_its_declared_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAVEN_TEST_BOT_SECRET", "bot-secret-value")
    manager = servers(
        {"fake": stdio(env={"API_TOKEN": "tok-${UPSTREAM}"})},
        environ={"UPSTREAM": "declared-value"},
    )
    async with manager:
        await ready(manager, "fake")
        seen = json.loads((await manager.call("fake", "environment", {})).text)

    assert seen["API_TOKEN"] == "tok-declared-value"
    assert "RAVEN_TEST_BOT_SECRET" not in seen
    assert "bot-secret-value" not in json.dumps(seen)
    # Only the SDK's safe defaults come along.
    assert set(seen) - {"API_TOKEN"} <= {
        "HOME",
        "LOGNAME",
        "PATH",
        "SHELL",
        "TERM",
        "USER",
        "LC_CTYPE",
    }


async def test_a_hanging_call_times_out_and_the_server_keeps_working() -> None:
    async with servers({"fake": stdio(timeout=2)}) as manager:
        await ready(manager, "fake")
        with pytest.raises(McpCallError, match=r"^fake/hang did not answer within 2 s$"):
            await manager.call("fake", "hang", {})
        assert (await manager.call("fake", "echo", {"text": "still here"})).text == "still here"


async def test_a_huge_result_is_cut_with_a_note() -> None:
    async with servers({"fake": stdio()}) as manager:
        await ready(manager, "fake")
        result = await manager.call("fake", "huge", {"size": 250_000})
    assert result.truncated
    assert result.text == "x" * 100_000 + "\n[result cut at 100,000 of 250,000 characters]"


async def test_a_server_dying_mid_call_fails_that_call_only_and_comes_back() -> None:
    # The first reconnect waits a second: long enough to see the calls in between fail.
    fast = Backoff(first=1.0, cap=1.0)
    async with servers({"fake": stdio(), "other": stdio()}, backoff=fast) as manager:
        await ready(manager, "fake")
        await ready(manager, "other")
        with pytest.raises(McpCallError, match=r"^fake/crash failed: the server closed the"):
            await manager.call("fake", "crash", {})
        state = manager.state("fake")
        assert (state.status, state.error) == ("reconnecting", "the server closed the connection")
        assert manager.tools("fake") == []
        with pytest.raises(McpCallError, match=r"^MCP server fake is reconnecting \(attempt"):
            await manager.call("fake", "echo", {"text": "x"})
        assert (await manager.call("other", "echo", {"text": "ok"})).text == "ok"

        await eventually(lambda: manager.state("fake").status == "ready", within=30)
        assert manager.state("fake") == ServerState(
            status="ready",
            stderr_tail="",
            initialize_seconds=manager.state("fake").initialize_seconds,
            tool_count=8,
        )
        assert (await manager.call("fake", "echo", {"text": "back"})).text == "back"


async def test_a_server_that_fails_to_start_is_reported_and_the_others_work() -> None:
    async with servers({"broken": stdio("--fail-start"), "fake": stdio()}) as manager:
        state = await asyncio.wait_for(manager.settled("broken"), 30)
        assert state.status == "failed"
        assert state.error == "the server closed the connection while starting (see its stderr)"
        assert state.stderr_tail == "fake-mcp: cannot read credentials file /nowhere"
        assert (state.attempt, state.initialize_seconds, state.tool_count) == (0, None, 0)
        assert manager.tools("broken") == []
        await ready(manager, "fake")
        assert (await manager.call("fake", "echo", {"text": "ok"})).text == "ok"


async def test_a_command_that_does_not_exist_fails_its_server() -> None:
    async with servers({"missing": {"command": "/nonexistent/mcp-server"}}) as manager:
        state = await asyncio.wait_for(manager.settled("missing"), 30)
    assert state.status == "failed"
    assert "/nonexistent/mcp-server" in (state.error or "")


async def test_a_streamable_http_server_lists_and_answers(http_url: str) -> None:
    entry = {
        "type": "http",
        "url": http_url,
        "allow_private_network": True,
        "headers": {"Authorization": "Bearer ${KEY}"},
    }
    async with servers({"web": entry}, environ={"KEY": "k"}) as manager:
        await ready(manager, "web")
        assert {tool.name for tool in manager.tools("web")} >= {"echo", "add", "hang"}
        assert (await manager.call("web", "echo", {"text": "over http"})).text == "over http"
        # The header's ${KEY} was filled from the bot's environment and went over the wire.
        assert (await manager.call("web", "header", {"name": "Authorization"})).text == "Bearer k"


async def test_a_private_network_url_is_refused_unless_allowed(http_url: str) -> None:
    port = urlsplit(http_url).port
    entries = {
        "loop": {"type": "http", "url": http_url},
        "named": {"type": "http", "url": f"http://localhost:{port}/mcp"},
    }
    async with servers(entries) as manager:
        for name in entries:
            state = await asyncio.wait_for(manager.settled(name), 30)
            assert state.status == "failed"
            assert "is a private-network address" in (state.error or "")
            assert '"allow_private_network": true' in (state.error or "")


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "10.1.2.3",
        "192.168.0.5",
        "172.16.9.9",
        "169.254.169.254",
        "[::1]",
        "localhost",
        "0.0.0.0",
    ],
)
async def test_private_hosts_are_refused(host: str) -> None:
    with pytest.raises(PrivateNetworkRefused):
        await refuse_private_network(f"http://{host}:8000/mcp")


async def test_a_public_address_passes_the_guard() -> None:
    await refuse_private_network("https://93.184.216.34/mcp")


async def test_close_leaves_no_child_process() -> None:
    token = f"mcp-close-{uuid.uuid4().hex}"
    manager = servers({"fake": stdio(token), "hung": stdio(token, timeout=600)})
    await manager.start()
    await ready(manager, "fake")
    await ready(manager, "hung")
    assert len(processes_with(token)) == 2
    # A call in flight when close() comes must not keep the child alive.
    in_flight = asyncio.create_task(manager.call("hung", "hang", {}))
    await eventually(lambda: "hanging" in manager.state("hung").stderr_tail)
    await manager.close()
    assert processes_with(token) == []
    with pytest.raises(McpCallError, match=r"^hung/hang failed: the server was closed$"):
        await in_flight
    assert manager.state("fake").status == "closed"


async def test_a_tool_error_is_a_result_the_model_can_read() -> None:
    async with servers({"fake": stdio()}) as manager:
        await ready(manager, "fake")
        result = await manager.call("fake", "fails", {})
    assert result.is_error
    assert "the tracker is down" in result.text


@pytest.mark.parametrize("flag", ["--silent", "--garbage"])
async def test_a_server_that_never_speaks_mcp_fails_its_start(flag: str) -> None:
    # A short connect timeout for the bad server only: a loaded machine may take longer than
    # that to start a good one (other tests show the others keep working).
    async with servers({"bad": stdio(flag)}, connect_timeout=2) as manager:
        state = await asyncio.wait_for(manager.settled("bad"), 30)
        assert (state.status, state.error) == ("failed", "no answer to initialize within 2 s")


async def test_a_flood_on_stderr_keeps_only_its_tail() -> None:
    async with servers({"chatty": stdio("--flood")}) as manager:
        state = await asyncio.wait_for(manager.settled("chatty"), 30)
    assert state.status == "failed"
    lines = state.stderr_tail.splitlines()
    assert len(lines) == 20
    assert lines[-1] == "fake-mcp: giving up"


async def test_close_does_not_wait_for_a_server_still_starting() -> None:
    token = f"mcp-starting-{uuid.uuid4().hex}"
    manager = servers({"silent": stdio("--silent", token)}, connect_timeout=600)
    await manager.start()
    await eventually(lambda: processes_with(token), what="the silent server started")
    # A hang guard, well under the close grace a ready server gets (10 s).
    async with asyncio.timeout(5):
        await manager.close()
    assert processes_with(token) == []
    assert manager.state("silent") == ServerState(
        status="failed", error="closed before it finished", stderr_tail=""
    )
