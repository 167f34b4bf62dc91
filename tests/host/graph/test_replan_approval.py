"""Replanning a suspended node with a graph that needs approval: the old run keeps waiting
until the user approves; on approval the new run starts (linked) and the old one is
superseded."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agents.tools import Tool
from bot.app import Runtime
from core.ids import ConversationRef
from host.agent.tools import HostToolDeps, ResolveInput, build_host_tools
from host.graph.runs import RunManager
from host.runtime.turn import TurnContext
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import eventually, write_agents
from tests.runtime_kit import chat_runtime, online

AGENTS = """
[agents.echo]
backend = "cli"
description = "Echoes its prompt (test agent)."
command = ["cat"]
"""
CONV = ConversationRef("test", "W", "C", "T")


def _responder(body: dict[str, Any]) -> dict[str, Any]:
    system = json.dumps(body.get("system"))
    if "You judge whether" in system:
        last = json.dumps(body["messages"][-1])
        accomplished = "second try" in last
        return {
            "content": [
                {
                    "type": "tool_use",
                    "id": "v1",
                    "name": "record_verdict",
                    "input": {
                        "accomplished": accomplished,
                        "category": "other",
                        "missing": "nothing useful",
                        "evidence": "echo",
                    },
                }
            ]
        }
    return {"content": "noted"}


@pytest.fixture
async def online_runtime(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> AsyncIterator[tuple[Runtime, FakeChatAdapter]]:
    write_agents(isolated_env, AGENTS)
    async with online(monkeypatch) as fake:
        fake.responder = _responder
        adapter = FakeChatAdapter()
        async with chat_runtime(adapter) as runtime:
            yield runtime, adapter


def _tool(runtime: Runtime, name: str) -> Tool[TurnContext]:
    deps = HostToolDeps(runs=runtime.runs, broker=runtime.broker, registry=runtime.registry)
    return next(t for t in build_host_tools(deps) if t.name == name)


async def test_replan_waits_for_approval_then_supersedes(
    online_runtime: tuple[Runtime, FakeChatAdapter],
) -> None:
    runtime, adapter = online_runtime
    runs: RunManager = runtime.runs
    started = await runs.submit(
        CONV,
        {"task_summary": "t", "nodes": [{"id": "a", "agent": "echo", "template": "first try"}]},
        submitted_by="U1",
    )
    old = started.run
    assert old is not None
    await eventually(lambda: old.state("a") == "exception")

    ctx = TurnContext(CONV, "turn1", "U1", "alice")
    replan = ResolveInput(
        run_id=old.id,
        node_id="a",
        action="replan",
        graph={
            "task_summary": "again",
            "confirm": True,
            "nodes": [{"id": "b", "agent": "echo", "template": "second try"}],
        },
    )
    text = await _tool(runtime, "resolve_exception").handler(ctx, replan)
    assert "Approval requested for the replanned graph" in text
    assert old.state("a") == "exception"  # still waiting
    (prompt,) = await runtime.broker.pending(CONV)
    assert "`b` → echo" in prompt.question

    outcome = await runtime.broker.answer(prompt.id, prompt.nonce, "U1", "Approve")
    assert outcome.status == "accepted"
    await eventually(old.done.is_set)
    record = await runs.store.run(old.id)
    assert record is not None and record.state == "superseded"
    new_runs = [r for r in await runs.store.runs(CONV.id) if r.replaces_run == old.id]
    assert len(new_runs) == 1
    new_id = new_runs[0].id

    async def new_state() -> str | None:
        record = await runs.store.run(new_id)
        return record.state if record is not None else None

    async def completed() -> bool:
        return await new_state() == "completed"

    await eventually(completed, what="the replanned run to complete")
    assert any("Approved by U1" in t for t in adapter.texts)
