"""What every platform's prompt widgets share: the id a button carries, the hint under a
pending prompt, the outcome line of a decided one, and what a click or a submitted answer
does. Platforms supply only how to show things (Block Kit, discord.ui)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from bot.channel import PromptAnswers
from bot.render.shorten import shortened
from core.reader_time import drop_reader_times
from host.prompts.broker import AnswerOutcome
from host.runtime.prompt_record import Prompt

ACTION_PREFIX = "prompt"
TEXT_CHOICE = "text"  # the button that opens the free-text form
MAX_BUTTONS = 5
UNKNOWN = "That request is unknown or no longer valid."
ALREADY_CLOSED = "That question was already answered or closed."


def action_id(prompt: Prompt, choice: str) -> str:
    """`prompt:<id>:<nonce>:<choice>`: choice is an option index or `text` (the form)."""
    return f"{ACTION_PREFIX}:{prompt.id}:{prompt.nonce}:{choice}"


def parse_action_id(value: str) -> tuple[str, str, str] | None:
    """(prompt id, nonce, choice) from an action id, or None when it is not ours."""
    parts = value.split(":")
    if len(parts) != 4 or parts[0] != ACTION_PREFIX:
        return None
    return parts[1], parts[2], parts[3]


def button_labels(prompt: Prompt) -> list[tuple[str, str]]:
    """(choice, label) of each button: the options, or one `Answer…` for free text."""
    if prompt.kind == "free_text":
        return [(TEXT_CHOICE, "Answer…")]
    return [(str(i), option[:75]) for i, option in enumerate(prompt.options[:MAX_BUTTONS])]


def answer_hint(prompt: Prompt, who: str, expires: str) -> str:
    """The line under a pending prompt: who may answer, until when, and the typed fallback."""
    fallback = "your answer" if prompt.kind == "free_text" else "the option number"
    return (
        f"Only {who} or an approver can answer · expires {expires} · or reply in this "
        f"thread with {fallback}"
    )


def outcome_line(prompt: Prompt, decider: str, bold: Callable[[str], str]) -> str:
    """The line a decided prompt shows instead of its buttons."""
    if prompt.state == "answered":
        icon = "✅" if prompt.answer != "Deny" else "🚫"
        return f"{icon} {bold(prompt.answer or '')} — answered by {decider}"
    if prompt.state == "expired":
        return "⌛ Expired without an answer" + (" (denied)" if prompt.kind == "approval" else "")
    return "⏹️ Cancelled"


def closed_text(prompt: Prompt, decider: str) -> str:
    """Plain-text form of a decided prompt (notifications, screen readers); `decider` is who
    answered, by display name."""
    question = shortened(drop_reader_times(prompt.question), 200)
    if prompt.state == "answered":
        return f"{question} — {prompt.answer} (by {decider})"
    return f"{question} — {prompt.state}"


@dataclass(frozen=True)
class Click:
    """A click on one of our buttons, by `user_id`, on message `message_id` if known."""

    prompt_id: str
    nonce: str
    choice: str
    user_id: str
    message_id: str | None = None


class ClickSurface(Protocol):
    """How the platform answers the person who clicked."""

    async def refuse(self, text: str) -> None:
        """Tell the clicker alone (ephemeral)."""
        ...

    async def open_answer_form(self, prompt: Prompt) -> None:
        """Open the free-text form (a modal)."""
        ...

    async def close_clicked(self, prompt: Prompt) -> None:
        """Show the decided outcome on the message the click came from."""
        ...


async def handle_click(prompts: PromptAnswers, click: Click, ui: ClickSurface) -> None:
    """Answer the prompt the button belongs to, or say why not (to the clicker only)."""
    prompt = await prompts.get(click.prompt_id)
    if prompt is None or prompt.nonce != click.nonce:
        await ui.refuse(UNKNOWN)
        return
    if click.choice == TEXT_CHOICE:
        if prompt.state != "pending":
            await ui.refuse(ALREADY_CLOSED)
            return
        await ui.open_answer_form(prompt)
        return
    try:
        answer = prompt.options[int(click.choice)]
    except (ValueError, IndexError):
        return
    outcome = await prompts.answer(
        click.prompt_id, click.nonce, click.user_id, answer, message_id=click.message_id
    )
    decided = outcome.prompt
    if (
        click.message_id is not None
        and decided is not None
        and decided.state != "pending"
        and decided.message_id != click.message_id
    ):
        # A click on a decided prompt whose buttons are still live (its message id was never
        # recorded): close the message the click came from.
        await ui.close_clicked(decided)
    if outcome.status != "accepted" and not outcome.notified:
        await ui.refuse(outcome.message)


async def handle_submission(
    prompts: PromptAnswers,
    prompt_id: str,
    nonce: str,
    user_id: str,
    value: str,
    refuse: Callable[[str], Awaitable[None]],
) -> AnswerOutcome:
    """Answer a prompt from its free-text form; a refusal goes to the submitter alone."""
    outcome = await prompts.answer(prompt_id, nonce, user_id, value)
    if outcome.status != "accepted" and not outcome.notified:
        await refuse(outcome.message)
    return outcome
