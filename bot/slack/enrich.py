"""Before a turn (not at ingress, which must ack at once): display names for mentions, the
thread re-read for context, shared files downloaded into the conversation's workspace."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from slack_sdk.errors import SlackApiError

from bot.access import AccessPolicy
from bot.attachments import attachment_path, download, files_note
from bot.slack.config import SlackConfig
from bot.slack.history import SlackHistory
from bot.slack.identity import SlackIdentity
from bot.slack.normalize import mentioned_users, mentions, plain_text
from core.ids import ConversationRef
from host.runtime.author_labels import context_line, display_name, left_out_note
from host.runtime.messages import Attachment, InboundMessage

log = logging.getLogger(__name__)


class SlackEnricher:
    """Adds Slack context to an inbound message just before its turn."""

    def __init__(
        self,
        config: SlackConfig,
        policy: AccessPolicy,
        workspace: Callable[[ConversationRef], Path],
        identity: SlackIdentity,
        history: SlackHistory,
    ) -> None:
        self._config = config
        self._policy = policy
        self._workspace = workspace
        self._identity = identity
        self._history = history

    async def enrich(self, msg: InboundMessage) -> InboundMessage:
        """Names for mentions, the thread re-read, shared files downloaded."""
        author_name = msg.author_name
        if author_name == msg.author_id:
            author_name = await self._identity.name(msg.author_id)
        text = plain_text(msg.text, await self._names(msg.text))
        context = ""
        if msg.reread_thread:
            context = await self._thread_context(msg)
        attachments = [await self._download(msg, a) for a in msg.attachments]
        if attachments:
            text = f"{text}\n\n{files_note(attachments)}"
        return msg.model_copy(
            update={
                "text": text,
                "context": context,
                "attachments": tuple(attachments),
                "author_name": author_name,
            }
        )

    async def _names(self, text: str) -> dict[str, str]:
        """Display names of the people `text` mentions."""
        return {
            uid: display_name(await self._identity.name(uid)) for uid in set(mentioned_users(text))
        }

    async def _thread_context(self, msg: InboundMessage) -> str:
        """Recent messages by other people in the thread, oldest first, each under its
        author's label; messages by people the access policy refuses are left out."""
        limit = self._config.thread_context_messages
        if limit <= 0:
            return ""
        try:
            thread = await self._history.thread(msg.channel, msg.thread)
        except SlackApiError as exc:
            log.warning("slack: conversations.replies failed: %s", exc)
            return ""
        bot_user_id = self._identity.bot_user_id
        lines = []
        refused = 0
        for item in thread[-(limit + 1) :]:
            if item.get("ts") == msg.message_id or item.get("bot_id"):
                continue
            user = str(item.get("user", "?"))
            if user == bot_user_id:
                continue
            if self._policy.refusal(user, msg.channel, is_dm=msg.is_dm) is not None:
                refused += 1  # someone refused here must not speak to the bot through others
                continue
            body = str(item.get("text", ""))
            if mentions(body, bot_user_id):
                continue  # messages that addressed the bot were turns: already in history
            names = await self._names(body)
            author = await self._identity.name(user)
            lines.append(context_line(author, user, plain_text(body, names)))
        lines = lines[-limit:]
        if refused:
            lines.append(left_out_note(refused))
        return "\n".join(lines)

    async def _download(self, msg: InboundMessage, attachment: Attachment) -> Attachment:
        target = attachment_path(self._workspace(msg.conversation), msg.message_id, attachment.name)
        return await download(
            attachment,
            target,
            cap=self._config.attachment_max_bytes,
            headers={"Authorization": f"Bearer {self._config.bot_token}"},
            platform="slack",
        )
