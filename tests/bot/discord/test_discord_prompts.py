"""Interactive prompts on Discord through the real discord.py adapter and the assembled bot:
persistent button views (after a restart too), modals, refusals, expiry, the typed
fallback, status messages edited in place, and `stop`."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from core.ids import ConversationRef
from tests.discord_harness import ALICE, BOB, DiscordBot, discord_bot, shared_fake
from tests.helpers import db_rows, eventually, write_agents

AGENTS = """
[agents.echo]
backend = "cli"
description = "Echoes its prompt (test agent)."
command = ["cat"]

[agents.sleeper]
backend = "cli"
description = "Sleeps (test agent)."
command = ["sh", "-c", "sleep 60"]
"""
PLAN = "a: echo: hello world\nconfirm"


def _buttons(message: dict[str, Any]) -> list[dict[str, Any]]:
    rows = message.get("components") or []
    return [c for row in rows for c in row.get("components", [])]


def _prompt_message(bot: DiscordBot, thread: str) -> dict[str, Any]:
    with_buttons = [m for m in bot.fake.bot_messages(thread) if _buttons(m)]
    assert with_buttons, bot.texts(thread)
    return with_buttons[-1]


def _current(bot: DiscordBot, thread: str, message_id: str) -> dict[str, Any]:
    return bot.fake.messages[thread][message_id]


async def _plan(bot: DiscordBot, text: str = PLAN) -> tuple[str, dict[str, Any]]:
    """Mention the bot with a plan that asks for approval; (thread, prompt message)."""
    root = await bot.mention(text)
    thread = str(root["id"])
    await bot.fake.wait_for(lambda: any(_buttons(m) for m in bot.fake.bot_messages(thread)))
    return thread, _prompt_message(bot, thread)


async def _click(
    bot: DiscordBot, thread: str, message: dict[str, Any], index: int, user: str
) -> None:
    button = _buttons(message)[index]
    await bot.fake.click(thread, message["id"], button["custom_id"], user)


def _ephemeral_texts(bot: DiscordBot) -> list[str]:
    """What users were told privately through interactions (responses and follow-ups)."""
    texts = [
        str((c.get("data") or {}).get("content", ""))
        for c in bot.fake.interaction_callbacks
        if ((c.get("data") or {}).get("flags", 0) & 64)
    ]
    texts += [
        str((f.get("payload") or {}).get("content", ""))
        for f in bot.fake.followups
        if ((f.get("payload") or {}).get("flags", 0) & 64)
    ]
    return texts


def _completed(bot: DiscordBot, thread: str) -> bool:
    return any("completed** — Explicit plan" in t for t in bot.texts(thread))


async def test_approval_by_the_requester_runs_the_graph(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, AGENTS)
    async with discord_bot(monkeypatch) as bot:
        thread, message = await _plan(bot)
        assert [b["label"] for b in _buttons(message)] == ["Approve", "Deny"]
        assert all(b["custom_id"].startswith("prompt:") for b in _buttons(message))
        # The requester by display name, never a mention (it would ping).
        assert "Only Alice or an approver" in message["content"] and "<t:" in message["content"]
        assert "<@" not in message["content"]
        await _click(bot, thread, message, 0, ALICE)
        await bot.fake.wait_for(lambda: _completed(bot, thread))
        # acknowledged by a deferred update, then the message shows who decided
        assert bot.fake.interaction_callbacks[0]["type"] == 6
        edited = _current(bot, thread, message["id"])
        assert "answered by Alice" in edited["content"]
        assert all(b.get("disabled") for b in _buttons(edited))


async def test_the_prompt_pings_nobody(monkeypatch: pytest.MonkeyPatch, isolated_env: Path) -> None:
    write_agents(isolated_env, AGENTS)
    async with discord_bot(monkeypatch) as bot:
        await _plan(bot)
        sent = [
            c.json
            for c in bot.fake.requests_to("POST", "/channels/{channel_id}/messages")
            if c.json and c.json.get("components")
        ]
        mentions = sent[-1]["allowed_mentions"]
        assert mentions["parse"] == [] and not mentions.get("users")


async def test_a_stranger_is_refused_privately(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, AGENTS)
    async with discord_bot(monkeypatch) as bot:
        thread, message = await _plan(bot)
        await _click(bot, thread, message, 0, BOB)
        await bot.fake.wait_for(lambda: any("can answer" in t for t in _ephemeral_texts(bot)))
        await bot.settle(thread)
        assert len(await bot.runtime.broker.pending()) == 1
        assert _buttons(_current(bot, thread, message["id"]))[0].get("disabled") is not True
        assert bot.fake.dm_channel_for(BOB)["id"] not in bot.fake.messages  # no DM needed


async def test_an_approver_may_answer(monkeypatch: pytest.MonkeyPatch, isolated_env: Path) -> None:
    write_agents(isolated_env, AGENTS)
    async with discord_bot(monkeypatch, env={"RAVEN_APPROVERS": BOB}) as bot:
        thread, message = await _plan(bot)
        await _click(bot, thread, message, 1, BOB)
        await bot.fake.wait_for(
            lambda: any("not approved (denied by Bob)" in t for t in bot.texts(thread))
        )


async def test_a_second_click_is_a_friendly_no_op(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, AGENTS)
    async with discord_bot(monkeypatch) as bot:
        thread, message = await _plan(bot)
        await _click(bot, thread, message, 0, ALICE)
        await bot.fake.wait_for(lambda: _completed(bot, thread))
        await _click(bot, thread, message, 1, ALICE)
        await bot.fake.wait_for(lambda: any("Already answered" in t for t in _ephemeral_texts(bot)))
        await bot.settle(thread)
        assert db_rows(bot.runtime.settings.home, "SELECT COUNT(*) FROM graph_runs") == [(1,)]


async def test_a_click_after_expiry_says_expired(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, AGENTS)
    async with discord_bot(monkeypatch, env={"RAVEN_PROMPT_EXPIRY_SECONDS": "0.5"}) as bot:
        thread, message = await _plan(bot)
        (prompt,) = await bot.runtime.broker.pending()
        await eventually(lambda: time.time() > prompt.expires_at)
        await _click(bot, thread, message, 0, ALICE)
        await bot.fake.wait_for(lambda: any("expired" in t.lower() for t in _ephemeral_texts(bot)))
        await bot.fake.wait_for(
            lambda: any("not approved (expired" in t for t in bot.texts(thread))
        )
        edited = _current(bot, thread, message["id"])
        assert "Expired" in edited["content"] and all(b.get("disabled") for b in _buttons(edited))
        await bot.settle(thread)
        assert db_rows(bot.runtime.settings.home, "SELECT COUNT(*) FROM graph_runs") == [(0,)]


async def test_buttons_work_after_a_restart(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, AGENTS)
    async with shared_fake() as fake:
        async with discord_bot(monkeypatch, fake=fake) as bot:
            thread, message = await _plan(bot)
        # A new process: the view is registered again from the pending prompt.
        async with discord_bot(monkeypatch, fake=fake) as bot:
            await _click(bot, thread, message, 0, ALICE)
            await bot.fake.wait_for(lambda: _completed(bot, thread))


async def test_a_typed_answer_in_the_thread_works(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, AGENTS)
    async with discord_bot(monkeypatch) as bot:
        thread, message = await _plan(bot)
        await bot.say(thread, "1")
        await bot.fake.wait_for(lambda: _completed(bot, thread))
        edited = _current(bot, thread, message["id"])
        assert "answered by Alice" in edited["content"]


async def _free_text(bot: DiscordBot) -> tuple[str, Any]:
    root = await bot.mention("start")
    thread = str(root["id"])
    await bot.settle(thread)
    conv = ConversationRef("discord", bot.guild, "700000000000000001", thread)
    prompt = await bot.runtime.broker.create(
        conversation=conv,
        kind="free_text",
        question="Which dataset?",
        requester=ALICE,
        purpose="clarification",
    )
    await bot.fake.wait_for(lambda: any(_buttons(m) for m in bot.fake.bot_messages(thread)))
    return thread, prompt


async def test_a_free_text_answer_through_the_modal(monkeypatch: pytest.MonkeyPatch) -> None:
    async with discord_bot(monkeypatch) as bot:
        thread, prompt = await _free_text(bot)
        message = _prompt_message(bot, thread)
        (button,) = _buttons(message)
        assert button["label"] == "Answer…"
        await bot.fake.click(thread, message["id"], button["custom_id"], ALICE)
        await bot.fake.wait_for(lambda: any(c["type"] == 9 for c in bot.fake.interaction_callbacks))
        modal = next(c for c in bot.fake.interaction_callbacks if c["type"] == 9)["data"]
        assert modal["custom_id"] == f"answer:{prompt.id}:{prompt.nonce}"
        await bot.fake.submit_modal(
            thread, modal["custom_id"], ALICE, {"text": "the public one"}, message_id=message["id"]
        )
        decided = await asyncio.wait_for(bot.runtime.broker.wait(prompt.id, poll_interval=0.05), 10)
        assert decided.answer == "the public one" and decided.answered_by == ALICE


async def test_a_strangers_modal_answer_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async with discord_bot(monkeypatch) as bot:
        thread, prompt = await _free_text(bot)
        await bot.fake.submit_modal(
            thread, f"answer:{prompt.id}:{prompt.nonce}", BOB, {"text": "mine"}
        )
        await bot.fake.wait_for(lambda: any("can answer" in t for t in _ephemeral_texts(bot)))
        assert (await bot.runtime.broker.get(prompt.id)).state == "pending"  # type: ignore[union-attr]


async def test_a_modal_opened_before_a_restart_is_answered_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with shared_fake() as fake:
        async with discord_bot(monkeypatch, fake=fake) as bot:
            thread, prompt = await _free_text(bot)
        async with discord_bot(monkeypatch, fake=fake) as bot:
            await bot.fake.submit_modal(
                thread, f"answer:{prompt.id}:{prompt.nonce}", ALICE, {"text": "after restart"}
            )
            decided = await asyncio.wait_for(
                bot.runtime.broker.wait(prompt.id, poll_interval=0.05), 10
            )
            assert decided.answer == "after restart"


async def test_stop_cancels_a_running_graph(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, AGENTS)
    async with discord_bot(monkeypatch) as bot:
        root = await bot.mention("s: sleeper: wait a minute")
        thread = str(root["id"])
        home = bot.runtime.settings.home
        await bot.fake.wait_for(lambda: thread in bot.fake.threads)
        await eventually(
            lambda: (
                db_rows(home, "SELECT state FROM graph_nodes WHERE node_id = 's'") == [("running",)]
            )
        )
        await bot.say(thread, "stop")
        await eventually(
            lambda: (
                db_rows(home, "SELECT state FROM graph_nodes WHERE node_id = 's'")
                == [("cancelled",)]
            )
        )
        await bot.fake.wait_for(lambda: any("Stopped" in t for t in bot.texts(thread)))


async def test_a_background_run_edits_one_status_message(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, AGENTS)
    async with discord_bot(monkeypatch) as bot:
        root = await bot.mention("a: echo: one\nb: echo: two [after a]")
        thread = str(root["id"])
        await bot.fake.wait_for(lambda: _completed(bot, thread))
        await bot.settle(thread)
        status = [t for t in bot.texts(thread) if "settled" in t]
        assert len(status) == 1
        assert bot.fake.requests_to("PATCH", "/channels/{channel_id}/messages/{message_id}")
        reports = [t for t in bot.texts(thread) if "completed** — Explicit plan" in t]
        assert len(reports) == 1  # exactly one final report


async def test_a_click_on_a_prompt_decided_while_the_bot_was_down(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, AGENTS)
    async with shared_fake() as fake:
        async with discord_bot(monkeypatch, fake=fake) as bot:
            thread, message = await _plan(bot)
            (prompt,) = await bot.runtime.broker.pending()
            await bot.runtime.broker.answer(prompt.id, prompt.nonce, ALICE, "Approve")
            await bot.fake.wait_for(lambda: _completed(bot, thread))
        # Discord still shows live buttons (say the closing edit was lost): no view comes
        # back for a decided prompt, yet the click is answered and the message closed.
        fake.messages[thread][message["id"]]["components"] = message["components"]
        async with discord_bot(monkeypatch, fake=fake) as bot:
            await _click(bot, thread, message, 1, ALICE)
            await bot.fake.wait_for(
                lambda: any("Already answered" in t for t in _ephemeral_texts(bot))
            )
            edited = _current(bot, thread, message["id"])
            assert all(b.get("disabled") for b in _buttons(edited))
            await bot.settle(thread)
            assert db_rows(bot.runtime.settings.home, "SELECT COUNT(*) FROM graph_runs") == [(1,)]


async def test_an_interaction_delivered_twice_is_answered_once(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, AGENTS)
    async with discord_bot(monkeypatch) as bot:
        thread, message = await _plan(bot)
        button = _buttons(message)[0]
        payload = await bot.fake.click(thread, message["id"], button["custom_id"], ALICE)
        await bot.fake.dispatch("INTERACTION_CREATE", payload)  # a replay of the same click
        await bot.fake.wait_for(lambda: _completed(bot, thread))
        await bot.settle(thread)
        answered = [c for c in bot.fake.interaction_callbacks if c["id"] == payload["id"]]
        assert len(answered) == 1
        assert db_rows(bot.runtime.settings.home, "SELECT COUNT(*) FROM graph_runs") == [(1,)]
