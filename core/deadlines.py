"""Deadlines of one length for many keys, watched by one timer.

`asyncio.timeout(seconds)` arms a timer per call: a graph run judging thousands of nodes
at once kept thousands of them in the event loop's heap, whose every push compares timers
in Python. Deadlines of one length expire in the order they were set, so one timer on the
oldest is enough.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from types import TracebackType
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class Expiring(Generic[K]):
    """Keys that expire `seconds` after they were added (a key added again keeps its first
    deadline): `on_expiry(key)` is called for each, in the order added, unless it was
    discarded or taken first."""

    def __init__(self, seconds: float, on_expiry: Callable[[K], object]) -> None:
        self.seconds = seconds
        self._on_expiry = on_expiry
        # Live keys and their deadlines (loop time), oldest first.
        self._due: dict[K, float] = {}
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._due)

    def add(self, key: K) -> None:
        """Start `key`'s deadline (unless it runs already)."""
        if key in self._due:
            return
        loop = asyncio.get_running_loop()
        self._due[key] = due = loop.time() + self.seconds
        if self._timer is None:
            self._timer = loop.call_at(due, self._expire)

    def discard(self, key: K) -> None:
        """Forget `key`: it does not expire."""
        self._due.pop(key, None)

    def take_all(self) -> list[K]:
        """Forget every key and return them, oldest first."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        keys = list(self._due)
        self._due.clear()
        return keys

    def _expire(self) -> None:
        """The oldest deadline passed: expire every key due, then wait for the next."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        for key, due in list(self._due.items()):
            if due > now:
                self._timer = loop.call_at(due, self._expire)
                return
            del self._due[key]
            self._on_expiry(key)


class SharedDeadlines:
    """`async with deadlines.guard():` raises TimeoutError when the block runs longer than
    `seconds`, like `asyncio.timeout(seconds)`, with one timer for every block in flight."""

    def __init__(self, seconds: float) -> None:
        self.live = Expiring[asyncio.Timeout](seconds, _expired)

    def guard(self) -> _Guard:
        """A context manager bounding its block to `seconds`."""
        return _Guard(self.live)


def _expired(timeout: asyncio.Timeout) -> None:
    # The block's own Timeout cancels its task now and turns that into TimeoutError.
    timeout.reschedule(asyncio.get_running_loop().time())


class _Guard:
    """One bounded block: an `asyncio.Timeout` without a timer of its own."""

    __slots__ = ("_live", "_timeout")

    def __init__(self, live: Expiring[asyncio.Timeout]) -> None:
        self._live = live
        self._timeout = asyncio.timeout(None)

    async def __aenter__(self) -> None:
        await self._timeout.__aenter__()
        self._live.add(self._timeout)

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._live.discard(self._timeout)
        await self._timeout.__aexit__(kind, error, traceback)
