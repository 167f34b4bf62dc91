"""At startup, read back what was said to the bot while it was down (Slack retries a
delivery for minutes, not for an outage)."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable

from bot.channel import CATCH_UP_SECONDS, Inbox
from bot.slack.config import UNREACHABLE, unreachable_reason
from bot.slack.history import SlackHistory
from bot.slack.identity import SlackIdentity
from bot.slack.ingress import SlackIngress
from bot.slack.normalize import DM_THREAD, mentions
from core.ids import ConversationRef

log = logging.getLogger(__name__)

# A Slack message ts: the core's own turns (firings, checks) are logged under keys instead.
_TS = re.compile(r"\d+\.\d+")


def slack_ts(value: str | None) -> str | None:
    """`value` when it is a Slack message ts, else None."""
    return value if value is not None and _TS.fullmatch(value) else None


class SlackCatchUp:
    """Replies in the bot's recent threads, then new mentions and DM messages in their
    channels, fed through `ingress` like live events. Duplicates are dropped by the
    message-level dedup key, whichever way a message arrives. Each thread and channel is
    read back on its own: one that fails is logged and skipped, the others still are."""

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
        for conv, last_id in recent:
            thread = slack_ts(conv.thread) if conv.thread != DM_THREAD else None
            # Where nobody but the core spoke yet (a firing's own thread), from its root.
            start = slack_ts(last_id) or thread
            if start is None:
                continue
            if thread is not None:  # a DM's history is a channel read
                what = f"thread {thread} in {conv.channel}"
                found += await self._isolated(what, self._read_back_thread(conv, start))
            key = (conv.workspace, conv.channel)
            if float(start) > float(newest.get(key, "0")):
                newest[key] = start
        for (workspace, channel), oldest in newest.items():
            read = self._read_back_channel(workspace, channel, oldest)
            found += await self._isolated(f"channel {channel}", read)
        if found:
            log.info("slack: %d message(s) from the downtime read back", found)

    @staticmethod
    async def _isolated(what: str, read: Awaitable[int]) -> int:
        """`read`'s count; 0 and one log line naming `what` when it fails."""
        try:
            return await read
        except UNREACHABLE as exc:
            log.warning("slack: reading back %s failed, skipped: %s", what, unreachable_reason(exc))
        except Exception:  # one bad conversation must not cost the others their read-back
            log.exception("slack: reading back %s failed, skipped", what)
        return 0

    async def _read_back_thread(self, conv: ConversationRef, after: str) -> int:
        """The thread's replies after `after`, taken in as events; how many."""
        replies = await self._history.thread(conv.channel, conv.thread)
        found = 0
        for item in replies:
            if float(item.get("ts", 0)) <= float(after):
                continue
            event = {**item, "channel": conv.channel, "thread_ts": conv.thread}
            body = {"team_id": conv.workspace, "event_id": f"read-back:{item.get('ts')}"}
            # A reply that does not mention the bot is taken in as such (not addressed): the
            # core decides, as for a live one, whether it is answered.
            mentioned = mentions(str(item.get("text", "")), self._identity.bot_user_id)
            await self._ingress.ingest(body, event, mentioned=mentioned)
            found += 1
        return found

    async def _read_back_channel(self, workspace: str, channel: str, oldest: str) -> int:
        """The channel's top-level messages after `oldest` that are meant for the bot (a
        mention, each starting a thread; in a DM, every message), in order; how many."""
        messages = await self._history.channel(channel, oldest)
        found = 0
        for item in reversed(messages):  # Slack pages newest first
            dm = channel.startswith("D")
            if not dm and not mentions(str(item.get("text", "")), self._identity.bot_user_id):
                continue
            body = {"team_id": workspace, "event_id": f"read-back:{item.get('ts')}"}
            await self._ingress.ingest(body, {**item, "channel": channel}, mentioned=True)
            found += 1
        return found
