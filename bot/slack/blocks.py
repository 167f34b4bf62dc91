"""Block Kit for prompts: buttons carrying prompt id + nonce, a modal for free-text answers."""

from __future__ import annotations

import json
from typing import Any

from host.prompt_model import Prompt

ACTION_PREFIX = "prompt"
MODAL_CALLBACK = "raven_prompt_answer"
MODAL_BLOCK = "answer"
MODAL_ACTION = "text"
MAX_BUTTONS = 5


def action_id(prompt: Prompt, choice: str) -> str:
    """`prompt:<id>:<nonce>:<choice>` — choice is an option index or `text` (modal)."""
    return f"{ACTION_PREFIX}:{prompt.id}:{prompt.nonce}:{choice}"


def parse_action_id(value: str) -> tuple[str, str, str] | None:
    """(prompt id, nonce, choice) from an action id, or None when it is not ours."""
    parts = value.split(":")
    if len(parts) != 4 or parts[0] != ACTION_PREFIX:
        return None
    return parts[1], parts[2], parts[3]


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:2900]}}


def _context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text[:2900]}]}


def prompt_blocks(prompt: Prompt, question_mrkdwn: str) -> list[dict[str, Any]]:
    """The message of a pending prompt: question, buttons, who may answer and until when."""
    buttons: list[dict[str, Any]] = []
    if prompt.kind == "free_text":
        buttons.append(
            {
                "type": "button",
                "action_id": action_id(prompt, "text"),
                "text": {"type": "plain_text", "text": "Answer…"},
                "value": "text",
            }
        )
    else:
        for index, option in enumerate(prompt.options[:MAX_BUTTONS]):
            button: dict[str, Any] = {
                "type": "button",
                "action_id": action_id(prompt, str(index)),
                "text": {"type": "plain_text", "text": option[:75]},
                "value": option[:2000],
            }
            if prompt.kind == "approval":
                button["style"] = "primary" if index == 0 else "danger"
            buttons.append(button)
    expires = int(prompt.expires_at)
    who = f"<@{prompt.requester}>"
    return [
        _section(question_mrkdwn),
        {"type": "actions", "block_id": f"prompt-{prompt.id}", "elements": buttons},
        _context(
            f"Only {who} or an approver can answer · expires "
            f"<!date^{expires}^{{time}}|in a while> · or reply in this thread with "
            + ("your answer" if prompt.kind == "free_text" else "the option number")
        ),
    ]


def closed_blocks(prompt: Prompt, question_mrkdwn: str) -> list[dict[str, Any]]:
    """The same message once decided: no buttons, the outcome and who decided."""
    if prompt.state == "answered":
        icon = "✅" if prompt.answer != "Deny" else "🚫"
        outcome = f"{icon} *{prompt.answer}* — answered by <@{prompt.answered_by}>"
    elif prompt.state == "expired":
        outcome = "⌛ Expired without an answer" + (
            " (denied)" if prompt.kind == "approval" else ""
        )
    else:
        outcome = "⏹️ Cancelled"
    return [_section(question_mrkdwn), _context(outcome)]


def closed_text(prompt: Prompt) -> str:
    """Plain-text fallback of a decided prompt (notifications, screen readers)."""
    if prompt.state == "answered":
        return f"{prompt.question[:200]} — {prompt.answer} (by {prompt.answered_by})"
    return f"{prompt.question[:200]} — {prompt.state}"


def answer_modal(prompt: Prompt, question_text: str) -> dict[str, Any]:
    """The modal that collects a free-text answer (view_submission comes back to us)."""
    return {
        "type": "modal",
        "callback_id": MODAL_CALLBACK,
        "private_metadata": json.dumps({"prompt_id": prompt.id, "nonce": prompt.nonce}),
        "title": {"type": "plain_text", "text": "Answer raven"},
        "submit": {"type": "plain_text", "text": "Send"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            _section(question_text),
            {
                "type": "input",
                "block_id": MODAL_BLOCK,
                "label": {"type": "plain_text", "text": "Your answer"},
                "element": {
                    "type": "plain_text_input",
                    "action_id": MODAL_ACTION,
                    "multiline": True,
                    "max_length": 3000,
                },
            },
        ],
    }
