"""The nudge policy over what scheduled tasks and checks say on their own: per-channel and
per-owner caps per hour, and the same thing said once in a conversation per day.

What differs between two sayings of the same thing (run ids, a firing's node-id suffix,
record paths) is left out of the comparison. A post the policy holds back is logged and not
posted; the work behind it ran and is recorded.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from core.store import Store
from host.features.schedules.store import ScheduledTask, channel_key

log = logging.getLogger(__name__)

DEDUP_SECONDS = 86_400.0
_VARYING = re.compile(r"\brun_[0-9a-f]{6,}\b|_\d{10}(?:\d\d)?\b|(?<![\w`])/[^\s`]+")


@dataclass(frozen=True)
class NudgeLimits:
    """How much tasks and checks may say on their own."""

    channel_per_hour: int = 20
    owner_per_hour: int = 10


def digest(text: str) -> str:
    """What a post says, without what differs at every firing."""
    return hashlib.sha256(_VARYING.sub("", " ".join(text.split())).encode()).hexdigest()


class NudgePolicy:
    """Admits a task's post, or holds it back (recording what was said)."""

    def __init__(
        self, store: Store, limits: NudgeLimits, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._store = store
        self.limits = limits
        self._clock = clock

    async def admit(self, task: ScheduledTask, text: str, *, dedup: bool = True) -> bool:
        """True (and recorded) when `task` may post `text` now. A firing's result is not
        deduplicated (its `notify:` decides on repeats); its notices are."""
        now = self._clock()
        said = digest(text)
        conv, channel = task.conversation.id, channel_key(task.conversation)
        row = await self._store.fetchone(
            "SELECT"
            " (SELECT COUNT(*) FROM nudges WHERE conversation_id = ? AND digest = ? AND at > ?)"
            " AS same,"
            " (SELECT COUNT(*) FROM nudges WHERE channel_key = ? AND at > ?) AS channel,"
            " (SELECT COUNT(*) FROM nudges WHERE owner = ? AND at > ?) AS owner",
            (conv, said, now - DEDUP_SECONDS, channel, now - 3600, task.owner, now - 3600),
        )
        assert row is not None
        why = (
            "it was said here in the last 24 h"
            if dedup and row["same"]
            else f"this channel had {self.limits.channel_per_hour} in the last hour"
            if row["channel"] >= self.limits.channel_per_hour
            else f"its owner's tasks said {self.limits.owner_per_hour} in the last hour"
            if row["owner"] >= self.limits.owner_per_hour
            else ""
        )
        if why:
            log.info("task %s: a post held back: %s", task.id, why)
            return False
        await self._store.execute(
            "INSERT INTO nudges (conversation_id, channel_key, owner, digest, at)"
            " VALUES (?, ?, ?, ?, ?)",
            (conv, channel, task.owner, said, now),
        )
        return True
