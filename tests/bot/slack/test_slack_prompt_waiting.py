"""Prompts that wait well on Slack, through the assembled bot and the loopback fake: the
reminder before the deadline, the expired message updated to its outcome (denied, or held
with live buttons) by `chat.update` with the bot token, never a click's `response_url`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import db_rows, eventually, write_agents
from tests.slack_harness import SlackBot, buttons, slack_bot

AGENTS = """
[agents.echo]
backend = "cli"
description = "Echoes its prompt (test agent)."
command = ["cat"]
"""
PLAN = "a: echo: hi\nconfirm"
REMINDER = "⏰ alice, a question still waits for your answer"


async def _plan(bot: SlackBot) -> tuple[str, dict[str, Any], str]:
    """Mention with a plan that needs approval; (thread, prompt post, prompt ts)."""
    ts, _ = await bot.mention(PLAN)
    await eventually(lambda: any(p.get("blocks") for p in bot.posts(ts)))
    call = next(
        c
        for c in bot.fake.calls_to("chat.postMessage")
        if c.ok and c.args.get("blocks") and c.args.get("thread_ts") == ts
    )
    return ts, call.args, str(call.response["ts"])


def _updates(bot: SlackBot, ts: str) -> list[list[dict[str, Any]]]:
    """The blocks of each `chat.update` of message `ts`, oldest first."""
    blocks = [c.args.get("blocks") for c in bot.fake.calls_to("chat.update") if c.args["ts"] == ts]
    return [json.loads(b) if isinstance(b, str) else list(b or []) for b in blocks]


def _context(blocks: list[dict[str, Any]]) -> str:
    return " ".join(e["text"] for b in blocks if b["type"] == "context" for e in b["elements"])


async def test_an_expired_approval_is_updated_to_denied_after_a_reminder(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, AGENTS)
    async with slack_bot(monkeypatch, env={"RAVEN_PROMPT_EXPIRY_SECONDS": "1.5"}) as bot:
        thread, _, prompt_ts = await _plan(bot)

        def texts() -> list[str]:
            return [str(p["text"]) for p in bot.posts(thread)]

        await eventually(lambda: any(t.startswith(REMINDER) for t in texts()))
        await eventually(lambda: any("not approved (expired" in t for t in texts()))
        (reminder,) = [t for t in texts() if t.startswith(REMINDER)]
        assert "counts as denied" in reminder and "<@U1>" not in reminder
        assert "<!date^" in reminder  # the deadline in each reader's own zone
        updates = _updates(bot, prompt_ts)
        assert updates, "the prompt message was not updated"
        final = updates[-1]
        assert not [b for b in final if b["type"] == "actions"]  # no buttons left
        assert "Expired" in _context(final) and "(denied)" in _context(final)
        assert bot.fake.response_url_posts == []  # no interaction token used
        await bot.settle(thread)
        assert db_rows(bot.runtime.settings.home, "SELECT COUNT(*) FROM graph_runs") == [(0,)]


async def test_a_held_approval_keeps_live_buttons_and_still_runs_when_approved(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, AGENTS)
    env = {"RAVEN_PROMPT_EXPIRY_SECONDS": "1", "RAVEN_PROMPT_ON_EXPIRY": "hold"}
    async with slack_bot(monkeypatch, env=env) as bot:
        thread, post, prompt_ts = await _plan(bot)
        await eventually(
            lambda: any("still waiting (held)" in _context(u) for u in _updates(bot, prompt_ts))
        )
        (held,) = _updates(bot, prompt_ts)
        assert buttons({"blocks": held}) == buttons(post)  # the same live buttons
        assert "alice or an approver can still answer" in _context(held)
        assert "<!date^" not in _context(held)  # no deadline left to show
        assert not any("not approved" in str(p["text"]) for p in bot.posts(thread))
        status = await bot.runtime.broker.status(bot.conversation(thread))
        assert "held past its deadline" in status and "from alice since" in status

        await bot.click(buttons(post)[0], "U1", thread, prompt_ts)
        await eventually(
            lambda: any("completed" in str(p["text"]) for p in bot.posts(thread)),
            what="the held plan to run once approved",
        )
        answered = _updates(bot, prompt_ts)[-1]
        assert not [b for b in answered if b["type"] == "actions"]
        assert "answered by alice" in _context(answered)
