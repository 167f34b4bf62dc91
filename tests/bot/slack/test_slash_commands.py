"""`/raven` on Slack (issue 41, part 4), through slack-bolt over Socket Mode against the fake:
answered to the caller alone through the command's response_url, with the answer and the
rules of the typed word, recorded once however often Slack delivers it."""

from __future__ import annotations

import asyncio
from importlib import resources
from pathlib import Path

import pytest
import yaml

from bot.slack.doctor import required_scopes
from bot.slack.slash import COMMAND
from core.ids import ConversationRef
from host.conversation.slash import USAGE_HINT, typed_text
from host.features.schedules.feature import SchedulesFeature
from host.runtime.messages import InboundMessage
from tests.fakes.slack import payloads
from tests.fakes.slack.server import SlashCommand
from tests.helpers import db_rows, eventually, write_agents
from tests.slack_harness import CHANNEL, SlackBot, slack_bot

ALICE, BOB, CAROL = "U1", "U2", "U3"
ALICES_DM = "D0ALICE"
SLEEPER = """
[agents.sleeper]
backend = "cli"
description = "Sleeps (test agent)."
command = ["sh", "-c", "sleep 60"]
"""


async def _answer(bot: SlackBot, command: SlashCommand) -> str:
    """The one ephemeral response the command got (after the bot's after-ack work)."""
    (post,) = await bot.fake.wait_for_response_url_post(command.response_url_id)
    await bot.adapter.idle()
    assert bot.fake.responses_to(command) == [post]
    assert post.json["response_type"] == "ephemeral", post.json
    return str(post.json["text"])


def _nothing_said_in_public(bot: SlackBot) -> None:
    assert bot.fake.calls_to("chat.postMessage") == []
    assert bot.fake.calls_to("chat.postEphemeral") == []


async def test_status_and_help_are_answered_to_the_caller_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with slack_bot(monkeypatch, transport="socket") as bot:
        status = await bot.fake.send_slash_command("status", user=ALICE)
        # A bare ack (Slack's three seconds never wait on the answer), then the answer.
        assert status.ack_payload is None
        assert (await _answer(bot, status)).startswith("*Status*: running nothing")

        helped = await bot.fake.send_slash_command("help", user=ALICE)
        text = await _answer(bot, helped)
        assert "*raven-bot*" in text and "`stop`" in text and "snooze 2h" in text
        # Anything else is not a request for the model: it gets the same help.
        unknown = await bot.fake.send_slash_command("deploy the docs", user=ALICE)
        assert await _answer(bot, unknown) == text
        _nothing_said_in_public(bot)
        # Recorded as inbound messages of the channel's conversation, none as the bot's.
        home = bot.runtime.settings.home
        rows = db_rows(
            home,
            "SELECT m.direction, m.text, m.handled FROM messages m JOIN conversations c"
            " ON c.id = m.conversation_id WHERE c.channel = ? ORDER BY m.id",
            CHANNEL,
        )
        assert rows == [("in", "status", 1), ("in", "help", 1), ("in", "help", 1)]


async def test_a_redelivered_command_runs_once(monkeypatch: pytest.MonkeyPatch) -> None:
    async with slack_bot(monkeypatch, transport="socket") as bot:
        first = await bot.fake.send_slash_command("status", user=ALICE)
        await _answer(bot, first)
        # Slack sends the same command again in a new envelope (the same trigger_id).
        again = await bot.fake.send_envelope("slash_commands", first.payload)
        await bot.fake.wait_for_ack(again)
        await bot.adapter.idle()
        assert len(bot.fake.responses_to(first)) == 1
        assert len(db_rows(bot.runtime.settings.home, "SELECT id FROM messages")) == 1


async def test_someone_not_allowed_gets_the_typed_refusal_privately(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {"RAVEN_ALLOWED_USERS": f"{ALICE},{BOB}"}
    async with slack_bot(monkeypatch, transport="socket", env=env) as bot:
        refused = await bot.fake.send_slash_command("status", user=CAROL)
        assert await _answer(bot, refused) == (
            "You're not on this bot's list of allowed users; ask an admin to add you."
        )
        _nothing_said_in_public(bot)
        assert db_rows(bot.runtime.settings.home, "SELECT id FROM messages") == []


async def test_stop_cancels_only_what_the_caller_may_stop(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, SLEEPER)
    async with slack_bot(monkeypatch, transport="socket") as bot:
        home = bot.runtime.settings.home
        # Alice's plan runs at channel level (where slash commands are given).
        channel = ConversationRef("slack", bot.fake.team_id, CHANNEL, "main")
        await bot.runtime.service.accept(_said(channel, ALICE, "alice", "s: sleeper: a minute"))
        running = [("running",)]
        await eventually(lambda: db_rows(home, "SELECT state FROM graph_nodes") == running)
        posted = len(bot.fake.calls_to("chat.postMessage"))

        # Bob may not stop Alice's run: the typed word's answer, and the run goes on.
        bobs = await _answer(bot, await bot.fake.send_slash_command("stop", user=BOB))
        assert bobs.startswith("Stopped: nothing of yours was running in this thread."), bobs
        assert "not yours to stop" in bobs and "alice" in bobs
        assert db_rows(home, "SELECT state FROM graph_nodes") == running

        alices = await _answer(bot, await bot.fake.send_slash_command("stop", user=ALICE))
        assert alices.startswith("Stopped: cancelled"), alices
        cancelled = [("cancelled",)]
        await eventually(lambda: db_rows(home, "SELECT state FROM graph_nodes") == cancelled)
        # The run's own messages aside, neither answer was posted.
        texts = [c.args.get("text", "") for c in bot.fake.calls_to("chat.postMessage")[posted:]]
        assert not any("Stopped" in text for text in texts), texts
        await bot.runtime.service.quiesce(channel)


async def test_mute_in_a_dm_quiets_that_dms_task_as_typed_mute_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with slack_bot(monkeypatch, transport="socket") as bot:
        line = "schedule: every 2h | s1: shell: echo tick"
        event = payloads.message_im(ALICES_DM, ALICE, line, bot.ts())
        assert await bot.send(payloads.event_callback(event)) == 200
        dm = ConversationRef("slack", bot.fake.team_id, ALICES_DM, "main")
        await bot.runtime.service.quiesce(dm)
        (prompt,) = await bot.runtime.broker.pending(dm)
        outcome = await bot.runtime.broker.answer(prompt.id, prompt.nonce, ALICE, "Approve")
        assert outcome.status == "accepted", outcome.message
        tasks = bot.runtime.feature(SchedulesFeature).tasks
        (task,) = await tasks.store.active()

        # In the channel there is no task: the command answers about where it is given.
        elsewhere = await bot.fake.send_slash_command("mute", user=ALICE)
        assert await _answer(bot, elsewhere) == "No scheduled tasks here."
        muted = await bot.fake.send_slash_command("mute", user=ALICE, channel=ALICES_DM)
        assert await _answer(bot, muted) == (
            f"Muted `{task.id}`: they run and say nothing until `unmute`."
        )
        assert (await tasks.store.get(task.id)).muted  # type: ignore[union-attr]
        listed = await bot.fake.send_slash_command("schedule list", user=ALICE, channel=ALICES_DM)
        assert task.id in await _answer(bot, listed)
        snoozed = await bot.fake.send_slash_command("snooze 2h", user=ALICE, channel=ALICES_DM)
        assert (await _answer(bot, snoozed)).startswith(f"Snoozed `{task.id}` until")
        await asyncio.wait_for(bot.runtime.service.quiesce(dm), 10)


async def test_over_the_http_events_api_too(monkeypatch: pytest.MonkeyPatch) -> None:
    async with slack_bot(monkeypatch, transport="http") as bot:
        response_url = bot.fake.response_url("http-status")
        command = payloads.slash_command("/raven", "status", ALICE, CHANNEL, response_url)
        # Signed by Slack, checked by the edge, answered by the bot behind it.
        assert await bot.send(command, form=True) == 200
        (post,) = await bot.fake.wait_for_response_url_post("http-status")
        await bot.adapter.idle()
        assert post.json["response_type"] == "ephemeral"
        assert str(post.json["text"]).startswith("*Status*: running nothing")
        _nothing_said_in_public(bot)


def _said(conv: ConversationRef, user: str, name: str, text: str) -> InboundMessage:
    """A message `user` sent in `conv`, as the adapter hands it over."""
    return InboundMessage(
        platform=conv.platform,
        workspace=conv.workspace,
        channel=conv.channel,
        thread=conv.thread,
        message_id=f"m-{text[:20]}",
        author_id=user,
        author_name=name,
        text=text,
        event_id=f"e-{text[:20]}",
    )


def test_the_manifest_declares_raven_with_its_scope() -> None:
    manifest = yaml.safe_load(
        resources.files("bot.slack").joinpath("manifest.yaml").read_text("utf-8")
    )
    (raven,) = manifest["features"]["slash_commands"]
    assert (raven["command"], raven["should_escape"]) == (COMMAND, False)
    # Each subcommand the hint offers is one the bot knows (none falls through to `help`).
    assert raven["usage_hint"] == USAGE_HINT
    for offered in USAGE_HINT.split(" | "):
        assert typed_text(offered) != "help" or offered == "help", offered
    assert "url" not in raven  # Socket Mode: Slack needs no request URL
    assert "commands" in required_scopes()
