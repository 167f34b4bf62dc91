"""A weak model calls an agent by its name as if it were a tool (the real Qwen2.5-Coder 1.5B
called `shell` with `{"command": "echo hello-from-raven"}`): the Host reads that as
`delegate` to the agent, marked recovered, so it passes every check `delegate` passes."""

from __future__ import annotations

from typing import Any

from agents.loop import AgentLoop
from agents.models.anthropic_provider import AnthropicProvider
from agents.models.types import Message, ToolCall
from agents.registry import load_registry
from agents.tools import Tool, ToolRegistry
from core.secret_names import SecretNames
from host.agent.tools import DelegateInput, agent_calls_as_delegate
from tests.fakes.anthropic_server import FakeAnthropic


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
    # Not an agent, no task, or several arguments without a usual key: left alone (the
    # loop then answers "Unknown tool" as before).
    assert rewrite(ToolCall(id="t3", name="rm", input={"command": "x"})) is None
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
