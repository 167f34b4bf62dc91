"""Starting a child process so that a cancellation cannot hang the caller.

CPython 3.11 (gh-103847, fixed in later releases): `create_subprocess_exec` (or
`loop.subprocess_exec`) cancelled before it has connected the child's pipes kills the child
alone and then waits for the pipes to close; processes the child started (bwrap's sandboxed
command, a shell's background job) still hold them, so the cancelled task hangs for good and
with it `stop` and the shutdown. The start therefore runs to its end in a task of its own; a
caller cancelled meanwhile kills what was started (its whole group) and then sees its
cancellation.
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
