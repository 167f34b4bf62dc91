"""An in-process channel adapter for end-to-end tests of the assembled runtime."""

from __future__ import annotations

import asyncio

from bot.channel import ChannelFeatures, Ingress
from tests.fakes.prompt_surface import RecordingPromptSurface
from tests.fakes.recording_channel import RecordingChannel


class FakeChatAdapter(RecordingChannel, RecordingPromptSurface):
    """Records posts, edits and prompts; `serve` waits until closed."""

    def __init__(self, platform: str = "test") -> None:
        RecordingChannel.__init__(self, platform)
        RecordingPromptSurface.__init__(self)
        self._closed = asyncio.Event()

    @property
    def features(self) -> ChannelFeatures:
        """Like a rich platform: buttons, private notes and edits."""
        return ChannelFeatures(threads=True, buttons=True, private_notes=True, editing=True)

    async def serve(self, ingress: Ingress) -> None:
        await self._closed.wait()

    async def close(self) -> None:
        self._closed.set()
