"""Tests for host.conversation.lanes: per-conversation FIFO lanes, pools, cancellation,
reaping, drain."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import pytest

from host.conversation.lanes import LaneBusy, LaneManager, LanesClosed, LaneStatus
from host.runtime.events import EventBus, subscribe_stop

# Hang guard only: a broken lane manager fails fast instead of stalling the suite.
GUARD = 2.0


async def settle(rounds: int = 20) -> None:
    """Let every ready task run a few steps (no wall-clock waiting)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def wait_for(event: asyncio.Event) -> None:
    async with asyncio.timeout(GUARD):
        await event.wait()


class Gate:
    """A job factory whose jobs record start/finish and block until released."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.finished: list[str] = []
        self.cancelled: list[str] = []
        self.running = 0
        self.max_running = 0
        self._release: dict[str, asyncio.Event] = {}
        self._started_events: dict[str, asyncio.Event] = {}

    def _event(self, table: dict[str, asyncio.Event], name: str) -> asyncio.Event:
        return table.setdefault(name, asyncio.Event())

    def job(self, name: str, *, block: bool = True) -> Callable[[], Awaitable[str]]:
        async def work() -> str:
            self.started.append(name)
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            self._event(self._started_events, name).set()
            try:
                if block:
                    await self._event(self._release, name).wait()
            except asyncio.CancelledError:
                self.cancelled.append(name)
                raise
            finally:
                self.running -= 1
            self.finished.append(name)
            return name

        return work

    async def wait_started(self, name: str) -> None:
        await wait_for(self._event(self._started_events, name))

    def release(self, name: str) -> None:
        self._event(self._release, name).set()


def other_tasks() -> set[asyncio.Task[object]]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}


async def test_fifo_order_and_serial_within_lane() -> None:
    lanes = LaneManager(EventBus())
    gate = Gate()
    names = [f"j{i}" for i in range(5)]
    futures = [lanes.submit("c1", gate.job(n), label=n) for n in names]

    await gate.wait_started("j0")
    await settle()
    assert gate.started == ["j0"]
    assert lanes.status("c1") == LaneStatus(running="j0", queued=4)

    for n in names:
        gate.release(n)
    async with asyncio.timeout(GUARD):
        results = await asyncio.gather(*futures)
    assert results == names
    assert gate.started == names
    assert gate.finished == names
    assert gate.max_running == 1
    assert lanes.status("c1") == LaneStatus(running=None, queued=0)
    await lanes.drain(0)


async def test_parallelism_across_lanes_bounded_by_user_pool() -> None:
    lanes = LaneManager(EventBus(), user_pool=2)
    gate = Gate()
    futures = [lanes.submit(f"c{i}", gate.job(f"j{i}")) for i in range(4)]

    await gate.wait_started("j0")
    await gate.wait_started("j1")
    await settle()
    assert gate.started == ["j0", "j1"]  # lanes run in parallel, but only two slots

    gate.release("j0")
    await gate.wait_started("j2")
    await settle()
    assert len(gate.started) == 3

    for i in range(1, 4):
        gate.release(f"j{i}")
    async with asyncio.timeout(GUARD):
        await asyncio.gather(*futures)
    assert gate.max_running == 2
    await lanes.drain(0)


async def test_user_job_runs_while_system_pool_saturated() -> None:
    lanes = LaneManager(EventBus(), user_pool=1, system_pool=2)
    gate = Gate()
    system = [lanes.submit(f"s{i}", gate.job(f"sys{i}"), kind="system") for i in range(3)]
    await gate.wait_started("sys0")
    await gate.wait_started("sys1")

    async with asyncio.timeout(GUARD):
        assert await lanes.run("u1", gate.job("user", block=False)) == "user"

    assert "sys2" not in gate.started  # still waiting for a system slot
    for i in range(3):
        gate.release(f"sys{i}")
    async with asyncio.timeout(GUARD):
        await asyncio.gather(*system)
    await lanes.drain(0)


async def test_system_pool_cap_respected() -> None:
    lanes = LaneManager(EventBus(), system_pool=2)
    gate = Gate()
    futures = [
        lanes.submit(f"s{i}", gate.job(f"j{i}"), kind="system", label=f"j{i}") for i in range(3)
    ]

    await gate.wait_started("j0")
    await gate.wait_started("j1")
    await settle()
    assert gate.started == ["j0", "j1"]
    assert lanes.status("s2") == LaneStatus(running="j2", queued=0)  # its turn, but no slot

    gate.release("j1")
    await gate.wait_started("j2")
    gate.release("j0")
    gate.release("j2")
    async with asyncio.timeout(GUARD):
        await asyncio.gather(*futures)
    assert gate.max_running == 2
    await lanes.drain(0)


async def test_failure_propagates_and_lane_keeps_working() -> None:
    lanes = LaneManager(EventBus())
    gate = Gate()

    async def boom() -> str:
        await gate.wait_started("first")
        raise ValueError("turn exploded")

    first = lanes.submit("c1", gate.job("first", block=False))
    failing = lanes.submit("c1", boom)
    after = lanes.submit("c1", gate.job("after", block=False))

    async with asyncio.timeout(GUARD):
        assert await first == "first"
        with pytest.raises(ValueError, match="turn exploded"):
            await failing
        assert await after == "after"
        assert await lanes.run("c1", gate.job("again", block=False)) == "again"
    await lanes.drain(0)


async def test_cancelling_waiter_of_running_job_cancels_it_and_lane_survives() -> None:
    lanes = LaneManager(EventBus())
    gate = Gate()

    waiter = asyncio.create_task(lanes.run("c1", gate.job("long"), label="long"))
    await gate.wait_started("long")
    worker = lanes._lanes["c1"].worker

    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await settle()
    assert gate.cancelled == ["long"]

    async with asyncio.timeout(GUARD):
        assert await lanes.run("c1", gate.job("next", block=False)) == "next"
    assert lanes._lanes["c1"].worker is worker  # same worker, not a replacement
    assert worker is not None and not worker.done()
    await lanes.drain(0)


async def test_cancelling_submitted_future_of_running_job() -> None:
    lanes = LaneManager(EventBus())
    gate = Gate()
    future = lanes.submit("c1", gate.job("long"))
    queued = lanes.submit("c1", gate.job("queued", block=False))
    await gate.wait_started("long")

    future.cancel()
    async with asyncio.timeout(GUARD):
        assert await queued == "queued"
    assert gate.cancelled == ["long"]
    await lanes.drain(0)


async def test_cancelling_waiter_of_queued_job_drops_it() -> None:
    lanes = LaneManager(EventBus())
    gate = Gate()
    first = lanes.submit("c1", gate.job("first"))
    waiter = asyncio.create_task(lanes.run("c1", gate.job("dropped")))
    await gate.wait_started("first")
    await settle()
    assert lanes.status("c1").queued == 1

    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert lanes.status("c1").queued == 0

    gate.release("first")
    async with asyncio.timeout(GUARD):
        assert await first == "first"
        assert await lanes.run("c1", gate.job("later", block=False)) == "later"
    assert "dropped" not in gate.started
    await lanes.drain(0)


async def test_stop_cancels_running_and_queued_and_tells_the_bus() -> None:
    stopped: list[str] = []

    async def hook(key: str) -> None:
        stopped.append(key)

    async def broken_hook(key: str) -> None:
        raise RuntimeError("hook failed")

    bus = EventBus()
    subscribe_stop(bus, broken_hook)
    subscribe_stop(bus, hook)
    lanes = LaneManager(bus=bus)
    gate = Gate()
    running = lanes.submit("c1", gate.job("running"))
    queued = [lanes.submit("c1", gate.job(f"q{i}")) for i in range(2)]
    other = lanes.submit("c2", gate.job("other"))
    await gate.wait_started("running")
    await gate.wait_started("other")

    async with asyncio.timeout(GUARD):
        assert await lanes.stop("c1") == 3
    assert stopped == ["c1"]  # the broken hook did not stop the next one
    assert gate.cancelled == ["running"]  # stop waited for the running turn to unwind
    assert running.cancelled()
    assert all(f.cancelled() for f in queued)
    assert not other.done()  # other lanes are untouched
    assert lanes.status("c1") == LaneStatus(running=None, queued=0)

    async with asyncio.timeout(GUARD):
        assert await lanes.run("c1", gate.job("after", block=False)) == "after"
        assert await lanes.stop("nobody") == 0
    assert stopped == ["c1", "nobody"]
    assert "q0" not in gate.started
    gate.release("other")
    await lanes.drain(GUARD)


async def test_idle_lane_is_reaped_and_recreated() -> None:
    lanes = LaneManager(EventBus(), idle_seconds=0.05)
    gate = Gate()
    assert await lanes.run("c1", gate.job("a", block=False)) == "a"
    assert lanes.active_keys() == ["c1"]
    worker = lanes._lanes["c1"].worker
    assert worker is not None

    async with asyncio.timeout(GUARD):
        await asyncio.wait({worker})
    assert lanes.active_keys() == []
    assert worker.exception() is None

    async with asyncio.timeout(GUARD):
        assert await lanes.run("c1", gate.job("b", block=False)) == "b"
    assert lanes.active_keys() == ["c1"]
    assert lanes._lanes["c1"].worker is not worker
    await lanes.drain(0)


async def test_submit_around_idle_deadline_is_never_lost() -> None:
    lanes = LaneManager(EventBus(), idle_seconds=0.01)
    results: list[asyncio.Future[int]] = []
    loop = asyncio.get_running_loop()

    async def value(i: int) -> int:
        return i

    all_submitted = asyncio.Event()

    def submit_later(i: int) -> None:
        results.append(lanes.submit("c1", lambda: value(i)))
        if len(results) == 12:
            all_submitted.set()

    # Submissions scheduled before, at and after the idle deadline; each must complete.
    for i in range(12):
        loop.call_later(0.002 * i, submit_later, i)
    async with asyncio.timeout(GUARD):
        await all_submitted.wait()
        assert await asyncio.gather(*results) == list(range(12))
    await lanes.drain(0)


def block_loop(seconds: float) -> None:
    """Stall the event loop so that several due timers fire in one loop iteration."""
    time.sleep(seconds)


async def test_submit_landing_as_idle_timeout_fires_is_not_lost() -> None:
    lanes = LaneManager(EventBus(), idle_seconds=0.02)
    gate = Gate()
    assert await lanes.run("c1", gate.job("first", block=False)) == "first"
    await settle()  # the worker is now waiting for work with its idle timer armed
    loop = asyncio.get_running_loop()
    late: list[asyncio.Future[str]] = []
    # Due just after the idle deadline; stalling the loop makes both timers fire in the same
    # iteration (deadline first), so the submit lands after the worker's timeout but before
    # the worker resumes: exactly the race the worker must re-check for.
    loop.call_later(0.03, lambda: late.append(lanes.submit("c1", gate.job("late", block=False))))
    block_loop(0.06)
    await settle()
    assert len(late) == 1
    async with asyncio.timeout(GUARD):
        assert await late[0] == "late"
    await lanes.drain(0)


async def test_idle_zero_reaps_immediately_without_losing_work() -> None:
    lanes = LaneManager(EventBus(), idle_seconds=0)
    for i in range(5):
        assert await lanes.run("c1", Gate().job(f"j{i}", block=False)) == f"j{i}"
        await settle()
        assert lanes.active_keys() == []
    await lanes.drain(0)


async def test_queue_cap_raises_lane_busy() -> None:
    lanes = LaneManager(EventBus(), queue_cap=2)
    gate = Gate()
    running = lanes.submit("c1", gate.job("running"), label="running")
    await gate.wait_started("running")
    queued = [lanes.submit("c1", gate.job(f"q{i}", block=False)) for i in range(2)]

    with pytest.raises(LaneBusy) as info:
        lanes.submit("c1", gate.job("overflow"))
    assert str(info.value) == (
        "This conversation already has 2 requests waiting; wait for them to finish or say `stop`."
    )
    assert info.value.key == "c1"
    assert lanes.status("c1") == LaneStatus(running="running", queued=2)

    # A cancelled queued turn frees its place at once.
    queued[0].cancel()
    await settle()
    queued[0] = lanes.submit("c1", gate.job("q0-again", block=False))
    with pytest.raises(LaneBusy):
        lanes.submit("c1", gate.job("overflow"))

    # Other conversations are unaffected, and the lane accepts work once it drains.
    async with asyncio.timeout(GUARD):
        assert await lanes.run("c2", gate.job("c2", block=False)) == "c2"
        gate.release("running")
        await asyncio.gather(running, *queued)
        assert await lanes.run("c1", gate.job("later", block=False)) == "later"
    assert "overflow" not in gate.started
    await lanes.drain(0)


async def test_drain_waits_for_work_within_grace() -> None:
    lanes = LaneManager(EventBus())
    gate = Gate()
    running = lanes.submit("c1", gate.job("running"))
    queued = lanes.submit("c1", gate.job("queued", block=False))
    await gate.wait_started("running")

    drain = asyncio.create_task(lanes.drain(GUARD * 5))
    await settle()
    assert lanes.closed
    with pytest.raises(LanesClosed, match="not accepting new requests"):
        lanes.submit("c2", gate.job("late"))
    assert not drain.done()

    gate.release("running")
    async with asyncio.timeout(GUARD):
        await drain
    assert running.result() == "running"
    assert queued.result() == "queued"
    assert gate.cancelled == []
    assert lanes.active_keys() == []
    assert other_tasks() == set()


async def test_drain_cancels_work_beyond_grace() -> None:
    lanes = LaneManager(EventBus())
    gate = Gate()
    running = lanes.submit("c1", gate.job("stuck"))
    queued = lanes.submit("c1", gate.job("never"))
    idle = lanes.submit("c2", gate.job("done", block=False))
    waiter = asyncio.create_task(lanes.run("c3", gate.job("awaited")))
    await gate.wait_started("stuck")
    await gate.wait_started("awaited")
    assert await idle == "done"

    async with asyncio.timeout(GUARD):
        await lanes.drain(0.01)
    assert running.cancelled()
    assert queued.cancelled()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert sorted(gate.cancelled) == ["awaited", "stuck"]
    assert "never" not in gate.started
    assert lanes.active_keys() == []
    assert other_tasks() == set()
    with pytest.raises(LanesClosed):
        lanes.submit("c1", gate.job("late"))


async def test_drain_with_no_lanes_returns_and_rejects_work() -> None:
    lanes = LaneManager(EventBus())
    await lanes.drain(1.0)
    with pytest.raises(LanesClosed):
        await lanes.run("c1", Gate().job("late", block=False))
    assert other_tasks() == set()


async def test_failure_after_submitter_left_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    lanes = LaneManager(EventBus())
    started = asyncio.Event()

    async def fails_on_cancel() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            raise RuntimeError("cleanup failed")

    future = lanes.submit("c1", fails_on_cancel, label="fragile")
    await wait_for(started)
    with caplog.at_level(logging.ERROR, logger="host.conversation.lanes"):
        future.cancel()
        async with asyncio.timeout(GUARD):
            assert await lanes.run("c1", Gate().job("next", block=False)) == "next"
    assert "failed after its submitter left" in caplog.text
    assert "cleanup failed" in caplog.text
    await lanes.drain(0)


async def test_invalid_arguments() -> None:
    with pytest.raises(ValueError):
        LaneManager(EventBus(), user_pool=0)
    with pytest.raises(ValueError):
        LaneManager(EventBus(), queue_cap=0)
    lanes = LaneManager(EventBus())
    with pytest.raises(ValueError):
        lanes.submit("c1", Gate().job("x"), kind="bogus")  # type: ignore[arg-type]
    assert lanes.active_keys() == []


async def test_shutdown_grace_refuses_people_and_still_runs_the_bots_own_turns() -> None:
    lanes = LaneManager(EventBus())
    release = asyncio.Event()
    running = lanes.submit("c1", release.wait, label="a request by alice")
    lanes.close_to_people()
    with pytest.raises(LanesClosed):
        lanes.submit("c1", release.wait, kind="user")
    # A run that ends during the grace still reports: the bot's own turn is taken.
    report = lanes.submit("c2", release.wait, kind="system", label="a report of mine")
    await settle()
    assert sorted(lanes.running()) == ["a report of mine", "a request by alice"]
    idle = asyncio.ensure_future(lanes.idle())
    await settle()
    assert not idle.done()
    release.set()
    await idle
    assert running.done() and report.done() and lanes.running() == []
    await lanes.drain(0)
