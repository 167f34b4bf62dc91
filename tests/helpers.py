"""Small test helpers shared across test modules."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from host.events import EventBus, subscribe_decision, subscribe_job
from host.prompt_model import Prompt
from host.scheduling import JobHandler


async def eventually(cond: Callable[[], bool], within: float = 10.0) -> None:
    """Wait until `cond()` holds; fail after `within` seconds (a hang guard, not a timing)."""
    async with asyncio.timeout(within):
        # Polling is right here: the state lives in another process or library we don't signal.
        while not cond():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


def decision_bus(handlers: Mapping[str, Callable[[Prompt], Awaitable[None]]]) -> EventBus:
    """An event bus on which each prompt purpose's decisions reach its handler."""
    bus = EventBus()
    for purpose, handler in handlers.items():
        subscribe_decision(bus, purpose, handler)
    return bus


def wake_up_bus(handlers: Mapping[str, JobHandler]) -> EventBus:
    """An event bus on which each job kind's wake-ups reach its handler."""
    bus = EventBus()
    for kind, handler in handlers.items():
        subscribe_job(bus, kind, handler)
    return bus
