"""An in-process channel adapter for end-to-end tests of the assembled runtime."""

from __future__ import annotations

import asyncio

from tests.fakes.prompt_surface import RecordingPromptSurface
from tests.fakes.recording_channel import RecordingChannel


class FakeChatAdapter(RecordingChannel, RecordingPromptSurface):
    """Records posts, edits and prompts; `serve` waits until closed."""

    def __init__(self, platform: str = "test") -> None:
        RecordingChannel.__init__(self, platform)
        RecordingPromptSurface.__init__(self)
        self._closed = asyncio.Event()
        self.inbox: object | None = None

    def bind(self, inbox: object, prompts: object = None) -> None:
        self.inbox = inbox

    async def serve(self) -> None:
        await self._closed.wait()

    async def close(self) -> None:
        self._closed.set()
