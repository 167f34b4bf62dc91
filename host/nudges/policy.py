"""The nudge policy over what the bot says on its own (scheduled tasks' results and notices,
standing checks, campaign notices other than final reports and failures): per-channel and
per-person caps per hour, the same thing said once in a conversation per day, and quiet
hours in the recipient's time zone.

What differs between two sayings of the same thing (run ids, a firing's node-id suffix,
record paths) is left out of the comparison. A post the caps or the dedup hold back is logged
and not posted; the work behind it ran and is recorded. Quiet hours do not drop anything:
each caller holds its post (or its firing) until they end.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from core.ids import ConversationRef
from core.store import Store
from host.nudges.quiet import QuietHours
from host.runtime.people import People

log = logging.getLogger(__name__)

DEDUP_SECONDS = 86_400.0
_VARYING = re.compile(r"\brun_[0-9a-f]{6,}\b|_\d{10}(?:\d\d)?\b|(?<![\w`])/[^\s`]+")


@dataclass(frozen=True)
class NudgeLimits:
    """How much the bot may say on its own."""

    channel_per_hour: int = 20
    owner_per_hour: int = 10


@dataclass(frozen=True)
class Nudge:
    """One post the bot makes on its own, for `recipient` (whose work it is about)."""

    conversation: ConversationRef
    recipient: str
    text: str
    # What speaks, for the log (`task t1`, `campaign c2`).
    source: str


def digest(text: str) -> str:
    """What a post says, without what differs at every firing."""
    return hashlib.sha256(_VARYING.sub("", " ".join(text.split())).encode()).hexdigest()


def describe_policy(limits: NudgeLimits, quiet: QuietHours | None, default_tz: str) -> str:
    """A nudge policy in one sentence, as `status` and `doctor` show it."""
    hours = (
        f"quiet hours {quiet} in each recipient's zone (default {default_tz})"
        if quiet is not None
        else "no quiet hours"
    )
    return (
        f"Proactive posts: {hours}; at most {limits.channel_per_hour} per channel "
        f"and {limits.owner_per_hour} per person per hour; the same post once a day "
        "per conversation; final reports and failures always post."
    )


class NudgePolicy:
    """Admits a post, or holds it back (recording what was said); says when quiet hours end."""

    def __init__(
        self,
        store: Store,
        limits: NudgeLimits,
        *,
        quiet: QuietHours | None = None,
        default_tz: str = "UTC",
        people: People | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self.limits = limits
        self.quiet = quiet
        self.default_tz = default_tz
        self._people = people or People()
        self._clock = clock

    def describe(self) -> str:
        """The policy in force, as `status` shows it."""
        return describe_policy(self.limits, self.quiet, self.default_tz)

    async def zone(
        self, conv: ConversationRef, person: str, default: ZoneInfo | None = None
    ) -> ZoneInfo:
        """`person`'s zone where their platform knows it (Slack profiles), else `default`,
        else the configured default."""
        named = await self._people.zone(conv, person, "")
        if named:
            return ZoneInfo(named)
        return default or ZoneInfo(self.default_tz)

    async def quiet_until(self, nudge: Nudge, now: datetime) -> datetime | None:
        """When the quiet hours `now` falls in end for the nudge's recipient; None outside."""
        if self.quiet is None:
            return None
        return self.quiet.end_after(now, await self.zone(nudge.conversation, nudge.recipient))

    async def admit(self, nudge: Nudge, *, dedup: bool = True, now: float | None = None) -> bool:
        """True (and recorded) when `nudge` may be posted now. A firing's result is not
        deduplicated (its `notify:` decides on repeats); notices are."""
        at = self._clock() if now is None else now
        said = digest(nudge.text)
        conv, channel = nudge.conversation.id, nudge.conversation.channel_key
        row = await self._store.fetchone(
            "SELECT"
            " (SELECT COUNT(*) FROM nudges WHERE conversation_id = ? AND digest = ? AND at > ?)"
            " AS same,"
            " (SELECT COUNT(*) FROM nudges WHERE channel_key = ? AND at > ?) AS channel,"
            " (SELECT COUNT(*) FROM nudges WHERE owner = ? AND at > ?) AS owner",
            (conv, said, at - DEDUP_SECONDS, channel, at - 3600, nudge.recipient, at - 3600),
        )
        assert row is not None
        why = (
            "it was said here in the last 24 h"
            if dedup and row["same"]
            else f"this channel had {self.limits.channel_per_hour} in the last hour"
            if row["channel"] >= self.limits.channel_per_hour
            else f"{self.limits.owner_per_hour} were for the same person in the last hour"
            if row["owner"] >= self.limits.owner_per_hour
            else ""
        )
        if why:
            log.info("%s: a post held back: %s", nudge.source, why)
            return False
        await self._store.execute(
            "INSERT INTO nudges (conversation_id, channel_key, owner, digest, at)"
            " VALUES (?, ?, ?, ?, ?)",
            (conv, channel, nudge.recipient, said, at),
        )
        return True
