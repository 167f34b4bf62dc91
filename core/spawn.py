"""Starting a child process so that a cancellation cannot hang the caller.

CPython before 3.13.x (gh-103847): cancelling `create_subprocess_exec` (or
`loop.subprocess_exec`) while it connects the child's pipes leaves it awaiting an exit that
is never reported, so the cancelled task hangs for good (a `stop` or a shutdown never
returns). The start therefore runs to its end in a task of its own; a caller cancelled
meanwhile undoes what was started (kills it) and then sees its cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
_REAP_SECONDS = 5.0


async def start_uncancelled(
    start: Coroutine[Any, Any, T], undo: Callable[[T], Awaitable[None]]
) -> T:
    """Await `start` to its end even when cancelled; then `undo` its result and re-raise."""
    task = asyncio.ensure_future(start)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError:
                continue  # cancelled again: the start still has to end first
        if not task.cancelled() and task.exception() is None:
            await undo(task.result())
        raise


async def kill_process(process: asyncio.subprocess.Process) -> None:
    """Undo a start nobody waits for: kill the child (its group when it leads one), reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(process.pid) == process.pid:
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
    # Bounded: `wait()` also waits for the pipes, which a grandchild outside the group holds.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(process.wait(), _REAP_SECONDS)
