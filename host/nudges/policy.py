"""The nudge policy over what the bot says on its own (scheduled tasks' results and notices,
standing checks, campaign notices other than final reports and failures): per-channel and
per-person caps per hour, the same thing said once in a conversation per day, and quiet
hours in the recipient's time zone.

What differs between two sayings of the same thing (run ids, a firing's node-id suffix,
record paths) is left out of the comparison. A post the caps hold back is recorded (one
short line, see backlog.py), listed by `status` and summarised in one post when the hour has
room again; one the dedup holds back was said already. An explicit run a person asked for
(`schedule: run`, `raven-bot schedules run`) is granted its next post past the caps. Quiet
hours do not drop anything: each caller holds its post (or its firing) until they end.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol
from zoneinfo import ZoneInfo

from core.ids import ConversationRef
from core.store import Store
from host.nudges.quiet import QuietHours
from host.runtime.people import People

log = logging.getLogger(__name__)

DEDUP_SECONDS = 86_400.0
CAP_SECONDS = 3600.0  # the caps count the posts of the last hour
GRANT_SECONDS = 86_400.0  # an explicit run's grant unused this long is void
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


class HoldsBack(Protocol):
    """Where a post the caps hold back is recorded (backlog.HeldBack)."""

    async def hold(self, nudge: Nudge, why: str, release_at: float, *, now: float) -> None:
        """Record `nudge`, held back for `why` until `release_at`."""
        ...


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
        held_back: HoldsBack | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self.limits = limits
        self.quiet = quiet
        self.default_tz = default_tz
        self._people = people or People()
        self._held_back = held_back
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

    async def grant(self, source: str, *, now: float | None = None) -> None:
        """The next post of `source` (`task t_…`) answers a person's explicit request (a
        run-now): it passes the caps and the dedup. Durable: a restart keeps it."""
        at = self._clock() if now is None else now
        await self._store.execute(
            "INSERT OR REPLACE INTO nudge_grants (source, granted_at) VALUES (?, ?)",
            (source, at),
        )

    async def withdraw(self, source: str) -> None:
        """An unused grant is void (the explicit run said nothing)."""
        await self._store.execute("DELETE FROM nudge_grants WHERE source = ?", (source,))

    async def admit(self, nudge: Nudge, *, dedup: bool = True, now: float | None = None) -> bool:
        """True (and recorded) when `nudge` may be posted now. A firing's result is not
        deduplicated (its `notify:` decides on repeats); notices are. Held back by a cap, it
        is recorded for the summary."""
        at = self._clock() if now is None else now
        said = digest(nudge.text)
        conv, channel = nudge.conversation.id, nudge.conversation.channel_key
        if await self._granted(nudge.source, at):
            log.info("%s: an explicit run's post passes the caps", nudge.source)
            await self._count(nudge, said, at)
            return True
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
            if self._held_back is not None and not (dedup and row["same"]):
                await self._held_back.hold(nudge, why, await self._room_at(nudge, at), now=at)
            return False
        await self._count(nudge, said, at)
        return True

    async def _count(self, nudge: Nudge, said: str, at: float) -> None:
        await self._store.execute(
            "INSERT INTO nudges (conversation_id, channel_key, owner, digest, at)"
            " VALUES (?, ?, ?, ?, ?)",
            (nudge.conversation.id, nudge.conversation.channel_key, nudge.recipient, said, at),
        )

    async def _granted(self, source: str, at: float) -> bool:
        """Whether `source` holds an explicit run's grant (taken now, once)."""
        taken = await self._store.execute(
            "DELETE FROM nudge_grants WHERE source = ? AND granted_at > ?",
            (source, at - GRANT_SECONDS),
        )
        return taken > 0

    async def _room_at(self, nudge: Nudge, at: float) -> float:
        """When both caps have room again for the nudge: when enough of the posts counted
        now have left the hour."""
        room = at
        for column, value, limit in (
            ("channel_key", nudge.conversation.channel_key, self.limits.channel_per_hour),
            ("owner", nudge.recipient, self.limits.owner_per_hour),
        ):
            rows = await self._store.fetchall(
                f"SELECT at FROM nudges WHERE {column} = ? AND at > ? ORDER BY at",
                (value, at - CAP_SECONDS),
            )
            if len(rows) >= limit:
                # The cap has room once the (count - limit + 1)-th oldest leaves the hour.
                room = max(room, float(rows[len(rows) - limit]["at"]) + CAP_SECONDS)
        return room
