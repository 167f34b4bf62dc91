"""A child process start that its caller cancels ends, and leaves no process behind."""

from __future__ import annotations

import asyncio

import pytest

from core.spawn import kill_process, start_uncancelled
from tests.agents.test_backends import pids_running, sleeper_token
from tests.helpers import cancel_while_spawning, eventually


@pytest.mark.parametrize("after", range(4))
async def test_a_cancelled_start_ends_and_kills_what_it_started(after: int) -> None:
    # The child leaves a process holding its pipes: asyncio's own cancelled start kills the
    # child alone and then waits for those pipes to close, forever (CPython gh-103847).
    token = sleeper_token()
    start = asyncio.create_subprocess_exec(
        "sh",
        "-c",
        f"sleep {token} & sleep {token}",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    task = asyncio.create_task(start_uncancelled(start, kill_process))
    await cancel_while_spawning(task, after)
    async with asyncio.timeout(30):  # a hang guard: the bug this covers never returned
        await asyncio.wait({task})
    assert task.cancelled()
    await eventually(lambda: not pids_running("sleep", token), within=10)


async def test_a_start_nobody_cancels_returns_its_process() -> None:
    process = await start_uncancelled(asyncio.create_subprocess_exec("true"), kill_process)
    assert await process.wait() == 0
