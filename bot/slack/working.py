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
import logging

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


class SlackWorking:
    """The `WorkingStatus` of one Slack workspace connection (called by the core one
    conversation at a time)."""

    def __init__(self, client: AsyncWebClient, *, refresh_seconds: float = REFRESH_SECONDS) -> None:
        self._client = client
        self.refresh_seconds = refresh_seconds
        self._off: set[str] = set()  # workspaces that refused statuses
        self._refreshers: dict[str, asyncio.Task[None]] = {}
        self._texts: dict[str, str] = {}  # the status each kept thread shows

    async def show(self, conv: ConversationRef, text: str) -> None:
        """Set the thread's status now and keep it set until `clear`."""
        if not self._has_status(conv):
            return
        self._stop_refreshing(conv)
        if await self._set(conv, text):
            self._keep(conv, text, first_delay=self.refresh_seconds)

    def posted(self, conv: ConversationRef) -> None:
        """The bot just posted in the thread, which hides its status on Slack: set it again
        at once if one is kept (in the background; the post is not held up)."""
        text = self._texts.get(conv.id)
        if text is None or not self.refreshing(conv):
            return
        self._stop_refreshing(conv)
        self._keep(conv, text, first_delay=0.0)

    def _keep(self, conv: ConversationRef, text: str, *, first_delay: float) -> None:
        """One task keeps the thread's status set: after `first_delay`, then every
        `refresh_seconds`."""
        self._texts[conv.id] = text
        task = asyncio.get_running_loop().create_task(
            self._refresh(conv, text, first_delay), name=f"slack-status:{conv.id}"
        )
        self._refreshers[conv.id] = task

    async def clear(self, conv: ConversationRef) -> None:
        """Stop refreshing and clear the thread's status (an empty status)."""
        if not self._has_status(conv):
            return
        task = self._stop_refreshing(conv)
        if task is not None:
            # A set still in flight must not land after the clear and show a stale status.
            await asyncio.wait([task])
        await self._set(conv, "")

    async def close(self) -> None:
        """Cancel every refresher (a status left behind expires within two minutes)."""
        tasks = list(self._refreshers.values())
        self._refreshers.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    def refreshing(self, conv: ConversationRef) -> bool:
        """Whether the thread's status is being kept alive now."""
        task = self._refreshers.get(conv.id)
        return task is not None and not task.done()

    def _has_status(self, conv: ConversationRef) -> bool:
        return conv.thread != DM_THREAD and conv.workspace not in self._off

    def _stop_refreshing(self, conv: ConversationRef) -> asyncio.Task[None] | None:
        self._texts.pop(conv.id, None)
        task = self._refreshers.pop(conv.id, None)
        if task is not None:
            task.cancel()
        return task

    async def _refresh(self, conv: ConversationRef, text: str, first_delay: float) -> None:
        delay = first_delay
        while True:
            await asyncio.sleep(delay)
            if not await self._set(conv, text):
                return
            delay = self.refresh_seconds

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
