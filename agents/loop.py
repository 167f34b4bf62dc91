"""The agent loop shell: model call, concurrent tool dispatch, iteration cap, accounting."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic

from agents.models.provider import ModelProvider
from agents.models.types import Message, TextBlock, ToolCall, ToolResult, Usage
from agents.tools import Ctx, ToolRegistry, dump_input

CAP_NOTE = (
    "You have used every tool iteration available for this turn. Answer now, without tools, "
    "from what you have: say what was done, what is missing, and what the user can do next."
)


@dataclass
class LoopResult:
    """What one run of the loop produced, with its accounting."""

    text: str
    transcript: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    model_calls: int = 0
    iterations: int = 0
    hit_cap: bool = False
    seconds: float = 0.0


class AgentLoop(Generic[Ctx]):
    """Runs the tool-use loop for one task until the model answers without tools."""

    def __init__(
        self, provider: ModelProvider, *, max_iterations: int = 40, max_tokens: int = 4096
    ) -> None:
        self._provider = provider
        self._max_iterations = max_iterations
        self._max_tokens = max_tokens

    async def run(
        self,
        *,
        system: str,
        messages: Sequence[Message],
        tools: ToolRegistry[Ctx],
        ctx: Ctx,
    ) -> LoopResult:
        """Loop: call the model; run requested tools concurrently; stop at a plain answer."""
        started = time.monotonic()
        convo = list(messages)
        result = LoopResult(text="")
        specs = tools.specs
        for _ in range(self._max_iterations):
            reply = await self._provider.complete(
                system=system, messages=convo, tools=specs, max_tokens=self._max_tokens
            )
            result.model_calls += 1
            result.iterations += 1
            result.usage = result.usage + reply.usage
            calls = reply.tool_calls
            if not calls:
                result.text = reply.text
                result.transcript.append({"type": "answer", "text": reply.text})
                result.seconds = time.monotonic() - started
                return result
            convo.append(Message(role="assistant", content=list(reply.content)))
            # Independent calls in one response run concurrently; order of results is kept.
            outcomes = await asyncio.gather(*(tools.dispatch(c, ctx) for c in calls))
            for call, outcome in zip(calls, outcomes, strict=True):
                result.transcript.append(
                    {
                        "type": "tool",
                        "name": call.name,
                        "input": dump_input(call),
                        "output": outcome.content[:2000],
                        "is_error": outcome.is_error,
                    }
                )
            convo.append(Message(role="user", content=list(outcomes)))
        # Cap reached: one last call with no tools, over a flattened transcript.
        final = await self._provider.complete(
            system=f"{system}\n\n{CAP_NOTE}",
            messages=flatten_tool_blocks(convo),
            tools=(),
            max_tokens=self._max_tokens,
        )
        result.model_calls += 1
        result.usage = result.usage + final.usage
        result.hit_cap = True
        result.text = final.text
        result.transcript.append({"type": "answer", "text": final.text, "after_cap": True})
        result.seconds = time.monotonic() - started
        return result


def flatten_tool_blocks(messages: Sequence[Message]) -> list[Message]:
    """Rewrite tool calls/results as text so a no-tools call can still read them."""
    flat: list[Message] = []
    for message in messages:
        parts: list[str] = []
        for block in message.content:
            if isinstance(block, TextBlock):
                parts.append(block.text)
            elif isinstance(block, ToolCall):
                parts.append(f"[called tool {block.name} with {dump_input(block)}]")
            elif isinstance(block, ToolResult):
                status = "error" if block.is_error else "result"
                parts.append(f"[tool {status}: {block.content}]")
        text = "\n".join(parts) or "(empty)"
        if flat and flat[-1].role == message.role:
            prev = flat.pop()
            text = "\n\n".join([_text_of(prev), text])
        flat.append(Message(role=message.role, content=[TextBlock(text=text)]))
    return flat


def _text_of(message: Message) -> str:
    return "\n".join(b.text for b in message.content if isinstance(b, TextBlock))
