"""Reading Slack history: a thread's replies and a channel's recent messages, paged."""

from __future__ import annotations

from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.normalize import DM_THREAD
from core.ids import ConversationRef

MAX_REPLY_PAGES = 10
# A redelivery after a crash concerns the last few posts: one page is plenty.
RECENT_MESSAGES = 200


class SlackHistory:
    """Paged reads of threads and channels (at most `MAX_REPLY_PAGES` pages each)."""

    def __init__(self, client: AsyncWebClient) -> None:
        self._client = client

    async def thread(
        self, channel: str, thread: str, *, metadata: bool = False
    ) -> list[dict[str, Any]]:
        """A thread's messages, oldest first (Slack pages oldest first: walk the cursor)."""
        messages: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_REPLY_PAGES):
            resp = await self._client.conversations_replies(
                channel=channel,
                ts=thread,
                limit=200,
                cursor=cursor,
                include_all_metadata=metadata,
            )
            messages.extend(resp.get("messages") or [])
            cursor = (resp.get("response_metadata") or {}).get("next_cursor") or None
            if not resp.get("has_more") or not cursor:
                break
        return messages

    async def channel(self, channel: str, oldest: str) -> list[dict[str, Any]]:
        """A channel's top-level messages after `oldest`, newest first (walks the cursor)."""
        messages: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_REPLY_PAGES):
            resp = await self._client.conversations_history(
                channel=channel, oldest=oldest, limit=200, cursor=cursor
            )
            messages.extend(resp.get("messages") or [])
            cursor = (resp.get("response_metadata") or {}).get("next_cursor") or None
            if not resp.get("has_more") or not cursor:
                break
        return messages

    async def recent(
        self, channel: str, *, metadata: bool = False, limit: int = RECENT_MESSAGES
    ) -> list[dict[str, Any]]:
        """A channel's latest top-level messages, OLDEST first (one page): where a DM, which
        has no thread, looks for what a redelivery may already have posted."""
        resp = await self._client.conversations_history(
            channel=channel, limit=limit, include_all_metadata=metadata
        )
        return list(reversed(resp.get("messages") or []))

    async def of(self, conv: ConversationRef, *, metadata: bool = False) -> list[dict[str, Any]]:
        """The messages a reply in `conv` lands among, oldest first: its thread's, or a DM's
        latest (a DM's single conversation has no thread)."""
        if conv.thread == DM_THREAD:
            return await self.recent(conv.channel, metadata=metadata)
        return await self.thread(conv.channel, conv.thread, metadata=metadata)
