"""Shared deadlines: each guarded block is bounded like `asyncio.timeout`, with one timer."""

from __future__ import annotations

import asyncio

import pytest

from core.deadlines import Expiring, SharedDeadlines
from tests.helpers import eventually

HANG_GUARD = 10.0  # a broken guard fails the test instead of hanging it


async def test_a_block_that_ends_in_time_returns_its_result() -> None:
    deadlines = SharedDeadlines(HANG_GUARD)
    async with deadlines.guard():
        await asyncio.sleep(0)
    assert not deadlines.live


async def test_blocks_past_their_deadline_raise_timeout_error_and_others_go_on() -> None:
    deadlines = SharedDeadlines(0.05)
    never = asyncio.Event()
    finished = asyncio.Event()

    async def hangs() -> None:
        async with deadlines.guard():
            await never.wait()

    async def ends() -> str:
        async with deadlines.guard():
            await asyncio.sleep(0)
        finished.set()
        return "done"

    async with asyncio.timeout(HANG_GUARD):
        first = asyncio.create_task(hangs())
        second = asyncio.create_task(hangs())
        quick = asyncio.create_task(ends())
        with pytest.raises(TimeoutError):
            await first
        with pytest.raises(TimeoutError):
            await second
        assert await quick == "done"
    assert not deadlines.live


async def test_a_cancellation_that_is_not_the_deadline_stays_a_cancellation() -> None:
    deadlines = SharedDeadlines(HANG_GUARD)
    entered = asyncio.Event()

    async def waits() -> None:
        async with deadlines.guard():
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(waits())
    await asyncio.wait_for(entered.wait(), HANG_GUARD)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not deadlines.live


async def test_a_guard_entered_after_the_timer_was_armed_gets_its_own_full_time() -> None:
    deadlines = SharedDeadlines(0.2)
    never = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def hangs() -> float:
        started = loop.time()
        with pytest.raises(TimeoutError):
            async with deadlines.guard():
                await never.wait()
        return loop.time() - started

    async with asyncio.timeout(HANG_GUARD):
        first = asyncio.create_task(hangs())
        # The second starts once the first is guarded: its deadline is later than the one
        # the timer was armed for, so the timer re-arms for it instead of expiring it early.
        await eventually(lambda: len(deadlines.live) == 1)
        second = asyncio.create_task(hangs())
        waited = await asyncio.gather(first, second)
    # Deadlines are measured from each block's start, never cut short.
    assert all(w >= 0.2 for w in waited), waited


async def test_expiring_keys_expire_in_order_unless_discarded_or_taken() -> None:
    expired: list[str] = []
    keys = Expiring[str](0.01, expired.append)
    for key in ("a", "b", "c"):
        keys.add(key)
    keys.add("a")  # already running: keeps its first deadline
    keys.discard("b")
    await eventually(lambda: expired == ["a", "c"])
    assert len(keys) == 0
    later = Expiring[str](HANG_GUARD, expired.append)
    later.add("d")
    later.add("e")
    assert later.take_all() == ["d", "e"] and len(later) == 0
