"""`raven-bot schedules …` (the real command, in its own process) on the database of a
running bot, which applies each change when it re-reads its tasks."""

from __future__ import annotations

import json

from host.features.schedules.tasks import job_id
from tests.bot.cli.test_cli_end_to_end import _env, _run
from tests.helpers import db_rows, eventually
from tests.host.features.schedules.kit import CONV, Bot


async def _scheduled(bot: Bot) -> str:
    await bot.say("schedule: every 1h | s1: shell: echo from-the-cli")
    await bot.approve()
    await eventually(lambda: any("is scheduled:" in t for t in bot.chat.texts))
    return (await bot.only_task()).id


async def test_list_and_show_read_the_tasks(bot: Bot) -> None:
    task_id = await _scheduled(bot)
    env = _env(bot.rt.settings.home)
    code, out, err = await _run("schedules", "list", "--json", env=env)
    assert code == 0, err
    (listed,) = json.loads(out)
    assert listed["id"] == task_id and listed["state"] == "active"
    assert listed["schedule"]["when"] == "1h" and listed["owner_name"] == "alice"
    code, out, err = await _run("schedules", "show", task_id, env=env)
    assert code == 0, err
    assert "When: every 1h (UTC)" in out and "s1: shell: echo from-the-cli" in out
    code, out, err = await _run("schedules", "show", "t_nope", env=env)
    assert code == 2 and "no task 't_nope'" in err and "schedules list" in err


async def test_run_pause_resume_delete_reach_the_running_bot(bot: Bot) -> None:
    task_id = await _scheduled(bot)
    env = _env(bot.rt.settings.home)
    jobs = bot.rt.scheduler.pending_job_ids

    code, out, _ = await _run("schedules", "run", task_id, env=env)
    assert code == 0 and "will run once now" in out
    await bot.tasks.reconcile_operator_changes()
    await bot.rt.service.quiesce(CONV)
    await eventually(lambda: any("from-the-cli" in t for t in bot.chat.texts[-2:]))
    task = await bot.only_task()
    assert task.fired == 0 and not task.run_now  # outside the schedule, which is unchanged

    code, out, _ = await _run("schedules", "pause", task_id, env=env)
    assert code == 0 and "paused" in out
    await bot.tasks.reconcile_operator_changes()
    assert job_id(task_id) not in await jobs()

    code, out, _ = await _run("schedules", "resume", task_id, env=env)
    assert code == 0 and "resumed, next" in out
    await bot.tasks.reconcile_operator_changes()
    assert job_id(task_id) in await jobs()

    code, out, _ = await _run("schedules", "delete", task_id, env=env)
    assert code == 0 and "cancelled" in out
    await bot.tasks.reconcile_operator_changes()
    assert job_id(task_id) not in await jobs()
    assert (await bot.only_task()).state == "cancelled"


async def test_a_run_request_survives_a_scheduled_firing_before_the_bot_reads_it(
    bot: Bot,
) -> None:
    task_id = await _scheduled(bot)
    code, out, _ = await _run("schedules", "run", task_id, env=_env(bot.rt.settings.home))
    assert code == 0 and "will run once now" in out
    # The task's own firing comes first: it must not swallow the operator's request.
    bot.clock.advance(hours=1)
    await bot.fire_due()
    assert (await bot.only_task()).run_now
    bot.clock.advance(seconds=10)  # the bot reads the request at its next look
    await bot.tasks.reconcile_operator_changes()
    await bot.rt.service.quiesce(CONV)
    home = bot.rt.settings.home
    sql = "SELECT COUNT(*) FROM scheduled_firings WHERE outcome = 'ran'"
    assert db_rows(home, sql) == [(2,)]  # the scheduled firing and the run now
    assert not (await bot.only_task()).run_now


async def test_show_counts_every_firing_it_lists_a_run_now_included(bot: Bot) -> None:
    await bot.say("schedule: every 1h | s1: shell: echo counted | count: 5")
    await bot.approve()
    await eventually(lambda: any("is scheduled:" in t for t in bot.chat.texts))
    task_id = (await bot.only_task()).id
    env = _env(bot.rt.settings.home)
    code, out, _ = await _run("schedules", "run", task_id, env=env)
    assert code == 0, out
    await bot.tasks.reconcile_operator_changes()
    await bot.rt.service.quiesce(CONV)
    code, out, err = await _run("schedules", "show", task_id, env=env)
    assert code == 0, err
    # It said "Fired: 0 time(s)" above this firing: a run now uses none of the fire times.
    assert "Fired: 1 time(s) (1 ran); 0 of its 5 fire times used\n" in out
    assert "Latest firings:\n- " in out and ": ran, " in out
