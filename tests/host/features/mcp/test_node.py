"""The `mcp` agent's one-call nodes (`SERVER TOOL {json}`) against the loopback server over
stdio: the call passes the real gate (its question shows the exact call), an unattended run
falls back to the approvals given with its task, a deny rule stays a deny, and a task that is
no call, or names no server or tool, fails saying so."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from agents.backends.base import AgentTask
from agents.permissions import (
    PermissionRules,
)
from host.features.mcp.agent import mcp_agent
from host.features.mcp.call_text import CallTextError, parse_call
from host.features.mcp.node import McpCallBackend
from mcp_client import McpServers
from tests.host.features.mcp.gates import TaskGate
from tests.host.features.mcp.test_tools import FAKE, ScriptedAsker, manager_for


@pytest.fixture
async def servers() -> AsyncIterator[McpServers]:
    manager = manager_for(FAKE, "ask")
    async with manager:
        yield manager


class Approvals:
    """A run's command approvals (a scheduled task's grants): records what it was asked."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.asked: list[str] = []

    async def __call__(self, text: str) -> bool:
        self.asked.append(text)
        return self.answer


def _task(text: str, tmp: Path, **ports: object) -> AgentTask:
    entry = replace(mcp_agent(tmp), enabled=True)
    return AgentTask(node_id="m1", agent=entry, prompt=text, workspace=tmp, **ports)  # type: ignore[arg-type]


async def test_an_approved_call_runs_and_its_answer_is_the_output(
    servers: McpServers, tmp_path: Path
) -> None:
    asker = ScriptedAsker("allow_once")
    gate = TaskGate(PermissionRules(), asker)
    backend = McpCallBackend(servers, settle_seconds=30)
    outcome = await backend.run(_task('fake echo {"text": "hi there"}', tmp_path, permit=gate))
    assert outcome.error is None and outcome.output == "hi there"
    ((call, question),) = asker.asked
    assert (call.tool, call.subject) == ("mcp", "fake:echo")
    assert 'fake echo {"text": "hi there"}' in question  # the exact call
    assert [d.tier for d in gate.audit.decisions] == ["human"]


async def test_a_declined_call_is_not_made(servers: McpServers, tmp_path: Path) -> None:
    gate = TaskGate(PermissionRules(), ScriptedAsker("deny"))
    outcome = await McpCallBackend(servers, settle_seconds=30).run(
        _task('fake add {"a": 1, "b": 2}', tmp_path, permit=gate)
    )
    assert outcome.not_approved and outcome.output == ""
    assert outcome.error is not None and "declined" in outcome.error


async def test_an_unattended_run_runs_only_what_its_task_approved(
    servers: McpServers, tmp_path: Path
) -> None:
    text = 'fake add {"a": 1, "b": 2}'
    backend = McpCallBackend(servers, settle_seconds=30)
    granted = Approvals(True)
    gate = TaskGate(PermissionRules(), asker=None)
    outcome = await backend.run(_task(text, tmp_path, permit=gate, approve=granted))
    assert outcome.output == "3" and granted.asked == [text]  # the task's text, byte for byte

    refused = Approvals(False)
    outcome = await backend.run(_task(text, tmp_path, permit=gate, approve=refused))
    assert outcome.not_approved and outcome.output == ""


async def test_a_deny_rule_is_never_overruled_by_a_tasks_approval(
    servers: McpServers, tmp_path: Path
) -> None:
    approvals = Approvals(True)
    gate = TaskGate(PermissionRules(deny=["mcp:fake:add"]), asker=None)
    outcome = await McpCallBackend(servers, settle_seconds=30).run(
        _task('fake add {"a": 1, "b": 2}', tmp_path, permit=gate, approve=approvals)
    )
    assert outcome.not_approved and approvals.asked == []
    assert outcome.error is not None and "mcp:fake:add" in outcome.error


async def test_an_allow_rule_runs_the_call_without_asking(
    servers: McpServers, tmp_path: Path
) -> None:
    gate = TaskGate(PermissionRules(allow=["mcp:fake:ec*"]), ScriptedAsker())
    outcome = await McpCallBackend(servers, settle_seconds=30).run(
        _task('fake echo {"text": "ok"}', tmp_path, permit=gate)
    )
    assert outcome.output == "ok"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("fake", "one tool call, written `SERVER TOOL"),
        ("fake echo {not json", "are not valid JSON"),
        ('fake echo ["a"]', "must be a JSON object"),
    ],
)
def test_a_task_that_is_no_call_says_how_to_write_one(text: str, said: str) -> None:
    with pytest.raises(CallTextError, match=said.replace("[", r"\[").replace("{", r"\{")):
        parse_call(text)


async def test_unknown_servers_and_tools_are_named(servers: McpServers, tmp_path: Path) -> None:
    backend = McpCallBackend(servers, settle_seconds=30)
    gate = TaskGate(PermissionRules(mode="full-access"), asker=None)
    outcome = await backend.run(_task("nosuch echo", tmp_path, permit=gate))
    assert outcome.error is not None and "No tool server named `nosuch`" in outcome.error
    outcome = await backend.run(_task("fake ech", tmp_path, permit=gate))
    assert outcome.error is not None and "offers no tool `ech`" in outcome.error
    assert "`echo`" in outcome.error
    outcome = await backend.run(_task("fake echo {", tmp_path, permit=gate))
    assert outcome.error is not None and "not a tool call" in outcome.error
