"""Small test helpers shared across test modules."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def eventually(cond: Callable[[], bool], within: float = 10.0) -> None:
    """Wait until `cond()` holds; fail after `within` seconds (a hang guard, not a timing)."""
    async with asyncio.timeout(within):
        # Polling is right here: the state lives in another process or library we don't signal.
        while not cond():  # noqa: ASYNC110
            await asyncio.sleep(0.01)
