"""The real `raven-bot` process: console chat (offline and against a fake Anthropic), doctor,
help, and crash recovery after `kill -9`."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
from pathlib import Path

import pytest

from tests.fakes.anthropic_server import FakeAnthropic
from tests.helpers import eventually

# Real processes (the raven-bot CLI, a pty, Slurm, ssh, restarts): `-m "not slow"` skips them.
pytestmark = pytest.mark.slow

RAVEN = str(Path(sys.executable).with_name("raven-bot"))


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["RAVEN_HOME"] = str(home)
    env.update(extra)
    return env


async def _run(
    *args: str, stdin: bytes = b"", env: dict[str, str], within: float = 60
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        RAVEN,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), within)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_piped_chat_offline_explains_and_exits(isolated_env: Path) -> None:
    code, out, err = await _run("chat", stdin=b"hello\n", env=_env(isolated_env))
    assert code == 0, err
    assert "offline mode" in out
    assert "ANTHROPIC_API_KEY" in out


async def test_chat_help_and_status_control_words(isolated_env: Path) -> None:
    code, out, err = await _run("chat", stdin=b"help\nstatus\n", env=_env(isolated_env))
    assert code == 0, err
    assert "`stop` cancels" in out
    assert "Status: running nothing" in out


async def test_chat_against_fake_anthropic(isolated_env: Path) -> None:
    async with FakeAnthropic() as fake:
        fake.queue_text("Hello from the fake model.")
        env = _env(
            isolated_env,
            ANTHROPIC_API_KEY="sk-ant-test-key-0123456789",
            ANTHROPIC_BASE_URL=fake.base_url,
        )
        code, out, err = await _run("chat", stdin=b"hi there\n", env=env)
        assert code == 0, err
        assert "raven> Hello from the fake model." in out
        (request,) = fake.requests
        user_text = request["json"]["messages"][-1]["content"][0]["text"]
        assert user_text.endswith("hi there")
        assert "sk-ant-test-key-0123456789" not in out + err


async def test_doctor_fresh_machine_exits_zero(isolated_env: Path) -> None:
    code, out, err = await _run("doctor", env=_env(isolated_env))
    assert code == 0, out + err
    assert str(isolated_env) in out
    assert "[WARN] model" in out and "offline mode" in out
    for check in ("data dir", "database", "scheduler store", "libraries", "embedder", "channels"):
        assert check in out


async def test_doctor_masks_secrets_and_fails_on_bad_key(isolated_env: Path) -> None:
    async with FakeAnthropic(api_key="sk-ant-right-key-000000") as fake:
        env = _env(
            isolated_env,
            ANTHROPIC_API_KEY="sk-ant-wrong-key-999999",
            ANTHROPIC_BASE_URL=fake.base_url,
        )
        code, out, err = await _run("doctor", env=env)
    assert code == 1
    assert "[FAIL] model" in out
    assert "sk-ant-wrong-key-999999" not in out + err


async def test_invalid_setting_is_named(isolated_env: Path) -> None:
    code, _, err = await _run("chat", env=_env(isolated_env, RAVEN_USER_POOL="zero"))
    assert code == 2
    assert "RAVEN_USER_POOL" in err


@pytest.mark.parametrize("command", [[], ["run"], ["chat"], ["doctor"], ["version"]])
async def test_help_for_every_command(isolated_env: Path, command: list[str]) -> None:
    code, out, _ = await _run(*command, "--help", env=_env(isolated_env))
    assert code == 0
    assert "usage: raven-bot" in out


async def test_kill_during_turn_marks_it_interrupted_and_reports(isolated_env: Path) -> None:
    async with FakeAnthropic() as fake:
        fake.queue_delay(60)  # the model "thinks" long enough for us to kill the process
        env = _env(
            isolated_env,
            ANTHROPIC_API_KEY="sk-ant-test-key-0123456789",
            ANTHROPIC_BASE_URL=fake.base_url,
        )
        proc = await asyncio.create_subprocess_exec(
            RAVEN,
            "chat",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=env,
        )
        assert proc.stdin is not None
        proc.stdin.write(b"a long question\n")
        await proc.stdin.drain()
        await eventually(lambda: len(fake.requests) >= 1, within=30)
        proc.send_signal(signal.SIGKILL)
        await proc.wait()

        db = isolated_env / "raven.db"
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT status FROM turns").fetchall() == [("running",)]

        fake.queue_text("fresh answer")
        code, out, err = await _run("chat", stdin=b"next question\n", env=env)
        assert code == 0, err
        # The interrupted request is named by what was asked (never by an internal id).
        assert (
            "A restart interrupted my work on an earlier request in this thread (“a long question”)"
            in out
        )
        assert "raven> fresh answer" in out
        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT status, reported FROM turns ORDER BY started_at").fetchall()
            inbound = conn.execute(
                "SELECT COUNT(*) FROM messages WHERE direction = 'in' AND handled = 0"
            ).fetchone()
        assert rows == [("interrupted", 1), ("completed", 0)]
        assert inbound == (0,)

        # A third start repeats nothing: the interruption was already reported.
        code, out, _ = await _run("chat", env=env)
        assert code == 0
        assert "interrupted" not in out


async def test_sigterm_shuts_down_cleanly(isolated_env: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        RAVEN,
        "chat",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_env(isolated_env),
    )
    # The banner is printed once serving starts, after the signal handlers are installed (a
    # fixed wait here sometimes signalled a process still starting up: killed, exit -15).
    assert proc.stdout is not None
    banner = await asyncio.wait_for(proc.stdout.readuntil(b"for a fresh one)"), 60)
    assert b"conversation console-" in banner
    proc.send_signal(signal.SIGTERM)
    code = await asyncio.wait_for(proc.wait(), 30)
    assert code == 0
