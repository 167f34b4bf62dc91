"""Discord's typing indicator while a turn works: triggered through discord.py against the
fake Discord, again and again while the turn runs, and stopped when it ends."""

from __future__ import annotations

import pytest

from tests.bot.discord.test_discord_adapter import _online
from tests.discord_harness import discord_bot
from tests.fakes.anthropic_server import FakeAnthropic
from tests.helpers import eventually


async def test_the_bot_types_while_a_turn_works_and_stops_when_it_is_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FakeAnthropic() as model:
        model.queue_delay(60)  # the model thinks until the turn is stopped (or the fake ends)
        model.queue_text("too late")
        await _online(monkeypatch, model)
        async with discord_bot(monkeypatch) as bot:
            bot.adapter.working.interval = 0.02  # the same loop, on a short interval
            root = await bot.mention("think hard about this")
            thread = str(root["id"])
            conv = bot.conversation(thread)
            # Typing goes to the reply thread, again and again while the model is held.
            await eventually(lambda: len(bot.fake.typing_in(thread)) >= 3)
            assert bot.adapter.working.typing(conv)
            await bot.say(thread, "stop")
            await eventually(lambda: not bot.adapter.working.typing(conv))
            await eventually(lambda: any(t.startswith("Stopped") for t in bot.texts(thread)))
