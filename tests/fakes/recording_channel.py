"""An in-memory Channel that records posts and edits (for core tests, not adapter tests)."""

from __future__ import annotations

import asyncio
import itertools

from core.ids import ConversationRef
from host.runtime.messages import OutboundMessage


class RecordingChannel:
    """Implements the `Channel` protocol by appending to lists."""

    def __init__(self, platform: str = "test", *, fail_posts: int = 0) -> None:
        self._platform = platform
        self.posts: list[tuple[ConversationRef, OutboundMessage]] = []
        self.edits: list[tuple[str, OutboundMessage]] = []
        self.fail_posts = fail_posts
        self._ids = itertools.count(1)
        self.posted = asyncio.Event()

    @property
    def platform(self) -> str:
        return self._platform

    async def post(self, conv: ConversationRef, message: OutboundMessage) -> str:
        if self.fail_posts > 0:
            self.fail_posts -= 1
            raise ConnectionError("platform unavailable")
        self.posts.append((conv, message))
        self.posted.set()
        return f"m{next(self._ids)}"

    async def edit(self, conv: ConversationRef, message_id: str, message: OutboundMessage) -> None:
        self.edits.append((message_id, message))

    @property
    def texts(self) -> list[str]:
        return [m.text for _, m in self.posts]
