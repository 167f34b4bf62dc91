"""Prompts on Discord: shown with buttons (or an `Answer…` button and its modal), closed
with the outcome, and answered from clicks and form submissions, each once.

A prompt is posted with `channel.send` and edited with the channel's message edit (PATCH
`/channels/{id}/messages/{id}` with the bot token), never through an interaction's
webhook token (which dies 15 minutes after the click): a prompt that expires or is held
hours later is still edited.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import discord

from bot.discord.keys import PLATFORM
from bot.discord.link import DiscordLink, channel_error
from bot.discord.names import DisplayNames
from bot.discord.notes import HeldInteractions, followup
from bot.discord.threads import Threads, partial_message
from bot.discord.views import AnswerModal, PromptView, closed_content, prompt_content
from bot.prompt_ui import TEXT_CHOICE, Click, handle_click, handle_submission
from host.prompts.waiting import held_line, is_held
from host.runtime.prompt_record import Prompt

log = logging.getLogger(__name__)


class PromptMessages:
    """Shows and closes prompt messages, and answers what people do with them."""

    def __init__(
        self,
        link: DiscordLink,
        threads: Threads,
        names: DisplayNames,
        held: HeldInteractions,
    ) -> None:
        self._link = link
        self._threads = threads
        self._names = names
        self._held = held

    # -- the message -----------------------------------------------------------------------

    async def show(self, prompt: Prompt) -> str:
        """Buttons (Approve/Deny or options) or an `Answer…` button that opens a modal."""
        try:
            channel = await self._threads.target(prompt.conversation)
            sent = await channel.send(
                await self._pending_content(prompt),
                view=PromptView(prompt),
                # The requester is named, not mentioned: nothing in a prompt pings.
                allowed_mentions=discord.AllowedMentions.none(),
            )
        except discord.HTTPException as exc:
            raise channel_error(exc) from exc
        if prompt.kind == "free_text":
            self._link.client.add_view(AnswerModal(prompt, self.submitted))
        return str(sent.id)

    async def close(self, prompt: Prompt) -> None:
        """Show the outcome and who decided; the buttons stay, disabled. A held prompt's
        buttons stay live, and its message says it is held."""
        if not prompt.message_id:
            return
        if not is_held(prompt):
            await self.close_message(prompt, prompt.message_id)
            return
        try:
            channel = await self._threads.target(prompt.conversation)
            await partial_message(channel, prompt.message_id).edit(
                content=await self._pending_content(prompt),
                view=PromptView(prompt),
                allowed_mentions=discord.AllowedMentions.none(),
            )
        except discord.HTTPException as exc:
            raise channel_error(exc) from exc

    async def _pending_content(self, prompt: Prompt) -> str:
        """Question, then who may answer until when (or that it is held)."""
        requester = await self._names.shown(prompt.requester)
        if not is_held(prompt):
            return prompt_content(prompt, requester)
        # Held: no deadline to show; the hint line says what waits instead.
        shown = prompt_content(replace(prompt, expires_at=prompt.created_at), requester)
        question = shown.rsplit("\n-# ", 1)[0]
        # As views.py names people: plain text, never a mention.
        name = discord.utils.escape_mentions(discord.utils.escape_markdown(requester))
        return f"{question}\n-# {held_line(name)}"

    async def close_message(self, prompt: Prompt, message_id: str) -> None:
        """Close message `message_id` as showing `prompt` decided."""
        closed = replace(prompt, message_id=message_id)
        decider = await self._names.shown(prompt.answered_by)
        try:
            channel = await self._threads.target(prompt.conversation)
            await partial_message(channel, message_id).edit(
                content=closed_content(closed, decider),
                view=PromptView(closed, disabled=True),
                allowed_mentions=discord.AllowedMentions.none(),
            )
        except discord.HTTPException as exc:
            raise channel_error(exc) from exc

    async def restore_forms(self) -> None:
        """Forms of pending free-text prompts take submissions again after a restart
        (buttons need nothing: `PromptButton` matches every click by its custom id)."""
        restored = 0
        for prompt in await self._link.prompts.pending():
            if prompt.conversation.platform != PLATFORM or not prompt.message_id:
                continue
            if prompt.kind == "free_text":
                self._link.client.add_view(AnswerModal(prompt, self.submitted))
                restored += 1
        if restored:
            log.info("discord: %d pending answer form(s) usable again", restored)

    # -- what people do ----------------------------------------------------------------------

    async def clicked(self, interaction: discord.Interaction, click: Click) -> None:
        """A click on a prompt button, live or from before a restart, pending or decided."""
        if not await self._first(interaction):
            return
        if click.choice != TEXT_CHOICE:
            # Acknowledge within Discord's 3 s first; a modal must be the first response.
            await interaction.response.defer()
        with self._held.answering(interaction):
            await handle_click(self._link.prompts, click, _ClickReplies(self, interaction))

    async def submitted(
        self, interaction: discord.Interaction, prompt_id: str, nonce: str, value: str
    ) -> None:
        """A free-text answer from the modal."""
        if not await self._first(interaction):
            return
        # From a prompt's message: a silent deferred update. Without one (a form opened
        # before a restart), a private "thinking" reply that the outcome then fills in.
        thinking = interaction.message is None
        await interaction.response.defer(ephemeral=True, thinking=thinking)
        with self._held.answering(interaction):
            outcome = await handle_submission(
                self._link.prompts,
                prompt_id,
                nonce,
                str(interaction.user.id),
                value,
                lambda text: followup(interaction, text),
            )
        if thinking and outcome.status == "accepted":
            await followup(interaction, "Thanks, your answer was recorded.")

    async def _first(self, interaction: discord.Interaction) -> bool:
        """False for an interaction delivered again (a gateway replay): answered once."""
        return await self._link.inbox.claim(PLATFORM, f"interaction:{interaction.id}")


@dataclass(frozen=True)
class _ClickReplies:
    """Answers one button click: ephemeral follow-ups, the modal, closing the message."""

    prompts: PromptMessages
    interaction: discord.Interaction

    async def refuse(self, text: str) -> None:
        """An ephemeral note to the clicker."""
        await followup(self.interaction, text)

    async def open_answer_form(self, prompt: Prompt) -> None:
        """The free-text modal (the click's first response)."""
        await self.interaction.response.send_modal(AnswerModal(prompt, self.prompts.submitted))

    async def close_clicked(self, prompt: Prompt) -> None:
        """Close the clicked message."""
        if self.interaction.message is not None:
            await self.prompts.close_message(prompt, str(self.interaction.message.id))
