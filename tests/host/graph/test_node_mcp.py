"""A node's tool-server override (the paper's Cfg_v, Eq. 29; issue 40 part 2): omitted, the
agent's own servers (agents.toml `mcp`, mcp.json `agents`); `[]`, none; names, exactly those.
Plans write `[mcp a, b]` / `[mcp none]`; admission refuses unknown servers, servers when none
are configured, and agents that cannot call tools; the model-facing schema does not advertise
it. A scheduled firing gets only the servers its approved plan names."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from agents.models.types import ToolCall
from agents.permissions import (
    PermissionRules,
)
from agents.plan_syntax import parse_plan
from agents.registry import AgentEntry, AgentRegistry, load_registry
from agents.tools import ToolRegistry
from agents.workspace_tools import ToolContext
from core.secret_names import SecretNames
from host.features.mcp.agent import mcp_agent
from host.features.mcp.grants import McpGrants
from host.graph.admission import AdmissionError, admit
from host.graph.model import AdmissionContext, GraphSubmission
from host.graph.run_store import RunRecord
from mcp_client import McpServers
from tests.bot.cli.test_cli_end_to_end import _env, _run
from tests.host.features.mcp.gates import TaskGate
from tests.host.features.mcp.test_tools import FAKE, manager_for
from tests.host.graph.test_node_skills import run  # noqa: F401  (the fixture)


def _configured_registry() -> AgentRegistry:
    """The registry with the `mcp` agent as a configured bot has it."""
    return load_registry(
        None, extra=[replace(mcp_agent(Path("/")), enabled=True)], secret_names=SecretNames()
    )


REGISTRY = _configured_registry()


def test_a_plan_line_names_its_servers_or_none() -> None:
    plan = parse_plan(
        "r1: research: triage [mcp tracker, docs] [after r0]\nr0: code: fix it [mcp none]"
        "\nr2: research: as configured"
    )
    assert plan is not None
    assert {n["id"]: n.get("mcp") for n in plan["nodes"]} == {
        "r1": ["tracker", "docs"],
        "r0": [],
        "r2": None,
    }
    assert plan["nodes"][0]["template"] == "triage" and plan["nodes"][0]["deps"] == ["r0"]
    GraphSubmission.model_validate(plan)


def test_the_model_facing_schema_does_not_advertise_the_override() -> None:
    node = GraphSubmission.model_json_schema()["$defs"]["NodeSpec"]
    assert "mcp" not in node["properties"]


def _ctx(tmp: Path, servers: frozenset[str] | None) -> AdmissionContext:
    return AdmissionContext(
        agents={e.name: e for e in REGISTRY.entries()}, workspace=tmp, tool_servers=servers
    )


def _submission(agent: str, mcp: list[str]) -> dict[str, object]:
    node = {"id": "n1", "agent": agent, "template": "look it up", "mcp": mcp}
    return {"task_summary": "one node", "nodes": [node]}


def test_admission_checks_the_servers_a_node_names(tmp_path: Path) -> None:
    known = frozenset({"tracker", "docs"})
    admit(_submission("research", ["tracker"]), _ctx(tmp_path, known))
    admit(_submission("shell", []), _ctx(tmp_path, known))  # none asked for: nothing to check

    with pytest.raises(AdmissionError) as unknown:
        admit(_submission("research", ["trakcer"]), _ctx(tmp_path, known))
    assert "no tool server named `trakcer`" in str(unknown.value)
    assert "`docs`, `tracker`" in str(unknown.value) and "raven-bot mcp list" in str(unknown.value)

    with pytest.raises(AdmissionError) as none:
        admit(_submission("research", ["tracker"]), _ctx(tmp_path, None))
    assert "none are configured" in str(none.value) and "mcp.json" in str(none.value)

    for agent in ("shell", "claude-code"):
        entry = REGISTRY.get(agent)
        assert entry is not None
        ctx = replace(_ctx(tmp_path, known), agents={agent: replace(entry, enabled=True)})
        with pytest.raises(AdmissionError) as cannot:
            admit(_submission(agent, ["tracker"]), ctx)
        assert f"agent `{agent}` cannot call tools" in str(cannot.value)


@pytest.fixture
async def servers() -> AsyncIterator[McpServers]:
    manager = manager_for(FAKE, "ask", agents=["research"])
    async with manager:
        assert (await asyncio.wait_for(manager.settled("fake"), 30)).status == "ready"
        yield manager


def _entry(name: str, **changes: object) -> AgentEntry:
    entry = REGISTRY.get(name)
    assert entry is not None
    return replace(entry, **changes)  # type: ignore[arg-type]


async def test_which_servers_a_node_gets(servers: McpServers, run: RunRecord) -> None:  # noqa: F811
    grants = McpGrants(servers, settle_seconds=5)
    research, code = _entry("research"), _entry("code")
    assert grants.servers_for(run, research, None) == ["fake"]  # mcp.json `agents`
    assert grants.servers_for(run, code, None) == []
    assert grants.servers_for(run, _entry("code", mcp=("fake",)), None) == ["fake"]  # agents.toml
    assert grants.servers_for(run, research, []) == []
    assert grants.servers_for(run, code, ["fake"]) == ["fake"]
    firing = replace(run, for_task="task_1")
    assert grants.servers_for(firing, research, None) == []  # defaults nobody approved
    assert grants.servers_for(firing, code, ["fake"]) == ["fake"]


async def test_an_in_process_agent_gets_tools_and_an_acp_agent_an_endpoint(
    servers: McpServers,
    run: RunRecord,  # noqa: F811
) -> None:
    grants = McpGrants(servers, settle_seconds=5)
    async with grants.open(run, _entry("code"), ["fake"], TaskGate(PermissionRules())) as toolset:
        names = [t.name for t in toolset.tools]
        assert "mcp__fake__echo" in names and toolset.endpoints == ()
    acp = _entry("claude-acp", enabled=True)
    async with grants.open(run, acp, ["fake"], TaskGate(PermissionRules())) as toolset:
        (endpoint,) = toolset.endpoints
        assert endpoint.name == "fake" and endpoint.url.startswith("http://127.0.0.1:")
        assert toolset.tools == ()
    shell = _entry("shell")
    async with grants.open(run, shell, ["fake"], TaskGate(PermissionRules())) as toolset:
        assert toolset.tools == () and toolset.endpoints == ()


async def test_a_firing_calls_the_servers_its_approved_plan_names_without_asking(
    servers: McpServers,
    run: RunRecord,  # noqa: F811
) -> None:
    """Unattended, `ask` refuses; the plan's `[mcp fake]`, approved with the task, is the
    approval. A deny rule still refuses."""
    call = ToolCall(id="c1", name="mcp__fake__add", input={"a": 2, "b": 3})
    grants = McpGrants(servers, settle_seconds=5)
    gate = TaskGate(PermissionRules())
    async with grants.open(run, _entry("code"), ["fake"], gate) as toolset:
        ctx = ToolContext(workspace=Path(), permit=gate)
        refused = await ToolRegistry(list(toolset.tools)).dispatch(call, ctx)
    assert refused.is_error and "unattended run" in refused.content

    firing = replace(run, for_task="task_1")
    async with grants.open(firing, _entry("code"), ["fake"], gate) as toolset:
        ctx = ToolContext(workspace=Path(), permit=gate)
        result = await ToolRegistry(list(toolset.tools)).dispatch(call, ctx)
    assert not result.is_error and "5" in result.content
    assert "approved that plan" in gate.audit.decisions[-1].reason

    denied = TaskGate(PermissionRules(deny=["mcp:fake:add"]))
    async with grants.open(firing, _entry("code"), ["fake"], denied) as toolset:
        ctx = ToolContext(workspace=Path(), permit=denied)
        result = await ToolRegistry(list(toolset.tools)).dispatch(call, ctx)
    assert result.is_error and "deny rule" in result.content


async def test_graph_validate_checks_a_nodes_servers_against_mcp_json(
    isolated_env: Path, tmp_path: Path
) -> None:
    graph = tmp_path / "graph.json"
    graph.write_text(json.dumps(_submission("research", ["tracker"])))
    env = _env(isolated_env)
    code, out, _ = await _run("graph", "validate", str(graph), env=env)
    assert code == 2 and "none are configured" in out, out

    server = {"command": sys.executable, "args": [FAKE]}
    (isolated_env / "mcp.json").write_text(json.dumps({"mcpServers": {"tracker": server}}))
    code, out, _ = await _run("graph", "validate", str(graph), env=env)
    assert (code, out.startswith("admitted")) == (0, True), out
    graph.write_text(json.dumps(_submission("research", ["docs"])))
    code, out, _ = await _run("graph", "validate", str(graph), env=env)
    assert code == 2 and "no tool server named `docs`" in out, out


def test_a_scheduled_plan_shows_the_servers_it_grants_when_it_is_approved() -> None:
    from host.features.schedules.work import task_work

    work = task_work(
        "r1: research: triage new issues [mcp tracker]\nr2: code: fix [mcp none]", offline=True
    )
    assert "r1: research: triage new issues [mcp tracker]" in work.description
    assert "r2: code: fix [mcp none]" in work.description
