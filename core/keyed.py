"""Per-key coordination: one lock per key (`KeyedLocks`) and ordered background work per key
(`KeyedSerial`, so what one conversation receives is handled in order)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class KeyedLocks:
    """One `asyncio.Lock` per key, made on first use and dropped once nobody holds or waits
    for it, so the table never grows with keys that are done."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """Hold the key's lock for the duration of the block."""
        lock, users = self._entries.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            # Only when nobody holds or awaits it: a waiter must never get a second lock.
            if users[0] == 0:
                self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)


class KeyedSerial:
    """Runs submitted work one at a time per key, in submission order, as owned tasks.

    Callers get the task back and may await it or not; `close` cancels and awaits them all.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._tails: dict[str, asyncio.Task[Any]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, key: str, work: Callable[[], Awaitable[T]]) -> asyncio.Task[T]:
        """Queue `work` behind everything spawned earlier for `key`."""
        previous = self._tails.get(key)

        async def run() -> T:
            if previous is not None:
                # asyncio.wait never raises the predecessor's outcome into this one.
                await asyncio.wait({previous})
            return await work()

        task = asyncio.get_running_loop().create_task(run(), name=f"{self._name}:{key}")
        self._tails[key] = task
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._finished(key, done))
        return task

    async def idle(self, key: str) -> None:
        """Wait until nothing spawned for `key` is left."""
        while (tail := self._tails.get(key)) is not None:
            await asyncio.wait({tail})

    def busy(self) -> bool:
        """Whether anything spawned (for any key) is queued or running."""
        return bool(self._tasks)

    async def settled(self) -> None:
        """Wait until nothing spawned (for any key) is left."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def close(self) -> None:
        """Cancel whatever is still queued or running and wait for it to unwind."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    def _finished(self, key: str, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if self._tails.get(key) is task:
            del self._tails[key]
        if not task.cancelled() and (exc := task.exception()) is not None:
            # Nobody may be awaiting this task, so the log is the report of record.
            log.error("%s: work for %s failed", self._name, key, exc_info=exc)
