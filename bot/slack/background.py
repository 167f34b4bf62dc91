"""Work the Slack adapter runs after an ack, in tasks it owns and awaits on close."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from bot.slack.config import UNREACHABLE, unreachable_reason
from host.runtime.ports import ChannelError

log = logging.getLogger(__name__)


class Background:
    """The adapter's after-ack tasks: a failure is logged, never raised into bolt."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Awaitable[None], name: str) -> None:
        """Run `coro` after the ack (Slack's 3 s deadline does not wait on it)."""

        async def guarded() -> None:
            try:
                await coro
            except UNREACHABLE as exc:
                log.warning("slack: %s failed: %s", name, unreachable_reason(exc))
            except ChannelError as exc:
                log.warning("slack: %s failed: %s", name, exc)
            except Exception:
                log.exception("slack: background task %s failed", name)

        task = asyncio.create_task(guarded(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def idle(self) -> None:
        """Wait until every task (and any task it started) has finished."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    async def drain(self, grace: float) -> None:
        """Give the tasks `grace` seconds to finish, then cancel the rest."""
        tasks = list(self._tasks)
        if not tasks:
            return
        _, still = await asyncio.wait(tasks, timeout=grace)
        for task in still:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
