"""After a restart the bot answers people at once: checks that came due while it was down
run in the background (each may take a minute, five on a machine), not before it serves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from bot.home import workspace_for
from host.features.schedules.feature import SchedulesFeature
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import db_rows, eventually
from tests.host.features.schedules.kit import CONV, Bot, FakeClock
from tests.runtime_kit import chat_runtime

# Runs until the test lets it end (a file in the conversation's workspace).
WAITING_CHECK = "watch: every 30m | check: while [ ! -e release ]; do sleep 0.05; done"


async def test_an_overdue_check_runs_while_the_bot_already_answers(isolated_env: Path) -> None:
    clock = FakeClock(datetime.now(UTC))
    chat = FakeChatAdapter()
    async with chat_runtime(chat, serving=True) as rt:
        bot = Bot(rt, chat, clock)
        reply = await bot.say(WAITING_CHECK)
        assert "waits for approval" in reply, reply
        await bot.approve()
        task = await bot.only_task()
        # Down past its due time: the next start finds it overdue.
        past = datetime.now(UTC) - timedelta(minutes=5)
        await bot.tasks.store.update(task.id, next_due=past)

    again = FakeChatAdapter()
    async with chat_runtime(again, serving=True) as rt:
        bot = Bot(rt, again, clock, events=100)  # its message ids after the first's
        # Answered while the overdue check still runs (it waits for `release`).
        assert "Scheduled tasks" in await bot.say("status")
        firings = "SELECT COUNT(*) FROM scheduled_firings WHERE task_id = ?"
        assert db_rows(isolated_env, firings, task.id) == [(0,)]
        (workspace_for(isolated_env)(CONV) / "release").touch()
        await eventually(lambda: db_rows(isolated_env, firings, task.id) == [(1,)], 60)
        await rt.feature(SchedulesFeature).caught_up.wait()
