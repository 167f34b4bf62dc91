"""Tool calls a weak model writes as text are recovered when they name an offered tool with
valid arguments, and run through the real agent loop; anything else stays text."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from agents.loop import AgentLoop
from agents.models.types import Message, ModelReply, TextBlock, ToolCall, ToolResult, ToolSpec
from agents.text_tool_calls import is_recovered, recover_tool_calls
from agents.tools import Tool, ToolRegistry
from tests.fakes.providers import TestProvider


class Echo(BaseModel):
    text: str


def _registry(seen: list[str]) -> ToolRegistry[str]:
    async def echo(ctx: str, args: Echo) -> str:
        seen.append(args.text)
        return f"echoed {args.text}"

    return ToolRegistry([Tool("echo", "Echo text back.", Echo, echo)])


def _text(text: str) -> ModelReply:
    return ModelReply(content=[TextBlock(text=text)], stop_reason="end_turn")


class Scripted(TestProvider):
    def __init__(self, replies: list[ModelReply]) -> None:
        self.replies = replies
        self.sent: list[list[Message]] = []

    async def reply(
        self, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> ModelReply:
        self.sent.append(messages)
        return self.replies.pop(0)


SPECS = _registry([]).specs

WRITTEN = [
    'I will echo it.\n```json\n{"name": "echo", "arguments": {"text": "hi"}}\n```',
    '{"name": "echo", "parameters": {"text": "hi"}}',
    '<tool_call>\n{"name": "echo", "input": {"text": "hi"}}\n</tool_call>',
    '```\n{"name": "echo", "arguments": "{\\"text\\": \\"hi\\"}"}\n```',
    '{"type": "function", "function": {"name": "echo", "arguments": {"text": "hi"}}}',
]


@pytest.mark.parametrize("text", WRITTEN)
def test_written_call_is_recovered(text: str) -> None:
    recovered = recover_tool_calls(_text(text), SPECS)
    assert recovered is not None
    [call] = recovered.tool_calls
    assert (call.name, call.input, is_recovered(call)) == ("echo", {"text": "hi"}, True)
    assert recovered.stop_reason == "tool_use"
    assert "{" not in recovered.text and "```" not in recovered.text
    assert "tool_call" not in recovered.text


STAYS_TEXT = [
    'Here is JSON: {"name": "echo"}',  # no arguments: `text` is required
    '{"name": "echo", "arguments": {"text": 3}}',  # wrong type
    '{"name": "delete_everything", "arguments": {}}',  # not an offered tool
    '```json\n{"name": "echo", "arguments": {"text": "hi"\n```',  # cut off
    "Plain answer with {braces} in it.",
]


@pytest.mark.parametrize("text", STAYS_TEXT)
def test_anything_else_stays_text(text: str) -> None:
    assert recover_tool_calls(_text(text), SPECS) is None


def test_real_calls_are_left_alone() -> None:
    reply = ModelReply(
        content=[
            TextBlock(text='{"name": "echo", "arguments": {"text": "no"}}'),
            ToolCall(id="t1", name="echo", input={"text": "yes"}),
        ],
        stop_reason="tool_use",
    )
    assert recover_tool_calls(reply, SPECS) is None


async def test_loop_runs_a_recovered_call_and_pairs_its_result() -> None:
    seen: list[str] = []
    provider = Scripted([_text(WRITTEN[0]), _text("done")])
    loop: AgentLoop[str] = AgentLoop(provider)
    result = await loop.run(
        system="s", messages=[Message.user_text("go")], tools=_registry(seen), ctx="c"
    )
    assert seen == ["hi"]
    assert result.text == "done"
    tool_entry = result.transcript[0]
    assert tool_entry["recovered"] is True and tool_entry["output"] == "echoed hi"
    # The model's history: its text, then the call as a real tool_use, then the paired result.
    assistant, results = provider.sent[1][1], provider.sent[1][2]
    assert isinstance(assistant.content[0], TextBlock)
    assert assistant.content[0].text == "I will echo it."
    call = assistant.content[1]
    assert isinstance(call, ToolCall) and is_recovered(call)
    [paired] = results.content
    assert isinstance(paired, ToolResult) and paired.tool_use_id == call.id


async def test_loop_keeps_an_invalid_written_call_as_the_answer() -> None:
    seen: list[str] = []
    text = '{"name": "echo", "arguments": {"txt": "hi"}}'
    loop: AgentLoop[str] = AgentLoop(Scripted([_text(text)]))
    result = await loop.run(
        system="s", messages=[Message.user_text("go")], tools=_registry(seen), ctx="c"
    )
    assert seen == [] and result.text == text and result.model_calls == 1


class Tagged(BaseModel):
    text: str
    tag: str | None = Field(default=None, pattern="^[a-z]+$")


def test_an_empty_optional_string_does_not_stop_recovery() -> None:
    """`"tag": ""` breaks the pattern, but reads as "not given" (as admission reads it)."""

    async def tagged(ctx: str, args: Tagged) -> str:
        return args.text

    specs = ToolRegistry([Tool("tagged", "Tagged.", Tagged, tagged)]).specs
    written = '{"name": "tagged", "arguments": {"text": "hi", "tag": ""}}'
    recovered = recover_tool_calls(_text(written), specs)
    assert recovered is not None
    assert recovered.tool_calls[0].input == {"text": "hi", "tag": ""}
    assert recover_tool_calls(_text(written.replace('""', '"B!"')), specs) is None
