"""Conversation lanes: turns for one conversation run one at a time, in order.

Each conversation key gets a lane with its own worker task. Across lanes, concurrency is
bounded by two independent pools, so user turns never wait for a slot behind system work.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from host.runtime.events import ConversationStopped, EventBus, StoppedItem, StopTally

log = logging.getLogger(__name__)

T = TypeVar("T")

LaneKind = Literal["user", "system"]


class LaneError(Exception):
    """Base class for errors raised by `LaneManager`."""


class LaneBusy(LaneError):
    """Raised by `submit` when a conversation already has `cap` user turns waiting."""

    def __init__(self, key: str, cap: int) -> None:
        super().__init__(
            f"This conversation already has {cap} requests waiting; "
            "wait for them to finish or say `stop`."
        )
        self.key = key
        self.cap = cap


class LanesClosed(LaneError):
    """Raised by `submit` once `drain` has started: no new work is accepted."""

    def __init__(self) -> None:
        super().__init__("The bot is shutting down and is not accepting new requests.")


@dataclass(frozen=True)
class LaneStatus:
    """Snapshot of one lane: the running turn's label (None when idle) and how many wait."""

    running: str | None
    queued: int


@dataclass(eq=False)
class _Job(Generic[T]):
    work: Callable[[], Awaitable[T]]
    kind: LaneKind
    label: str
    future: asyncio.Future[T]
    # Who asked for it (the user id); "" for the bot's own work. `stop` goes by it.
    owner: str = ""
    # Set (synchronously) when the worker starts the job; None while it is queued.
    task: asyncio.Task[T] | None = None


@dataclass(eq=False)
class _Lane:
    key: str
    queue: deque[_Job[Any]] = field(default_factory=deque)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    # Set when nothing is running or queued; drain() waits on it.
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    running: _Job[Any] | None = None
    worker: asyncio.Task[None] | None = None

    def refresh_idle(self) -> None:
        if self.queue or self.running is not None:
            self.idle.clear()
        else:
            self.idle.set()


def _item(job: _Job[Any]) -> StoppedItem:
    return StoppedItem("request" if job.kind == "user" else "report", "", job.owner)


def _user_jobs(lane: _Lane) -> int:
    return sum(1 for job in lane.queue if job.kind == "user" and not job.future.done())


class LaneManager:
    """Runs conversation turns serially per key, with bounded user and system concurrency."""

    def __init__(
        self,
        bus: EventBus,
        *,
        user_pool: int = 4,
        system_pool: int = 2,
        idle_seconds: float = 300.0,
        queue_cap: int = 50,
    ) -> None:
        if user_pool < 1 or system_pool < 1:
            raise ValueError("lane pools need at least one slot each")
        if queue_cap < 1:
            raise ValueError("queue_cap must be at least 1")
        if idle_seconds < 0:
            raise ValueError("idle_seconds must not be negative")
        self._pools: dict[LaneKind, asyncio.Semaphore] = {
            "user": asyncio.Semaphore(user_pool),
            "system": asyncio.Semaphore(system_pool),
        }
        self._idle_seconds = idle_seconds
        self._queue_cap = queue_cap
        self._bus = bus
        self._lanes: dict[str, _Lane] = {}
        self._closed = False
        # Shutdown's grace: people's new turns are refused, the bot's own still run.
        self._people_closed = False

    @property
    def closed(self) -> bool:
        """True once `drain` has started."""
        return self._closed

    def submit(
        self,
        key: str,
        work: Callable[[], Awaitable[T]],
        *,
        kind: LaneKind = "user",
        label: str = "",
        owner: str = "",
    ) -> asyncio.Future[T]:
        """Queue `work` on the lane for `key`; the future resolves with its outcome.

        `owner` is who asked for it ("" for the bot's own work): a `stop` that is not
        privileged cancels only its typist's turns. Cancelling the future cancels the job.
        Raises `LaneBusy` or `LanesClosed` immediately.
        """
        if self._closed or (kind == "user" and self._people_closed):
            raise LanesClosed()
        if kind not in self._pools:
            raise ValueError(f"unknown lane kind {kind!r}")
        loop = asyncio.get_running_loop()
        lane = self._lanes.get(key)
        # The cap protects against flooding users; the bot's own reports and wake-ups are
        # never refused by it (they are recorded work that must run).
        if kind == "user" and lane is not None and _user_jobs(lane) >= self._queue_cap:
            raise LaneBusy(key, self._queue_cap)
        if lane is None:
            lane = _Lane(key)
            lane.worker = loop.create_task(self._worker(lane), name=f"lane-worker:{key}")
            self._lanes[key] = lane
            log.debug("lane %s: opened", key)
        future: asyncio.Future[T] = loop.create_future()
        job = _Job(work=work, kind=kind, label=label, future=future, owner=owner)
        future.add_done_callback(functools.partial(self._on_future_done, lane, job))
        lane.queue.append(job)
        lane.refresh_idle()
        lane.wakeup.set()
        return future

    async def run(
        self,
        key: str,
        work: Callable[[], Awaitable[T]],
        *,
        kind: LaneKind = "user",
        label: str = "",
        owner: str = "",
    ) -> T:
        """Submit `work` and wait for its result (cancelling this call cancels the job)."""
        return await self.submit(key, work, kind=kind, label=label, owner=owner)

    async def stop(
        self,
        key: str,
        *,
        by: str = "",
        privileged: bool = True,
        tally: StopTally | None = None,
    ) -> int:
        """Cancel the lane's running and queued turns that `by` may stop (their own, or
        every one when `privileged`), then publish ConversationStopped with the same rule.

        What was cancelled and what was left goes into `tally` (the subscribers add
        theirs). Waits for a cancelled running turn to unwind; returns how many turns
        were cancelled.
        """
        event = ConversationStopped(
            key, by, privileged, tally if tally is not None else StopTally()
        )
        cancelled = 0
        running_task: asyncio.Task[Any] | None = None
        lane = self._lanes.get(key)
        if lane is not None:
            for job in list(lane.queue):
                if job.future.done():
                    continue
                stoppable = event.may_stop(job.owner)
                event.tally.record(_item(job), cancelled=stoppable)
                # A cancelled queued job leaves the queue through its done-callback.
                if stoppable and job.future.cancel():
                    cancelled += 1
            running = lane.running
            if running is not None and running.task is not None:
                if running.future.done() or event.may_stop(running.owner):
                    running_task = running.task
                    # The future's done-callback cancels the task itself.
                    if running.future.cancel():
                        event.tally.record(_item(running), cancelled=True)
                        cancelled += 1
                else:
                    event.tally.record(_item(running), cancelled=False)
            lane.refresh_idle()
        # The bus logs a failing subscriber and still calls the others.
        await self._bus.publish(event)
        # A turn that calls stop() on its own lane must not wait for itself.
        if running_task is not None and running_task is not asyncio.current_task():
            await asyncio.wait({running_task})
        log.info("lane %s: stopped, %d turn(s) cancelled", key, cancelled)
        return cancelled

    def status(self, key: str) -> LaneStatus:
        """Return what the lane for `key` is running and how many turns wait behind it."""
        lane = self._lanes.get(key)
        if lane is None:
            return LaneStatus(running=None, queued=0)
        running = lane.running.label if lane.running is not None else None
        # A cancelled future leaves the queue one callback later; don't count it meanwhile.
        queued = sum(1 for job in lane.queue if not job.future.done())
        return LaneStatus(running=running, queued=queued)

    def close_to_people(self) -> None:
        """Refuse people's new turns (`LanesClosed`) while what runs gets its grace; the
        bot's own (the report of a run that ends meanwhile) are still taken."""
        self._people_closed = True

    def running(self) -> list[str]:
        """The labels of the turns running now and waiting, one per turn."""
        return [
            job.label or job.kind
            for lane in self._lanes.values()
            for job in ([lane.running] if lane.running is not None else []) + list(lane.queue)
            if not job.future.done()
        ]

    async def idle(self) -> None:
        """Wait until no lane runs or holds a turn (a lane opened meanwhile too)."""
        while busy := [lane for lane in self._lanes.values() if not lane.idle.is_set()]:
            waits = [asyncio.ensure_future(lane.idle.wait()) for lane in busy]
            try:
                await asyncio.wait(waits)
            finally:
                for wait in waits:
                    wait.cancel()

    def active_keys(self) -> list[str]:
        """Keys of lanes that currently exist (busy, or idle but not yet reaped)."""
        return list(self._lanes)

    async def drain(self, grace: float) -> None:
        """Refuse new work, give running and queued turns up to `grace` seconds to finish,
        then cancel whatever remains and await every lane worker."""
        self._closed = True
        lanes = list(self._lanes.values())
        try:
            async with asyncio.timeout(grace):
                for lane in lanes:
                    await lane.idle.wait()
        except TimeoutError:
            busy = sum(1 for lane in lanes if not lane.idle.is_set())
            # No grace: the caller already waited (and said so), this only cancels.
            log.log(
                logging.WARNING if grace > 0 else logging.INFO,
                "drain: %gs grace ran out; cancelling work in %d lane(s)",
                grace,
                busy,
            )
        finally:
            workers = [lane.worker for lane in lanes if lane.worker is not None]
            for worker in workers:
                worker.cancel()
            if workers:
                await asyncio.wait(workers)
            log.info("drain: %d lane worker(s) finished", len(workers))

    # -- internals -------------------------------------------------------------------------

    def _on_future_done(self, lane: _Lane, job: _Job[Any], future: asyncio.Future[Any]) -> None:
        if not future.cancelled():
            return
        if job.task is not None:
            # Running: interrupt it; the worker settles the job and moves on.
            job.task.cancel()
        elif job in lane.queue:
            lane.queue.remove(job)
            lane.refresh_idle()

    def _forget(self, lane: _Lane) -> None:
        if self._lanes.get(lane.key) is lane:
            del self._lanes[lane.key]

    async def _worker(self, lane: _Lane) -> None:
        try:
            while True:
                if not lane.queue:
                    if not await self._wait_for_work(lane):
                        return
                    continue
                job = lane.queue.popleft()
                if job.future.done():
                    # Cancelled while queued; its done-callback has not run yet.
                    continue
                await self._run_job(lane, job)
        except Exception:
            log.exception("lane %s: worker crashed", lane.key)
            for job in lane.queue:
                if not job.future.done():
                    job.future.set_exception(RuntimeError(f"lane {lane.key} worker crashed"))
        finally:
            self._forget(lane)
            # Only reached with a non-empty queue when cancelled (drain) or crashed.
            for job in lane.queue:
                job.future.cancel()
            lane.queue.clear()
            lane.refresh_idle()

    async def _wait_for_work(self, lane: _Lane) -> bool:
        """Wait for a submit; False when the lane sat idle too long and was removed."""
        lane.wakeup.clear()
        try:
            async with asyncio.timeout(self._idle_seconds):
                await lane.wakeup.wait()
        except TimeoutError:
            # A submit may have landed between the timeout firing and this resuming.
            if lane.queue:
                return True
            # No await between the check above and this removal, so no submit is lost:
            # a later submit simply opens a fresh lane.
            self._forget(lane)
            log.debug("lane %s: idle, reaped", lane.key)
            return False
        return True

    async def _run_job(self, lane: _Lane, job: _Job[Any]) -> None:
        lane.running = job
        lane.refresh_idle()
        task = asyncio.create_task(
            self._execute(job), name=f"lane:{lane.key}:{job.label or job.kind}"
        )
        job.task = task
        try:
            # asyncio.wait never raises the job's outcome (or its cancellation) into the worker.
            await asyncio.wait({task})
        finally:
            try:
                if not task.done():
                    # The worker itself is being cancelled: take the running job down with it.
                    task.cancel()
                    await asyncio.wait({task})
            finally:
                lane.running = None
                lane.refresh_idle()
                self._settle(lane.key, job, task)

    async def _execute(self, job: _Job[T]) -> T:
        async with self._pools[job.kind]:
            return await job.work()

    @staticmethod
    def _settle(key: str, job: _Job[Any], task: asyncio.Task[Any]) -> None:
        future = job.future
        if not task.done() or task.cancelled():
            future.cancel()
            return
        exc = task.exception()
        if exc is None:
            if not future.done():
                future.set_result(task.result())
        elif future.done():
            # The submitter is gone, so this log line is the only report of the failure.
            log.error(
                "lane %s: turn %r failed after its submitter left", key, job.label, exc_info=exc
            )
        else:
            log.info("lane %s: turn %r failed: %r", key, job.label, exc)
            future.set_exception(exc)
