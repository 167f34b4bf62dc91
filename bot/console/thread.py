"""The active console conversation: its thread id, kept in RAVEN_HOME so a restart
continues it until the user types `new`, and how it is named to the user."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from core.files import atomic_write

log = logging.getLogger(__name__)

# The thread of a console that never typed `new` (and of every console before `new` existed).
CONSOLE_THREAD = "main"
# In RAVEN_HOME: the thread id of the active console conversation.
CONSOLE_STATE_FILE = "console-conversation"
_THREAD = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ConsoleThread:
    """The active console conversation, kept in a file so a restart continues it until `new`."""

    def __init__(self, path: Path | None) -> None:
        self._path = path

    def load(self) -> str:
        """The saved thread id, or the default one when nothing (valid) is saved."""
        if self._path is None:
            return CONSOLE_THREAD
        try:
            saved = self._path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return CONSOLE_THREAD
        except (OSError, UnicodeDecodeError) as exc:
            log.warning(
                "cannot read %s (%s); using conversation %s", self._path, exc, label(CONSOLE_THREAD)
            )
            return CONSOLE_THREAD
        if not _THREAD.match(saved):
            log.warning("ignoring %s: %r is not a console thread id", self._path, saved[:40])
            return CONSOLE_THREAD
        return saved

    def save(self, thread: str) -> None:
        """Remember `thread` for the next start (a failure only costs that memory)."""
        if self._path is None:
            return
        try:
            atomic_write(self._path, thread + "\n")
        except OSError as exc:
            log.warning("cannot save the console conversation to %s: %s", self._path, exc)


def label(thread: str) -> str:
    """How a console conversation is named to the user: `console-1` for the first one (its
    thread id is `main`, from before `new` existed), then `console-2`, …"""
    return f"console-{1 if thread == CONSOLE_THREAD else thread}"


def next_thread(thread: str) -> str:
    """The thread id after `thread` (`main` counts as 1)."""
    return str(int(thread) + 1) if thread.isdigit() else "2"
