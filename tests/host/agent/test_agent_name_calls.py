"""A weak model calls an agent by its name as if it were a tool (the real Qwen2.5-Coder 1.5B
called `shell` with `{"command": "echo hello-from-raven"}`): the Host reads that as
`delegate` to the agent, marked recovered, so it passes every check `delegate` passes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agents.loop import AgentLoop
from agents.models.anthropic_provider import AnthropicProvider
from agents.models.types import Message, ToolCall
from agents.registry import load_registry
from agents.tools import Tool, ToolRegistry
from core.secret_names import SecretNames
from host.agent.tools import DelegateInput, agent_calls_as_delegate, agent_tool_hint
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import inbound
from tests.runtime_kit import chat_runtime, online


def _registry() -> Any:
    return load_registry(None, secret_names=SecretNames())


def test_an_agents_name_with_a_task_becomes_a_delegate_call() -> None:
    rewrite = agent_calls_as_delegate(_registry())
    call = ToolCall(id="t1", name="shell", input={"command": "echo hi"})
    assert rewrite(call) == ToolCall(
        id="t1", name="delegate", input={"agent": "shell", "task": "echo hi"}
    )
    # The one string argument of a call, whatever its key, is the task.
    lone = rewrite(ToolCall(id="t2", name="research", input={"topic": "faiss"}))
    assert lone is not None and lone.input == {"agent": "research", "task": "faiss"}
    # Not an agent: left alone (the loop then answers "Unknown tool" as before).
    assert rewrite(ToolCall(id="t3", name="rm", input={"command": "x"})) is None
    # An agent with no task found (the real model called `shell` with `{}`): left unknown,
    # and the Host's registry says how to run it (`agent_tool_hint`).
    assert rewrite(ToolCall(id="t4", name="shell", input={})) is None
    assert rewrite(ToolCall(id="t5", name="shell", input={"a": "x", "b": "y"})) is None


async def test_the_loop_runs_it_as_delegate_and_marks_it_recovered() -> None:
    delegated: list[DelegateInput] = []

    async def delegate(ctx: object, args: DelegateInput) -> str:
        delegated.append(args)
        return "started node s1"

    tools = ToolRegistry([Tool("delegate", "Delegate a task.", DelegateInput, delegate)])

    async with FakeAnthropic() as fake:
        fake.queue_tool_use("shell", {"command": "echo hello-from-raven"})
        fake.queue_text("Started.")
        provider = AnthropicProvider(api_key="k", model="m", base_url=fake.base_url)
        loop: AgentLoop[object] = AgentLoop(provider, rewrite=agent_calls_as_delegate(_registry()))
        result = await loop.run(
            system="s", messages=[Message.user_text("run it")], tools=tools, ctx=object()
        )
        await provider.aclose()
        # The model's next call sees the delegate call paired with its result.
        second = fake.requests[1]["json"]["messages"]
    assert [(d.agent, d.task) for d in delegated] == [("shell", "echo hello-from-raven")]
    [tool] = [e for e in result.transcript if e["type"] == "tool"]
    assert tool["name"] == "delegate" and tool["recovered"] is True
    assert not tool["is_error"]
    assert second[1]["content"][0]["name"] == "delegate"
    assert result.text == "Started."


async def test_an_agent_called_without_a_task_hears_how_to_run_it() -> None:
    tools = ToolRegistry(
        [Tool("delegate", "Delegate a task.", DelegateInput, _never)],
        unknown_hint=agent_tool_hint(_registry()),
    )
    async with FakeAnthropic() as fake:
        fake.queue_tool_use("shell", {})
        fake.queue_tool_use("rm", {"path": "x"})
        fake.queue_text("I need the command.")
        provider = AnthropicProvider(api_key="k", model="m", base_url=fake.base_url)
        loop: AgentLoop[object] = AgentLoop(provider, rewrite=agent_calls_as_delegate(_registry()))
        result = await loop.run(
            system="s", messages=[Message.user_text("run it")], tools=tools, ctx=object()
        )
        await provider.aclose()
    shell, rm = [e for e in result.transcript if e["type"] == "tool"]
    assert shell["name"] == "shell" and shell["is_error"]
    assert shell["output"] == (
        "Unknown tool `shell`. `shell` is an agent, not a tool: run it with the `delegate` "
        'tool, as in {"agent": "shell", "task": "<what it should do, e.g. the exact command>"}.'
    )
    # Not an agent: the tools offered, as before.
    assert rm["output"] == "Unknown tool `rm`. Available tools: delegate."


async def _never(ctx: object, args: DelegateInput) -> str:
    raise AssertionError("nothing runs without a task")


async def test_an_invented_delegate_id_is_replaced_not_refused(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    """The real model gave `delegate` ids such as `123`, which are no node ids: admission
    refused the whole delegation. The optional id is left out instead (nothing refers to a
    node before it exists), so the delegation runs under a generated id."""

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        system, last = json.dumps(body.get("system")), json.dumps(body["messages"][-1])
        if "You judge whether an agent accomplished" in system:
            verdict = {"accomplished": True, "evidence": "output present"}
            return {"content": [_use("record_verdict", verdict)]}
        if "You are Raven, the Host Agent" in system:
            if "tool_result" in last:
                return {"content": "Looked it up."}
            task = {"agent": "research", "task": "Look it up.", "id": "123"}
            return {"content": [_use("delegate", task)]}
        return {"content": "Found it."}

    async with online(monkeypatch) as fake:
        fake.responder = answer
        async with chat_runtime(FakeChatAdapter()) as runtime:
            msg = inbound("Look it up, please.", "e1")
            turn = await runtime.service.accept(msg)
            assert turn is not None
            assert (await turn).text == "Looked it up."
            [run] = await runtime.runs.store.runs(msg.conversation.id)
            [node] = await runtime.runs.store.nodes_of_run(run.id)
    assert node.node_id.startswith("research") and node.state == "completed"


def _use(name: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{name}", "name": name, "input": payload}
