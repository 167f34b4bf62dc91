"""The four harness modules around the loop shell: memory window, planning, capability, events."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from agents.harness import (
    ContextWindow,
    Harness,
    PassThroughPlanning,
    fit_window,
    message_chars,
)
from agents.loop import AgentLoop
from agents.models.provider import ModelProvider
from agents.models.types import (
    Message,
    ModelReply,
    TextBlock,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
)
from agents.tools import Ctx, Tool, ToolRegistry
from tests.agents.test_agent_loop import ScriptedProvider


class Text(BaseModel):
    text: str


def _registry() -> ToolRegistry[str]:
    async def echo(ctx: str, args: Text) -> str:
        return f"echo:{args.text}"

    async def shout(ctx: str, args: Text) -> str:
        return args.text.upper()

    return ToolRegistry(
        [Tool("echo", "Echo text.", Text, echo), Tool("shout", "Upper-case text.", Text, shout)]
    )


def _tool_reply(*calls: ToolCall, text: str = "") -> ModelReply:
    content: list[TextBlock | ToolCall] = [TextBlock(text=text)] if text else []
    return ModelReply(content=[*content, *calls], stop_reason="tool_use", usage=Usage())


def _text_reply(text: str) -> ModelReply:
    return ModelReply(content=[TextBlock(text=text)], stop_reason="end_turn", usage=Usage())


def _exchange(i: int, size: int) -> list[Message]:
    """An assistant tool call and the user message carrying its result."""
    call = ToolCall(id=f"t{i}", name="echo", input={"text": str(i)})
    result = ToolResult(tool_use_id=f"t{i}", content="x" * size)
    return [Message(role="assistant", content=[call]), Message(role="user", content=[result])]


def _assert_pairs_intact(messages: Sequence[Message]) -> None:
    """Every tool_use is answered in the next message and every tool_result has its tool_use."""
    for i, message in enumerate(messages):
        for block in message.content:
            if isinstance(block, ToolCall):
                following = messages[i + 1].content
                assert any(
                    isinstance(b, ToolResult) and b.tool_use_id == block.id for b in following
                )
            if isinstance(block, ToolResult):
                previous = messages[i - 1].content
                assert any(isinstance(b, ToolCall) and b.id == block.tool_use_id for b in previous)


# -- memory ----------------------------------------------------------------------------------


async def test_window_keeps_everything_under_budget() -> None:
    messages = [Message.user_text("task"), *_exchange(1, 100), Message.assistant_text("done")]
    assert await ContextWindow(budget_chars=10_000).window(messages) == messages


def test_window_drops_oldest_exchanges_and_keeps_tool_pairs() -> None:
    first = Message.user_text("the original task")
    messages = [first]
    for i in range(6):
        messages += _exchange(i, 1000)
    budget = 3500  # room for the first message plus about three exchanges
    window = fit_window(messages, budget)
    assert sum(message_chars(m) for m in window) <= budget
    assert window[0].role == "user"
    assert window[0].content[0] == first.content[0]
    note = window[0].content[-1]
    assert isinstance(note, TextBlock) and "earlier message(s)" in note.text
    # The newest exchange is always there; roles alternate; pairs are never split.
    assert window[-2:] == messages[-2:]
    roles = [m.role for m in window]
    assert all(a != b for a, b in itertools.pairwise(roles))
    _assert_pairs_intact(window)
    assert len(window) < len(messages)


def test_window_never_drops_the_newest_exchange_even_over_budget() -> None:
    messages = [Message.user_text("task"), *_exchange(1, 5000), *_exchange(2, 5000)]
    window = fit_window(messages, 100)
    assert window[1:] == messages[3:]
    _assert_pairs_intact(window)


def test_window_keeps_history_with_text_turns_and_a_new_question() -> None:
    messages = [
        Message.user_text("q1"),
        *_exchange(1, 2000),
        Message.assistant_text("a1"),
        Message.user_text("q2 " + "y" * 2000),
        *_exchange(2, 10),
        Message.assistant_text("a2"),
        Message.user_text("q3"),
    ]
    window = fit_window(messages, 2400)
    assert window[-1] == messages[-1]
    _assert_pairs_intact(window)
    roles = [m.role for m in window]
    assert all(a != b for a, b in itertools.pairwise(roles))


async def test_loop_sends_the_window_not_the_whole_conversation() -> None:
    calls = [
        _tool_reply(ToolCall(id=f"c{i}", name="echo", input={"text": "z" * 300})) for i in range(5)
    ]
    provider = ScriptedProvider([*calls, _text_reply("ok")])
    loop: AgentLoop[str] = AgentLoop(provider, harness=Harness(memory=ContextWindow(1500)))
    result = await loop.run(
        system="s", messages=[Message.user_text("go")], tools=_registry(), ctx="c"
    )
    assert result.text == "ok"
    last_sent = provider.calls[-1][1]
    assert len(last_sent) < len(result.messages) - 1  # trimmed
    _assert_pairs_intact(last_sent)
    # The kept session is complete: the window is a view, not a loss.
    assert len(result.messages) == 1 + 2 * 5 + 1


# -- planning --------------------------------------------------------------------------------


async def test_default_planning_passes_through() -> None:
    messages = [Message.user_text("hi")]
    system, out = await PassThroughPlanning().plan("sys", messages)
    assert system == "sys" and out == messages


@dataclass(frozen=True)
class AdvicePlanning:
    async def plan(self, system: str, messages: Sequence[Message]) -> tuple[str, list[Message]]:
        return f"{system}\nAdvice: check sources.", list(messages)


async def test_custom_planning_shapes_each_call_without_touching_the_session() -> None:
    provider = ScriptedProvider([_text_reply("fine")])
    loop: AgentLoop[str] = AgentLoop(provider, harness=Harness(planning=AdvicePlanning()))
    result = await loop.run(
        system="base", messages=[Message.user_text("q")], tools=_registry(), ctx="c"
    )
    assert provider.calls[0][0] == "base\nAdvice: check sources."
    assert result.messages[0] == Message.user_text("q")


# -- capability ------------------------------------------------------------------------------


@dataclass(frozen=True)
class EchoFirstThenShout:
    """Iteration 0 offers only `echo`; later ones only `shout`."""

    def tools(self, iteration: int, registry: ToolRegistry[Ctx]) -> ToolRegistry[Ctx]:
        return registry.select(["echo"] if iteration == 0 else ["shout"])


async def test_capability_changes_the_tool_set_per_iteration() -> None:
    provider = ScriptedProvider(
        [
            _tool_reply(ToolCall(id="a", name="echo", input={"text": "1"})),
            # `echo` is no longer offered, so calling it is refused like an unknown tool.
            _tool_reply(
                ToolCall(id="b", name="echo", input={"text": "2"}),
                ToolCall(id="c", name="shout", input={"text": "hey"}),
            ),
            _text_reply("done"),
        ]
    )
    harness = Harness(name="cap-test", capability=EchoFirstThenShout())
    loop: AgentLoop[str] = AgentLoop(provider, harness=harness)
    await loop.run(system="s", messages=[Message.user_text("go")], tools=_registry(), ctx="c")
    offered = [[t.name for t in tools] for _, _, tools in provider.calls]
    assert offered == [["echo"], ["shout"], ["shout"]]
    refused, shouted = provider.calls[2][1][-1].content
    assert isinstance(refused, ToolResult) and refused.is_error
    assert "Unknown tool `echo`" in refused.content
    assert isinstance(shouted, ToolResult) and shouted.content == "HEY"


# -- action ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryEmpty:
    """An Action that asks again once when the model returns an empty answer."""

    async def call(
        self,
        provider: ModelProvider,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        max_tokens: int,
    ) -> ModelReply:
        reply = await provider.complete(
            system=system, messages=messages, tools=tools, max_tokens=max_tokens
        )
        if not reply.text and not reply.tool_calls:
            reply = await provider.complete(
                system=system, messages=messages, tools=tools, max_tokens=max_tokens
            )
        return reply


async def test_custom_action_module_is_used_for_model_calls() -> None:
    provider = ScriptedProvider([_text_reply(""), _text_reply("second try")])
    loop: AgentLoop[str] = AgentLoop(provider, harness=Harness(action=RetryEmpty()))
    result = await loop.run(
        system="s", messages=[Message.user_text("q")], tools=_registry(), ctx="c"
    )
    assert result.text == "second try" and len(provider.calls) == 2


# -- events ----------------------------------------------------------------------------------


async def test_on_event_reports_model_calls_and_tools() -> None:
    provider = ScriptedProvider(
        [
            _tool_reply(ToolCall(id="a", name="echo", input={"text": "1"}), text="Looking."),
            _text_reply("done"),
        ]
    )
    events: list[dict[str, Any]] = []

    async def on_event(event: dict[str, Any]) -> None:
        events.append(event)

    loop: AgentLoop[str] = AgentLoop(provider)
    await loop.run(
        system="s",
        messages=[Message.user_text("go")],
        tools=_registry(),
        ctx="c",
        on_event=on_event,
    )
    assert [e["type"] for e in events] == ["model_call", "tool_start", "tool_end", "model_call"]
    assert events[0]["text"] == "Looking." and events[0]["tool_calls"] == ["echo"]
    assert not events[0]["final"] and events[-1]["final"]
    assert events[1]["name"] == "echo" and events[1]["id"] == "a"
    assert events[2]["output"] == "echo:1" and events[2]["is_error"] is False


async def test_a_failing_event_listener_does_not_break_the_run() -> None:
    provider = ScriptedProvider(
        [_tool_reply(ToolCall(id="a", name="echo", input={"text": "1"})), _text_reply("done")]
    )

    async def broken(event: dict[str, Any]) -> None:
        raise RuntimeError("listener bug")

    loop: AgentLoop[str] = AgentLoop(provider)
    result = await loop.run(
        system="s",
        messages=[Message.user_text("go")],
        tools=_registry(),
        ctx="c",
        on_event=broken,
    )
    assert result.text == "done"


async def test_result_messages_hold_the_whole_session() -> None:
    provider = ScriptedProvider(
        [_tool_reply(ToolCall(id="a", name="echo", input={"text": "1"})), _text_reply("done")]
    )
    loop: AgentLoop[str] = AgentLoop(provider)
    result = await loop.run(
        system="s", messages=[Message.user_text("go")], tools=_registry(), ctx="c"
    )
    assert [m.role for m in result.messages] == ["user", "assistant", "user", "assistant"]
    assert result.messages[-1] == Message.assistant_text("done")
