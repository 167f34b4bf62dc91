"""Slack's thread status ("raven is running `s2`: pytest -q…") through
`assistant.threads.setStatus`, kept alive while the bot works and cleared after.

Slack hides a status after two minutes without a message, so each shown status is set again
every `refresh_seconds` by one task per thread, cancelled when it is cleared. Only threads
have a status (the call needs a `thread_ts`); a DM's single conversation shows none. A
workspace whose token may not set statuses (a missing scope, an app that is not an
assistant) turns statuses off for that workspace, said once in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.normalize import DM_THREAD
from core.ids import ConversationRef

log = logging.getLogger(__name__)

# Well before Slack's two-minute expiry, with room for a slow call.
REFRESH_SECONDS = 90.0
# Answers that will not change while the bot runs: statuses stay off for the workspace.
REFUSALS = frozenset(
    {
        "missing_scope",
        "not_allowed",
        "not_allowed_token_type",
        "no_permission",
        "method_not_supported_for_channel_type",
        "feature_not_enabled",
        "team_access_not_granted",
        "restricted_action",
    }
)


@dataclass
class _Kept:
    """One thread's status kept alive: its text, and a bell that ends the wait for the next
    refresh (to refresh at once, or to stop)."""

    text: str
    bell: asyncio.Event = field(default_factory=asyncio.Event)
    stopped: bool = False
    task: asyncio.Task[None] | None = None


class SlackWorking:
    """The `WorkingStatus` of one Slack workspace connection (called by the core one
    conversation at a time).

    A refresher is never cancelled mid-call: it is stopped between calls and waited for, so
    a set in flight neither lands after a clear nor costs its keep-alive connection."""

    def __init__(self, client: AsyncWebClient, *, refresh_seconds: float = REFRESH_SECONDS) -> None:
        self._client = client
        self.refresh_seconds = refresh_seconds
        self._off: set[str] = set()  # workspaces that refused statuses
        self._kept: dict[str, _Kept] = {}

    async def show(self, conv: ConversationRef, text: str) -> None:
        """Set the thread's status now and keep it set until `clear`."""
        if not self._has_status(conv):
            return
        await self._halt(conv)
        if await self._set(conv, text):
            kept = _Kept(text)
            kept.task = asyncio.get_running_loop().create_task(
                self._refresh(conv, kept), name=f"slack-status:{conv.id}"
            )
            self._kept[conv.id] = kept

    def posted(self, conv: ConversationRef) -> None:
        """The bot just posted in the thread, which hides its status on Slack: set it again
        at once if one is kept (in the background; the post is not held up)."""
        kept = self._kept.get(conv.id)
        if kept is not None:
            kept.bell.set()

    async def clear(self, conv: ConversationRef) -> None:
        """Stop refreshing and clear the thread's status (an empty status)."""
        if not self._has_status(conv):
            return
        await self._halt(conv)
        await self._set(conv, "")

    async def close(self) -> None:
        """Stop every refresher (a status left behind expires within two minutes)."""
        for conv_id in list(self._kept):
            await self._halt_id(conv_id)

    def refreshing(self, conv: ConversationRef) -> bool:
        """Whether the thread's status is being kept alive now."""
        kept = self._kept.get(conv.id)
        return kept is not None and kept.task is not None and not kept.task.done()

    def _has_status(self, conv: ConversationRef) -> bool:
        return conv.thread != DM_THREAD and conv.workspace not in self._off

    async def _halt(self, conv: ConversationRef) -> None:
        await self._halt_id(conv.id)

    async def _halt_id(self, conv_id: str) -> None:
        """Stop the thread's refresher and wait until its call in flight, if any, is over."""
        kept = self._kept.pop(conv_id, None)
        if kept is None or kept.task is None:
            return
        kept.stopped = True
        kept.bell.set()
        await asyncio.wait([kept.task])

    async def _refresh(self, conv: ConversationRef, kept: _Kept) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(kept.bell.wait(), self.refresh_seconds)
            if kept.stopped:
                return
            kept.bell.clear()
            if not await self._set(conv, kept.text):
                return

    async def _set(self, conv: ConversationRef, status: str) -> bool:
        """One `setStatus` call; False when it failed (a refusal turns statuses off)."""
        try:
            await self._client.assistant_threads_setStatus(
                channel_id=conv.channel, thread_ts=conv.thread, status=status
            )
        except SlackApiError as exc:
            error = str(exc.response.get("error") or "")
            if error in REFUSALS:
                if conv.workspace not in self._off:
                    self._off.add(conv.workspace)
                    log.warning(
                        "slack: thread statuses are off for workspace %s: Slack answered %s "
                        "to assistant.threads.setStatus (grant the chat:write scope and "
                        "reinstall the app to see them)",
                        conv.workspace,
                        error,
                    )
                return False
            log.debug("slack: status of %s not set: %s", conv.id, error or exc)
            return False
        except Exception as exc:
            log.debug("slack: status of %s not set: %r", conv.id, exc)
            return False
        return True
