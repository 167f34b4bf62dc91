"""Posts held by quiet hours: stored with when they end, and released then by a durable
wake-up (or, after downtime longer than the scheduler's grace, by the next start's sweep).

A held post is a row until it is released: the releaser records it as an outbound message
(posted once under its key) before the row goes, so a crash in between posts it once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from core.ids import ConversationRef
from core.store import Row, Store
from host.nudges.policy import Nudge
from host.runtime.scheduling import Scheduler

HELD_POST_RELEASE = "nudges.release"


@dataclass(frozen=True)
class HeldPost:
    """A post waiting for the end of its recipient's quiet hours."""

    key: str
    nudge: Nudge
    release_at: datetime


class HeldPosts:
    """The held posts and their release wake-ups."""

    def __init__(self, store: Store, scheduler: Scheduler) -> None:
        self._store = store
        self._scheduler = scheduler

    async def hold(self, key: str, nudge: Nudge, until: datetime, *, now: float) -> None:
        """Keep `nudge` (posted under `key`) until `until`; once per key."""
        await self._store.execute(
            "INSERT OR IGNORE INTO held_posts"
            " (key, conversation_id, recipient, text, release_at, held_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (key, nudge.conversation.id, nudge.recipient, nudge.text, until.timestamp(), now),
        )
        await self._arm(key, until)

    async def get(self, key: str) -> HeldPost | None:
        row = await self._store.fetchone("SELECT * FROM held_posts WHERE key = ?", (key,))
        return None if row is None else _post(row)

    async def released(self, key: str) -> None:
        """The post is recorded for delivery: it is held no more."""
        await self._store.execute("DELETE FROM held_posts WHERE key = ?", (key,))

    async def pending(self) -> list[HeldPost]:
        """Every held post, the earliest release first (for the start's sweep)."""
        rows = await self._store.fetchall("SELECT * FROM held_posts ORDER BY release_at, key")
        return [_post(row) for row in rows]

    async def rearm(self, post: HeldPost) -> None:
        await self._arm(post.key, post.release_at)

    async def _arm(self, key: str, until: datetime) -> None:
        await self._scheduler.schedule_at(
            f"held:{key}", until, HELD_POST_RELEASE, {"key": key}, replace_existing=False
        )


def _post(row: Row) -> HeldPost:
    conv = ConversationRef.parse(row["conversation_id"])
    return HeldPost(
        row["key"],
        Nudge(conv, row["recipient"], row["text"], f"held post {row['key']}"),
        datetime.fromtimestamp(row["release_at"], UTC),
    )
