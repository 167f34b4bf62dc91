"""discord.ui for prompts: a persistent view of buttons (custom ids carry prompt id + nonce,
so they keep working after a restart) and a modal for free-text answers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import discord

from bot.discord.markdown import markdown_to_discord
from bot.prompt_ui import action_id, answer_hint, button_labels, outcome_line
from host.runtime.prompt_record import Prompt

MODAL_PREFIX = "answer"
MODAL_INPUT = "text"
QUESTION_CHARS = 1500  # the question, hint and outcome stay within one 2,000-char message

ClickHandler = Callable[[discord.Interaction, str], Awaitable[None]]
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


class PromptView(discord.ui.View):
    """The buttons of one prompt; `timeout=None` and stable custom ids make it persistent."""

    def __init__(self, prompt: Prompt, on_click: ClickHandler, *, disabled: bool = False) -> None:
        super().__init__(timeout=None)
        for index, (choice, label) in enumerate(button_labels(prompt)):
            button: discord.ui.Button[PromptView] = discord.ui.Button(
                label=label,
                custom_id=action_id(prompt, choice),
                style=_style(prompt, index),
                disabled=disabled,
            )
            button.callback = self._callback(button.custom_id or "", on_click)  # type: ignore[method-assign,assignment]
            self.add_item(button)

    @staticmethod
    def _callback(
        custom_id: str, on_click: ClickHandler
    ) -> Callable[[discord.Interaction], Coroutine[Any, Any, None]]:
        async def clicked(interaction: discord.Interaction) -> None:
            await on_click(interaction, custom_id)

        return clicked


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
            placeholder=prompt.question[:100],
        )
        self.add_item(self.answer)

    async def on_submit(self, interaction: discord.Interaction) -> None:
        """Hand the typed answer to the adapter."""
        await self._on_submit(interaction, self._prompt_id, self._nonce, self.answer.value)
