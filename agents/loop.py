"""The agent loop shell: model call, concurrent tool dispatch, iteration cap, accounting, events.

The shell is fixed; what varies per agent is its `Harness` (Memory, Planning, Capability, Action)
plus the system prompt and tools it is given. Specialists configure it, never fork it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic

from agents.harness import Harness
from agents.models.fallback import fallback_note, scoped_for_turn
from agents.models.provider import ModelProvider
from agents.models.types import Message, ModelReply, TextBlock, ToolCall, ToolResult, Usage
from agents.text_tool_calls import (
    CallRewrite,
    is_recovered,
    recover_tool_calls,
    rewrite_unknown_calls,
)
from agents.tools import Ctx, ToolRegistry, dump_input

log = logging.getLogger(__name__)

CAP_NOTE = (
    "You have used every tool iteration available for this turn. Answer now, without tools, "
    "from what you have: say what was done, what is missing, and what the user can do next."
)
EVENT_PREVIEW_CHARS = 500

EventSink = Callable[[dict[str, Any]], Awaitable[None]]


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
    # The full conversation (input messages, tool traffic, final answer), for stateful sessions.
    messages: list[Message] = field(default_factory=list)
    # Set when a fallback model answered: "answered by the fallback model X: Y was overloaded".
    fallback: str = ""


class AgentLoop(Generic[Ctx]):
    """Runs the tool-use loop for one task until the model answers without tools."""

    def __init__(
        self,
        provider: ModelProvider,
        *,
        harness: Harness | None = None,
        max_iterations: int = 40,
        max_tokens: int = 4096,
        rewrite: CallRewrite | None = None,
    ) -> None:
        self._provider = provider
        self._harness = harness or Harness()
        # Maps a call to a tool not offered onto one that is (the Host: an agent's name).
        self._rewrite = rewrite
        self._max_iterations = max_iterations
        self._max_tokens = max_tokens

    @property
    def harness(self) -> Harness:
        """The strategy modules this loop runs with."""
        return self._harness

    async def run(
        self,
        *,
        system: str,
        messages: Sequence[Message],
        tools: ToolRegistry[Ctx],
        ctx: Ctx,
        on_event: EventSink | None = None,
    ) -> LoopResult:
        """Loop: call the model; run requested tools concurrently; stop at a plain answer.

        `on_event` receives `model_call`, `tool_start` and `tool_end` dicts as they happen.
        """
        started = time.monotonic()
        # One run stays on the model it fell back to (its prompt cache stays warm).
        provider = scoped_for_turn(self._provider)
        h = self._harness
        convo = list(messages)
        result = LoopResult(text="")
        emit = _Emitter(on_event)
        for iteration in range(self._max_iterations):
            offered = h.capability.tools(iteration, tools)
            window = await h.memory.window(convo)
            call_system, call_messages = await h.planning.plan(system, window)
            reply = await h.action.call(
                provider, call_system, call_messages, offered.specs, self._max_tokens
            )
            result.model_calls += 1
            result.iterations += 1
            result.usage = result.usage + reply.usage
            # A call the model wrote as text (a weak model's habit) runs when it is valid;
            # the history then holds it as a real call, so its result pairs with it.
            if not self._provider.offline:  # the offline rules never write calls as text
                reply = recover_tool_calls(reply, offered.specs) or reply
                if self._rewrite is not None:
                    reply = rewrite_unknown_calls(reply, offered.specs, self._rewrite) or reply
            calls = reply.tool_calls
            await emit(_model_event(iteration, reply, final=not calls))
            if not calls:
                return self._finish(result, convo, reply.text, started, provider, after_cap=False)
            convo.append(Message(role="assistant", content=list(reply.content)))
            # Independent calls in one response run concurrently; order of results is kept.
            outcomes = await asyncio.gather(
                *(self._dispatch(offered, call, ctx, iteration, emit) for call in calls)
            )
            for call, outcome in zip(calls, outcomes, strict=True):
                result.transcript.append(
                    {
                        "type": "tool",
                        "name": call.name,
                        "input": dump_input(call),
                        "output": outcome.content[:2000],
                        "is_error": outcome.is_error,
                        **({"recovered": True} if is_recovered(call) else {}),
                    }
                )
            convo.append(Message(role="user", content=list(outcomes)))
        # Cap reached: one last call with no tools, over a flattened transcript.
        window = await h.memory.window(convo)
        cap_system, cap_messages = await h.planning.plan(f"{system}\n\n{CAP_NOTE}", window)
        final = await h.action.call(
            provider, cap_system, flatten_tool_blocks(cap_messages), (), self._max_tokens
        )
        result.model_calls += 1
        result.usage = result.usage + final.usage
        result.hit_cap = True
        await emit(_model_event(self._max_iterations, final, final=True))
        return self._finish(result, convo, final.text, started, provider, after_cap=True)

    async def _dispatch(
        self,
        registry: ToolRegistry[Ctx],
        call: ToolCall,
        ctx: Ctx,
        iteration: int,
        emit: _Emitter,
    ) -> ToolResult:
        base = {"iteration": iteration, "id": call.id, "name": call.name}
        await emit({"type": "tool_start", **base, "input": dump_input(call)})
        outcome = await registry.dispatch(call, ctx)
        await emit(
            {
                "type": "tool_end",
                **base,
                "is_error": outcome.is_error,
                "output": outcome.content[:EVENT_PREVIEW_CHARS],
            }
        )
        return outcome

    @staticmethod
    def _finish(
        result: LoopResult,
        convo: list[Message],
        text: str,
        started: float,
        provider: ModelProvider,
        *,
        after_cap: bool,
    ) -> LoopResult:
        result.text = text
        note = fallback_note(provider)
        if note is not None:
            # Kept with the record of the turn or node: which model answered, and why.
            result.fallback = str(note)
            result.transcript.append({"type": "fallback", "text": result.fallback})
        entry: dict[str, Any] = {"type": "answer", "text": text}
        if after_cap:
            entry["after_cap"] = True
        result.transcript.append(entry)
        # The API rejects empty text blocks, so an empty answer is recorded as a marker.
        result.messages = [*convo, Message.assistant_text(text or "(empty answer)")]
        result.seconds = time.monotonic() - started
        return result


class _Emitter:
    """Delivers events; a failing listener is logged and never breaks the run."""

    def __init__(self, sink: EventSink | None) -> None:
        self._sink = sink

    async def __call__(self, event: dict[str, Any]) -> None:
        if self._sink is None:
            return
        try:
            await self._sink(event)
        except Exception:
            log.exception("agent loop event listener failed on %s", event.get("type"))


def _model_event(iteration: int, reply: ModelReply, *, final: bool) -> dict[str, Any]:
    return {
        "type": "model_call",
        "iteration": iteration,
        "final": final,
        "text": reply.text[:EVENT_PREVIEW_CHARS],
        "tool_calls": [c.name for c in reply.tool_calls],
        "recovered_calls": sum(1 for c in reply.tool_calls if is_recovered(c)),
        "input_tokens": reply.usage.input_tokens,
        "output_tokens": reply.usage.output_tokens,
    }


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
