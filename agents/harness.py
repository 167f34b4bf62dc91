"""The four harness strategy modules (Memory, Planning, Capability, Action) and their defaults.

The loop shell (`agents.loop`) is fixed; a harness is the editable policy around it (paper §4.1).
Each strategy is a small protocol, so a specialist or an evolved candidate swaps one piece only.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agents.models.provider import ModelProvider
from agents.models.types import Block, Message, ModelReply, TextBlock, ToolCall, ToolSpec
from agents.tools import Ctx, ToolRegistry

log = logging.getLogger(__name__)

DEFAULT_CONTEXT_BUDGET_CHARS = 400_000


class MemoryStrategy(Protocol):
    """Decides the working window of messages shown to the model under a context budget."""

    async def window(self, messages: Sequence[Message]) -> list[Message]:
        """The messages to send this call; must keep tool_use/tool_result pairs together."""
        ...


class PlanningStrategy(Protocol):
    """Prepares turn guidance: may adjust the system prompt and messages before a call."""

    async def plan(self, system: str, messages: Sequence[Message]) -> tuple[str, list[Message]]:
        """The (system, messages) to send this call."""
        ...


class CapabilityStrategy(Protocol):
    """Selects the tools exposed to the model at each iteration."""

    def tools(self, iteration: int, registry: ToolRegistry[Ctx]) -> ToolRegistry[Ctx]:
        """The tool set offered (and dispatchable) at `iteration` (0-based)."""
        ...


class ActionStrategy(Protocol):
    """Obtains a usable model response for one iteration."""

    async def call(
        self,
        provider: ModelProvider,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        max_tokens: int,
    ) -> ModelReply:
        """Run the model call(s) for one iteration and return the reply to act on."""
        ...


@dataclass(frozen=True)
class ContextWindow:
    """Default Memory: drop the oldest whole exchanges after the first user message."""

    budget_chars: int = DEFAULT_CONTEXT_BUDGET_CHARS

    async def window(self, messages: Sequence[Message]) -> list[Message]:
        """Everything if it fits; else the first user message, a note, and the newest exchanges."""
        return fit_window(messages, self.budget_chars)


@dataclass(frozen=True)
class PassThroughPlanning:
    """Default Planning: preserves its input unchanged."""

    async def plan(self, system: str, messages: Sequence[Message]) -> tuple[str, list[Message]]:
        """Return the system prompt and messages as given."""
        return system, list(messages)


@dataclass(frozen=True)
class AllTools:
    """Default Capability: every registered tool at every iteration."""

    def tools(self, iteration: int, registry: ToolRegistry[Ctx]) -> ToolRegistry[Ctx]:
        """The whole registry."""
        return registry


@dataclass(frozen=True)
class SingleCall:
    """Default Action: one provider call (retrying transient failures is the provider's job)."""

    async def call(
        self,
        provider: ModelProvider,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        max_tokens: int,
    ) -> ModelReply:
        """Call the provider once."""
        return await provider.complete(
            system=system, messages=messages, tools=tools, max_tokens=max_tokens
        )


@dataclass(frozen=True)
class Harness:
    """One complete harness: an identifier plus the four strategy modules."""

    name: str = "default"
    memory: MemoryStrategy = field(default_factory=ContextWindow)
    planning: PlanningStrategy = field(default_factory=PassThroughPlanning)
    capability: CapabilityStrategy = field(default_factory=AllTools)
    action: ActionStrategy = field(default_factory=SingleCall)


def block_chars(block: Block) -> int:
    """Approximate size of one content block in characters."""
    if isinstance(block, TextBlock):
        return len(block.text)
    if isinstance(block, ToolCall):
        return len(block.name) + len(json.dumps(block.input, ensure_ascii=False))
    return len(block.content)


def message_chars(message: Message) -> int:
    """Approximate size of one message in characters (a small per-block overhead included)."""
    return sum(block_chars(b) + 16 for b in message.content)


def fit_window(messages: Sequence[Message], budget_chars: int) -> list[Message]:
    """Drop the oldest complete exchanges after the first user message until under budget.

    An exchange starts at an assistant message and runs through the user messages after it, so
    a tool_use and its tool_result always go (or stay) together and roles keep alternating.
    """
    msgs = list(messages)
    total = sum(message_chars(m) for m in msgs)
    if total <= budget_chars:
        return msgs
    first = next((i for i, m in enumerate(msgs) if m.role == "user"), None)
    if first is None:
        return msgs
    head, rest = msgs[: first + 1], msgs[first + 1 :]
    units: list[list[Message]] = []
    for message in rest:
        if not units or message.role == "assistant":
            units.append([message])
        else:
            units[-1].append(message)
    dropped_units = 0
    dropped_messages = 0
    # Reserve room for the note that tells the model some of the conversation was left out.
    limit = budget_chars - len(_omitted_note(len(msgs))) - 16
    # The newest exchange holds the request being answered now: it is never dropped.
    while total > limit and dropped_units < len(units) - 1:
        unit = units[dropped_units]
        total -= sum(message_chars(m) for m in unit)
        dropped_messages += len(unit)
        dropped_units += 1
    if dropped_units == 0:
        log.warning("context over budget (%d > %d chars), nothing to drop", total, budget_chars)
        return msgs
    if total > limit:
        log.warning("context window still over budget (%d > %d chars)", total, budget_chars)
    # Every unit after the first starts with an assistant message, so roles still alternate.
    kept = [m for unit in units[dropped_units:] for m in unit]
    anchor = head[-1]
    note = TextBlock(text=_omitted_note(dropped_messages))
    head[-1] = Message(role=anchor.role, content=[*anchor.content, note])
    return [*head, *kept]


def _omitted_note(count: int) -> str:
    return (
        f"[{count} earlier message(s) of this conversation were left out to fit the context "
        "budget.]"
    )
