"""What a conversation's scheduled-work page shows (a stub: being built)."""

from __future__ import annotations

from dataclasses import dataclass

from core.ids import ConversationRef
from host.features.schedules.store import ScheduledTask, TaskStore
from host.graph.run_store import RunStore


@dataclass(frozen=True)
class SchedulesView:
    """A conversation's scheduled tasks as the page shows them."""

    tasks: tuple[ScheduledTask, ...]


async def load_schedules(
    tasks: TaskStore, runs: RunStore, conv: ConversationRef, *, now: float
) -> SchedulesView:
    """The conversation's scheduled tasks, live ones first."""
    return SchedulesView(tuple(await tasks.of_conversation(conv.id)))
