"""The runtime's exit stack, which says which stop was slow: a shutdown that hangs names
the part it hangs in instead of ending in a bare timeout."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any, ParamSpec, TypeVar

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

# A stop slower than this is logged as a warning, with its name and duration.
SLOW_STOP_SECONDS = 5.0


class TimedExitStack(AsyncExitStack):
    """An AsyncExitStack whose async callbacks log their name and duration when slow."""

    def __init__(self, slow_seconds: float = SLOW_STOP_SECONDS) -> None:
        super().__init__()
        self._slow = slow_seconds

    def push_async_callback(
        self, callback: Callable[P, Awaitable[R]], /, *args: P.args, **kwds: P.kwargs
    ) -> Callable[P, Awaitable[R]]:
        name = _name(callback)

        async def timed(*a: Any, **k: Any) -> R:
            started = time.monotonic()
            log.debug("stopping %s", name)
            try:
                return await callback(*a, **k)
            finally:
                took = time.monotonic() - started
                if took >= self._slow:
                    log.warning("stopping %s took %.1f s", name, took)

        super().push_async_callback(timed, *args, **kwds)
        return callback


def _name(callback: Callable[..., Any]) -> str:
    owner = getattr(callback, "__self__", None)
    qualname = getattr(callback, "__qualname__", repr(callback))
    return f"{type(owner).__name__}.{callback.__name__}" if owner is not None else qualname
