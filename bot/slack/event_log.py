"""Slack events acknowledged but not yet handed to the bot: the HTTP edge's durable queue.

The edge stores an event here, in its own SQLite file and connection, before it answers
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
        return [QueuedEvent(str(r[0]), bytes(r[1]), dict(json.loads(r[2]))) for r in rows]

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()
