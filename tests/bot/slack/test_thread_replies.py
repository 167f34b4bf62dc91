"""Slack threads (issue 39, finding 1): the bot answers its requester's follow-up without a
mention and gives a bystander's chatter nothing, by `RAVEN_THREAD_REPLIES`; someone the
access rules refuse who chats in its thread is not told anything."""

from __future__ import annotations

import pytest

from agents.models.offline import OFFLINE_NOTICE, OFFLINE_REMINDER
from bot.slack.mrkdwn import render_for_slack
from tests.fakes.slack import payloads
from tests.slack_harness import CHANNEL, SlackBot, slack_bot

ALICE, BOB = "U1", "U2"
# The offline notice (said once per thread) and the reminder after it, as Slack shows them.
NOTICE, REMINDER = ("".join(render_for_slack(t)) for t in (OFFLINE_NOTICE, OFFLINE_REMINDER))


async def _reply(bot: SlackBot, root: str, user: str, text: str) -> None:
    """`user` answers in the thread without mentioning the bot."""
    event = payloads.thread_message(CHANNEL, user, text, bot.ts(), root)
    assert await bot.send(payloads.event_callback(event)) == 200


def _texts(bot: SlackBot, root: str) -> list[str]:
    return [str(p.get("text", "")) for p in bot.posts(root)]


async def test_a_bystanders_thanks_gets_nothing_and_the_requesters_follow_up_is_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with slack_bot(monkeypatch) as bot:
        root, _ = await bot.mention("deploy the docs", user=ALICE)
        await bot.replies_in(root)
        await _reply(bot, root, BOB, "nice, thanks!")
        await _reply(bot, root, ALICE, "and the changelog too?")
        # Alice's follow-up, after Bob's message in the same thread, was answered ...
        await bot.replies_in(root, 2)
        await bot.settle(root)
        # ... and Bob got nothing: no post, no private note.
        assert _texts(bot, root) == [NOTICE, REMINDER]
        assert bot.fake.calls_to("chat.postEphemeral") == []


async def test_mentions_mode_ignores_the_requesters_unmentioned_follow_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with slack_bot(monkeypatch, env={"RAVEN_THREAD_REPLIES": "mentions"}) as bot:
        root, _ = await bot.mention("deploy the docs", user=ALICE)
        await bot.replies_in(root)
        await _reply(bot, root, ALICE, "and the changelog too?")
        await bot.mention("and the changelog too?", user=ALICE, thread_ts=root)
        await bot.replies_in(root, 2)
        await bot.settle(root)
        assert _texts(bot, root) == [NOTICE, REMINDER]


async def test_anyone_mode_answers_a_bystander(monkeypatch: pytest.MonkeyPatch) -> None:
    async with slack_bot(monkeypatch, env={"RAVEN_THREAD_REPLIES": "anyone"}) as bot:
        root, _ = await bot.mention("deploy the docs", user=ALICE)
        await bot.replies_in(root)
        await _reply(bot, root, BOB, "nice, thanks!")
        await bot.replies_in(root, 2)
        assert _texts(bot, root) == [NOTICE, REMINDER]


async def test_a_refused_person_chatting_in_the_thread_is_not_told_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with slack_bot(monkeypatch, env={"RAVEN_ALLOWED_USERS": ALICE}) as bot:
        root, _ = await bot.mention("deploy the docs", user=ALICE)
        await bot.replies_in(root)
        await _reply(bot, root, BOB, "nice, thanks!")
        # Bob then mentions the bot: that one refusal is all he ever gets.
        await bot.mention("can I too?", user=BOB, thread_ts=root)
        (note,) = await bot.fake.wait_for_call("chat.postEphemeral")
        await bot.settle(root)
        assert len(bot.fake.calls_to("chat.postEphemeral")) == 1
        assert note.args["user"] == BOB
        assert _texts(bot, root) == [NOTICE]
