"""Replanning a suspended node with a graph that needs approval: the old run keeps waiting
until the user approves; on approval the new run starts (linked) and the old one is
superseded."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agents.tools import Tool
from bot.app import build_runtime, shutdown
from bot.settings import load_settings
from core.ids import ConversationRef
from host.agent.tools import HostToolDeps, ResolveInput, build_host_tools
from host.graph.runs import RunManager
from host.runtime.turn import TurnContext
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import eventually

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


def _write_agents(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "agents.toml").write_text(AGENTS)


@pytest.fixture
async def online_runtime(monkeypatch: pytest.MonkeyPatch, isolated_env: Path) -> Any:
    _write_agents(isolated_env)
    async with FakeAnthropic() as fake:
        fake.responder = _responder
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
        adapter = FakeChatAdapter()
        runtime = await build_runtime(load_settings(), [lambda: adapter])
        yield runtime, adapter
        await shutdown(runtime)


def _tool(runtime: Any, name: str) -> Tool[TurnContext]:
    deps = HostToolDeps(runs=runtime.runs, broker=runtime.broker, registry=runtime.registry)
    return next(t for t in build_host_tools(deps) if t.name == name)


async def test_replan_waits_for_approval_then_supersedes(online_runtime: Any) -> None:
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

    for _ in range(500):
        if await new_state() == "completed":
            break
        await asyncio.sleep(0.02)
    assert await new_state() == "completed"
    assert any("Approved by U1" in t for t in adapter.texts)
