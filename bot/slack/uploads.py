"""Files into a Slack thread with `files_upload_v2` (getUploadURLExternal → upload →
completeUploadExternal). Slack keeps no metadata on a file share, so a redelivery looks for
the bot's share of a file with the same name and size in the thread instead."""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.config import PERMANENT_ERRORS
from bot.slack.history import SlackHistory
from bot.slack.identity import SlackIdentity
from bot.slack.outgoing import thread_ts
from core.ids import ConversationRef
from host.runtime.attachment_bytes import attachment_bytes
from host.runtime.messages import OutboundFile
from host.runtime.ports import ChannelError, FileRefused

log = logging.getLogger(__name__)

NO_SCOPE = (
    "this workspace hasn't given me permission to upload files (files:write). "
    "Ask an admin to reinstall the app with that scope."
)
TOO_LARGE = "Slack refused it as too large; it stays in the run's records on the bot's host."
# Slack's answers to a file it will never take (besides the scope).
_TOO_LARGE_ERRORS = frozenset({"file_upload_size_restricted", "file_too_large"})


class SlackFiles:
    """Uploads for one workspace connection."""

    def __init__(
        self, client: AsyncWebClient, identity: SlackIdentity, history: SlackHistory
    ) -> None:
        self._client = client
        self._identity = identity
        self._history = history

    async def upload(
        self,
        conv: ConversationRef,
        file: OutboundFile,
        *,
        idempotency_key: str,
        redelivery: bool,
        earlier_copies: int = 0,
    ) -> str:
        """Share `file` in the thread; return its file id (an earlier share's on a
        redelivery that finds one)."""
        if redelivery:
            shared = await self._already_shared(conv, file, earlier_copies)
            if shared is not None:
                log.info("slack: %s is already in the thread (%s)", file.name, idempotency_key)
                return shared
        data = await attachment_bytes(file)
        try:
            resp = await self._client.files_upload_v2(
                channel=conv.channel,
                thread_ts=thread_ts(conv),
                filename=file.name,
                title=file.name,
                content=data,
            )
        except SlackApiError as exc:
            raise _refusal(exc, file) from exc
        except SlackRequestError as exc:
            # The bytes' POST answered with an HTTP status (the SDK puts it in the message).
            if "status: 413" in str(exc):
                raise FileRefused(str(exc), reason="too_large", why=TOO_LARGE) from exc
            raise
        shared_file = resp.get("file") or {}
        return str(shared_file.get("id") or "")

    async def _already_shared(
        self, conv: ConversationRef, file: OutboundFile, earlier_copies: int
    ) -> str | None:
        try:
            messages = await self._history.of(conv)
        except SlackApiError as exc:
            log.warning("slack: could not check for an earlier upload: %s", exc)
            return None
        bot = self._identity.bot_user_id or await self._who_am_i()
        if bot is None:
            return None
        copies = [
            str(shared.get("id") or "")
            for message in messages
            for shared in message.get("files") or []
            if _same(shared, file) and bot in (message.get("user"), shared.get("user"))
        ]
        # The thread's oldest copies are the other deliveries'; one more is this one's.
        return copies[earlier_copies] if len(copies) > earlier_copies else None

    async def _who_am_i(self) -> str | None:
        """The bot's user id before any event told it (`auth.test`)."""
        try:
            resp = await self._client.auth_test()
        except SlackApiError as exc:
            log.warning("slack: could not tell the bot's own user id: %s", exc)
            return None
        self._identity.seen(resp.get("user_id"))
        return self._identity.bot_user_id


def _same(shared: dict[str, Any], file: OutboundFile) -> bool:
    return shared.get("name") == file.name and shared.get("size") == file.size


def _refusal(exc: SlackApiError, file: OutboundFile) -> ChannelError:
    error = str(exc.response.get("error") or "")
    if error == "missing_scope":
        return FileRefused(
            f"Slack refused {file.name}: {error}", reason="missing_scope", why=NO_SCOPE
        )
    if error in _TOO_LARGE_ERRORS:
        return FileRefused(f"Slack refused {file.name}: {error}", reason="too_large", why=TOO_LARGE)
    return ChannelError(
        f"Slack refused the upload of {file.name}: {error}",
        retryable=error not in PERMANENT_ERRORS,
    )


__all__ = ["NO_SCOPE", "SlackFiles"]
