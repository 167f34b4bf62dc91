"""How an unanswered prompt waits: the reminder at 80 % of its lifetime, and what its
deadline does (`deny`: it expires, failing closed; `hold`: it stays answerable, past due).

A held prompt is stored with no deadline (`expires_at` is +inf): every check that compares
the deadline (answers, waiters, typed replies, the expiry sweep) then treats it as live
without knowing about holds, and it stays `pending` until someone answers or `stop` cancels
it. When it was held is in its row (`held_at`) and its audit trail.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, tzinfo
from typing import Literal

from core.reader_time import reader_mark
from host.runtime.prompt_record import Prompt

OnExpiry = Literal["deny", "hold"]
ON_EXPIRY_CHOICES: tuple[OnExpiry, ...] = ("deny", "hold")
# The reminder comes when this share of the prompt's lifetime has passed.
REMINDER_SHARE = 0.8
NO_DEADLINE = math.inf

# The outcome line of a held prompt's message (its buttons stay).
HELD_OUTCOME = "⌛ Expired — still waiting (held)"
HELD_HINT = "the run waits until someone answers here (buttons or a reply) or types `stop`"


def is_held(prompt: Prompt) -> bool:
    """True for a prompt that passed its deadline under `hold` and still waits."""
    return prompt.state == "pending" and math.isinf(prompt.expires_at)


def remind_at(prompt: Prompt) -> float:
    """When the reminder is due: 80 % of the way from asking to the deadline (a held
    prompt's is past: it is due at once)."""
    if is_held(prompt):
        return prompt.created_at
    return prompt.created_at + REMINDER_SHARE * (prompt.expires_at - prompt.created_at)


def shown_time(at: float, zone: tzinfo = UTC) -> str:
    """`09:24 UTC` in `zone`, marked so each reader's client shows their own zone too."""
    when = datetime.fromtimestamp(at, zone)
    return f"{when:%H:%M} {when.tzname()}{reader_mark(when)}"


def held_line(who: str) -> str:
    """The hint under a held prompt (`who`: the display name of who may answer)."""
    return f"{HELD_OUTCOME} · {who} or an approver can still answer; {HELD_HINT}"


def reminder_text(
    prompt: Prompt,
    *,
    addressee: str,
    gist_text: str,
    short_id: str,
    now: float,
    on_expiry: OnExpiry,
    zone: tzinfo = UTC,
) -> str:
    """The reminder to `addressee` (a display name, never a mention): what waits, when it
    expires, and what the deadline then does."""
    head = f"⏰ {addressee}, a question still waits for your answer: “{gist_text}” ({short_id})."
    if is_held(prompt):
        return f"{head} It passed its deadline and is held: {HELD_HINT}."
    left = max(1, round((prompt.expires_at - now) / 60))
    when = f"It expires at {shown_time(prompt.expires_at, zone)} (in {left} min)"
    if on_expiry == "hold":
        then = "then it is held and the run keeps waiting until someone answers or types `stop`"
    elif prompt.kind == "approval":
        then = "unanswered, it then counts as denied"
    else:
        then = "unanswered, it then expires and the run goes on without your answer"
    return f"{head} {when}; {then}. Answer with the buttons above or reply in this thread."
