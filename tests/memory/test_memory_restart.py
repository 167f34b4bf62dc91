"""Memory survives kill -9 with the real process: a turn answered just before the kill is
taken into memory exactly once, whether the kill came before or after the write."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from pathlib import Path

import pytest

from tests.bot.cli.test_cli_end_to_end import RAVEN, _env, _run

# Real processes (the raven-bot CLI, a pty, Slurm, ssh, restarts): `-m "not slow"` skips them.
pytestmark = pytest.mark.slow

FACT = "I maintain the billing service written in Rust."


def _episodes(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT narrative, source_turns FROM memory_episodes"))


async def test_a_turn_answered_before_kill_9_is_remembered_once(isolated_env: Path) -> None:
    env = _env(isolated_env)
    proc = await asyncio.create_subprocess_exec(
        RAVEN,
        "chat",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"{FACT}\n".encode())
    await proc.stdin.drain()
    line = b""
    while b"Say `help` for more." not in line:  # the end of the (offline) reply
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
    proc.send_signal(signal.SIGKILL)  # right after the reply: the write may not have run
    await proc.wait()

    code, out, err = await _run("chat", stdin=b"what do you remember about me\n", env=env)
    assert code == 0, err
    assert out.count(FACT) == 1, out
    episodes = [e for e in _episodes(isolated_env / "raven.db") if "billing service" in e[0]]
    assert len(episodes) == 1
    with sqlite3.connect(isolated_env / "raven.db") as conn:
        owed = conn.execute("SELECT COUNT(*) FROM turns WHERE remembered = 0").fetchone()[0]
    assert owed == 0
