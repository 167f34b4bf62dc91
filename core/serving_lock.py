"""One serving bot per data directory.

Two bots on one RAVEN_HOME would both serve, and the second one's start-up recovery would
call the first one's running work interrupted. So `run` and `chat` hold an exclusive flock
on `RAVEN_HOME/bot.lock` for their whole life, taken before anything is recovered; the file
names the holder (pid and command) so a second one can say who serves. One-shot commands
never take it. The kernel drops the lock when the holder dies, even by `kill -9`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

LOCK_FILE = "bot.lock"
# The record is a few dozen bytes; more than this is not ours.
_MAX_RECORD = 4096


class LockError(RuntimeError):
    """The serving lock cannot be taken; the message is one line saying why and what to do."""


class AlreadyServing(LockError):
    """Another process holds the serving lock; the message names it."""


@dataclass(frozen=True)
class Holder:
    """The process that serves a data directory (or last did)."""

    pid: int
    command: str

    def describe(self) -> str:
        return f"pid {self.pid}, `{self.command}`" if self.command else f"pid {self.pid}"


class ServingLock:
    """The exclusive serving lock of one data directory (a context manager)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.path = home / LOCK_FILE
        self._fd: int | None = None

    def acquire(self, command: str) -> None:
        """Take the lock and record this process as its holder; `AlreadyServing` naming
        the holder when another process has it. Never waits."""
        # O_NOFOLLOW: the home's files are the bot's own, never a link planted for it.
        # O_CLOEXEC: an agent process must not inherit the lock and outlive the bot with it.
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise LockError(
                f"cannot open {self.path} ({exc.strerror or exc}); remove it (raven-bot makes "
                "it as a plain file) and start again"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = _read(fd)
            os.close(fd)
            who = f" ({other.describe()})" if other is not None else ""
            raise AlreadyServing(
                f"another raven-bot{who} is serving {self.home}; stop it first "
                "(one-shot commands such as `doctor` and `memory` work beside it)"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        record = json.dumps({"pid": os.getpid(), "command": command}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
        self._fd = fd

    def release(self) -> None:
        """Clear the record (a clean stop: nobody serves) and drop the lock."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)

    def __enter__(self) -> ServingLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def serving_holder(home: Path) -> Holder | None:
    """Who serves `home` now (None: nobody). Read without taking the lock, so asking never
    stops a bot from starting; a record whose process is gone (killed) is nobody."""
    try:
        fd = os.open(home / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        holder = _read(fd)
    finally:
        os.close(fd)
    if holder is None or not _alive(holder.pid):
        return None
    return holder


def _read(fd: int) -> Holder | None:
    try:
        data = json.loads(os.pread(fd, _MAX_RECORD, 0) or b"null")
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("pid"), int):
        return None
    command = data.get("command")
    return Holder(data["pid"], command if isinstance(command, str) else "")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive
    return True
