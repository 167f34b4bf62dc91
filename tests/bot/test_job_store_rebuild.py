"""`scheduler.db` is derived data (issue 38): after it is damaged while the bot is down, the
next start rebuilds every kind of job from raven.db (a task, a standing check, a campaign
wake-up, a pending prompt's expiry, a held post), each at its time with its payload, and each
does its work when it fires."""

from __future__ import annotations

import contextlib
import pickle
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.app import Runtime
from bot.settings import load_settings
from host.features.schedules.feature import SchedulesFeature
from host.features.schedules.tasks import job_id
from host.features.schedules.work import parse_check
from host.nudges.held import HeldPosts
from host.nudges.policy import Nudge
from host.prompts.expiry import expiry_job_id, reminder_job_id
from host.runtime.apscheduler_adapter import fire
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import approve_campaigns, db_rows, eventually
from tests.host.features.schedules.kit import CONV, Bot, FakeClock
from tests.oncall_kit import spec
from tests.runtime_kit import chat_runtime

# A campaign's round is a real process.
pytestmark = pytest.mark.slow

HELD_KEY = "test:held-post"


def _stored(home: Path, job: str) -> dict[str, Any]:
    """A job's state as the job store holds it (what APScheduler loads to fire it)."""
    with contextlib.closing(sqlite3.connect(home / "scheduler.db")) as db:
        row = db.execute("SELECT job_state FROM apscheduler_jobs WHERE id = ?", (job,)).fetchone()
    assert row is not None, f"job {job} is not in scheduler.db"
    state: dict[str, Any] = pickle.loads(row[0])
    return state


async def _fire(home: Path, job: str) -> None:
    """Run a stored job as APScheduler runs it when it comes due: its function, its args."""
    state = _stored(home, job)
    assert state["func"] == f"{fire.__module__}:fire"
    await fire(*state["args"])


async def _task_ids(rt: Runtime) -> dict[str, str]:
    """Active task ids: the standing check's and the other's."""
    active = await rt.feature(SchedulesFeature).tasks.store.active()
    return {("check" if parse_check(t.schedule.what) else "task"): t.id for t in active}


async def _make_one_job_of_every_kind(rt: Runtime, chat: FakeChatAdapter) -> dict[str, str]:
    """Job ids by kind, each made the way the bot makes it."""
    bot = Bot(rt, chat, FakeClock(datetime.now(UTC)))
    await bot.say("schedule: every 1h | s1: shell: echo rebuilt-tick")
    await bot.approve()
    await bot.say("watch: every 30m | check: true")
    await bot.approve()
    await bot.say("schedule: every 2h | s2: shell: echo never-approved")  # left pending
    (prompt,) = [p for p in await rt.broker.pending() if p.purpose == "schedule_approval"]
    # Its round ends by itself should the test fail before stopping it.
    campaign = await rt.campaigns.start("U1", CONV, spec("sleep 120"))
    await approve_campaigns(rt.broker)

    def waking() -> list[tuple[Any, ...]]:
        return db_rows(
            rt.settings.home,
            "SELECT id FROM campaign_wakeups WHERE state = 'pending' AND campaign_id = ?",
            campaign.id,
        )

    await eventually(waking, within=60, what="the campaign's round to start and its wake-up")
    ((wake,),) = waking()
    until = datetime.now(UTC) + timedelta(hours=2)
    nudge = Nudge(CONV, "U1", "held until quiet hours end", "test")
    now = datetime.now(UTC).timestamp()
    await HeldPosts(rt.store, rt.scheduler).hold(HELD_KEY, nudge, until, now=now)
    tasks = await _task_ids(rt)
    return {
        "task": job_id(tasks["task"]),
        "check": job_id(tasks["check"]),
        "prompt expiry": expiry_job_id(prompt.id),
        "prompt reminder": reminder_job_id(prompt.id),
        "campaign wake-up": str(wake),
        "held post": f"held:{HELD_KEY}",
        "campaign": str(campaign.id),
    }


async def test_every_kind_of_job_comes_back_after_scheduler_db_is_damaged(
    isolated_env: Path,
) -> None:
    settings = load_settings()
    chat = FakeChatAdapter()
    async with chat_runtime(chat, settings, serving=True) as rt:
        made = await _make_one_job_of_every_kind(rt, chat)
        campaign = made.pop("campaign")
        assert set(made.values()) <= set(await rt.scheduler.pending_job_ids())
    before = {kind: _stored(isolated_env, job) for kind, job in made.items()}
    (isolated_env / "scheduler.db").write_bytes(bytes(range(256)) * 16)  # while it is down

    again = FakeChatAdapter()
    async with chat_runtime(again, settings, serving=True) as rt:
        try:
            assert rt.scheduler.set_aside is not None
            # Tasks and checks are re-armed in the background while the bot serves.
            await rt.feature(SchedulesFeature).caught_up.wait()
            pending = set(await rt.scheduler.pending_job_ids())
            missing = {kind for kind, job in made.items() if job not in pending}
            assert not missing, f"not re-armed from raven.db: {sorted(missing)}"
            # Each at its time with its payload, as it was before the damage.
            for kind, job in made.items():
                state = _stored(isolated_env, job)
                assert state["next_run_time"] == before[kind]["next_run_time"], kind
                assert state["args"][1:] == before[kind]["args"][1:], kind

            # And each does its work when it fires.
            tasks = rt.feature(SchedulesFeature).tasks
            for kind in ("task", "check"):
                due = before[kind]["next_run_time"]
                tasks.clock = FakeClock(due)
                await _fire(isolated_env, made[kind])
                task = made[kind].removeprefix(job_id(""))
                fired = db_rows(
                    isolated_env, "SELECT outcome FROM scheduled_firings WHERE task_id = ?", task
                )
                assert fired, f"the {kind} did not fire"
            await _fire(isolated_env, made["held post"])
            await rt.service.quiesce(CONV)
            assert "held until quiet hours end" in again.texts
            assert db_rows(isolated_env, "SELECT key FROM held_posts") == []
            await _fire(isolated_env, made["campaign wake-up"])
            assert db_rows(
                isolated_env,
                "SELECT state FROM campaign_wakeups WHERE id = ?",
                made["campaign wake-up"],
            ) == [("fired",)]
            # A prompt's expiry job expires it once its deadline passed (its own tests);
            # here: it is the pending prompt's, at its deadline.
            (prompt_id,) = db_rows(isolated_env, "SELECT id FROM prompts WHERE state='pending'")
            assert made["prompt expiry"] == expiry_job_id(prompt_id[0])
        finally:
            await rt.campaigns.stop(campaign, by="U1")
