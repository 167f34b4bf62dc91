"""The console's terminal: its screen, its input and the active conversation.

Made before the runtime, so `raven-bot chat` shows its prompt and accepts typing while the
slow parts still load (`greet`); the console adapter takes it over once the runtime serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import TextIO

from bot.console.screen import Screen
from bot.console.stdin import StdinLines
from bot.console.thread import ConsoleThread, label

log = logging.getLogger(__name__)

USER_PROMPT = "you> "


class Terminal:
    """Where the console reads and writes (see the module docstring)."""

    def __init__(
        self,
        *,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        state_file: Path | None = None,
    ) -> None:
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        # Set when input ends for good: closed by the runtime, or the reader went away.
        self.closed = asyncio.Event()
        self.screen = Screen(self.stdout, on_gone=self._reader_gone)
        self.lines = StdinLines(self.stdin, on_enter=self.screen.entered)
        self.state = ConsoleThread(state_file)
        self.thread = self.state.load()
        self._greeted = False

    def greet(self) -> None:
        """Name the conversation and, for a person at a terminal, show the prompt and keep
        what they type from now on (call on the loop; once)."""
        if self._greeted:
            return
        self._greeted = True
        self.screen.say(f"conversation {label(self.thread)} (type `new` for a fresh one)")
        if self.lines.interactive:
            self.screen.prompt(USER_PROMPT)
            self.lines.start()

    def abandon(self) -> None:
        """Starting failed after `greet`: end the prompt's line so the error reads clean."""
        self.screen.end_input()

    def close(self) -> None:
        """Stop reading input."""
        self.closed.set()
        self.lines.cancel()

    def _reader_gone(self) -> None:
        """Output cannot be written any more (the screen stops writing): stop input too."""
        log.info("console output closed (the reader went away); stopping input")
        # Point stdout at /dev/null so the interpreter's final flush does not print a
        # BrokenPipeError traceback (the recipe in the Python `signal` docs).
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stdout.fileno())
            os.close(devnull)
        self.close()
