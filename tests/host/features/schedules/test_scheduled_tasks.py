"""Scheduled tasks in the assembled runtime (offline, default settings): proposed by a
`schedule:` line, approved once by their owner, fired through the scheduler port with a
fake clock, run unattended with exactly the approved commands, caught up after downtime as
the task's `missed` says, idempotent, and acted on only by those allowed."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from host.features.schedules.feature import SchedulesFeature
from host.features.schedules.tasks import SCHEDULED_TASK_JOB, job_id
from host.nudges.quiet import parse_quiet_hours
from host.runtime.events import WakeUp
from host.runtime.scheduling import FiredJob
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import db_rows, eventually
from tests.host.features.schedules.kit import CONV, Bot, FakeClock, days_ahead
from tests.runtime_kit import chat_runtime


async def test_a_task_is_approved_once_then_fires_its_exact_command_unattended(bot: Bot) -> None:
    reply = await bot.say("schedule: every 2h | s1: shell: echo scheduled-tick")
    assert "waits for approval" in reply
    (shown,) = bot.chat.shown
    assert "every 2h (UTC)" in shown.question
    (nexts,) = [line for line in shown.question.splitlines() if line.startswith("- Next:")]
    assert nexts.count(" UTC") == 3  # the next three fire times, with their zone
    assert "echo scheduled-tick" in shown.question
    await bot.approve()
    await eventually(lambda: any("is scheduled:" in t for t in bot.chat.texts))
    task = await bot.only_task()
    assert task.state == "active" and task.next_due == task.anchor + timedelta(hours=2)

    bot.clock.advance(hours=2)
    await bot.fire_due()
    await eventually(lambda: any("scheduled-tick" in t for t in bot.chat.texts[-3:]))
    # Ran without a new approval: the command was approved with the task.
    assert [p.purpose for p in bot.chat.shown] == ["schedule_approval"]
    task = await bot.only_task()
    assert task.fired == 1 and task.next_due == task.anchor + timedelta(hours=4)

    # The grant is the firing's: the owner's own run of the same command still asks.
    await bot.send("s9: shell: echo scheduled-tick")
    await eventually(lambda: bot.chat.shown[-1].purpose == "command_approval")
    asking = bot.chat.shown[-1]
    assert "echo scheduled-tick" in asking.question
    await bot.rt.broker.answer(asking.id, asking.nonce, "U1", "Deny")
    await bot.rt.service.quiesce(CONV)

    # The same firing delivered again (a crash before the job was removed) does nothing.
    posted = len(bot.chat.texts)
    await bot.rt.bus.publish(
        WakeUp(
            FiredJob(
                job_id(task.id),
                SCHEDULED_TASK_JOB,
                {"task_id": task.id, "due": (task.anchor + timedelta(hours=2)).isoformat()},
                task.anchor,
                bot.clock.now,
            )
        )
    )
    await bot.rt.service.quiesce(CONV)
    assert len(bot.chat.texts) == posted
    assert db_rows(bot.rt.settings.home, "SELECT COUNT(*) FROM scheduled_firings") == [(1,)]

    # The next firing runs the plan again (with node ids of its own: ids are unique per
    # conversation), again without asking.
    bot.clock.advance(hours=2)
    await bot.fire_due()
    home = bot.rt.settings.home
    sql = "SELECT COUNT(*) FROM graph_nodes WHERE node_id LIKE 's1_%' AND state = 'completed'"
    await eventually(lambda: db_rows(home, sql) == [(2,)])
    assert (await bot.only_task()).fired == 2
    assert not [p for p in await bot.rt.broker.pending() if p.purpose == "command_approval"]


async def test_downtime_runs_one_catch_up_and_says_how_late(bot: Bot) -> None:
    await bot.say("schedule: every 2h | s1: shell: echo caught-up")
    await bot.approve()
    await eventually(lambda: any("is scheduled:" in t for t in bot.chat.texts))
    task = await bot.only_task()
    # Down for 7 h 12 m: due at +2h, +4h, +6h; the catch-up is the last, 1 h 12 m late.
    bot.clock.advance(hours=7, minutes=12)
    bot.tasks.started_at = bot.clock.now  # the restart
    await bot.fire_due()
    await eventually(lambda: any("caught-up" in t for t in bot.chat.texts[-3:]))
    note = next(t for t in bot.chat.texts if t.startswith("⏰"))
    assert "missed 2 run(s) while I was down; this one is 1h12m late" in note
    task = await bot.only_task()
    assert task.fired == 3 and task.next_due == task.anchor + timedelta(hours=8)
    rows = db_rows(bot.rt.settings.home, "SELECT outcome FROM scheduled_firings ORDER BY due")
    assert rows == [("skipped",), ("skipped",), ("ran",)]


async def test_missed_skip_says_so_and_runs_nothing(bot: Bot) -> None:
    await bot.say("schedule: every 1h | s1: shell: echo never-now | missed: skip")
    await bot.approve()
    await eventually(lambda: any("is scheduled:" in t for t in bot.chat.texts))
    bot.clock.advance(hours=3, minutes=30)
    bot.tasks.started_at = bot.clock.now  # the restart
    await bot.fire_due()
    assert any("skipped 3 run(s) missed while I was down" in t for t in bot.chat.texts)
    assert not any("never-now" in t for t in bot.chat.texts[-3:] if "skipped" not in t)
    task = await bot.only_task()
    assert task.next_due == task.anchor + timedelta(hours=4)


async def test_only_the_owner_an_approver_or_an_admin_acts_on_a_task(bot: Bot) -> None:
    await bot.say("schedule: every 1h | s1: shell: echo mine")
    await bot.approve()
    await eventually(lambda: any("is scheduled:" in t for t in bot.chat.texts))
    task = await bot.only_task()
    reply = await bot.say(f"schedule: cancel {task.id}", author="U2", name="mallory")
    assert "You may not cancel" in reply and "alice" in reply
    reply = await bot.say(f"schedule: run {task.id}", author="U2", name="mallory")
    assert "You may not run" in reply
    assert (await bot.only_task()).state == "active"
    listing = await bot.say("schedule: list", author="U2", name="mallory")
    assert f"| `{task.id}` | alice | every 1h (UTC) | " in listing and " UTC " in listing
    assert "pause" in await bot.say(f"schedule: pause {task.id}")
    assert (await bot.only_task()).state == "paused"
    assert "resumed" in await bot.say(f"schedule: resume {task.id}")
    assert "cancelled" in await bot.say(f"schedule: cancel {task.id}")
    assert (await bot.only_task()).state == "cancelled"


async def test_a_stranger_cannot_approve_someone_elses_task(bot: Bot) -> None:
    await bot.say("schedule: in 30m | s1: shell: echo hi")
    (prompt,) = await bot.rt.broker.pending()
    outcome = await bot.rt.broker.answer(prompt.id, prompt.nonce, "U2", "Approve")
    assert outcome.status != "accepted"
    assert (await bot.only_task()).state == "proposed"


async def test_bad_lines_are_refused_with_the_syntax(bot: Bot) -> None:
    reply = await bot.say("schedule: every 1m | s1: shell: echo too-often")
    assert "more often than the limit" in reply and "schedule: in 20m" in reply
    reply = await bot.say("schedule: every 1h | summarise the news")
    assert "offline mode" in reply and "ANTHROPIC_API_KEY" in reply
    reply = await bot.say("schedule: every 1h | schedule: in 5m | s1: shell: echo nested")
    assert "cannot create scheduled tasks" in reply
    reply = await bot.say("schedule: every 1h | s1: shell: echo x | tz: Mars/Olympus")
    assert "is not a time zone" in reply
    reply = await bot.say("schedule: every 1h | s1: shell: echo x | post: channel")
    assert "`post: channel` needs a Slack or Discord channel" in reply
    assert await bot.tasks.store.listed(live_only=False) == []


async def test_concurrent_firings_in_one_channel_keep_its_hourly_limit(bot: Bot) -> None:
    bot.tasks.limits = replace(bot.tasks.limits, channel_firings_per_hour=2)
    for n in range(4):
        await bot.say(f"schedule: every 1h | s{n}: shell: echo task-{n}")
        await bot.approve()
    tasks = await bot.tasks.store.active()
    assert len(tasks) == 4
    bot.clock.advance(hours=1)
    await asyncio.gather(
        *(
            bot.rt.bus.publish(
                WakeUp(
                    FiredJob(
                        job_id(t.id),
                        SCHEDULED_TASK_JOB,
                        {"task_id": t.id, "due": str(t.next_due and t.next_due.isoformat())},
                        t.anchor,
                        bot.clock.now,
                    )
                )
            )
            for t in tasks
        )
    )
    await bot.rt.service.quiesce(CONV)
    outcomes = db_rows(
        bot.rt.settings.home, "SELECT outcome, COUNT(*) FROM scheduled_firings GROUP BY outcome"
    )
    assert dict(outcomes) == {"ran": 2, "limited": 2}
    assert sum("RAVEN_SCHEDULE_CHANNEL_PER_HOUR" in t for t in bot.chat.texts) == 2


async def test_a_restart_arms_only_the_tasks_whose_job_is_missing(bot: Bot) -> None:
    await bot.say("schedule: every 1h | s1: shell: echo armed")
    await bot.approve()
    task = await bot.only_task()
    scheduler = bot.rt.scheduler
    assert job_id(task.id) in await scheduler.pending_job_ids()
    await scheduler.cancel(job_id(task.id))  # a crash between recording and arming
    await bot.tasks.start()
    assert job_id(task.id) in await scheduler.pending_job_ids()


async def _schedule(bot: Bot, line: str) -> None:
    await bot.say(line)
    await bot.approve()
    await eventually(lambda: any("is scheduled:" in t for t in bot.chat.texts))


async def _fire_next(bot: Bot, hours: float = 1) -> list[str]:
    """Advance to the next firing and fire it; what the bot posted meanwhile."""
    before = len(bot.chat.texts)
    bot.clock.advance(hours=hours)
    await bot.fire_due()
    return bot.chat.texts[before:]


async def test_notify_changes_posts_a_result_only_when_it_differs(bot: Bot) -> None:
    await _schedule(bot, "schedule: every 1h | s1: shell: echo steady | notify: changes")
    first = await _fire_next(bot)
    assert any("steady" in t for t in first), first
    assert await _fire_next(bot) == []  # the same output: nothing said
    await bot.say("schedule: list")
    (task,) = await bot.tasks.store.active()
    assert task.fired == 2


async def test_notify_changes_posts_each_different_result(bot: Bot) -> None:
    await _schedule(bot, "schedule: every 1h | s1: shell: date +%N | notify: changes")
    assert await _fire_next(bot)
    assert await _fire_next(bot)  # nanoseconds differ: a new result each time


async def test_notify_failures_posts_only_failures(bot: Bot) -> None:
    await _schedule(bot, "schedule: every 1h | s1: shell: true | notify: failures")
    assert await _fire_next(bot) == []
    await bot.say(f"schedule: cancel {(await bot.tasks.store.active())[0].id}")
    await _schedule(bot, "schedule: every 1h | s2: shell: false | notify: failures")
    failed = await _fire_next(bot)
    assert any("s2" in t and "fail" in t for t in failed), failed


async def test_quiet_hours_hold_a_firing_until_they_end(bot: Bot) -> None:
    bot.rt.feature(SchedulesFeature).nudges.quiet = parse_quiet_hours("22:00-07:00")
    bot.clock.now = start = days_ahead(21)
    await _schedule(bot, "schedule: every 1h | s1: shell: echo night-shift")
    assert await _fire_next(bot) == []  # 22:00: held, nothing run or said
    (task,) = await bot.tasks.store.active()
    assert task.fired == 0 and task.next_due == start + timedelta(hours=1)
    said = await _fire_next(bot, hours=9)  # 07:00: quiet hours are over
    assert any("missed 9 run(s) in quiet hours (22:00–07:00)" in t for t in said), said
    assert any("night-shift" in t for t in said), said
    status = await bot.say("status")
    assert "Proactive posts: quiet hours 22:00–07:00 in each recipient's zone" in status


class ZonedChat(FakeChatAdapter):
    """A platform that knows people's zones (as Slack profiles do): everyone in Tokyo."""

    async def display_name(self, user_id: str) -> str:
        return user_id

    async def time_zone(self, user_id: str) -> str | None:
        return "Asia/Tokyo"


async def test_quiet_hours_are_the_owners_not_the_tasks_zone(isolated_env: Path) -> None:
    chat = ZonedChat()
    async with chat_runtime(chat, serving=True) as rt:
        start = days_ahead(11, 30)
        bot = Bot(rt, chat, FakeClock(start))
        rt.feature(SchedulesFeature).tasks.clock = bot.clock
        rt.feature(SchedulesFeature).nudges.quiet = parse_quiet_hours("22:00-07:00")
        # The task runs on UTC, its owner lives in Tokyo: 13:30 UTC is 22:30 for them.
        await _schedule(bot, "schedule: every 1h | s1: shell: echo tokyo | tz: UTC")
        assert any("tokyo" in t for t in await _fire_next(bot))  # 21:30 in Tokyo: runs
        assert await _fire_next(bot) == []  # 22:30 in Tokyo: held
        (task,) = await bot.tasks.store.active()
        assert task.next_due == start + timedelta(hours=2)


async def test_a_persons_task_limit_is_named(bot: Bot) -> None:
    bot.tasks.limits = replace(bot.tasks.limits, max_per_user=1)
    await bot.say("schedule: every 1h | s1: shell: echo one")
    reply = await bot.say("schedule: every 1h | s2: shell: echo two")
    assert "You already have 1 scheduled tasks" in reply and "RAVEN_SCHEDULE_MAX_PER_USER" in reply


async def test_a_request_seen_again_after_a_crash_before_asking_is_asked_then(bot: Bot) -> None:
    from host.features.schedules.tasks import Proposer

    who = Proposer(CONV, "U1", "alice", "event-1")
    await bot.tasks.propose(who, "schedule: every 1h | s1: shell: echo asked")
    (task,) = await bot.tasks.store.listed()
    # The crash: the task was recorded, its prompt never made.
    await bot.rt.store.execute("UPDATE scheduled_tasks SET prompt_id = NULL")
    assert len(bot.chat.shown) == 1
    reply = await bot.tasks.propose(who, "schedule: every 1h | s1: shell: echo asked")
    assert "waits for approval" in reply
    assert len(bot.chat.shown) == 2 and (await bot.tasks.store.get(task.id)).prompt_id  # type: ignore[union-attr]
    again = await bot.tasks.propose(who, "schedule: every 1h | s1: shell: echo asked")
    assert "already proposed" in again and len(bot.chat.shown) == 2
