"""The nudge policy's own part of a runtime: what the caps held back is listed in `status`
and summarised in one post per conversation when the hour has room again (a durable
wake-up, or the next start after a downtime)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import ClassVar

from host.features.feature import BaseFeature, HostParts, StatusSource
from host.nudges.backlog import HELD_BACK_SUMMARY, HeldBack, HeldBackSummaries
from host.nudges.migrations import MIGRATIONS
from host.runtime.events import EventBus, subscribe_job


@dataclass(frozen=True)
class NudgesSection:
    """The zone `status` names the summary's time in (named as in Settings)."""

    timezone: str


class NudgesFeature(BaseFeature):
    """Held-back posts: listed, then summarised once."""

    Section: ClassVar[type[NudgesSection]] = NudgesSection
    migrations = MIGRATIONS
    # Its first version keeps the `nudges` table the schedules package made (schedules 3).
    migrations_after = frozenset({"schedules"})

    def __init__(self, parts: HostParts, section: NudgesSection) -> None:
        self.summaries = HeldBackSummaries(
            HeldBack(parts.store, parts.scheduler),
            parts.conversation_log,
            parts.outbox,
            zone=section.timezone,
        )

    def status_sources(self) -> Sequence[StatusSource]:
        return (self.summaries.status,)

    def subscribe(self, bus: EventBus) -> None:
        subscribe_job(bus, HELD_BACK_SUMMARY, self.summaries.on_job)

    async def start(self, stack: AsyncExitStack) -> None:
        # What a downtime kept past its hour is summarised now; the rest is re-armed.
        await self.summaries.recover()
