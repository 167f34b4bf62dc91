"""When the store's writer checkpoints SQLite's write-ahead log, and what reaches the disk
just before it does.

With `synchronous=NORMAL` a commit survives a crash of the process at once, but a power
loss only once the log is synced, which SQLite does at each checkpoint. Files that a commit
points at (a graph run's journal) are written before that commit and fsynced here, just
before the checkpoint: whatever a synced log holds, those files hold too, and the commit
path pays no fsync of its own. SQLite's automatic checkpoint (which would sync the log
without them) is off on the store's connections; the writer runs this one instead: when the
log has grown by `wal_frames` pages (SQLite's own default), or once no commit came for
`quiet_seconds`, and at the latest `max_seconds` after the first commit it has not synced,
when the writer is idle. Quiet periods take most of them, off every caller's path.
"""

from __future__ import annotations

import itertools
import sqlite3
import time
from collections.abc import Callable
from typing import Literal, Protocol

# SQLite's own default. A checkpoint costs two fsyncs, so more often than SQLite would slow
# sequential writes (measured: 0.23-0.25 → 0.27-0.39 ms per insert at every 200 commits).
DEFAULT_WAL_FRAMES = 1000
DEFAULT_QUIET_SECONDS = 1.0
DEFAULT_MAX_SECONDS = 30.0

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
        wal_frames: int = DEFAULT_WAL_FRAMES,
        quiet_seconds: float = DEFAULT_QUIET_SECONDS,
        max_seconds: float = DEFAULT_MAX_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if wal_frames < 1 or quiet_seconds < 0 or max_seconds < 0:
            raise ValueError(
                "wal_frames must be at least 1, quiet_seconds and max_seconds not negative"
            )
        self.wal_frames = wal_frames
        self.quiet_seconds = quiet_seconds
        self.max_seconds = max_seconds
        self._clock = clock
        self._syncs: dict[int, Callable[[], None]] = {}
        self._keys = itertools.count()
        self._first: float | None = None  # when the first commit not checkpointed came
        self._last = 0.0  # when the last commit came
        self._frames = 0  # the log's length after the last commit
        self._base = 0  # its length when the last checkpoint ran
        self._retry_at = 0.0  # not due before (another process owns the log)

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
        return self._first is not None

    def committed(self, wal_frames: int) -> None:
        """A transaction committed; the log now holds `wal_frames` pages."""
        self._last = self._clock()
        if self._first is None:
            self._first = self._last
        if wal_frames < self._base:
            self._base = 0  # the log restarted from its beginning after the checkpoint
        self._frames = wal_frames

    def due(self, *, idle: bool) -> bool:
        """Whether to checkpoint now: the log grew by `wal_frames`, or the writer is `idle`
        and the quiet period (or the longest wait) is over."""
        if self._first is None:
            return False
        if self._frames - self._base >= self.wal_frames and self._clock() >= self._retry_at:
            return True
        return idle and self.idle_wait() == 0

    def idle_wait(self) -> float | None:
        """How long an idle writer may sleep before a checkpoint is due (None: none owed)."""
        if self._first is None:
            return None
        due = min(self._last + self.quiet_seconds, self._first + self.max_seconds)
        return max(0.0, due - self._clock(), self._retry_at - self._clock())

    def job(
        self, mode: Mode = "PASSIVE", *, first: Callable[[], None] | None = None
    ) -> Callable[[sqlite3.Connection], None]:
        """The checkpoint, to run on the writer's thread: `first` (a sync of every file),
        every registered fsync, then SQLite's. The fsyncs are taken now, on the event loop,
        where they are registered."""
        syncs = tuple(self._syncs.values()) if first is None else (first, *self._syncs.values())

        def checkpoint(conn: sqlite3.Connection) -> None:
            for sync in syncs:
                sync()  # raises: the log stays unsynced, like the file it points at
            conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()

        return checkpoint

    def done(self) -> None:
        """The checkpoint ran: nothing is owed."""
        self._first = None
        self._base = self._frames

    def failed(self) -> None:
        """The checkpoint failed: try again after the quiet period (not at once, in a loop)."""
        self._first = self._last = self._clock()
        self._base = self._frames

    def deferred(self) -> None:
        """Another process owns the log (`core.store.log_lock`): its checkpoints take this
        store's commits too; try again after the longest wait, not at every commit."""
        self.failed()
        self._retry_at = self._clock() + self.max_seconds
