"""Conversation log: conversations, turns, inbound/outbound messages and event dedup."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Any, Literal

from core.ids import ConversationRef
from core.store import Store, WritePriority

DEDUP_PURGE_SECONDS = 60.0
TurnStatus = Literal["running", "completed", "failed", "interrupted", "cancelled"]
Delivery = Literal["none", "pending", "sent", "failed"]


@dataclass(frozen=True)
class LoggedMessage:
    """One stored message of a conversation."""

    id: int
    conversation_id: str
    turn_id: str | None
    direction: Literal["in", "out"]
    author_id: str
    author_name: str
    text: str
    idempotency_key: str
    delivery: Delivery
    platform_message_id: str | None
    # An outgoing file to attach (JSON the outbox wrote; None for a text message).
    file: str | None = None


@dataclass(frozen=True)
class TurnRecord:
    """One stored turn."""

    id: str
    conversation_id: str
    kind: str
    author_id: str
    status: TurnStatus
    error: str | None
    model_calls: int
    input_tokens: int
    output_tokens: int
    # The Host chose to say nothing to this follow-up (nothing was posted).
    no_reply: bool = False


# The first message that made someone the thread's requester: a person's message that
# addressed the bot (payloads older than `addressed` count as addressed), or a scheduled
# task's firing in a thread it opened (recorded under the task's owner).
_REQUESTER = (
    "SELECT author_id FROM messages WHERE conversation_id = ? AND direction = 'in'"
    " AND payload IS NOT NULL AND author_id != 'raven-system' AND ("
    " json_extract(payload, '$.origin') = 'scheduled'"
    " OR (COALESCE(json_extract(payload, '$.origin'), 'user') = 'user'"
    "     AND COALESCE(json_extract(payload, '$.addressed'), 1) = 1))"
    " ORDER BY id LIMIT 1"
)


class ConversationLog:
    """Durable record of what was said, by whom, and what the bot is about to send.

    Every write is one store write unit (batched with other writers' units, committed
    before the call returns); the inbound claim, which a platform's ack waits for, jumps
    the queue.
    """

    def __init__(self, store: Store, *, clock: Any = time.time) -> None:
        self._store = store
        self._clock = clock
        self._last_purge = 0.0

    async def claim_inbound(
        self,
        conv: ConversationRef,
        *,
        event_keys: list[str],
        ttl_seconds: float,
        author_id: str,
        author_name: str,
        text: str,
        payload: str,
    ) -> int | None:
        """Atomically dedup an inbound event and record its message as unhandled.

        Returns the message id, or None (recording nothing) when any of `event_keys` was seen
        within its TTL, so a redelivery or a restart can never produce a second turn.
        """
        now = self._clock()
        # Expired keys are purged now and then, not on every event (hot path). Decided here,
        # on the event loop, so concurrent claims of one batch do not all purge.
        purge = now - self._last_purge > DEDUP_PURGE_SECONDS
        if purge:
            self._last_purge = now
        marks = ",".join("?" * len(event_keys))

        def claim(db: sqlite3.Connection) -> int | None:
            if purge:
                db.execute("DELETE FROM dedup WHERE expires_at < ?", (now,))
            cur = db.execute(
                f"SELECT 1 FROM dedup WHERE key IN ({marks}) AND expires_at >= ? LIMIT 1",
                (*event_keys, now),
            )
            if cur.fetchone() is not None:
                return None
            # An expired key may still be there (no purge yet): replace it.
            db.executemany("DELETE FROM dedup WHERE key = ?", [(key,) for key in event_keys])
            db.executemany(
                "INSERT INTO dedup (key, expires_at) VALUES (?, ?)",
                [(key, now + ttl_seconds) for key in event_keys],
            )
            ensure_conversation_sync(db, conv, now)
            cur = db.execute(
                "INSERT OR IGNORE INTO messages (conversation_id, direction, author_id,"
                " author_name, text, idempotency_key, payload, handled, created_at)"
                " VALUES (?, 'in', ?, ?, ?, ?, ?, 0, ?)",
                (conv.id, author_id, author_name, text, f"in:{event_keys[0]}", payload, now),
            )
            # The log remembers every event for good: a redelivery after the dedup TTL is
            # still a duplicate.
            return cur.lastrowid if cur.rowcount == 1 else None

        # The ack waits for this commit: it goes into the next batch before any other unit.
        return await self._store.write(claim, priority=WritePriority.INGRESS)

    async def recent_conversations(
        self, platform: str, *, since: float
    ) -> list[tuple[ConversationRef, str | None]]:
        """The platform's conversations with an inbound message and activity since `since`,
        each with the platform id of its newest message from a person (where a catch-up after
        downtime starts); None where only the core spoke (a firing's own thread).

        The core's own turns (firings, checks, run reports) carry keys, not platform ids: a
        read-back must never start from one."""
        rows = await self._store.fetchall(
            "SELECT c.workspace, c.channel, c.thread,"
            " (SELECT json_extract(m.payload, '$.message_id') FROM messages m"
            "   WHERE m.conversation_id = c.id AND m.direction = 'in'"
            "   AND m.payload IS NOT NULL"
            "   AND COALESCE(json_extract(m.payload, '$.origin'), 'user') = 'user'"
            "   ORDER BY m.id DESC LIMIT 1) AS last_id"
            " FROM conversations c"
            " WHERE c.platform = ? AND c.updated_at >= ? AND EXISTS (SELECT 1 FROM messages m"
            "   WHERE m.conversation_id = c.id AND m.direction = 'in' AND m.payload IS NOT NULL)",
            (platform, since),
        )
        return [
            (
                ConversationRef(platform, r["workspace"], r["channel"], r["thread"]),
                str(r["last_id"]) if r["last_id"] else None,
            )
            for r in rows
        ]

    async def claim_key(self, key: str, *, ttl_seconds: float) -> bool:
        """True the first time `key` is claimed within its TTL (an interaction id, say)."""
        now = self._clock()

        def claim(db: sqlite3.Connection) -> bool:
            seen = db.execute(
                "SELECT 1 FROM dedup WHERE key = ? AND expires_at >= ?", (key, now)
            ).fetchone()
            if seen is not None:
                return False
            db.execute("DELETE FROM dedup WHERE key = ?", (key,))
            db.execute(
                "INSERT INTO dedup (key, expires_at) VALUES (?, ?)", (key, now + ttl_seconds)
            )
            return True

        claimed: bool = await self._store.write(claim, priority=WritePriority.INGRESS)
        return claimed

    async def mark_handled(self, message_id: int, turn_id: str | None = None) -> None:
        """Record that an inbound message was taken up (by a turn, or deliberately not)."""
        await self._store.execute(
            "UPDATE messages SET handled = 1, turn_id = COALESCE(?, turn_id) WHERE id = ?",
            (turn_id, message_id),
        )

    async def handle_stop(
        self, conversation_id: str, stop_message_id: int, *, by: str, privileged: bool
    ) -> int:
        """Mark every earlier unhandled inbound message of the conversation that the `stop`
        may cancel (those `by` wrote; every one when `privileged`) stopped, in one
        transaction; return how many were stopped.

        Done before anything is cancelled, so a crash in between cannot resurrect them.
        The stop message itself stays unhandled until the caller has cancelled the rest
        (`mark_handled`): a crash before that runs the same stop again at the next start.
        """

        def stop(db: sqlite3.Connection) -> int:
            cur = db.execute(
                "UPDATE messages SET handled = 1, stopped = 1 WHERE conversation_id = ?"
                " AND direction = 'in' AND handled = 0 AND id < ? AND (? OR author_id = ?)",
                (conversation_id, stop_message_id, int(privileged), by),
            )
            return int(cur.rowcount)

        return await self._store.write(stop)

    async def undelivered(self, conversation_id: str) -> list[LoggedMessage]:
        """Outgoing messages of a conversation whose posting failed (oldest first)."""
        rows = await self._store.fetchall(
            "SELECT * FROM messages WHERE conversation_id = ? AND direction = 'out'"
            " AND delivery = 'failed' ORDER BY id",
            (conversation_id,),
        )
        return [_message(r) for r in rows]

    async def unhandled_inbound(self, platform: str) -> list[tuple[int, str]]:
        """Inbound messages accepted but never taken up (a crash in between): id, payload."""
        rows = await self._store.fetchall(
            "SELECT m.id, m.payload FROM messages m"
            " JOIN conversations c ON c.id = m.conversation_id"
            " WHERE m.handled = 0 AND m.direction = 'in' AND c.platform = ? ORDER BY m.id",
            (platform,),
        )
        return [(int(r["id"]), str(r["payload"] or "")) for r in rows]

    async def start_turn(
        self,
        conv: ConversationRef,
        *,
        turn_id: str,
        kind: str,
        author_id: str,
        author_name: str,
        inbound_message_id: int | None = None,
    ) -> None:
        """Record a turn as running (and its inbound message as handled) in one transaction."""
        now = self._clock()

        def start(db: sqlite3.Connection) -> None:
            ensure_conversation_sync(db, conv, now)
            # A user turn is owed to memory until its writer says it is in.
            db.execute(
                "INSERT INTO turns (id, conversation_id, kind, author_id, author_name, status,"
                " started_at, remembered) VALUES (?, ?, ?, ?, ?, 'running', ?, ?)",
                (turn_id, conv.id, kind, author_id, author_name, now, int(kind != "user")),
            )
            if inbound_message_id is not None:
                db.execute(
                    "UPDATE messages SET handled = 1, turn_id = ? WHERE id = ?",
                    (turn_id, inbound_message_id),
                )

        await self._store.write(start)

    async def finish_turn(
        self,
        turn_id: str,
        *,
        status: TurnStatus,
        error: str | None = None,
        model_calls: int = 0,
        input_tokens: int = 0,
        output_tokens: int = 0,
        transcript: list[dict[str, Any]] | None = None,
        no_reply: bool = False,
    ) -> None:
        """Record how a turn ended, with its accounting and tool transcript; `no_reply`: the
        Host chose to say nothing (such a turn is owed nothing to memory either)."""
        await self._store.execute(
            "UPDATE turns SET status = ?, error = ?, model_calls = ?, input_tokens = ?,"
            " output_tokens = ?, transcript = ?, finished_at = ?, no_reply = ?,"
            " remembered = MAX(remembered, ?) WHERE id = ?",
            (
                status,
                error,
                model_calls,
                input_tokens,
                output_tokens,
                json.dumps(transcript or []),
                self._clock(),
                int(no_reply),
                int(no_reply),
                turn_id,
            ),
        )

    async def cancel_turn(self, turn_id: str) -> None:
        """Record a turn as cancelled unless it already ended (a no-op if never started)."""
        await self._store.execute(
            "UPDATE turns SET status = 'cancelled', finished_at = ? WHERE id = ?"
            " AND status = 'running'",
            (self._clock(), turn_id),
        )

    async def interrupt_running(self) -> list[TurnRecord]:
        """Mark turns left `running` by a crash as `interrupted`; return them (startup)."""
        now = self._clock()

        def interrupt(db: sqlite3.Connection) -> list[TurnRecord]:
            rows = db.execute("SELECT * FROM turns WHERE status = 'running'").fetchall()
            db.execute(
                "UPDATE turns SET status = 'interrupted', finished_at = ?,"
                " error = 'interrupted by a restart' WHERE status = 'running'",
                (now,),
            )
            return [_turn(row) for row in rows]

        return await self._store.write(interrupt)

    async def unreported_interruptions(self) -> list[tuple[TurnRecord, ConversationRef, str]]:
        """Interrupted turns whose users have not been told yet, with the text of the
        request each was answering ("" for a turn the bot started itself)."""
        rows = await self._store.fetchall(
            "SELECT t.*, c.platform, c.workspace, c.channel, c.thread,"
            " (SELECT m.text FROM messages m WHERE m.turn_id = t.id AND m.direction = 'in'"
            "  ORDER BY m.id LIMIT 1) AS request"
            " FROM turns t JOIN conversations c ON c.id = t.conversation_id"
            " WHERE t.status = 'interrupted' AND t.reported = 0 ORDER BY t.started_at"
        )
        return [
            (
                _turn(r),
                ConversationRef(r["platform"], r["workspace"], r["channel"], r["thread"]),
                str(r["request"] or ""),
            )
            for r in rows
        ]

    async def mark_reported(self, turn_id: str) -> None:
        """Remember that the user was told about this turn's interruption."""
        await self._store.execute("UPDATE turns SET reported = 1 WHERE id = ?", (turn_id,))

    async def unremembered_turns(self) -> list[tuple[str, str]]:
        """Completed user turns memory has not taken in (a crash came first): turn id and the
        inbound payload, oldest first. Turns that ended otherwise are owed
        nothing and are settled here."""

        def owed(db: sqlite3.Connection) -> list[tuple[str, str]]:
            db.execute(
                "UPDATE turns SET remembered = 1 WHERE remembered = 0"
                " AND status NOT IN ('running', 'completed')"
            )
            rows = db.execute(
                "SELECT t.id, i.payload FROM turns t"
                " JOIN messages i ON i.turn_id = t.id AND i.direction = 'in'"
                " JOIN messages o ON o.idempotency_key = 'turn:' || t.id || ':reply'"
                " WHERE t.remembered = 0 AND t.status = 'completed' ORDER BY t.started_at"
            ).fetchall()
            return [(str(r[0]), str(r[1] or "")) for r in rows]

        return await self._store.write(owed)

    async def mark_remembered(self, turn_id: str) -> None:
        """Memory has taken this turn in."""
        await self._store.execute("UPDATE turns SET remembered = 1 WHERE id = ?", (turn_id,))

    async def turn(self, turn_id: str) -> TurnRecord | None:
        """One turn by id."""
        row = await self._store.fetchone("SELECT * FROM turns WHERE id = ?", (turn_id,))
        return _turn(row) if row is not None else None

    async def record_outbound(
        self,
        conv: ConversationRef,
        *,
        idempotency_key: str,
        text: str,
        turn_id: str | None = None,
        author_id: str = "raven",
        author_name: str = "raven",
        file: str | None = None,
    ) -> LoggedMessage:
        """Persist an outgoing message as `pending` before it is sent (idempotent by key);
        `file`: the record is a file to attach (the outbox's JSON), `text` names it."""
        now = self._clock()

        def record(db: sqlite3.Connection) -> LoggedMessage:
            ensure_conversation_sync(db, conv, now)
            db.execute(
                "INSERT OR IGNORE INTO messages (conversation_id, turn_id, direction, author_id,"
                " author_name, text, idempotency_key, delivery, created_at, file)"
                " VALUES (?, ?, 'out', ?, ?, ?, ?, 'pending', ?, ?)",
                (conv.id, turn_id, author_id, author_name, text, idempotency_key, now, file),
            )
            row = db.execute(
                "SELECT * FROM messages WHERE idempotency_key = ?", (idempotency_key,)
            ).fetchone()
            assert row is not None
            return _message(row)

        return await self._store.write(record)

    async def mark_delivery(
        self, idempotency_key: str, delivery: Delivery, platform_message_id: str | None = None
    ) -> None:
        """Record the outcome of sending an outgoing message."""
        await self._store.execute(
            "UPDATE messages SET delivery = ?, platform_message_id ="
            " COALESCE(?, platform_message_id) WHERE idempotency_key = ?",
            (delivery, platform_message_id, idempotency_key),
        )

    async def delivery_of(self, idempotency_key: str) -> Delivery | None:
        """The recorded delivery state of one outgoing message (None when unknown)."""
        message = await self.outbound(idempotency_key)
        return message.delivery if message is not None else None

    async def outbound(self, idempotency_key: str) -> LoggedMessage | None:
        """One outgoing message by its idempotency key (None when never recorded)."""
        row = await self._store.fetchone(
            "SELECT * FROM messages WHERE idempotency_key = ?", (idempotency_key,)
        )
        return _message(row) if row is not None else None

    async def sent_copies(self, idempotency_key: str, name: str, size: int) -> int:
        """How many OTHER files of this `name` and `size` the bot attached in the
        conversation of the file recorded under `idempotency_key` (recorded as sent): a
        redelivery finding more copies than this in the thread finds its own."""
        row = await self._store.fetchone(
            "SELECT COUNT(*) AS n FROM messages o JOIN messages m"
            " ON m.conversation_id = o.conversation_id"
            " WHERE m.idempotency_key = ? AND o.idempotency_key != m.idempotency_key"
            " AND o.direction = 'out' AND o.file IS NOT NULL AND o.delivery = 'sent'"
            " AND json_extract(o.file, '$.file.name') = ?"
            " AND json_extract(o.file, '$.file.size') = ?",
            (idempotency_key, name, size),
        )
        return int(row["n"]) if row is not None else 0

    async def pending_outbound(
        self, platform: str, *, max_age_seconds: float = 86_400.0
    ) -> list[tuple[LoggedMessage, ConversationRef]]:
        """Recent outgoing messages not confirmed sent (pending at a crash, or failed)."""
        rows = await self._store.fetchall(
            "SELECT m.*, c.platform, c.workspace, c.channel, c.thread FROM messages m"
            " JOIN conversations c ON c.id = m.conversation_id"
            " WHERE m.delivery IN ('pending', 'failed') AND m.direction = 'out'"
            " AND c.platform = ? AND m.created_at >= ? ORDER BY m.id",
            (platform, self._clock() - max_age_seconds),
        )
        return [
            (
                _message(r),
                ConversationRef(r["platform"], r["workspace"], r["channel"], r["thread"]),
            )
            for r in rows
        ]

    async def turn_answered(self, inbound_key: str) -> bool:
        """Whether the turn that took up the inbound message recorded under `inbound_key`
        (`in:<platform>:event:<event id>`) is over and its reply is no longer waiting to go
        out: what files attached to that reply wait for. True for a message a `stop`
        cancelled; False while it was never recorded, is queued, or its turn runs."""
        row = await self._store.fetchone(
            "SELECT m.turn_id, m.stopped, t.status, t.no_reply FROM messages m"
            " LEFT JOIN turns t ON t.id = m.turn_id WHERE m.idempotency_key = ?",
            (inbound_key,),
        )
        if row is None:
            return False
        if row["stopped"]:
            return True
        status = row["status"]
        if row["turn_id"] is None or status in (None, "running"):
            return False
        if status not in ("completed", "failed") or row["no_reply"]:
            return True  # cancelled or interrupted: no reply is coming
        # The turn is recorded over a moment before its reply is recorded: wait for the reply
        # (or the error) itself to be sent.
        said = "reply" if status == "completed" else "error"
        sent = await self._store.fetchone(
            "SELECT 1 FROM messages WHERE idempotency_key = ? AND delivery = 'sent'",
            (f"turn:{row['turn_id']}:{said}",),
        )
        return sent is not None

    async def exists(self, conversation_id: str) -> bool:
        """True when the bot has taken part in this conversation before."""
        row = await self._store.fetchone(
            "SELECT 1 FROM conversations WHERE id = ?", (conversation_id,)
        )
        return row is not None

    async def thread_requester(self, conversation_id: str) -> str | None:
        """Whose request the conversation is about: the author of its first message that
        addressed the bot (a mention, a DM), or the owner of the scheduled task that opened
        it; None when there is none yet. Read from the log, so it survives a restart."""
        row = await self._store.fetchone(_REQUESTER, (conversation_id,))
        return str(row["author_id"]) if row is not None else None

    async def history(self, conversation_id: str, *, limit: int) -> list[LoggedMessage]:
        """The newest `limit` messages of a conversation, oldest first."""
        if limit <= 0:
            return []
        rows = await self._store.fetchall(
            "SELECT * FROM (SELECT * FROM messages WHERE conversation_id = ?"
            " ORDER BY id DESC LIMIT ?) ORDER BY id",
            (conversation_id, limit),
        )
        return [_message(r) for r in rows]


_ENSURE_CONVERSATION = (
    "INSERT INTO conversations (id, platform, workspace, channel, thread, created_at,"
    " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT(id) DO UPDATE SET updated_at = excluded.updated_at"
)


async def ensure_conversation(db: Any, conv: ConversationRef, now: float) -> None:
    """Insert the conversation row if missing (inside the caller's write transaction)."""
    await db.execute(_ENSURE_CONVERSATION, _conversation_row(conv, now))


def ensure_conversation_sync(db: sqlite3.Connection, conv: ConversationRef, now: float) -> None:
    """`ensure_conversation` inside a write unit (on the writer's own thread)."""
    db.execute(_ENSURE_CONVERSATION, _conversation_row(conv, now))


def _conversation_row(conv: ConversationRef, now: float) -> tuple[Any, ...]:
    return (conv.id, conv.platform, conv.workspace, conv.channel, conv.thread, now, now)


def _message(row: Any) -> LoggedMessage:
    return LoggedMessage(
        id=row["id"],
        conversation_id=row["conversation_id"],
        turn_id=row["turn_id"],
        direction=row["direction"],
        author_id=row["author_id"],
        author_name=row["author_name"],
        text=row["text"],
        idempotency_key=row["idempotency_key"],
        delivery=row["delivery"],
        platform_message_id=row["platform_message_id"],
        file=row["file"],
    )


def _turn(row: Any) -> TurnRecord:
    return TurnRecord(
        id=row["id"],
        conversation_id=row["conversation_id"],
        kind=row["kind"],
        author_id=row["author_id"],
        status=row["status"],
        error=row["error"],
        model_calls=row["model_calls"],
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        no_reply=bool(row["no_reply"]),
    )
