"""A stdio server's stderr, kept as a bounded tail: enough to say why it would not start, and
never more, however much a chatty or hostile server writes."""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import TextIO

TAIL_BYTES = 4_000
TAIL_LINES = 20
READ_CHUNK = 65_536


class StderrTail:
    """A pipe the child writes its stderr to, read by a task of the caller's (`open` starts
    it, `close` ends it); `text()` is the last lines."""

    def __init__(self) -> None:
        read_fd, write_fd = os.pipe()
        self._read = os.fdopen(read_fd, "rb", buffering=0)
        # The SDK hands this to the child as its stderr; it wants a text file with a fileno.
        self.writer: TextIO = os.fdopen(write_fd, "w", encoding="utf-8")
        self._tail = bytearray()
        self._task: asyncio.Task[None] | None = None
        self._transport: asyncio.ReadTransport | None = None

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        self._transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), self._read
        )
        self._task = asyncio.create_task(self._drain(reader), name="mcp-server-stderr")

    def spawned(self) -> None:
        """The child holds its own copy now: drop ours, so its exit ends the pipe."""
        if not self.writer.closed:
            self.writer.close()

    async def finished(self, within: float) -> None:
        """Wait (bounded: a grandchild may hold the pipe) until the child's stderr is read."""
        self.spawned()
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._task), within)

    async def close(self) -> None:
        self.spawned()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._transport is not None:
            self._transport.close()
        self._read.close()

    def text(self) -> str:
        lines = bytes(self._tail).decode("utf-8", "replace").splitlines()
        return "\n".join(lines[-TAIL_LINES:])

    async def _drain(self, reader: asyncio.StreamReader) -> None:
        while chunk := await reader.read(READ_CHUNK):
            self._tail += chunk
            del self._tail[:-TAIL_BYTES]
