"""Nothing the caps hold back is dropped silently: a task's result over the per-person cap is
recorded, listed by `status`, and summarised in one post when the hour has room again, once
(also across a restart); a run-now someone asked for is never capped."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.app import Runtime
from bot.settings import load_settings
from host.features.schedules.feature import SchedulesFeature
from host.nudges.backlog import HELD_BACK_SUMMARY
from host.nudges.feature import NudgesFeature
from host.nudges.policy import NudgeLimits
from host.runtime.events import WakeUp
from host.runtime.scheduling import FiredJob
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import db_rows, eventually
from tests.host.features.schedules.kit import CONV, Bot, FakeClock
from tests.runtime_kit import chat_runtime

SUMMARY_JOB = f"held-back:{CONV.id}"


def _one_an_hour(bot: Bot) -> None:
    """The per-person cap at one post an hour (the default is 10: the same rule, sooner)."""
    policy = bot.rt.feature(SchedulesFeature).nudges
    policy.limits = NudgeLimits(channel_per_hour=20, owner_per_hour=1)


async def _fire(bot: Bot) -> list[str]:
    """The task's next firing, five minutes on (inside the cap's hour); what it posted."""
    before = len(bot.chat.texts)
    bot.clock.advance(minutes=5)
    await bot.fire_due()
    return bot.chat.texts[before:]


async def _scheduled(rt: Runtime, chat: FakeChatAdapter) -> Bot:
    """A task firing every 5 minutes, approved, with the per-person cap at one an hour."""
    clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
    rt.feature(SchedulesFeature).tasks.clock = clock
    bot = Bot(rt, chat, clock)
    _one_an_hour(bot)
    await bot.say("schedule: every 5m | s1: shell: echo tick")
    await bot.approve()
    await eventually(lambda: any("is scheduled:" in t for t in chat.texts))
    return bot


async def _summary_wakes(bot: Bot, at: float) -> None:
    """The conversation's summary wake-up fires at `at` (as the scheduler would)."""
    bot.rt.feature(NudgesFeature).summaries.clock = lambda: at
    now = datetime.fromtimestamp(at, UTC)
    job = FiredJob(SUMMARY_JOB, HELD_BACK_SUMMARY, {"conversation_id": CONV.id}, now, now)
    assert await bot.rt.bus.publish(WakeUp(job))
    await bot.rt.service.quiesce(CONV)


def _summaries(bot: Bot) -> list[str]:
    return [t for t in bot.chat.texts if t.startswith("📬")]


@pytest.fixture
async def capped(isolated_env: Path) -> AsyncIterator[Bot]:
    chat = FakeChatAdapter()
    async with chat_runtime(chat, serving=True) as rt:
        yield await _scheduled(rt, chat)


async def test_results_over_the_cap_are_listed_then_summarised_once(capped: Bot) -> None:
    bot = capped
    assert await _fire(bot)  # the hour's one post
    assert await _fire(bot) == []  # held back: two more results inside the hour
    assert await _fire(bot) == []
    (task,) = await bot.tasks.store.active()
    status = await bot.say("status")
    lines = status.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("📬"))
    assert lines[head].startswith(
        "📬 2 update(s) held back here (1 were for the same person in the last hour); "
        "summarised in one post at "
    ), status
    assert lines[head + 1].startswith(f"- task `{task.id}`: "), status
    assert lines[head + 2].startswith(f"- task `{task.id}`: "), status
    # Armed for when the hour has room again: an hour after the post that used it.
    assert SUMMARY_JOB in await bot.rt.scheduler.pending_job_ids()
    ((release,),) = db_rows(bot.rt.settings.home, "SELECT DISTINCT release_at FROM held_back")

    await _summary_wakes(bot, float(release) - 1)  # early (a stale job): nothing yet
    assert _summaries(bot) == []
    for _ in range(2):  # the window ended; a second firing of the job says nothing more
        await _summary_wakes(bot, float(release) + 1)
    (summary,) = _summaries(bot)
    said = summary.splitlines()
    assert said[0] == "📬 2 updates held back by the hourly cap on posts the bot makes on its own:"
    assert [ln.startswith(f"- task `{task.id}`: ") for ln in said[1:]] == [True, True], summary
    assert "📬" not in await bot.say("status")  # summarised: no longer listed


async def test_a_summary_due_during_a_downtime_posts_once_at_the_next_start(
    isolated_env: Path,
) -> None:
    settings = load_settings()
    chat = FakeChatAdapter()
    async with chat_runtime(chat, settings, serving=True) as rt:
        bot = await _scheduled(rt, chat)
        assert await _fire(bot)
        assert await _fire(bot) == []
    # The hour ends while the bot is down, and the wake-up is lost with the scheduler's grace.
    with sqlite3.connect(isolated_env / "raven.db") as db:
        db.execute("UPDATE held_back SET release_at = 0")
    with sqlite3.connect(isolated_env / "scheduler.db") as db:
        db.execute("DELETE FROM apscheduler_jobs WHERE id = ?", (SUMMARY_JOB,))
    for attempt in range(2):  # the next start posts it; the one after does not again
        again = FakeChatAdapter()
        async with chat_runtime(again, settings, serving=True) as rt:
            await rt.service.quiesce(CONV)
            said = [t for t in again.texts if t.startswith("📬")]
            assert len(said) == (1 if attempt == 0 else 0), again.texts
    assert db_rows(
        isolated_env, "SELECT COUNT(*) FROM messages WHERE idempotency_key LIKE 'held-back:%'"
    ) == [(1,)]


async def test_a_run_now_someone_asked_for_is_never_capped(capped: Bot) -> None:
    bot = capped
    assert await _fire(bot)  # the hour's one post
    assert await _fire(bot) == []  # over the cap
    (task,) = await bot.tasks.store.active()
    bot.clock.advance(minutes=1)
    before = len(bot.chat.texts)
    reply = await bot.tasks.act(task.id, "run", by="U1", conversation=CONV)
    assert "runs now" in reply, reply
    await bot.rt.service.quiesce(CONV)
    assert bot.chat.texts[before:], "the run-now's result was not posted"
    # Its result posted; only the scheduled firing's is held back.
    rows = db_rows(bot.rt.settings.home, "SELECT COUNT(*) FROM held_back")
    assert rows == [(1,)]
    # The grant was the run's, once: the next scheduled result over the cap is held back.
    assert await _fire(bot) == []
    assert db_rows(bot.rt.settings.home, "SELECT COUNT(*) FROM held_back") == [(2,)]
