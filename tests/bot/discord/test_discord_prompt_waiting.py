"""Prompts that wait well on Discord, through the assembled bot and the loopback fake: the
reminder before the deadline, the expired message edited to its outcome (denied, or held
with live buttons) through the channel's message edit, never an interaction's token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.discord_harness import ALICE, DiscordBot, discord_bot
from tests.fakes.discord.server import Recorded
from tests.helpers import db_rows, write_agents

AGENTS = """
[agents.echo]
backend = "cli"
description = "Echoes its prompt (test agent)."
command = ["cat"]
"""
PLAN = "a: echo: hello world\nconfirm"
REMINDER = "⏰ Alice, a question still waits for your answer"


def _buttons(message: dict[str, Any]) -> list[dict[str, Any]]:
    rows = message.get("components") or []
    return [c for row in rows for c in row.get("components", [])]


async def _plan(bot: DiscordBot) -> tuple[str, dict[str, Any]]:
    """Mention the bot with a plan that asks for approval; (thread, prompt message)."""
    root = await bot.mention(PLAN)
    thread = str(root["id"])
    await bot.fake.wait_for(lambda: any(_buttons(m) for m in bot.fake.bot_messages(thread)))
    (message,) = [m for m in bot.fake.bot_messages(thread) if _buttons(m)]
    return thread, message


def _edits_of(bot: DiscordBot, message_id: str) -> list[Recorded]:
    """Every edit of the message: by the channel's endpoint or an interaction's webhook."""
    return [
        r
        for r in bot.fake.requests
        if r.method == "PATCH" and r.path.endswith(f"/messages/{message_id}")
    ]


async def test_an_expired_approval_is_edited_to_denied_after_a_reminder(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, AGENTS)
    env = {"RAVEN_PROMPT_EXPIRY_SECONDS": "1.5"}
    async with discord_bot(monkeypatch, env=env) as bot:
        thread, message = await _plan(bot)
        # Nobody clicks: the reminder comes first, then the expiry job denies it.
        await bot.fake.wait_for(lambda: any(t.startswith(REMINDER) for t in bot.texts(thread)))
        await bot.fake.wait_for(
            lambda: any("not approved (expired" in t for t in bot.texts(thread))
        )
        (reminder,) = [t for t in bot.texts(thread) if t.startswith(REMINDER)]
        assert "counts as denied" in reminder and "<@" not in reminder
        texts = bot.texts(thread)
        assert texts.index(reminder) < next(
            i for i, t in enumerate(texts) if "not approved (expired" in t
        )
        edited = bot.fake.messages[thread][message["id"]]
        assert "Expired" in edited["content"] and "(denied)" in edited["content"]
        assert _buttons(edited) and all(b.get("disabled") for b in _buttons(edited))
        # Edited with the bot's token on the channel's message, no interaction token.
        edits = _edits_of(bot, message["id"])
        assert edits and all(r.path.startswith("/channels/") for r in edits)
        await bot.settle(thread)
        assert db_rows(bot.runtime.settings.home, "SELECT COUNT(*) FROM graph_runs") == [(0,)]


async def test_a_held_approval_keeps_live_buttons_and_still_runs_when_approved(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, AGENTS)
    env = {"RAVEN_PROMPT_EXPIRY_SECONDS": "1", "RAVEN_PROMPT_ON_EXPIRY": "hold"}
    async with discord_bot(monkeypatch, env=env) as bot:
        thread, message = await _plan(bot)

        def held() -> bool:
            content = str(bot.fake.messages[thread][message["id"]]["content"])
            return "Expired — still waiting (held)" in content

        await bot.fake.wait_for(held)
        edited = bot.fake.messages[thread][message["id"]]
        assert "Alice or an approver can still answer" in edited["content"]
        assert "<t:" not in edited["content"]  # no deadline left to show
        assert [b["label"] for b in _buttons(edited)] == ["Approve", "Deny"]
        assert not any(b.get("disabled") for b in _buttons(edited))
        assert all(r.path.startswith("/channels/") for r in _edits_of(bot, message["id"]))
        assert not any("not approved" in t for t in bot.texts(thread))
        status = await bot.runtime.broker.status(bot.conversation(thread))
        assert "held past its deadline" in status and "from Alice since" in status

        await bot.fake.click(thread, message["id"], _buttons(edited)[0]["custom_id"], ALICE)
        await bot.fake.wait_for(
            lambda: any("completed** — Explicit plan" in t for t in bot.texts(thread))
        )
        answered = bot.fake.messages[thread][message["id"]]
        assert "answered by Alice" in answered["content"]
        assert all(b.get("disabled") for b in _buttons(answered))
