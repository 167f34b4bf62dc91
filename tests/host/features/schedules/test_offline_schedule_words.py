"""Scheduled tasks offline, as people write and read them (issue 39): fields before what to do
are the schedule's, a firing says its result without the tools' plumbing, and a reminder
request gets a line that, sent as it is, proposes the task."""

from __future__ import annotations

from datetime import timedelta

from tests.helpers import eventually
from tests.host.features.schedules.kit import Bot

DUMP = ("here is what the tools returned", "`submit_graph`", "Offline mode (no model)")


def _plain(text: str) -> None:
    assert not any(marker in text for marker in DUMP), text


async def test_fields_before_what_to_do_are_the_schedules_and_a_firing_reads_plainly(
    bot: Bot,
) -> None:
    # Refused before: "I can schedule only … an explicit plan" (the fields were read as WHAT).
    reply = await bot.say("schedule: every 2h | notify: failures | s1: shell: echo tick-1")
    assert "waits for approval" in reply, reply
    (shown,) = bot.chat.shown
    assert "results: failures" in shown.question and "echo tick-1" in shown.question
    await bot.approve()
    task = await bot.only_task()
    assert (task.schedule.notify, task.schedule.what) == ("failures", "s1: shell: echo tick-1")

    await bot.say("schedule: notify: always | every 2h | s2: shell: echo tick-2")
    shown = bot.chat.shown[-1]
    assert "results: always" in shown.question
    await bot.approve()
    (always,) = [t for t in await bot.tasks.store.active() if t.schedule.notify == "always"]
    assert always.schedule.what == "s2: shell: echo tick-2"

    # Its firing runs the plan; what it posts is the run's report, not a tool dump.
    assert "runs now" in await bot.tasks.run_now(always.id)
    await bot.rt.service.quiesce(always.conversation)
    await eventually(lambda: any("tick-2" in t for t in bot.chat.texts))
    for text in bot.chat.texts:
        _plain(text)


async def test_a_reminder_request_gets_a_line_that_proposes_the_task_when_sent(bot: Bot) -> None:
    reply = await bot.say("remind me every morning at 9 to check the CI")
    line = "schedule: cron 0 9 * * * | s1: shell: echo 'Reminder: check the CI'"
    assert reply == (
        "I can't read free-form requests offline (no model key), but this line would do it "
        f"(every day at 09:00):\n```\n{line}\n```\n"
        "Send it and approve the prompt: the reminder then posts here. For a command to run "
        "instead, put it after `s1: shell:`."
    )
    assert "waits for approval" in await bot.say(line)
    await bot.approve()
    task = await bot.only_task()
    assert task.state == "active" and task.schedule.when == "0 9 * * *"
    assert task.next_due is not None and task.next_due - bot.clock.now <= timedelta(days=1)


async def test_a_task_whose_plan_has_a_malformed_line_is_refused_naming_it(bot: Bot) -> None:
    reply = await bot.say("schedule: every 2h | s1: shell: echo one\ns2 shell: echo two")
    assert reply.startswith(
        "⚠️ Nothing was scheduled: line 2 of this plan is not a node.\n"
        "- line 2, `s2 shell: echo two`: a `:` is missing after the id; write "
        "`s2: shell: echo two`\n"
    ), reply
    assert await bot.tasks.store.listed(live_only=False) == []
