"""The agent loop shell: tool dispatch, concurrency, validation errors, iteration cap."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from agents.loop import CAP_NOTE, AgentLoop
from agents.models.types import (
    Message,
    ModelReply,
    TextBlock,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
)
from agents.tools import Tool, ToolRegistry
from tests.fakes.providers import TestProvider


class ScriptedProvider(TestProvider):
    """A provider that replays scripted replies and records what it was sent."""

    label = "scripted"

    def __init__(self, replies: list[ModelReply]) -> None:
        self.replies = replies
        self.calls: list[tuple[str, list[Message], list[ToolSpec]]] = []

    async def reply(
        self, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> ModelReply:
        self.calls.append((system, messages, tools))
        return self.replies.pop(0)


class Echo(BaseModel):
    text: str


def _tool_reply(*calls: ToolCall) -> ModelReply:
    return ModelReply(content=list(calls), stop_reason="tool_use", usage=Usage(input_tokens=5))


def _text_reply(text: str) -> ModelReply:
    return ModelReply(
        content=[TextBlock(text=text)], stop_reason="end_turn", usage=Usage(output_tokens=3)
    )


def _registry(started: list[str], gate: asyncio.Event | None = None) -> ToolRegistry[str]:
    async def echo(ctx: str, args: Echo) -> str:
        started.append(args.text)
        if gate is not None:
            if len(started) == 2:
                gate.set()
            await gate.wait()
        return f"{ctx}:{args.text}"

    return ToolRegistry([Tool("echo", "Echo text back.", Echo, echo)])


async def test_tool_round_trip_and_accounting() -> None:
    provider = ScriptedProvider(
        [_tool_reply(ToolCall(id="a", name="echo", input={"text": "hi"})), _text_reply("done")]
    )
    loop: AgentLoop[str] = AgentLoop(provider)
    result = await loop.run(
        system="s", messages=[Message.user_text("go")], tools=_registry([]), ctx="c"
    )
    assert result.text == "done"
    assert result.model_calls == 2
    assert result.usage == Usage(input_tokens=5, output_tokens=3)
    sent = provider.calls[1][1][-1].content[0]
    assert isinstance(sent, ToolResult) and sent.content == "c:hi" and not sent.is_error
    assert provider.calls[0][2][0].input_schema["required"] == ["text"]


async def test_independent_calls_run_concurrently() -> None:
    started: list[str] = []
    gate = asyncio.Event()  # each call waits until both have started: only concurrency passes
    provider = ScriptedProvider(
        [
            _tool_reply(
                ToolCall(id="a", name="echo", input={"text": "1"}),
                ToolCall(id="b", name="echo", input={"text": "2"}),
            ),
            _text_reply("ok"),
        ]
    )
    loop: AgentLoop[str] = AgentLoop(provider)
    result = await asyncio.wait_for(
        loop.run(
            system="s", messages=[Message.user_text("go")], tools=_registry(started, gate), ctx="c"
        ),
        timeout=5,
    )
    assert result.text == "ok"
    results = provider.calls[1][1][-1].content
    assert [r.tool_use_id for r in results if isinstance(r, ToolResult)] == ["a", "b"]


async def test_bad_input_and_unknown_tool_become_error_results() -> None:
    provider = ScriptedProvider(
        [
            _tool_reply(
                ToolCall(id="a", name="echo", input={"txt": 1}),
                ToolCall(id="b", name="nope", input={}),
            ),
            _text_reply("recovered"),
        ]
    )
    loop: AgentLoop[str] = AgentLoop(provider)
    result = await loop.run(
        system="s", messages=[Message.user_text("go")], tools=_registry([]), ctx="c"
    )
    bad, unknown = provider.calls[1][1][-1].content
    assert isinstance(bad, ToolResult) and bad.is_error and "text: Field required" in bad.content
    assert isinstance(unknown, ToolResult) and "Unknown tool `nope`" in unknown.content
    assert result.text == "recovered"


async def test_iteration_cap_ends_with_a_no_tools_answer() -> None:
    calls = [
        _tool_reply(ToolCall(id=f"t{i}", name="echo", input={"text": str(i)})) for i in range(3)
    ]
    provider = ScriptedProvider([*calls, _text_reply("summary")])
    loop: AgentLoop[str] = AgentLoop(provider, max_iterations=3)
    result = await loop.run(
        system="s", messages=[Message.user_text("go")], tools=_registry([]), ctx="c"
    )
    assert result.hit_cap and result.text == "summary" and result.model_calls == 4
    system, messages, tools = provider.calls[-1]
    assert tools == [] and CAP_NOTE in system
    # The final call sees tool traffic as plain text, roles alternating.
    assert all(isinstance(b, TextBlock) for m in messages for b in m.content)
    assert [m.role for m in messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert "[tool result: c:2]" in messages[-1].content[0].text  # type: ignore[union-attr]
