"""Block Kit for prompts: buttons carrying prompt id + nonce, a modal for free-text answers."""

from __future__ import annotations

import json
from typing import Any

from bot.prompt_ui import action_id, answer_hint, button_labels, outcome_line
from bot.render.shorten import shortened
from host.runtime.prompt_record import Prompt

MODAL_CALLBACK = "raven_prompt_answer"
MODAL_BLOCK = "answer"
MODAL_ACTION = "text"


# Below Block Kit's 3,000-character cap on a text object.
BLOCK_TEXT_CHARS = 2900


def _section(text: str) -> dict[str, Any]:
    return {
        "type": "section",
        "text": {"type": "mrkdwn", "text": shortened(text, BLOCK_TEXT_CHARS)},
    }


def _context(text: str) -> dict[str, Any]:
    text = shortened(text, BLOCK_TEXT_CHARS)
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}


def _name(name: str) -> str:
    """A person's (cleaned) display name as mrkdwn text: plain, never a `<@U…>` mention,
    which would ping them."""
    return name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def prompt_blocks(prompt: Prompt, question_mrkdwn: str, requester: str) -> list[dict[str, Any]]:
    """The message of a pending prompt: question, buttons, who may answer (`requester`, a
    display name) and until when."""
    buttons: list[dict[str, Any]] = []
    for index, (choice, label) in enumerate(button_labels(prompt)):
        button: dict[str, Any] = {
            "type": "button",
            "action_id": action_id(prompt, choice),
            "text": {"type": "plain_text", "text": label},
            "value": choice,
        }
        if prompt.kind == "approval":
            button["style"] = "primary" if index == 0 else "danger"
        buttons.append(button)
    expires = f"<!date^{int(prompt.expires_at)}^{{time}}|in a while>"
    return [
        _section(question_mrkdwn),
        {"type": "actions", "block_id": f"prompt-{prompt.id}", "elements": buttons},
        _context(answer_hint(prompt, _name(requester), expires)),
    ]


def closed_blocks(prompt: Prompt, question_mrkdwn: str, decider: str) -> list[dict[str, Any]]:
    """The same message once decided: no buttons, the outcome and who decided (`decider`, a
    display name)."""
    outcome = outcome_line(prompt, _name(decider), lambda s: f"*{s}*")
    return [_section(question_mrkdwn), _context(outcome)]


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
