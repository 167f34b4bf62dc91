"""The real `raven-bot run` process for restart tests (killed with SIGKILL if still alive)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from pathlib import Path

from tests.bot.cli.test_cli_end_to_end import RAVEN, _env


@contextlib.asynccontextmanager
async def bot_process(home: Path, **env: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """`raven-bot run` with RAVEN_HOME=`home` and `env` added; output discarded."""
    proc = await asyncio.create_subprocess_exec(
        RAVEN,
        "run",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        env=_env(home, **env),
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
