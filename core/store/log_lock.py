"""Which process checkpoints a database's log while several have it open.

The bot fsyncs its run journals before each checkpoint it runs (`core.store.checkpoints`):
the commits a synced log holds point only at lines on disk. A one-shot command or a headless
campaign that checkpointed the same log meanwhile would sync the bot's commits without
those fsyncs. So the process that registers them (the log's owner: the bot) holds a shared
lock on `<db>-checkpoint.lock` while its store is open, and every other process checkpoints
only while it holds that lock exclusively, which it cannot while an owner runs: it leaves
its commits to the owner's next checkpoint. (Its store's close is then never the log's last
connection either, which SQLite would checkpoint: the owner's are open.)

A log that holds frames when the store opens may have been written by a process that died
before it synced the files those frames point at: the first checkpoint after that syncs
the file system first.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path

# How long an owner waits at open for another process's checkpoint (milliseconds each).
OWNER_WAIT_SECONDS = 10.0
_POLL_SECONDS = 0.01


class LogBusy(RuntimeError):
    """Another process held the log's checkpoint lock for longer than an owner waits."""


class LogLock:
    """The checkpoint lock of one store: shared for its life when it owns the log,
    exclusive around each checkpoint otherwise."""

    def __init__(
        self,
        db_path: Path,
        *,
        owner: bool,
        sync_files: Callable[[], None] = os.sync,
        wait_seconds: float = OWNER_WAIT_SECONDS,
    ) -> None:
        self.path = Path(f"{db_path}-checkpoint.lock")
        self.owner = owner
        self._wal = Path(f"{db_path}-wal")
        # Syncs every file (the owner's journals too, whichever process wrote them).
        self._sync_files = sync_files
        self._wait_seconds = wait_seconds
        self._fd: int | None = None
        self._held = False  # exclusively, around one checkpoint (never for an owner)
        self.inherited = False  # the log held frames when the store opened

    async def open(self) -> None:
        """Take the lock file (before the store connects); an owner waits (up to
        `wait_seconds`) for another process's checkpoint to end."""
        try:
            self.inherited = self._wal.stat().st_size > 0
        except FileNotFoundError:
            self.inherited = False
        # O_NOFOLLOW: the home's files are the bot's own, never a link planted for it.
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        if not self.owner:
            return
        deadline = time.monotonic() + self._wait_seconds
        while not self._try(fcntl.LOCK_SH):
            if time.monotonic() >= deadline:
                self.close()
                raise LogBusy(
                    f"another process has held {self.path.name} for over "
                    f"{self._wait_seconds:g} s while checkpointing {self._wal.name[:-4]}: "
                    "wait for the command using the database to finish, then start again"
                )
            await asyncio.sleep(_POLL_SECONDS)

    def claim(self) -> bool:
        """Whether this store may checkpoint now: always for the owner; otherwise only with
        the lock taken exclusively (no owner runs), held until `release()`."""
        if self.owner:
            return True
        self._held = self._try(fcntl.LOCK_EX)
        return self._held

    def release(self) -> None:
        """End a claim (an owner's lasts until `close`)."""
        if self._held and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._held = False

    def sync_first(self, *, claimed: bool) -> Callable[[], None] | None:
        """The sync of every file owed before a checkpoint (None when none is): once after
        open when the log held frames, and always without the claim (an erasure's
        checkpoint, which runs anyway: the owner's journals are synced with everything)."""
        if claimed and not self.inherited:
            return None
        self.inherited = False
        return self._sync_files

    def close(self) -> None:
        """Drop the lock (closing the file releases it)."""
        self._held = False
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _try(self, mode: int) -> bool:
        assert self._fd is not None, "open() first"
        try:
            fcntl.flock(self._fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True
