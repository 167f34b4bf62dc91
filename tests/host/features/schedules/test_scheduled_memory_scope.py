"""A scheduled firing in a channel never recalls its owner's DM memory (issue 38): what a
person said to the bot in a DM is recalled only in DMs, and a task they own firing in a
channel is a turn on their behalf there. The assembled runtime with the default embedder and
a loopback model; the Host's requests for the firing are read as sent."""

from __future__ import annotations

import json

from host.runtime.messages import InboundMessage
from host.runtime.turn import TurnContext
from tests.fakes.anthropic_server import FakeAnthropic
from tests.helpers import eventually
from tests.host.features.schedules.kit import CONV, Bot

SECRET = "zq4242"  # alice's locker code, said only in her DM


def _dm(text: str, event: str) -> InboundMessage:
    return InboundMessage(
        platform="test",
        workspace="W",
        channel="DU1",
        thread="DU1",
        message_id=event,
        author_id="U1",
        author_name="alice",
        text=text,
        event_id=event,
        is_dm=True,
    )


async def _contexts(bot: Bot, ctx: TurnContext) -> str:
    """Every context block the Host's system prompt would get for `ctx`."""
    return "\n".join([await source.context(ctx) for source in bot.rt.host.context_sources])


async def test_a_firing_in_a_channel_never_recalls_the_owners_dm_memory(
    model_bot: tuple[Bot, FakeAnthropic],
) -> None:
    bot, fake = model_bot
    said = _dm(f"remember my locker code is {SECRET}", "dm1")
    turn = await bot.rt.service.accept(said)
    if turn is not None:
        await turn
    await bot.rt.service.quiesce(said.conversation)
    await bot.rt.memory_writer.idle()
    # In her DM the memory is there to recall (the probe below is not vacuous).
    question = "what is my locker code?"
    in_dm = TurnContext(said.conversation, "t-dm", "U1", "alice", "user", question, True)
    assert SECRET in await _contexts(bot, in_dm)

    fake.queue_tool_use("schedule_task", {"when": "every 2h", "what": "tell me my locker code"})
    fake.queue_text("I asked you to approve the schedule.")
    await bot.say("every two hours, tell me my locker code")  # alice, in the channel
    await bot.approve()
    await eventually(lambda: any("is scheduled:" in t for t in bot.chat.texts))

    before = len(fake.requests)
    fake.queue_text("I cannot tell from here.")
    bot.clock.advance(hours=2)
    await bot.fire_due()
    await eventually(lambda: "I cannot tell from here." in bot.chat.texts)
    firing = [r["json"] for r in fake.requests[before:] if "tools" in r["json"]]
    assert firing and "This turn is a scheduled firing" in json.dumps(firing[0]["system"])
    assert all(SECRET not in json.dumps(request) for request in fake.requests[before:])
    # The context sources themselves, for the firing's turn in the channel.
    scheduled = TurnContext(CONV, "t-fire", "U1", "alice", "scheduled", question, False)
    assert SECRET not in await _contexts(bot, scheduled)
