"""Whom a model call is for: the person, conversation, run and node it serves.

Set where work starts (a turn, a node's attempt, a campaign's decision) and read where a
model call is metered, so usage is attributed without every caller passing it down. A
`ContextVar` because this is per-task context that asyncio copies into the tasks a piece
of work starts (a node's tasks inherit its run and node); each value is immutable.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace

from core.ids import ConversationRef


@dataclass(frozen=True)
class CallScope:
    """What a model call serves ("" where unknown: the bot's own upkeep)."""

    person: str = ""
    conversation: str = ""  # ConversationRef.id
    channel: str = ""  # ConversationRef.channel_key
    run: str = ""
    node: str = ""


_SCOPE: ContextVar[CallScope | None] = ContextVar("raven_call_scope", default=None)


def current_scope() -> CallScope:
    """The scope of the work running now (an empty one outside any)."""
    return _SCOPE.get() or CallScope()


@contextmanager
def call_scope(
    *,
    person: str | None = None,
    conversation: ConversationRef | None = None,
    run: str | None = None,
    node: str | None = None,
) -> Iterator[CallScope]:
    """Narrow the current scope for the block (fields not given stay as they are)."""
    changes: dict[str, str] = {}
    if person is not None:
        changes["person"] = person
    if conversation is not None:
        changes["conversation"] = conversation.id
        changes["channel"] = conversation.channel_key
    if run is not None:
        changes["run"] = run
    if node is not None:
        changes["node"] = node
    scope = replace(current_scope(), **changes)
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)
