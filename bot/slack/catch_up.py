"""At startup, read back what was said to the bot while it was down (Slack retries a
delivery for minutes, not for an outage)."""

from __future__ import annotations

import logging
import time

from slack_sdk.errors import SlackApiError

from bot.channel import CATCH_UP_SECONDS, Inbox
from bot.slack.history import SlackHistory
from bot.slack.identity import SlackIdentity
from bot.slack.ingress import SlackIngress
from bot.slack.normalize import DM_THREAD, mentions
from core.ids import ConversationRef

log = logging.getLogger(__name__)


class SlackCatchUp:
    """Replies in the bot's recent threads, then new mentions and DM messages in their
    channels, fed through `ingress` like live events. Duplicates are dropped by the
    message-level dedup key, whichever way a message arrives."""

    def __init__(
        self, inbox: Inbox, ingress: SlackIngress, history: SlackHistory, identity: SlackIdentity
    ) -> None:
        self._inbox = inbox
        self._ingress = ingress
        self._history = history
        self._identity = identity

    async def run(self) -> None:
        """Read back every conversation active within `CATCH_UP_SECONDS`."""
        recent = await self._inbox.recent("slack", time.time() - CATCH_UP_SECONDS)
        found = 0
        newest: dict[tuple[str, str], str] = {}
        for conv, last_ts in recent:
            if conv.thread != DM_THREAD:  # a DM's history is a channel read
                found += await self._read_back_thread(conv, last_ts)
            key = (conv.workspace, conv.channel)
            if float(last_ts or 0) > float(newest.get(key, 0)):
                newest[key] = last_ts
        for (workspace, channel), oldest in newest.items():
            found += await self._read_back_channel(workspace, channel, oldest)
        if found:
            log.info("slack: %d message(s) from the downtime read back", found)

    async def _read_back_thread(self, conv: ConversationRef, last_ts: str) -> int:
        """The thread's replies after `last_ts`, taken in as events; how many."""
        try:
            replies = await self._history.thread(conv.channel, conv.thread)
        except SlackApiError as exc:
            log.warning("slack: reading back thread %s failed: %s", conv.thread, exc)
            return 0
        found = 0
        for item in replies:
            if float(item.get("ts", 0)) <= float(last_ts or 0):
                continue
            event = {**item, "channel": conv.channel, "thread_ts": conv.thread}
            body = {"team_id": conv.workspace, "event_id": f"read-back:{item.get('ts')}"}
            mentioned = mentions(str(item.get("text", "")), self._identity.bot_user_id)
            await self._ingress.ingest(body, event, mentioned=mentioned)
            found += 1
        return found

    async def _read_back_channel(self, workspace: str, channel: str, oldest: str) -> int:
        """The channel's top-level messages after `oldest` that are meant for the bot (a
        mention, each starting a thread; in a DM, every message), in order; how many."""
        try:
            messages = await self._history.channel(channel, oldest)
        except SlackApiError as exc:
            log.warning("slack: reading back channel %s failed: %s", channel, exc)
            return 0
        found = 0
        for item in reversed(messages):  # Slack pages newest first
            dm = channel.startswith("D")
            if not dm and not mentions(str(item.get("text", "")), self._identity.bot_user_id):
                continue
            body = {"team_id": workspace, "event_id": f"read-back:{item.get('ts')}"}
            await self._ingress.ingest(body, {**item, "channel": channel}, mentioned=True)
            found += 1
        return found
