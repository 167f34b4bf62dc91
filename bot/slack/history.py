"""Reading Slack history: a thread's replies and a channel's recent messages, paged."""

from __future__ import annotations

from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

MAX_REPLY_PAGES = 10


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
