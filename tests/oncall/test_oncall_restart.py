"""Kill the bot with SIGKILL while a campaign waits: after the restart the missed wake-up
fires once with its lateness recorded and told in the thread, and the round (which kept
running, detached) is still monitored."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from tests.bot.cli.test_cli_end_to_end import RAVEN, _env
from tests.helpers import db_rows

# Real processes (the raven-bot CLI, a pty, Slurm, ssh, restarts): `-m "not slow"` skips them.
pytestmark = pytest.mark.slow

WITHIN = 60.0
# Prints a decreasing loss every 0.3 s for about 12 s: long enough to span a kill/restart.
JOB = 'i=0; while [ $i -lt 40 ]; do echo "loss $((1000-i))"; i=$((i+1)); sleep 0.3; done'
LINE = (
    f"campaign: survive a restart | machine: local | run: {JOB} | metric: loss min "
    "| budget: 10m | wake: 2s | poll: 1s | stall: 60s\n"
    "1\n"  # approve the command (the console shows the prompt as numbered choices)
)


async def _until(cond: object, within: float = WITHIN) -> None:
    async with asyncio.timeout(within):
        # The state lives in another process's database: polling is the way to see it.
        while not cond():  # type: ignore[operator]  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def _bot(home: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        RAVEN,
        "chat",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        env=_env(home),
    )


def _measurements(home: Path) -> int:
    try:
        return int(db_rows(home, "SELECT COUNT(*) FROM campaign_measurements")[0][0])  # type: ignore[call-overload]
    except sqlite3.OperationalError:
        return 0


async def test_a_missed_wake_up_fires_once_after_a_kill_and_the_job_is_still_watched(
    isolated_env: Path,
) -> None:
    home = isolated_env
    first = await _bot(home)
    assert first.stdin is not None
    first.stdin.write(LINE.encode())
    await first.stdin.drain()
    await _until(lambda: _measurements(home) >= 2)
    os.kill(first.pid, signal.SIGKILL)
    await first.wait()
    before = _measurements(home)
    ((wake_id, due_at),) = db_rows(
        home, "SELECT id, due_at FROM campaign_wakeups WHERE state = 'pending'"
    )
    # Down past the wake-up's due time: it is missed, not fired.
    await _until(lambda: time.time() > float(due_at) + 1.0)  # type: ignore[arg-type]
    second = await _bot(home)
    try:
        await _until(
            lambda: (
                db_rows(home, "SELECT state FROM campaign_wakeups WHERE id = ?", wake_id)
                == [("fired",)]
            )
        )
        ((lateness, fired),) = db_rows(
            home, "SELECT lateness, fired_at FROM campaign_wakeups WHERE id = ?", wake_id
        )
        assert float(lateness) >= 1.0  # type: ignore[arg-type]
        # The thread was told in the campaign's one status message, the same one as before
        # the kill (posted once, through its lane and the outbox), edited to say it.
        shown = "SELECT status_view FROM campaigns WHERE status_view LIKE ?"
        await _until(lambda: bool(db_rows(home, shown, "%⏰ A wake-up fired % late%")))
        status = "SELECT delivery FROM messages WHERE idempotency_key LIKE 'campaign:%:status'"
        assert db_rows(home, status) == [("sent",)]
        # The detached round kept running through the kill, and the monitor re-attached.
        await _until(lambda: _measurements(home) > before + 2)
        ((handle,),) = db_rows(home, "SELECT handle FROM campaign_rounds WHERE round = 1")
        assert json.loads(str(handle))["job_id"]
        rounds = db_rows(home, "SELECT COUNT(*) FROM campaign_rounds")
        assert rounds == [(1,)]
        # Fired once: APScheduler's own catch-up and the engine's recovery share the ledger.
        fired_rows = db_rows(
            home,
            "SELECT COUNT(*) FROM campaign_wakeups WHERE state = 'fired' AND reason = 'scheduled'"
            " AND due_at <= ?",
            float(fired),  # type: ignore[arg-type]
        )
        assert fired_rows == [(1,)]
    finally:
        assert second.stdin is not None
        second.stdin.write(b"stop\n")
        await second.stdin.drain()
        await _until(lambda: db_rows(home, "SELECT state FROM campaigns") == [("cancelled",)])
        second.stdin.close()
        await asyncio.wait_for(second.wait(), WITHIN)
