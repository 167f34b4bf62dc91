"""Console input: stdin's lines, read by a daemon thread into the event loop, in order.

Bytes are read, not text: a line that is not UTF-8 must not end the input (a decode error
inside a text reader would look like end of input); its bad bytes are replaced and flagged.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO, TextIO


@dataclass(frozen=True)
class Line:
    """One input line, decoded; `replaced` when invalid UTF-8 bytes were replaced."""

    text: str
    replaced: bool = False


class StdinLines:
    """Reads `stdin` line by line from the first `start` on; `next` hands them out in order.

    `on_enter` runs on the loop as each line arrives (on a terminal, Enter moved the cursor
    then, not when the line is taken from the queue)."""

    def __init__(self, stdin: TextIO, *, on_enter: Callable[[], None]) -> None:
        self._stdin = stdin
        self._on_enter = on_enter
        self._lines: asyncio.Queue[Line | None] | None = None
        self._read: asyncio.Future[Line | None] | None = None
        self._eof = False

    @property
    def interactive(self) -> bool:
        """True when a person types at a terminal."""
        try:
            return self._stdin.isatty()
        except (ValueError, OSError):
            return False

    def start(self) -> None:
        """Start reading (once; call on the loop): what is typed from now on is kept."""
        if self._lines is not None:
            return
        self._lines = asyncio.Queue()
        loop = asyncio.get_running_loop()
        # A daemon thread, not the default executor: a read blocked on a terminal must not
        # keep the process alive after shutdown.
        threading.Thread(
            target=self._pump, args=(loop, self._lines), name="console-stdin", daemon=True
        ).start()

    async def next(self, closed: asyncio.Event) -> Line | None:
        """The next line; None at end of input or once `closed` is set."""
        self.start()
        assert self._lines is not None
        if self._eof:
            return None
        # The read survives a caller's cancellation and is reused, so no line is ever dropped.
        if self._read is None:
            self._read = asyncio.ensure_future(self._lines.get())
        read = self._read
        closing = asyncio.ensure_future(closed.wait())
        waiting: set[asyncio.Future[Any]] = {read, closing}
        try:
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
        if read not in done:
            return None
        self._read = None
        line = read.result()
        if line is None:
            self._eof = True
        return line

    def cancel(self) -> None:
        """Stop waiting for a line (the reading thread ends with the process)."""
        if self._read is not None:
            self._read.cancel()

    def _pump(self, loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[Line | None]) -> None:
        raw: BinaryIO | None = getattr(self._stdin, "buffer", None)
        while True:
            try:
                line = decode(raw.readline()) if raw is not None else fix(self._stdin.readline())
            except (OSError, ValueError):
                line = None
            try:
                loop.call_soon_threadsafe(self._arrived, lines, line)
            except RuntimeError:
                return  # the loop is gone: the process is exiting
            if line is None:
                return

    def _arrived(self, lines: asyncio.Queue[Line | None], line: Line | None) -> None:
        if line is not None and self.interactive:
            self._on_enter()
        lines.put_nowait(line)


def decode(raw: bytes) -> Line | None:
    """A line read as bytes (None: end of input)."""
    if not raw:
        return None
    try:
        return Line(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return Line(raw.decode("utf-8", errors="replace"), replaced=True)


def fix(text: str) -> Line | None:
    """A line read as text (None: end of input)."""
    if not text:
        return None
    # Text streams opened with surrogateescape carry undecodable bytes as lone surrogates.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            raw = text.encode("utf-8", errors="surrogateescape")
        except UnicodeEncodeError:
            raw = text.encode("utf-8", errors="replace")
        return Line(raw.decode("utf-8", errors="replace"), replaced=True)
    return Line(text)
