"""Slack interactivity: button clicks (block_actions) and modal submissions
(view_submission) answer prompts through the broker. Acks are immediate; the answering,
closing and notes run after, in the adapter's background tasks."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bot.channel import PromptAnswers
from bot.prompt_ui import Click, handle_click, handle_submission, parse_action_id
from bot.slack.background import Background
from bot.slack.blocks import MODAL_ACTION, MODAL_BLOCK
from bot.slack.prompts import SlackPromptMessages
from host.runtime.prompt_record import Prompt

log = logging.getLogger(__name__)

Ack = Callable[..., Awaitable[Any]]


class SlackInteractions:
    """bolt's action and view listeners for prompts, answering through `answers`."""

    def __init__(
        self, answers: PromptAnswers, messages: SlackPromptMessages, background: Background
    ) -> None:
        self._answers = answers
        self._messages = messages
        self._background = background

    async def on_action(self, ack: Ack, body: dict[str, Any], action: dict[str, Any]) -> None:
        """A button click."""
        # Validate and ack only: answering, closing and notes post to Slack, and the ack
        # must not wait on that (a 429 with Retry-After would push it past Slack's 3 s).
        await ack()
        parsed = parse_action_id(str(action.get("action_id", "")))
        if parsed is None:
            return
        self._background.spawn(self._clicked(body, *parsed), f"click:{parsed[0]}")

    async def _clicked(self, body: dict[str, Any], prompt_id: str, nonce: str, choice: str) -> None:
        user = str((body.get("user") or {}).get("id", ""))
        clicked = _clicked_message(body)
        click = Click(prompt_id, nonce, choice, user, clicked[1] if clicked else None)
        await handle_click(self._answers, click, _SlackClick(self._messages, body, user, clicked))

    async def on_view(self, ack: Ack, body: dict[str, Any], view: dict[str, Any]) -> None:
        """A submitted answer modal."""
        try:
            meta = json.loads(view.get("private_metadata") or "{}")
            value = str(view["state"]["values"][MODAL_BLOCK][MODAL_ACTION]["value"] or "")
        except (KeyError, TypeError, ValueError, AttributeError):
            log.warning("slack: malformed view_submission")
            await ack()
            return
        if not value.strip():
            # Validation belongs in the ack: the modal stays open and shows why.
            await ack(response_action="errors", errors={MODAL_BLOCK: "Please type an answer."})
            return
        await ack()
        user = str((body.get("user") or {}).get("id", ""))
        prompt_id, nonce = str(meta.get("prompt_id")), str(meta.get("nonce"))
        self._background.spawn(self._submitted(prompt_id, nonce, user, value), f"modal:{prompt_id}")

    async def _submitted(self, prompt_id: str, nonce: str, user: str, value: str) -> None:
        answers = self._answers

        async def refuse(text: str) -> None:
            prompt = await answers.get(prompt_id)
            if prompt is not None:
                await self._messages.notify_private(prompt.conversation, user, text)

        await handle_submission(answers, prompt_id, nonce, user, value, refuse)


@dataclass(frozen=True)
class _SlackClick:
    """Answers one block_actions click: ephemeral notes, the modal, closing the message."""

    messages: SlackPromptMessages
    body: dict[str, Any]
    user: str
    clicked: tuple[str, str] | None

    async def refuse(self, text: str) -> None:
        """An ephemeral note to the clicker, where the click happened."""
        body = self.body
        container = body.get("container") or {}
        channel = (body.get("channel") or {}).get("id") or container.get("channel_id")
        if not channel:
            return
        thread = (body.get("message") or {}).get("thread_ts")
        await self.messages.notify_in(channel, self.user, text, thread)

    async def open_answer_form(self, prompt: Prompt) -> None:
        """The free-text modal, opened with the click's trigger id."""
        await self.messages.open_answer_form(self.body.get("trigger_id"), prompt)

    async def close_clicked(self, prompt: Prompt) -> None:
        """Close the clicked message."""
        if self.clicked is not None:
            await self.messages.close_message(self.clicked[0], self.clicked[1], prompt)


def _clicked_message(body: dict[str, Any]) -> tuple[str, str] | None:
    """(channel, ts) of the message whose button was clicked, from the block_actions body."""
    container = body.get("container") or {}
    channel = (body.get("channel") or {}).get("id") or container.get("channel_id")
    ts = (body.get("message") or {}).get("ts") or container.get("message_ts")
    return (str(channel), str(ts)) if channel and ts else None
