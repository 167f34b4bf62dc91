"""discord.ui for prompts: buttons whose custom ids carry prompt id, nonce and choice, so
discord.py rebuilds them from any click (a `DynamicItem`: no per-message registration, and
they keep working after a restart), and a modal for free-text answers."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import discord

from bot.discord.markdown import markdown_to_discord
from bot.prompt_ui import (
    ACTION_PREFIX,
    Click,
    action_id,
    answer_hint,
    button_labels,
    outcome_line,
)
from core.reader_time import drop_reader_times
from host.runtime.prompt_record import Prompt

log = logging.getLogger(__name__)

MODAL_PREFIX = "answer"
MODAL_INPUT = "text"
QUESTION_CHARS = 1500  # the question, hint and outcome stay within one 2,000-char message
# `prompt:<id>:<nonce>:<choice>` (bot.prompt_ui.action_id); discord.py full-matches it.
BUTTON_TEMPLATE = (
    re.escape(ACTION_PREFIX) + r":(?P<prompt_id>[^:]+):(?P<nonce>[^:]+):(?P<choice>[^:]+)"
)

SubmitHandler = Callable[[discord.Interaction, str, str, str], Awaitable[None]]


def _question(prompt: Prompt) -> str:
    text = markdown_to_discord(prompt.question)
    return text if len(text) <= QUESTION_CHARS else text[: QUESTION_CHARS - 1] + "…"


def _name(name: str) -> str:
    """A person's (cleaned) display name as Discord Markdown: plain text, never a mention."""
    return discord.utils.escape_mentions(discord.utils.escape_markdown(name))


def prompt_content(prompt: Prompt, requester: str) -> str:
    """The message of a pending prompt: question, then who may answer (`requester`, a
    display name) and until when."""
    hint = answer_hint(prompt, _name(requester), f"<t:{int(prompt.expires_at)}:R>")
    return f"{_question(prompt)}\n-# {hint}"


def closed_content(prompt: Prompt, decider: str) -> str:
    """The same message once decided: the outcome and who decided (`decider`, a display
    name)."""
    return f"{_question(prompt)}\n{outcome_line(prompt, _name(decider), lambda s: f'**{s}**')}"


def _style(prompt: Prompt, index: int) -> discord.ButtonStyle:
    if prompt.kind == "approval":
        return discord.ButtonStyle.success if index == 0 else discord.ButtonStyle.danger
    return (
        discord.ButtonStyle.primary if prompt.kind == "free_text" else discord.ButtonStyle.secondary
    )


class PromptClient(discord.Client):
    """A client that hears clicks on prompt buttons. discord.py builds a fresh
    `PromptButton` for each click, so the button reaches the bot through the client."""

    async def prompt_clicked(self, interaction: discord.Interaction, click: Click) -> None:
        """Answer a click on a prompt button (acknowledge it within Discord's 3 s)."""
        raise NotImplementedError


class PromptButton(
    discord.ui.DynamicItem[discord.ui.Button[discord.ui.View]], template=BUTTON_TEMPLATE
):
    """One choice of one prompt. Register the class once (`Client.add_dynamic_items`): every
    click whose custom id matches the template reaches `callback`, whether or not this
    process sent the message, and whether or not the prompt is still pending."""

    def __init__(
        self,
        custom_id: str,
        *,
        label: str | None = None,
        style: discord.ButtonStyle = discord.ButtonStyle.secondary,
        disabled: bool = False,
    ) -> None:
        super().__init__(
            discord.ui.Button(custom_id=custom_id, label=label, style=style, disabled=disabled)
        )
        match = self.template.fullmatch(custom_id)
        assert match is not None  # DynamicItem checked it against the template already
        self.prompt_id: str = match["prompt_id"]
        self.nonce: str = match["nonce"]
        self.choice: str = match["choice"]

    @classmethod
    async def from_custom_id(
        cls,
        interaction: discord.Interaction,
        item: discord.ui.Item[Any],
        match: re.Match[str],
        /,
    ) -> PromptButton:
        """The button a click came from, rebuilt from its custom id."""
        return cls(match.string)

    async def callback(self, interaction: discord.Interaction) -> None:
        """Hand the click to the client (which knows the prompts)."""
        client = interaction.client
        if not isinstance(client, PromptClient):
            log.warning("discord: a prompt click reached a client without prompts; ignored")
            return
        message = interaction.message
        click = Click(
            self.prompt_id,
            self.nonce,
            self.choice,
            str(interaction.user.id),
            str(message.id) if message is not None else None,
        )
        await client.prompt_clicked(interaction, click)


class PromptView(discord.ui.View):
    """The buttons of one prompt; `timeout=None` and dynamic buttons make it persistent."""

    def __init__(self, prompt: Prompt, *, disabled: bool = False) -> None:
        super().__init__(timeout=None)
        for index, (choice, label) in enumerate(button_labels(prompt)):
            self.add_item(
                PromptButton(
                    action_id(prompt, choice),
                    label=label,
                    style=_style(prompt, index),
                    disabled=disabled,
                )
            )


class AnswerModal(discord.ui.Modal):
    """Collects a free-text answer; its custom id names the prompt, so it survives restarts."""

    def __init__(self, prompt: Prompt, on_submit: SubmitHandler) -> None:
        super().__init__(
            title="Answer raven",
            timeout=None,
            custom_id=f"{MODAL_PREFIX}:{prompt.id}:{prompt.nonce}",
        )
        self._prompt_id = prompt.id
        self._nonce = prompt.nonce
        self._on_submit = on_submit
        self.answer: discord.ui.TextInput[AnswerModal] = discord.ui.TextInput(
            label="Your answer",
            custom_id=MODAL_INPUT,
            style=discord.TextStyle.paragraph,
            max_length=3000,
            required=True,
            placeholder=drop_reader_times(prompt.question)[:100],
        )
        self.add_item(self.answer)

    async def on_submit(self, interaction: discord.Interaction) -> None:
        """Hand the typed answer to the adapter."""
        await self._on_submit(interaction, self._prompt_id, self._nonce, self.answer.value)
