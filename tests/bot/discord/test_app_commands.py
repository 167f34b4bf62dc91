"""`/raven` on Discord (issue 41, part 4), through discord.py against the fake: registered
for the allowed guild at start (and not doubled by a restart), answered to the caller alone
with the typed word's answer and rules, once per interaction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.ids import ConversationRef
from host.features.schedules.feature import SchedulesFeature
from tests.discord_harness import ALICE, BOB, GENERAL, DiscordBot, discord_bot, shared_fake
from tests.fakes.discord import FakeDiscord, payloads
from tests.helpers import db_rows, eventually, write_agents

EPHEMERAL = 1 << 6
OTHER_GUILD = "800000000000000099"
SLEEPER = """
[agents.sleeper]
backend = "cli"
description = "Sleeps (test agent)."
command = ["sh", "-c", "sleep 60"]
"""


async def _registered(fake: FakeDiscord) -> None:
    """Wait until start-up registered the guild's and the DMs' commands."""
    await fake.wait_for(lambda: {s.guild_id for s in fake.commands.syncs} >= {fake.guild_id, None})


async def _invoke(
    bot: DiscordBot, words: str, *, user: str = ALICE, channel: str = GENERAL, argument: str = ""
) -> str:
    """`user` runs `/raven WORDS [ARGUMENT]`; the one ephemeral answer they got."""
    *group, name = words.split()
    option = payloads.subcommand(
        name, [payloads.string_option(_option_name(bot, words), argument)] if argument else ()
    )
    options = [payloads.subcommand_group(group[0], [option])] if group else [option]
    sent = await bot.fake.invoke_command("raven", channel, user, options=options)
    await bot.fake.wait_for(lambda: _callbacks(bot, sent) != [])
    await bot.adapter.idle()
    (callback,) = _callbacks(bot, sent)
    assert callback["type"] == 4 and callback["data"]["flags"] & EPHEMERAL, callback
    assert callback["data"]["allowed_mentions"] == {"parse": []}
    return str(callback["data"]["content"])


def _option_name(bot: DiscordBot, words: str) -> str:
    """The option name Discord knows for a subcommand's argument (from what was synced)."""
    (raven,) = bot.fake.commands.commands(bot.fake.guild_id)
    options: list[dict[str, Any]] = raven["options"]
    for word in words.split():
        (found,) = [o for o in options if o["name"] == word]
        options = found.get("options") or []
    (argument,) = options
    return str(argument["name"])


def _callbacks(bot: DiscordBot, sent: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in bot.fake.interaction_callbacks if c["id"] == sent["id"]]


async def test_status_and_help_answer_the_caller_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"RAVEN_DISCORD_ALLOWED_GUILDS": ""}
    async with discord_bot(monkeypatch, env=env) as bot:
        await _registered(bot.fake)
        status = await _invoke(bot, "status")
        assert status.startswith("**Status**: running nothing"), status
        helped = await _invoke(bot, "help")
        assert "**raven-bot**" in helped and "`stop`" in helped
        assert bot.texts() == []  # nothing in any channel
        rows = db_rows(bot.runtime.settings.home, "SELECT direction, text, handled FROM messages")
        assert rows == [("in", "status", 1), ("in", "help", 1)]


async def test_a_redelivered_interaction_runs_once(monkeypatch: pytest.MonkeyPatch) -> None:
    async with discord_bot(monkeypatch) as bot:
        await _registered(bot.fake)
        option = payloads.subcommand("status")
        sent = await bot.fake.invoke_command("raven", GENERAL, ALICE, options=[option])
        await bot.fake.wait_for(lambda: _callbacks(bot, sent) != [])
        # The gateway delivers the same interaction again (a resumed session's replay).
        await bot.fake.dispatch("INTERACTION_CREATE", sent)
        await bot.adapter.idle()
        await bot.runtime.service.dispatched()
        assert len(_callbacks(bot, sent)) == 1
        assert len(db_rows(bot.runtime.settings.home, "SELECT id FROM messages")) == 1


async def test_registered_in_the_allowed_guild_and_not_doubled_by_a_restart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with shared_fake() as fake:
        env = {"RAVEN_DISCORD_ALLOWED_GUILDS": f"{fake.guild_id},{OTHER_GUILD}"}
        async with discord_bot(monkeypatch, env=env, fake=fake):
            await _registered(fake)
        (first,) = fake.commands.commands(fake.guild_id)
        async with discord_bot(monkeypatch, env=env, fake=fake):
            await fake.wait_for(lambda: len(fake.commands.syncs) == 4)
        (again,) = fake.commands.commands(fake.guild_id)
        assert (again["name"], again["id"]) == ("raven", first["id"])
        # Each start overwrote the allowed guild it is in and the DMs' global command (the
        # other allowed guild has not added the bot: nothing to register there).
        synced = [(s.guild_id, len(s.commands)) for s in fake.commands.syncs]
        assert synced == [(fake.guild_id, 1), (None, 1)] * 2
        (dm_only,) = fake.commands.global_commands
        assert dm_only["contexts"] == [1]  # BOT_DM: not shown in guilds a second time
        subcommands = {o["name"] for o in again["options"]}
        assert subcommands == {
            "status", "stop", "help", "schedule", "memory", "mute", "unmute", "snooze",
        }  # fmt: skip


async def test_someone_not_allowed_gets_the_typed_refusal_privately(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with discord_bot(monkeypatch, env={"RAVEN_ALLOWED_USERS": ALICE}) as bot:
        await _registered(bot.fake)
        refused = await _invoke(bot, "stop", user=BOB)
        assert refused == "You're not on this bot's list of allowed users; ask an admin to add you."
        assert db_rows(bot.runtime.settings.home, "SELECT id FROM messages") == []
        assert bot.texts() == []


async def test_mute_in_a_dm_quiets_that_dms_task(monkeypatch: pytest.MonkeyPatch) -> None:
    async with discord_bot(monkeypatch) as bot:
        await _registered(bot.fake)
        dm_channel = bot.fake.dm_channel_for(ALICE)["id"]
        await bot.fake.send_message(
            dm_channel, ALICE, "schedule: every 2h | s1: shell: echo hi", dm=True
        )
        dm = ConversationRef("discord", "dm", dm_channel, "main")
        await eventually(lambda: bot.runtime.broker.pending(dm))  # the task's approval
        (prompt,) = await bot.runtime.broker.pending(dm)
        outcome = await bot.runtime.broker.answer(prompt.id, prompt.nonce, ALICE, "Approve")
        assert outcome.status == "accepted", outcome.message
        tasks = bot.runtime.feature(SchedulesFeature).tasks
        (task,) = await tasks.store.active()

        assert await _invoke(bot, "mute") == "No scheduled tasks here."  # in the channel
        muted = await _invoke(bot, "mute", channel=dm_channel)
        assert muted == f"Muted `{task.id}`: they run and say nothing until `unmute`."
        stored = await tasks.store.get(task.id)
        assert stored is not None and stored.muted
        listed = await _invoke(bot, "schedule list", channel=dm_channel)
        assert task.id in listed
        snoozed = await _invoke(bot, "snooze", channel=dm_channel, argument="2h")
        assert snoozed.startswith(f"Snoozed `{task.id}` until"), snoozed
        remembered = await _invoke(bot, "memory show", channel=dm_channel)
        assert remembered  # the typed `what do you remember about me` answer
        await bot.runtime.service.quiesce(dm)


async def test_an_answer_not_ready_in_time_is_deferred_then_followed_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with discord_bot(monkeypatch) as bot:
        await _registered(bot.fake)
        bot.adapter.commands.defer_after = 0.0  # every answer is "late"
        sent = await bot.fake.invoke_command(
            "raven", GENERAL, ALICE, options=[payloads.subcommand("status")]
        )
        await bot.fake.wait_for(lambda: _followups(bot, sent) != [])
        await bot.adapter.idle()
        (deferred,) = _callbacks(bot, sent)
        # DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE, ephemeral: "raven is thinking…" to Alice alone.
        assert deferred["type"] == 5 and deferred["data"]["flags"] & EPHEMERAL, deferred
        (answer,) = _followups(bot, sent)
        assert answer["message"]["content"].startswith("**Status**: running nothing")
        assert answer["message"]["flags"] & EPHEMERAL
        assert bot.texts(GENERAL) == []


def _followups(bot: DiscordBot, sent: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in bot.fake.followups if f["interaction_id"] == sent["id"]]


async def test_stop_cancels_only_what_the_caller_may_stop(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, SLEEPER)
    async with discord_bot(monkeypatch, env={"RAVEN_DISCORD_THREADS": "false"}) as bot:
        await _registered(bot.fake)
        home = bot.runtime.settings.home
        # Inline mode: Alice's plan runs at channel level, where Bob gives the command.
        await bot.mention("s: sleeper: a minute")
        running = [("running",)]
        await eventually(lambda: db_rows(home, "SELECT state FROM graph_nodes") == running)

        bobs = await _invoke(bot, "stop", user=BOB)
        assert bobs.startswith("Stopped: nothing of yours was running in this thread."), bobs
        assert "not yours to stop" in bobs and "Alice" in bobs
        assert db_rows(home, "SELECT state FROM graph_nodes") == running

        alices = await _invoke(bot, "stop")
        assert alices.startswith("Stopped: cancelled"), alices
        cancelled = [("cancelled",)]
        await eventually(lambda: db_rows(home, "SELECT state FROM graph_nodes") == cancelled)
        assert not any("Stopped" in text for text in bot.texts()), bot.texts()
        await bot.runtime.service.quiesce(bot.conversation("main"))
