"""Discord threads (issue 39, finding 1): the bot answers its requester's follow-up without a
mention and gives a bystander's chatter nothing, by `RAVEN_THREAD_REPLIES`; someone the
access rules refuse who chats in its thread is not told anything."""

from __future__ import annotations

import pytest

from agents.models.offline import OFFLINE_NOTICE, OFFLINE_REMINDER
from tests.discord_harness import ALICE, BOB, DiscordBot, discord_bot


async def _thread(bot: DiscordBot, text: str) -> str:
    """Alice mentions the bot in #general; the thread id once the bot has answered."""
    root = await bot.mention(text, user=ALICE)
    thread = str(root["id"])
    await bot.wait_texts(thread)
    return thread


async def test_a_bystanders_thanks_gets_nothing_and_the_requesters_follow_up_is_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with discord_bot(monkeypatch) as bot:
        thread = await _thread(bot, "deploy the docs")
        await bot.say(thread, "nice, thanks!", user=BOB)
        await bot.say(thread, "and the changelog too?", user=ALICE)
        # Alice's follow-up, after Bob's message in the same thread, was answered ...
        await bot.wait_texts(thread, 2)
        await bot.settle(thread)
        # ... and Bob got nothing, in the thread or privately.
        assert bot.texts(thread) == [OFFLINE_NOTICE, OFFLINE_REMINDER]
        assert len(bot.texts()) == 2


async def test_mentions_mode_ignores_the_requesters_unmentioned_follow_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with discord_bot(monkeypatch, env={"RAVEN_THREAD_REPLIES": "mentions"}) as bot:
        thread = await _thread(bot, "deploy the docs")
        await bot.say(thread, "and the changelog too?", user=ALICE)
        await bot.mention("and the changelog too?", user=ALICE, channel=thread)
        await bot.wait_texts(thread, 2)
        await bot.settle(thread)
        assert bot.texts(thread) == [OFFLINE_NOTICE, OFFLINE_REMINDER]


async def test_anyone_mode_answers_a_bystander(monkeypatch: pytest.MonkeyPatch) -> None:
    async with discord_bot(monkeypatch, env={"RAVEN_THREAD_REPLIES": "anyone"}) as bot:
        thread = await _thread(bot, "deploy the docs")
        await bot.say(thread, "nice, thanks!", user=BOB)
        assert await bot.wait_texts(thread, 2) == [OFFLINE_NOTICE, OFFLINE_REMINDER]


async def test_a_refused_person_chatting_in_the_thread_is_not_told_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with discord_bot(monkeypatch, env={"RAVEN_ALLOWED_USERS": ALICE}) as bot:
        thread = await _thread(bot, "deploy the docs")
        await bot.say(thread, "nice, thanks!", user=BOB)
        # Bob then mentions the bot: that one refusal (a DM) is all he ever gets.
        await bot.mention("can I too?", user=BOB, channel=thread)
        await bot.fake.wait_for(lambda: len(bot.texts()) >= 2)
        await bot.settle(thread)
        assert bot.texts(thread) == [OFFLINE_NOTICE]
        assert len(bot.texts()) == 2
