"""What the agent writes on stdout, checked frame by frame before the SDK reads it.

The SDK skips a line that is not JSON and waits on: a request whose answer was that line would
never end. Here such a line ends the connection instead (the SDK then fails every pending
request), and what the agent wrote is kept to say why.
"""

from __future__ import annotations

import asyncio
import json

# Past this, one line is no frame the bot will parse (the SDK's own default is 50 MiB).
MAX_FRAME_BYTES = 16 * 1024 * 1024


class FrameGuard:
    """Copies well-formed frames from the agent's stdout into the reader the SDK reads."""

    def __init__(self, source: asyncio.StreamReader) -> None:
        self._source = source
        self.reader = asyncio.StreamReader(limit=MAX_FRAME_BYTES + 1)
        # The first line that was no JSON object (as the agent wrote it), if any.
        self.malformed: str | None = None

    async def pump(self) -> None:
        """Until the agent's stdout ends or a frame is malformed; then the SDK sees EOF."""
        try:
            while True:
                try:
                    line = await self._source.readline()
                except ValueError:  # a line longer than the stream's limit
                    self.malformed = "(a line over 16 MiB)"
                    return
                if not line:
                    return
                if line.strip() and not _is_object(line):
                    self.malformed = line.decode("utf-8", errors="replace").strip()[:500]
                    return
                self.reader.feed_data(line)
        finally:
            self.reader.feed_eof()


def _is_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False
