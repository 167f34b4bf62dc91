"""A scheduled task due while the real bot process is killed (`kill -9`) fires once after
the restart, with its lateness said, and never again."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.bot.cli.test_cli_end_to_end import RAVEN, _env, _run
from tests.helpers import eventually

pytestmark = pytest.mark.slow


def _task(db: Path) -> tuple[str, str | None, int]:
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT state, next_due, fired FROM scheduled_tasks").fetchone()
    return row[0], row[1], row[2]


async def _read_until(stream: asyncio.StreamReader, text: bytes) -> None:
    line = b""
    while text not in line:
        line = await asyncio.wait_for(stream.readline(), 30)
        assert line, f"the bot ended before saying {text!r}"


async def test_a_task_due_while_killed_fires_once_after_restart_saying_how_late(
    isolated_env: Path,
) -> None:
    env = _env(isolated_env)
    db = isolated_env / "raven.db"
    proc = await asyncio.create_subprocess_exec(
        RAVEN,
        "chat",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"schedule: in 6s | s1: shell: echo restart-tick\n")
    await proc.stdin.drain()
    await _read_until(proc.stdout, b"Reply with a number")
    proc.stdin.write(b"1\n")
    await proc.stdin.drain()
    await _read_until(proc.stdout, b"is scheduled: in 6s")
    state, due, _ = _task(db)
    assert state == "active" and due is not None
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    due_at = datetime.fromisoformat(due)
    assert datetime.now(UTC) < due_at, "killed after the task came due: the test proves nothing"
    await eventually(lambda: datetime.now(UTC) > due_at, within=30, what="the due time passes")

    code, out, err = await _run("chat", env=env)
    assert code == 0, err
    assert "late: I was down when it came due" in out
    assert out.count("restart-tick") >= 1
    assert _task(db)[0] == "done"

    code, out, err = await _run("chat", env=env)
    assert code == 0, err
    assert "restart-tick" not in out and "late" not in out
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*), MIN(outcome) FROM scheduled_firings").fetchone() == (
            1,
            "ran",
        )
        fired = conn.execute(
            "SELECT COUNT(*), COUNT(turn_id) FROM messages WHERE direction = 'in'"
            " AND text GLOB 's1_*: shell: echo restart-tick'"
        ).fetchone()
    assert fired == (1, 1)  # one firing turn, though the job and the restart both saw it due
