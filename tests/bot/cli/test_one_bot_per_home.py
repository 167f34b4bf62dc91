"""One serving bot per RAVEN_HOME (issue 38, finding 5): a second `run` or `chat` exits 2
naming the one that serves, before its recovery can touch the first one's work; one-shot
commands keep working beside it."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from tests.bot.cli.test_cli_end_to_end import RAVEN, _env, _run
from tests.fakes.anthropic_server import FakeAnthropic
from tests.helpers import eventually

pytestmark = pytest.mark.slow


def _turns(home: Path) -> list[tuple[str, ...]]:
    with sqlite3.connect(home / "raven.db") as conn:
        return conn.execute("SELECT status FROM turns").fetchall()


def _said(home: Path) -> list[str]:
    with sqlite3.connect(home / "raven.db") as conn:
        rows = conn.execute("SELECT text FROM messages WHERE direction = 'out'").fetchall()
    return [text for (text,) in rows]


async def test_second_bot_exits_naming_the_first_and_tools_still_work(
    isolated_env: Path,
) -> None:
    async with FakeAnthropic() as fake:
        fake.queue_delay(120)  # the first bot's turn is still running throughout
        env = _env(
            isolated_env,
            ANTHROPIC_API_KEY="sk-ant-test-key-0123456789",
            ANTHROPIC_BASE_URL=fake.base_url,
        )
        first = await asyncio.create_subprocess_exec(
            RAVEN,
            "chat",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            env=env,
        )
        try:
            assert first.stdin is not None
            first.stdin.write(b"a long question\n")
            await first.stdin.drain()
            await eventually(lambda: len(fake.requests) >= 1, within=60)
            assert _turns(isolated_env) == [("running",)]

            for command in ("chat", "run"):
                code, out, err = await _run(command, stdin=b"hello\n", env=env)
                assert code == 2, out + err
                assert err.strip().splitlines() == [
                    f"raven-bot: another raven-bot (pid {first.pid}, `raven-bot chat`) is "
                    f"serving {isolated_env}; stop it first (one-shot commands such as "
                    "`doctor` and `memory` work beside it)"
                ]
                assert out == ""
            # The second ones recovered nothing: the first one's turn still runs, and its
            # thread was told nothing about an interruption.
            assert _turns(isolated_env) == [("running",)]
            assert not [t for t in _said(isolated_env) if "interrupted" in t]

            code, out, err = await _run("doctor", env=env)
            assert f"[ok  ] serving          pid {first.pid}, `raven-bot chat`" in out, out
            code, out, err = await _run("memory", "add", "--user", "U1", "likes", "tea", env=env)
            assert code == 0, out + err
            code, out, err = await _run("runs", "list", env=env)
            assert code == 0, out + err
        finally:
            first.kill()
            await first.wait()

    # Killed: the kernel dropped its lock, and nobody is named as serving any more.
    code, out, err = await _run("doctor", env=_env(isolated_env))
    assert "[ok  ] serving          not running" in out, out
