"""What the caps held back: never dropped silently. Each post a cap keeps from a conversation
is recorded (one short line), listed by `status`, and summarised in one post when the cap's
hour has room again ("📬 3 updates held back: …"), by a durable wake-up per conversation or,
after a downtime, by the next start.

Exactly once: the summary is recorded as an outbound message under a key made of the rows it
covers before the rows are marked with that key, so a crash in between posts the same
summary (one key) once, and a summarised row is never listed or summarised again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from core.ids import ConversationRef
from core.reader_time import reader_mark
from core.store import Row, Store
from host.conversation.outbox import DeliveryError, Outbox
from host.nudges.policy import Nudge
from host.runtime.conversation_log import ConversationLog
from host.runtime.scheduling import FiredJob, Scheduler

log = logging.getLogger(__name__)

HELD_BACK_SUMMARY = "nudges.summary"
LINE_CHARS = 100  # one short line per held-back post


@dataclass(frozen=True)
class HeldBackPost:
    """One post a cap kept from a conversation, as its summary will name it."""

    id: int
    conversation: ConversationRef
    line: str
    why: str
    held_at: float
    release_at: float


def short_line(nudge: Nudge) -> str:
    """The post in one short line: its first line of text (not a code fence), named after
    the task that said it when the text does not name it."""
    first = _first_line(nudge.text)
    if nudge.source.startswith("task "):
        task = nudge.source.removeprefix("task ")
        if task not in first:
            first = _first_line(f"task `{task}`: {first}")
    return first


def summary_text(posts: list[HeldBackPost]) -> str:
    """The one post that says what the caps held back: `📬 3 updates held back …` and one
    line each."""
    count = f"{len(posts)} update{'s' if len(posts) != 1 else ''}"
    lines = [f"📬 {count} held back by the hourly cap on posts the bot makes on its own:"]
    lines += [f"- {p.line}" for p in posts]
    return "\n".join(lines)


class HeldBack:
    """The held-back posts and their per-conversation summary wake-ups."""

    def __init__(self, store: Store, scheduler: Scheduler) -> None:
        self._store = store
        self._scheduler = scheduler

    async def hold(self, nudge: Nudge, why: str, release_at: float, *, now: float) -> None:
        """Record a post a cap held back; its conversation's summary posts at `release_at`
        (or with an earlier one's)."""
        await self._store.execute(
            "INSERT INTO held_back (conversation_id, recipient, source, line, why, held_at,"
            " release_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                nudge.conversation.id,
                nudge.recipient,
                nudge.source,
                short_line(nudge),
                why,
                now,
                release_at,
            ),
        )
        await self.arm(nudge.conversation.id)

    async def listed(self, conversation_id: str) -> list[HeldBackPost]:
        """The conversation's posts held back and not summarised yet, oldest first."""
        rows = await self._store.fetchall(
            "SELECT * FROM held_back WHERE conversation_id = ? AND summary_key IS NULL ORDER BY id",
            (conversation_id,),
        )
        return [_post(row) for row in rows]

    async def quiet_held(self, conversation_id: str) -> list[tuple[str, float]]:
        """The conversation's posts quiet hours hold (held.py), each as (line, release)."""
        rows = await self._store.fetchall(
            "SELECT text, release_at FROM held_posts WHERE conversation_id = ?"
            " ORDER BY release_at, key",
            (conversation_id,),
        )
        return [(_first_line(str(row["text"])), float(row["release_at"])) for row in rows]

    async def conversations(self) -> list[str]:
        """Every conversation with posts waiting for their summary."""
        rows = await self._store.fetchall(
            "SELECT DISTINCT conversation_id FROM held_back WHERE summary_key IS NULL"
        )
        return [str(row["conversation_id"]) for row in rows]

    async def summarised(self, ids: list[int], key: str) -> None:
        """The posts are in the summary recorded under `key`: they are held no more."""
        marks = ", ".join("?" for _ in ids)
        await self._store.execute(
            f"UPDATE held_back SET summary_key = ? WHERE id IN ({marks}) AND summary_key IS NULL",
            (key, *ids),
        )

    async def arm(self, conversation_id: str) -> None:
        """The conversation's summary wake-up, at its earliest release (none left: none)."""
        row = await self._store.fetchone(
            "SELECT MIN(release_at) AS due FROM held_back"
            " WHERE conversation_id = ? AND summary_key IS NULL",
            (conversation_id,),
        )
        if row is None or row["due"] is None:
            return
        await self._scheduler.schedule_at(
            f"held-back:{conversation_id}",
            datetime.fromtimestamp(float(row["due"]), UTC),
            HELD_BACK_SUMMARY,
            {"conversation_id": conversation_id},
        )


class HeldBackSummaries:
    """Posts each conversation's summary once its posts' hour has room, and lists them in
    `status` until then."""

    def __init__(
        self,
        held: HeldBack,
        conversation_log: ConversationLog,
        outbox: Outbox,
        *,
        zone: str = "UTC",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._held = held
        self._log = conversation_log
        self._outbox = outbox
        self._zone = ZoneInfo(zone)
        self.clock = clock

    async def on_job(self, job: FiredJob) -> None:
        """A conversation's summary wake-up fired."""
        await self.summarise(str(job.payload["conversation_id"]))

    async def recover(self) -> None:
        """At start: summarise what is due (a downtime passed its wake-up), re-arm the rest."""
        for conversation_id in await self._held.conversations():
            await self.summarise(conversation_id)

    async def summarise(self, conversation_id: str) -> None:
        """Post one summary of the conversation's held-back posts whose hour has room now
        (once), and arm the wake-up for those held later."""
        now = self.clock()
        due = [p for p in await self._held.listed(conversation_id) if p.release_at <= now]
        if due:
            conv = due[0].conversation
            key = f"held-back:{conversation_id}:{due[0].id}-{due[-1].id}"
            text = summary_text(due)
            # Recorded before the rows are marked: a crash in between finds the same rows
            # and the same key, which posts once.
            await self._log.record_outbound(conv, idempotency_key=key, text=text)
            await self._held.summarised([p.id for p in due], key)
            try:
                await self._outbox.send(conv, text, idempotency_key=key)
            except DeliveryError as exc:
                # Recorded as failed: retried by the outbox, else sent at the next start.
                log.warning("summary %s not posted yet: %s", key, exc)
        await self._held.arm(conversation_id)

    async def status(self, conv: ConversationRef) -> str:
        """`status`: what the caps hold back here, and when its summary posts; what quiet
        hours hold, and when it posts."""
        lines: list[str] = []
        posts = await self._held.listed(conv.id)
        if posts:
            lines.append(
                f"📬 {len(posts)} update(s) held back here ({posts[0].why}); summarised in one "
                f"post at {self._time(min(p.release_at for p in posts))}:"
            )
            lines += _listed([p.line for p in posts])
        quiet = await self._held.quiet_held(conv.id)
        if quiet:
            lines.append(
                f"🌙 {len(quiet)} update(s) held for quiet hours here; posted at "
                f"{self._time(min(at for _, at in quiet))}:"
            )
            lines += _listed([line for line, _ in quiet])
        return "\n".join(lines)

    def _time(self, at: float) -> str:
        when = datetime.fromtimestamp(at, self._zone)
        return f"{when:%H:%M} {when.tzname()}{reader_mark(when)}"


def _listed(lines: list[str], most: int = 10) -> list[str]:
    shown = [f"- {line}" for line in lines[:most]]
    return shown + ([f"- … and {len(lines) - most} more"] if len(lines) > most else [])


def _first_line(text: str) -> str:
    lines = (ln.strip() for ln in text.splitlines())
    first = next((ln for ln in lines if ln and not ln.startswith("```")), "(no text)")
    return first if len(first) <= LINE_CHARS else first[: LINE_CHARS - 1] + "…"


def _post(row: Row) -> HeldBackPost:
    return HeldBackPost(
        id=int(row["id"]),
        conversation=ConversationRef.parse(row["conversation_id"]),
        line=row["line"],
        why=row["why"],
        held_at=float(row["held_at"]),
        release_at=float(row["release_at"]),
    )
