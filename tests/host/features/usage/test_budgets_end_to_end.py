"""Budgets through the assembled runtime and the real Anthropic SDK against a loopback fake:
every model call lands in the ledger under its role and person; a run stops dispatching new
nodes once its owner's day's budget is spent (the running node finishes); the owner's next
turn is refused before any model call, with the figures; another person is not."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.app import Runtime
from host.runtime.messages import InboundMessage
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import db_rows, eventually, inbound
from tests.runtime_kit import chat_runtime, online

GRAPH = {
    "task_summary": "Survey then summarise",
    "background": True,
    "nodes": [
        {"id": "survey", "agent": "research", "template": "Survey it.", "summary": "survey"},
        {
            "id": "summary",
            "agent": "research",
            "deps": ["survey"],
            "template": "Summarise {{survey.output}}.",
            "summary": "summarise",
        },
    ],
}
SMALL = {"input_tokens": 100, "output_tokens": 10}
# The survey node's one call spends more than the 5,000-token day.
LARGE = {"input_tokens": 6000, "output_tokens": 20}


def _system(body: dict[str, Any]) -> str:
    system = body.get("system")
    return system if isinstance(system, str) else json.dumps(system)


def _answer(body: dict[str, Any]) -> dict[str, Any]:
    """Host turns, the research agent and the judge, each with the usage the test needs."""
    system = _system(body)
    last = json.dumps(body["messages"][-1])
    if "You judge whether an agent accomplished" in system:
        verdict = {"accomplished": True, "evidence": "output present"}
        return {"content": [_tool("record_verdict", verdict)], "usage": SMALL}
    if "You are Raven, the Host Agent" in system:
        if "tool_result" in last or "Run `" in last:
            return {
                "content": "Done: the survey is in; the summary was not started.",
                "usage": SMALL,
            }
        if "Survey and summarise" in last:
            return {"content": [_tool("submit_graph", GRAPH)], "usage": SMALL}
        return {"content": "Hello.", "usage": SMALL}
    return {"content": "The survey found three sources.", "usage": LARGE}


def _tool(name: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": f"toolu_{name}_{len(json.dumps(payload))}",
        "name": name,
        "input": payload,
    }


@pytest.fixture
async def budgeted(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> AsyncIterator[tuple[FakeAnthropic, FakeChatAdapter, Runtime, Path]]:
    async with online(monkeypatch) as fake:
        monkeypatch.setenv("RAVEN_MODEL_MAX_RETRIES", "0")
        monkeypatch.setenv("RAVEN_BUDGET_PERSON_DAY", "5000")
        fake.responder = _answer
        adapter = FakeChatAdapter()
        async with chat_runtime(adapter) as runtime:
            await runtime.broker.recover()
            yield fake, adapter, runtime, isolated_env


async def _ask(runtime: Runtime, text: str, event: str, author: str = "U1") -> InboundMessage:
    msg = inbound(text, event, author, thread="T1")
    turn = await runtime.service.accept(msg)
    assert turn is not None
    await turn
    return msg


async def test_a_spent_budget_stops_the_run_and_refuses_the_next_turn(
    budgeted: tuple[FakeAnthropic, FakeChatAdapter, Runtime, Path],
) -> None:
    fake, adapter, runtime, home = budgeted
    msg = await _ask(runtime, "Survey and summarise the topic.", "e1")
    await eventually(lambda: any("the summary was not started" in t for t in adapter.texts))
    await runtime.service.quiesce(msg.conversation)

    [run] = await runtime.runs.store.runs(msg.conversation.id)
    nodes = {n.node_id: n for n in await runtime.runs.store.nodes_of_run(run.id)}
    assert nodes["survey"].state == "completed"
    assert nodes["summary"].state == "failed"
    assert "not started: Your daily model budget is spent" in (nodes["summary"].error or "")
    assert "of 5,000 tokens today" in (nodes["summary"].error or "")

    # Every call is in the ledger, under its role, its person and (in a run) its node.
    rows = db_rows(home, "SELECT role, person, run_id, node_id FROM model_calls ORDER BY id")
    roles = {(role, node) for role, _, _, node in rows}
    assert ("host", "") in roles
    assert ("agent:research", "survey") in roles and ("judge", "survey") in roles
    # The request's turn and the run count against U1; the report turn is the bot's own.
    assert next(row for row in rows if row[0] == "host")[1] == "U1"
    assert ("skills", "") in roles  # the skill gate's call, counted too
    assert all(person == "U1" for role, person, _, _ in rows if role != "host")
    assert all(run_id == run.id for role, _, run_id, _ in rows if role.startswith("agent:"))

    # The owner's next turn is refused before any model call, with the figures.
    calls_before = len(fake.requests)
    await _ask(runtime, "And now the rest, please.", "e2")
    assert len(fake.requests) == calls_before
    refusal = adapter.texts[-1]
    assert refusal.startswith("⛔ Your daily model budget is spent:")
    assert "tokens of 5,000 tokens today" in refusal

    # Someone else in the channel still gets an answer.
    await _ask(runtime, "Hi there.", "e3", author="U2")
    assert len(fake.requests) == calls_before + 1
    assert adapter.texts[-1] == "Hello."


REMOTE_GRAPH = {
    "task_summary": "Ask the remote model",
    "background": True,
    "nodes": [{"id": "ask", "agent": "remote", "template": "Say hi.", "summary": "ask"}],
}


def _remote_agent(home: Path, url: str) -> None:
    """agents.toml with one agent on an OpenAI-compatible API at `url`."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "agents.toml").write_text(
        '[agents.remote]\nbackend = "api"\ndescription = "A remote model"\n'
        f'api_style = "openai"\nmodel = "qwen"\nbase_url = "{url}"\n',
        encoding="utf-8",
    )


async def test_an_api_agents_reported_usage_is_recorded_under_its_model(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    """An agent on a remote API calls its model itself: the usage it reports with its
    outcome is counted against the run's owner, under the agent and its model."""
    async with FakeOpenAI() as remote, online(monkeypatch) as fake:
        remote.queue_completion(
            {
                "content": "hi from remote",
                "usage": {"prompt_tokens": 40, "completion_tokens": 2, "total_tokens": 42},
            }
        )
        _remote_agent(isolated_env, remote.base_url)
        monkeypatch.setenv("RAVEN_MODEL_MAX_RETRIES", "0")

        def answer(body: dict[str, Any]) -> dict[str, Any]:
            system, last = _system(body), json.dumps(body["messages"][-1])
            if "You judge whether an agent accomplished" in system:
                verdict = {"accomplished": True, "evidence": "output present"}
                return {"content": [_tool("record_verdict", verdict)], "usage": SMALL}
            if "tool_result" in last or "Run `" in last:
                return {"content": "The remote model said hi.", "usage": SMALL}
            return {"content": [_tool("submit_graph", REMOTE_GRAPH)], "usage": SMALL}

        fake.responder = answer
        adapter = FakeChatAdapter()
        async with chat_runtime(adapter) as runtime:
            await runtime.broker.recover()
            msg = await _ask(runtime, "Ask the remote model to say hi.", "e1")
            await eventually(lambda: any("The remote model said hi." in t for t in adapter.texts))
            await runtime.service.quiesce(msg.conversation)
    rows = db_rows(
        isolated_env,
        "SELECT model, person, node_id, input_tokens, output_tokens FROM model_calls "
        "WHERE role = 'agent:remote'",
    )
    assert rows == [("openai:qwen", "U1", "ask", 40, 2)]
