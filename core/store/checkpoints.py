"""When the store's writer checkpoints SQLite's write-ahead log, and what reaches the disk
just before it does.

With `synchronous=NORMAL` a commit survives a crash of the process at once, but a power
loss only once the log is synced, which SQLite does at each checkpoint. Files that a commit
points at (a graph run's journal) are written before that commit and fsynced here, just
before the checkpoint: whatever a synced log holds, those files hold too, and the commit
path pays no fsync of its own. SQLite's automatic checkpoint (which would sync the log
without them) is off on the store's connections; the writer runs this one instead, after
`every_batches` commits, or once it has been idle for `idle_seconds` after a commit.
"""

from __future__ import annotations

import itertools
import sqlite3
import time
from collections.abc import Callable
from typing import Literal, Protocol

DEFAULT_EVERY_BATCHES = 200
DEFAULT_IDLE_SECONDS = 1.0

Mode = Literal["PASSIVE", "TRUNCATE"]


class BeforeCheckpoint(Protocol):
    """Where a file registers the fsync it owes before SQLite syncs its log."""

    def before_checkpoint(self, sync: Callable[[], None]) -> Callable[[], None]:
        """Run `sync` (on the writer's thread) before every checkpoint until the returned
        function is called."""
        ...


class Checkpoints:
    """The writer's checkpoint policy and the fsyncs owed before each checkpoint."""

    def __init__(
        self,
        *,
        every_batches: int = DEFAULT_EVERY_BATCHES,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if every_batches < 1 or idle_seconds < 0:
            raise ValueError("every_batches must be at least 1 and idle_seconds not negative")
        self.every_batches = every_batches
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._syncs: dict[int, Callable[[], None]] = {}
        self._keys = itertools.count()
        self._batches = 0
        self._owed_since: float | None = None  # the first commit not checkpointed yet

    def before(self, sync: Callable[[], None]) -> Callable[[], None]:
        """See `BeforeCheckpoint.before_checkpoint`."""
        key = next(self._keys)
        self._syncs[key] = sync

        def remove() -> None:
            self._syncs.pop(key, None)

        return remove

    @property
    def registered(self) -> int:
        """How many fsyncs run before each checkpoint (for tests)."""
        return len(self._syncs)

    @property
    def owed(self) -> bool:
        """Whether a commit was made since the last checkpoint."""
        return self._owed_since is not None

    def committed(self) -> None:
        """A transaction committed: a checkpoint is owed."""
        self._batches += 1
        if self._owed_since is None:
            self._owed_since = self._clock()

    def due(self, *, idle: bool) -> bool:
        """Whether to checkpoint now: after `every_batches` commits, or when idle for
        `idle_seconds` since the first commit not checkpointed."""
        if self._owed_since is None:
            return False
        if self._batches >= self.every_batches:
            return True
        return idle and self._clock() - self._owed_since >= self.idle_seconds

    def idle_wait(self) -> float | None:
        """How long an idle writer may sleep before a checkpoint is due (None: none owed)."""
        if self._owed_since is None:
            return None
        return max(0.0, self._owed_since + self.idle_seconds - self._clock())

    def job(self, mode: Mode = "PASSIVE") -> Callable[[sqlite3.Connection], None]:
        """The checkpoint, to run on the writer's thread: every registered fsync, then
        SQLite's. The fsyncs are taken now, on the event loop, where they are registered."""
        syncs = tuple(self._syncs.values())

        def checkpoint(conn: sqlite3.Connection) -> None:
            for sync in syncs:
                sync()  # raises: the log stays unsynced, like the file it points at
            conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()

        return checkpoint

    def done(self) -> None:
        """The checkpoint ran: nothing is owed."""
        self._batches = 0
        self._owed_since = None

    def failed(self) -> None:
        """The checkpoint failed: try again after `idle_seconds` (not at once, in a loop)."""
        self._batches = 0
        self._owed_since = self._clock()
