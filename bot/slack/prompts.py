"""Prompts as Slack messages: Block Kit buttons, the closed outcome, the answer modal.

Every edit is `chat.update` by the message's ts with the bot token: no interaction token
(a click's `response_url` lasts 30 minutes and 5 uses), so a prompt that expires or is held
hours after it was shown is still edited.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bot.prompt_ui import closed_text
from bot.render.shorten import shortened
from bot.slack.blocks import answer_modal, closed_blocks, prompt_blocks
from bot.slack.identity import SlackIdentity
from bot.slack.mrkdwn import markdown_to_mrkdwn
from bot.slack.outgoing import SlackOutgoing, thread_ts
from core.ids import ConversationRef
from core.reader_time import drop_reader_times
from host.prompts.waiting import held_line, is_held
from host.runtime.prompt_record import Prompt

# A prompt's notification text (the fallback of its blocks), at most.
FALLBACK_CHARS = 300


class SlackPromptMessages:
    """Shows, closes and answers prompts (the `PromptSurface` side of the adapter)."""

    def __init__(self, outgoing: SlackOutgoing, identity: SlackIdentity) -> None:
        self._outgoing = outgoing
        self._identity = identity

    async def show(self, prompt: Prompt) -> str:
        """Buttons (Approve/Deny or options) or an `Answer…` button that opens a modal."""
        resp = await self._outgoing.call(
            self._outgoing.client.chat_postMessage,
            channel=prompt.conversation.channel,
            thread_ts=thread_ts(prompt.conversation),
            # The notification's fallback: no per-reader times there.
            text=shortened(drop_reader_times(prompt.question), FALLBACK_CHARS),
            blocks=await self._pending_blocks(prompt),
        )
        return str(resp["ts"])

    async def close(self, prompt: Prompt) -> None:
        """Remove the buttons and show the outcome and who decided; a held prompt keeps its
        buttons and says it is held."""
        if not prompt.message_id:
            return
        if is_held(prompt):
            await self._outgoing.call(
                self._outgoing.client.chat_update,
                channel=prompt.conversation.channel,
                ts=prompt.message_id,
                text=shortened(drop_reader_times(prompt.question), FALLBACK_CHARS),
                blocks=await self._pending_blocks(prompt),
            )
            return
        await self.close_message(prompt.conversation.channel, prompt.message_id, prompt)

    async def _pending_blocks(self, prompt: Prompt) -> list[dict[str, Any]]:
        """Question and buttons, then who may answer until when (or that it is held)."""
        question = markdown_to_mrkdwn(prompt.question)
        requester = await self._identity.shown(prompt.requester)
        if not is_held(prompt):
            return prompt_blocks(prompt, question, requester)
        # Held: no deadline to show; the hint under the buttons says what waits instead.
        question_and_buttons = prompt_blocks(
            replace(prompt, expires_at=prompt.created_at), question, requester
        )[:-1]
        # Display names come cleaned of `<`/`>`; `&` is the one mrkdwn escape left.
        hint = {"type": "mrkdwn", "text": held_line(requester.replace("&", "&amp;"))}
        return [*question_and_buttons, {"type": "context", "elements": [hint]}]

    async def close_message(self, channel: str, ts: str, prompt: Prompt) -> None:
        """Close the prompt message `ts` in `channel` (the one shown, or the one clicked)."""
        closed = replace(prompt, message_id=ts)
        decider = await self._identity.shown(prompt.answered_by)
        await self._outgoing.call(
            self._outgoing.client.chat_update,
            channel=channel,
            ts=ts,
            text=closed_text(closed, decider),
            blocks=closed_blocks(closed, markdown_to_mrkdwn(prompt.question), decider),
        )

    async def open_answer_form(self, trigger_id: str | None, prompt: Prompt) -> None:
        """The free-text modal, opened with a click's trigger id."""
        await self._outgoing.call(
            self._outgoing.client.views_open,
            trigger_id=trigger_id,
            view=answer_modal(prompt, markdown_to_mrkdwn(prompt.question)),
        )

    async def notify_private(self, conv: ConversationRef, user_id: str, text: str) -> None:
        """An ephemeral message only `user_id` sees."""
        await self.notify_in(conv.channel, user_id, text, thread_ts(conv))

    async def notify_in(self, channel: str, user_id: str, text: str, thread: str | None) -> None:
        """An ephemeral message only `user_id` sees, in `thread` of `channel`."""
        await self._outgoing.ephemeral(channel, user_id, text, thread)
