"""Scheduling one run: submitting ready nodes, waiting for decisions and their deadlines,
and the conversation's slots every run of it shares.

A submitted node renders its prompt, then waits for its instance (nodes sharing a handle run
one after another) and for the conversation's slot — `queued` while it waits, `running` once
it holds the slot. The slot is held for the agent call only: journaling, judging and
committing happen outside it, so the next node starts meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from core.keyed import KeyedLocks
from host.graph.executor.commits import NodeBook
from host.graph.executor.ready import ReadySet, RunFlags
from host.graph.model import NodeState
from host.graph.run_store import NodeRecord

log = logging.getLogger(__name__)


@dataclass
class ConversationCapacity:
    """Shared per conversation: one semaphore for graphs and delegations, instance locks."""

    semaphore: asyncio.Semaphore
    instance_locks: KeyedLocks = field(default_factory=KeyedLocks)
    # Holders and waiters per handle, so a node can tell it is about to wait (`queued`).
    _instance_users: dict[str, int] = field(default_factory=dict, init=False, repr=False)

    def instance_busy(self, handle: str) -> bool:
        """True when another node holds (or waits for) this instance."""
        return self._instance_users.get(handle, 0) > 0

    def instance_lock(self, handle: str) -> AbstractAsyncContextManager[None]:
        """Held while a node of this handle runs, so nodes sharing it run one after another."""
        return self._hold_instance(handle)

    @contextlib.asynccontextmanager
    async def _hold_instance(self, handle: str) -> AsyncIterator[None]:
        self._instance_users[handle] = self._instance_users.get(handle, 0) + 1
        try:
            async with self.instance_locks.hold(handle):
                yield
        finally:
            left = self._instance_users[handle] - 1
            if left:
                self._instance_users[handle] = left
            else:
                del self._instance_users[handle]


Attempt = Callable[[str], Coroutine[Any, Any, None]]


class Scheduler:
    """Submits each node once it is ready, one task per attempt, and waits until every node
    settled (suspended nodes wait for a decision or their deadline)."""

    def __init__(
        self,
        run_id: str,
        book: NodeBook,
        ready: ReadySet,
        flags: RunFlags,
        *,
        attempt: Attempt,
        clock: Callable[[], float],
    ) -> None:
        self._run_id = run_id
        self._book = book
        self._ready = ready
        self._flags = flags
        self._attempt = attempt
        self._clock = clock
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()

    async def run(self, order: Sequence[str]) -> None:
        """Submit what is ready, then loop until nothing runs or waits (or a halt)."""
        for node_id in order:
            self.submit_if_ready(node_id)
        while not self._flags.halting:
            await self._expire_decisions()
            if not self._tasks and not self._book.suspended:
                if self._book.idle:
                    return
                await self._book.drain()  # a commit may still submit nodes
                continue
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._next_deadline()):
                    await self._wake.wait()

    def wake(self) -> None:
        """Make the loop look again (a stop, a halt, a commit)."""
        self._wake.set()

    async def stop_tasks(self) -> None:
        """Cancel every running attempt and wait until they ended."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    def committed(self, record: NodeRecord, previous: NodeState) -> None:
        """A commit may make successors ready (a completion), or the node itself (a
        decision to continue)."""
        if record.state == "completed" and previous != "completed":
            for child in self._ready.completed(record.node_id):
                self.submit_if_ready(child)
        elif record.state == "pending":
            self.submit_if_ready(record.node_id)

    def batch_applied(self) -> None:
        """A commit wakes the loop."""
        self._wake.set()

    def submit_if_ready(self, node_id: str) -> None:
        """Eq. 31: pending, not submitted, every in-graph predecessor completed and settled
        (the counter drops only once a completion is committed)."""
        if self._flags.stopping or self._flags.halting or node_id in self._tasks:
            return
        if self._ready.blocked(node_id) or self._book.nodes[node_id].state != "pending":
            return
        if self._book.current(node_id).state != "pending":
            return  # about to be skipped, or a decision not committed yet
        task = asyncio.create_task(self._attempt(node_id), name=f"node:{self._run_id}:{node_id}")
        self._tasks[node_id] = task
        task.add_done_callback(functools.partial(self._node_done, node_id))

    def _node_done(self, node_id: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(node_id) is task:
            del self._tasks[node_id]
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("node %s of run %s crashed", node_id, self._run_id, exc_info=exc)
        # A continuation decided while the last attempt was still announcing starts now.
        self.submit_if_ready(node_id)
        self._wake.set()

    def _next_deadline(self) -> float | None:
        deadlines = [d for d in self._book.suspended.values() if d is not None]
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - self._clock())

    async def _expire_decisions(self) -> None:
        book = self._book
        if self._flags.stopping or not book.suspended:
            return
        now = self._clock()
        expired = [
            node_id
            for node_id, deadline in book.suspended.items()
            if deadline is not None
            and deadline <= now
            and book.current(node_id).state == "exception"
        ]
        for node_id in expired:
            book.decide(
                node_id,
                "failed",
                error=f"no decision by the deadline ({book.nodes[node_id].error})",
                deadline=None,
                finished_at=now,
            )
        if expired:
            await book.flushed()
