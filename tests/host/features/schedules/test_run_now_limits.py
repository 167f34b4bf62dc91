"""`schedule: run ID` obeys every limit a firing obeys, and says which one refused (issue 38,
finding 6): the channel's hourly limit for a task, the minimum interval for a check."""

from __future__ import annotations

from dataclasses import replace

from tests.helpers import db_rows
from tests.host.features.schedules.kit import CONV, Bot


async def _run(bot: Bot, task_id: str) -> str:
    """`schedule: run ID` by the task's owner: the reply to the command (the run it starts
    reports in the thread after it)."""
    reply = await bot.tasks.act(task_id, "run", by="U1", conversation=CONV)
    await bot.rt.service.quiesce(CONV)
    return reply


async def test_run_now_counts_against_the_channels_hourly_limit(bot: Bot) -> None:
    bot.tasks.limits = replace(bot.tasks.limits, channel_firings_per_hour=3)
    await bot.say("schedule: every 1h | s1: shell: echo now")
    await bot.approve()
    task = await bot.only_task()
    replies = []
    for _ in range(6):
        bot.clock.advance(minutes=1)  # each run now is a firing of its own time
        replies.append(await _run(bot, task.id))
    ran = [r for r in replies if "runs now" in r]
    refused = [r for r in replies if "RAVEN_SCHEDULE_CHANNEL_PER_HOUR" in r]
    assert (len(ran), len(refused)) == (3, 3), replies
    assert "did not run now" in refused[0], refused[0]
    rows = db_rows(
        bot.rt.settings.home, "SELECT COUNT(*) FROM scheduled_firings WHERE outcome = 'ran'"
    )
    assert rows == [(3,)]


async def test_a_checks_run_now_keeps_the_minimum_interval(bot: Bot) -> None:
    await bot.say("watch: every 30m | check: echo fine")
    await bot.approve()
    task = await bot.only_task()
    assert "ran now" in await _run(bot, task.id)
    bot.clock.advance(minutes=2)
    refused = await _run(bot, task.id)
    assert "did not run now" in refused, refused
    assert "RAVEN_SCHEDULE_MIN_INTERVAL" in refused, refused
    assert "ran 2m ago" in refused, refused
    bot.clock.advance(minutes=3)
    assert "ran now" in await _run(bot, task.id)


async def test_a_stored_check_the_bot_can_no_longer_read_is_paused_and_said_once(
    bot: Bot,
) -> None:
    """A check stored before patterns ran on RE2, with a pattern RE2 refuses (a lookahead):
    its firing pauses it and says why once, instead of failing at every firing."""
    await bot.say("watch: every 30m | check: echo fine | when: output ~ ok")
    await bot.approve()
    task = await bot.only_task()
    await bot.rt.store.execute(
        "UPDATE scheduled_tasks SET schedule = replace(schedule, '~ ok', '~ (?=ok)') WHERE id = ?",
        (task.id,),
    )
    bot.clock.advance(minutes=30)
    await bot.fire_due()
    stored = await bot.tasks.store.get(task.id)
    assert stored is not None and stored.state == "paused", stored
    said = [t for t in bot.chat.texts if "can no longer be read" in t]
    assert len(said) == 1, bot.chat.texts
    assert "lookahead" in said[0], said[0]
    # Nor can it be resumed until it is proposed again in a form the bot reads.
    reply = await bot.tasks.act(task.id, "resume", by="U1", conversation=CONV)
    assert "stays paused" in reply and "lookahead" in reply, reply
