"""The team's tools reach an ACP agent's session: the `acp` backend passes a node's granted
endpoints as HTTP MCP servers in `session/new`, and the loopback agent (tests/fakes/acp_agent.py,
in the real bubblewrap sandbox) calls a tool through the bot's endpoint (mcp_client/proxy.py),
whose callback is where the bot's gate runs. No endpoint is passed when none is granted."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agents.backends import AcpProcesses, AgentTask
from agents.backends.acp.backend import AcpBackend, session_of
from agents.backends.base import McpEndpoint, NodeToolset
from agents.registry import AgentEntry
from core.secret_names import SecretNames
from mcp_client.proxy import ProxiedResult, ProxiedTool, ProxyEndpoint, serve_tools
from tests.sandboxing import real_sandbox

FAKE = Path(__file__).resolve().parent.parent / "fakes" / "acp_agent.py"
AGENT_DIR = "agent"
TOOLS = (
    ProxiedTool(
        "search",
        "Search the tracker",
        {"type": "object", "properties": {"q": {"type": "string"}}},
    ),
)


def _entry(**changes: Any) -> AgentEntry:
    base = AgentEntry(
        name="fake",
        description="a loopback ACP agent",
        backend="acp",
        stateful=True,
        file_capable=True,
        progress=True,
        enabled=True,
        role="raven",
        command=(sys.executable, f"{AGENT_DIR}/acp_agent.py"),
        timeout_seconds=30,
        init_timeout_seconds=10,
    )
    return dataclasses.replace(base, **changes)


class Gate:
    """The bot's side of the endpoint: records each call (where the gate would run)."""

    def __init__(self, allow: bool = True) -> None:
        self.allow = allow
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, name: str, arguments: dict[str, Any]) -> ProxiedResult:
        self.calls.append((name, arguments))
        if not self.allow:
            return ProxiedResult("Refused: mcp:tracker:search is not allowed", is_error=True)
        return ProxiedResult(f"found {arguments.get('q')}")


@pytest.fixture
async def pool() -> AsyncIterator[AcpProcesses]:
    processes = AcpProcesses(real_sandbox(), secret_names=SecretNames())
    yield processes
    await processes.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    where = (tmp_path / "workspace").resolve()
    (where / AGENT_DIR).mkdir(parents=True)
    shutil.copy(FAKE, where / AGENT_DIR / "acp_agent.py")
    return where


def _granted(*endpoints: tuple[str, ProxyEndpoint]) -> NodeToolset:
    return NodeToolset(
        endpoints=tuple(
            McpEndpoint(name=name, url=endpoint.url, headers=endpoint.headers)
            for name, endpoint in endpoints
        )
    )


def _task(workspace: Path, prompt: str, **kw: Any) -> AgentTask:
    return AgentTask(node_id="n1", agent=_entry(), prompt=prompt, workspace=workspace, **kw)


def _servers(output: str) -> Any:
    prefix = "mcp servers: "
    assert output.startswith(prefix), output
    rest = output[len(prefix) :]
    return rest if rest == "none" else json.loads(rest)


async def test_a_granted_tool_is_called_by_the_agent_through_the_bots_endpoint(
    pool: AcpProcesses, workspace: Path
) -> None:
    gate = Gate()
    backend = AcpBackend(_entry(), pool)
    async with serve_tools(TOOLS, gate) as endpoint:
        granted = _granted(("tracker", endpoint))
        listed = await backend.run(_task(workspace, "mcp-servers", granted=granted))
        assert _servers(listed.output) == [
            {"name": "tracker", "type": "http", "url": endpoint.url, "headers": ["Authorization"]}
        ], listed.error
        called = await backend.run(
            _task(workspace, 'call-mcp tracker search {"q": "flaky test"}', granted=granted)
        )
    assert called.output == "mcp result: found flaky test", called.error
    assert gate.calls == [("search", {"q": "flaky test"})]


async def test_a_call_the_gate_refuses_reaches_the_agent_as_the_tools_error(
    pool: AcpProcesses, workspace: Path
) -> None:
    gate = Gate(allow=False)
    async with serve_tools(TOOLS, gate) as endpoint:
        outcome = await AcpBackend(_entry(stateful=False), pool).run(
            _task(
                workspace,
                'call-mcp tracker search {"q": "x"}',
                granted=_granted(("tracker", endpoint)),
            )
        )
    assert outcome.output == "mcp error: Refused: mcp:tracker:search is not allowed"
    assert gate.calls == [("search", {"q": "x"})]


async def test_no_endpoint_is_passed_when_none_is_granted(
    pool: AcpProcesses, workspace: Path
) -> None:
    outcome = await AcpBackend(_entry(), pool).run(_task(workspace, "mcp-servers"))
    assert _servers(outcome.output) == "none", outcome.error


async def test_a_continuation_gets_this_tasks_endpoints_in_the_same_session(
    pool: AcpProcesses, workspace: Path
) -> None:
    backend = AcpBackend(_entry(), pool)
    gate = Gate()
    async with serve_tools(TOOLS, gate) as first_endpoint:
        first = await backend.run(
            _task(
                workspace, "remember the blue door", granted=_granted(("tracker", first_endpoint))
            )
        )
    assert first.output == "noted", first.error
    # The first task's endpoint is closed; the next node of the instance gets its own.
    async with serve_tools(TOOLS, gate) as second_endpoint:
        granted = _granted(("tracker", second_endpoint))
        listed = await backend.run(
            _task(workspace, "mcp-servers", history=first.history, granted=granted)
        )
        assert [server["url"] for server in _servers(listed.output)] == [second_endpoint.url]
        recalled = await backend.run(
            _task(workspace, "recall", history=listed.history, granted=granted)
        )
        called = await backend.run(
            _task(
                workspace,
                'call-mcp tracker search {"q": "door"}',
                history=recalled.history,
                granted=granted,
            )
        )
    assert recalled.output == "you said: the blue door", recalled.error
    assert called.output == "mcp result: found door", called.error
    assert session_of(called.history) == session_of(first.history)
    assert gate.calls == [("search", {"q": "door"})]


async def test_an_agent_without_network_fails_a_node_granted_tools_saying_why(
    pool: AcpProcesses, workspace: Path
) -> None:
    gate = Gate()
    entry = _entry(network=False)
    async with serve_tools(TOOLS, gate) as endpoint:
        task = dataclasses.replace(
            _task(workspace, 'call-mcp tracker search {"q": "x"}'),
            agent=entry,
            granted=_granted(("tracker", endpoint)),
        )
        outcome = await AcpBackend(entry, pool).run(task)
    assert outcome.error is not None
    assert "granted the team's tools (`tracker`) but cannot use them" in outcome.error
    assert "`network = false`" in outcome.error
    assert gate.calls == []


async def test_an_agent_that_takes_no_http_mcp_servers_fails_a_node_granted_tools(
    workspace: Path,
) -> None:
    pool = AcpProcesses(
        real_sandbox(),
        environ={"FAKE_ACP_NO_HTTP_MCP": "1", "PATH": "/usr/bin:/bin"},
        secret_names=SecretNames(),
    )
    entry = _entry(env_allow=("FAKE_ACP_NO_HTTP_MCP",))
    gate = Gate()
    try:
        async with serve_tools(TOOLS, gate) as endpoint:
            granted = _granted(("tracker", endpoint))
            refused = await AcpBackend(entry, pool).run(
                _task(workspace, "mcp-servers", granted=granted)
            )
            plain = await AcpBackend(entry, pool).run(_task(workspace, "mcp-servers"))
    finally:
        await pool.close()
    assert refused.error is not None
    assert "does not take MCP servers over HTTP" in refused.error
    assert _servers(plain.output) == "none", plain.error
