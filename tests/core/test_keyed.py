"""Per-key locks and per-key ordered work."""

from __future__ import annotations

import asyncio

import pytest

from core.keyed import KeyedLocks, KeyedSerial


async def test_keyed_locks_exclude_per_key_and_forget_unused_keys() -> None:
    locks = KeyedLocks()
    inside: dict[str, int] = {"a": 0, "b": 0}
    most: dict[str, int] = {"a": 0, "b": 0}
    release = asyncio.Event()
    both_held = asyncio.Event()

    async def worker(key: str) -> None:
        async with locks.hold(key):
            inside[key] += 1
            most[key] = max(most[key], inside[key])
            if inside["a"] and inside["b"]:
                both_held.set()
            await release.wait()
            inside[key] -= 1

    tasks = [asyncio.create_task(worker(k)) for k in ("a", "a", "a", "b", "b")]
    await both_held.wait()  # one holder per key, both keys at once
    assert inside == {"a": 1, "b": 1}
    release.set()
    await asyncio.gather(*tasks)
    assert most == {"a": 1, "b": 1}
    assert len(locks) == 0


async def test_keyed_lock_waiter_cancelled_does_not_leak_or_split_the_lock() -> None:
    locks = KeyedLocks()
    held = asyncio.Event()
    release = asyncio.Event()

    async def holder() -> None:
        async with locks.hold("k"):
            held.set()
            await release.wait()

    waiting = asyncio.Event()

    async def waiter() -> None:
        # set() does not yield: this task goes on into hold() and blocks on the lock before
        # the test runs again.
        waiting.set()
        async with locks.hold("k"):
            pytest.fail("a cancelled waiter must never get the lock")

    first = asyncio.create_task(holder())
    await held.wait()
    second = asyncio.create_task(waiter())
    await waiting.wait()
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    assert len(locks) == 1  # still held by `first`
    release.set()
    await first
    assert len(locks) == 0


async def test_keyed_serial_runs_in_order_per_key() -> None:
    serial = KeyedSerial("test")
    seen: list[str] = []

    async def step(name: str) -> str:
        await asyncio.sleep(0)
        seen.append(name)
        return name

    tasks = [serial.spawn("k", lambda n=n: step(n)) for n in ("1", "2", "3")]
    assert [await t for t in tasks] == ["1", "2", "3"]
    assert seen == ["1", "2", "3"]
    await serial.idle("k")
    await serial.close()
