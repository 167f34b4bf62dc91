"""Slack events acknowledged but not yet handed to the bot: the HTTP edge's durable queue.

The edge (its own process) stores an event here, in its own SQLite file, before it answers
Slack's POST; the bot's loop removes it once the listener has recorded the message (in
raven.db). Whatever a crash left here is handed over again at the next start, and the
listener's dedup keeps that from doubling anything. One row per Slack `event_id`: a retry
or a duplicate delivery of an event still queued is acknowledged without a second row.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class QueuedEvent:
    """One acknowledged event: its id, the raw body and the headers it came with."""

    event_id: str
    body: bytes
    headers: dict[str, str]


class SlackEventLog:
    """A small SQLite queue shared by the edge's thread and the bot's loop (each call is a
    short transaction under one lock; WAL with synchronous=NORMAL: a commit survives a
    crash of the process, like raven.db's)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS slack_events (event_id TEXT PRIMARY KEY,"
                " received REAL NOT NULL, body BLOB NOT NULL, headers TEXT NOT NULL)"
            )

    def add(self, event: QueuedEvent) -> bool:
        """Store an event (committed on return); False when it is queued already."""
        with self._lock:
            cursor = self._db.execute(
                "INSERT OR IGNORE INTO slack_events VALUES (?, ?, ?, ?)",
                (event.event_id, time.time(), event.body, json.dumps(event.headers)),
            )
            return cursor.rowcount == 1

    def get(self, event_id: str) -> QueuedEvent | None:
        """The queued event with this id (None when it is not queued)."""
        with self._lock:
            row = self._db.execute(
                "SELECT event_id, body, headers FROM slack_events WHERE event_id = ?", (event_id,)
            ).fetchone()
        return None if row is None else _event(row)

    def done(self, event_id: str) -> None:
        """The bot has recorded the event: forget it."""
        with self._lock:
            self._db.execute("DELETE FROM slack_events WHERE event_id = ?", (event_id,))

    def pending(self) -> list[QueuedEvent]:
        """Events still queued, oldest first (what a crash left behind)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT event_id, body, headers FROM slack_events ORDER BY received, rowid"
            ).fetchall()
        return [_event(row) for row in rows]

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()


def _event(row: tuple[object, ...]) -> QueuedEvent:
    event_id, body, headers = row
    return QueuedEvent(str(event_id), bytes(body), dict(json.loads(str(headers))))  # type: ignore[call-overload]


def event_id_of(body: bytes, headers: dict[str, str]) -> str | None:
    """The `event_id` of an Events API callback (None for any other request)."""
    if not headers.get("content-type", "").startswith("application/json"):
        return None
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    if not isinstance(payload, dict) or payload.get("type") != "event_callback":
        return None
    event_id = payload.get("event_id")
    return event_id if isinstance(event_id, str) and event_id else None
