"""Everything the Slack adapter sends: ping-free Web API calls, threaded mrkdwn replies in
parts, in-place edits and ephemeral notes. Rate limits are retried by the client's
handlers (`retry_handlers`); errors no retry fixes become a non-retryable `ChannelError`."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot.slack.chart_blocks import with_chart
from bot.slack.config import PERMANENT_ERRORS
from bot.slack.history import SlackHistory
from bot.slack.identity import SlackIdentity
from bot.slack.mrkdwn import render_for_slack
from bot.slack.normalize import DM_THREAD
from bot.slack.pings import neutralize_slack_args
from bot.slack.table_blocks import message_blocks
from core.ids import ConversationRef
from host.runtime.messages import OutboundMessage
from host.runtime.ports import ChannelError

log = logging.getLogger(__name__)

METADATA_EVENT = "raven_message"


def thread_ts(conv: ConversationRef) -> str | None:
    """The thread a reply goes into (none for a DM's single conversation)."""
    return None if conv.thread == DM_THREAD else conv.thread


class SlackOutgoing:
    """Posting, editing and ephemeral notes; every call passes the ping neutraliser."""

    def __init__(
        self, client: AsyncWebClient, identity: SlackIdentity, history: SlackHistory
    ) -> None:
        self._client = client
        self._identity = identity
        self._history = history

    @property
    def client(self) -> AsyncWebClient:
        """The Web API client the calls go through."""
        return self._client

    async def call(
        self, method: Callable[..., Awaitable[AsyncSlackResponse]], **args: Any
    ) -> AsyncSlackResponse:
        """Every Web API call that sends text goes through here: pings are neutralised in
        `text`, blocks and views alike, whatever produced them."""
        try:
            return await method(**neutralize_slack_args(args))
        except SlackApiError as exc:
            error = str(exc.response.get("error") or "")
            if error in PERMANENT_ERRORS:
                raise ChannelError(f"Slack refused the call: {error}", retryable=False) from exc
            raise

    async def ephemeral(self, channel: str, user: str, text: str, thread: str | None) -> None:
        """A note only `user` sees, in `thread` of `channel`."""
        await self.call(
            self._client.chat_postEphemeral,
            channel=channel,
            user=user,
            text=text,
            thread_ts=thread,
        )

    async def _chunks(self, message: OutboundMessage) -> list[str]:
        return render_for_slack(await self._identity.named_mentions(message.text)) or ["(empty)"]

    async def post(self, conv: ConversationRef, message: OutboundMessage) -> str:
        """Post into the thread in ≤3,500-char mrkdwn parts; a redelivery skips parts Slack
        already has (found by the idempotency key in message metadata)."""
        chunks = await self._chunks(message)
        if message.ephemeral_to:
            await self.ephemeral(conv.channel, message.ephemeral_to, chunks[0], thread_ts(conv))
            return ""
        posted = (
            await self._posted_parts(conv, message.idempotency_key) if message.redelivery else {}
        )
        first: str | None = posted.get(0)
        for index, chunk in enumerate(chunks):
            if index in posted:
                continue
            # A chart (Slack draws it) goes under the last part.
            last = index == len(chunks) - 1
            blocks = with_chart(message, chunk, message_blocks(message), last=last)
            resp = await self.call(
                self._client.chat_postMessage,
                channel=conv.channel,
                thread_ts=thread_ts(conv),
                text=chunk,
                **({"blocks": blocks} if blocks else {}),
                unfurl_links=False,
                unfurl_media=False,
                metadata={
                    "event_type": METADATA_EVENT,
                    "event_payload": {"key": message.idempotency_key[:200], "part": index},
                },
            )
            if first is None:
                first = str(resp["ts"])
        return first or ""

    async def _posted_parts(self, conv: ConversationRef, key: str) -> dict[int, str]:
        try:
            thread_messages = await self._history.of(conv, metadata=True)
        except SlackApiError as exc:
            log.warning("slack: could not check for an earlier delivery: %s", exc)
            return {}
        parts: dict[int, str] = {}
        for item in thread_messages:
            meta = item.get("metadata") or {}
            payload = meta.get("event_payload") or {}
            if meta.get("event_type") == METADATA_EVENT and payload.get("key") == key[:200]:
                parts[int(payload.get("part", 0))] = str(item.get("ts"))
        return parts

    async def edit(self, conv: ConversationRef, message_id: str, message: OutboundMessage) -> None:
        """Edit a status message in place (`chat.update`)."""
        chunks = await self._chunks(message)
        await self.call(
            self._client.chat_update,
            channel=conv.channel,
            ts=message_id,
            text=chunks[0],
            **(
                {"blocks": blocks}
                if (blocks := with_chart(message, chunks[0], message_blocks(message), last=True))
                else {}
            ),
        )
