"""Held prompts on the console: shown without a deadline, and said to be still waiting
(a typed answer still answers them) instead of closed."""

from __future__ import annotations

import io
import math
from dataclasses import replace

from bot.console.adapter import ConsoleAdapter
from core.ids import ConversationRef
from host.runtime.prompt_record import Prompt

PROMPT = Prompt(
    id="abcdef1234",
    nonce="n",
    kind="approval",
    question="Deploy?",
    options=("Approve", "Deny"),
    requester="me",
    allowed_responders=("me",),
    conversation=ConversationRef("console", "local", "console", "t1"),
    created_at=1_000.0,
    expires_at=2_800.0,
)


async def test_a_held_prompt_is_shown_and_kept_waiting() -> None:
    out = io.StringIO()
    console = ConsoleAdapter(stdin=io.StringIO(""), stdout=out)
    held = replace(PROMPT, expires_at=math.inf)
    await console.show_prompt(held)  # after a restart: no deadline to print
    assert "(prompt abcdef12, held past its deadline)" in out.getvalue()
    await console.close_prompt(held)
    assert "Prompt `abcdef12` expired — still waiting (held)" in out.getvalue()
    assert "type your answer, or `stop`" in out.getvalue()


async def test_an_expired_prompt_is_still_said_to_have_expired() -> None:
    out = io.StringIO()
    console = ConsoleAdapter(stdin=io.StringIO(""), stdout=out)
    await console.show_prompt(PROMPT)
    assert "expires 00:46 UTC" in out.getvalue()
    await console.close_prompt(replace(PROMPT, state="expired"))
    assert "Prompt `abcdef12` expired." in out.getvalue()
    assert "held" not in out.getvalue()
