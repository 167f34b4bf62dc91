"""Deadlines of one length shared by many concurrent calls, watched by one timer.

`asyncio.timeout(seconds)` arms a timer per call: a graph run judging thousands of nodes
at once kept thousands of them in the event loop's heap, whose every push compares timers
in Python. Deadlines of one length expire in the order they were set, so one timer on the
oldest is enough; each call's `asyncio.Timeout` is armed only when its deadline passes.
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class SharedDeadlines:
    """`async with deadlines.guard():` raises TimeoutError when the block runs longer than
    `seconds`, like `asyncio.timeout(seconds)`."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        # Live guards and their deadlines (loop time), oldest first.
        self._live: dict[asyncio.Timeout, float] = {}
        self._timer: asyncio.TimerHandle | None = None

    def guard(self) -> _Guard:
        """A context manager bounding its block to `seconds`."""
        return _Guard(self)

    def _enter(self, timeout: asyncio.Timeout) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + self.seconds
        self._live[timeout] = due
        if self._timer is None:
            self._timer = loop.call_at(due, self._expire)

    def _leave(self, timeout: asyncio.Timeout) -> None:
        self._live.pop(timeout, None)

    def _expire(self) -> None:
        """The oldest deadline passed: expire every guard due, then wait for the next."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        for timeout, due in list(self._live.items()):
            if due > now:
                self._timer = loop.call_at(due, self._expire)
                return
            del self._live[timeout]
            # The guard's own Timeout cancels its task now and turns that into TimeoutError.
            timeout.reschedule(now)


class _Guard:
    """One bounded block: an `asyncio.Timeout` without a timer of its own."""

    __slots__ = ("_deadlines", "_timeout")

    def __init__(self, deadlines: SharedDeadlines) -> None:
        self._deadlines = deadlines
        self._timeout = asyncio.timeout(None)

    async def __aenter__(self) -> None:
        await self._timeout.__aenter__()
        self._deadlines._enter(self._timeout)

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._deadlines._leave(self._timeout)
        await self._timeout.__aexit__(kind, error, traceback)
