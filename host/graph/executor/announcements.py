"""A run's events on the bus, each carrying a frozen snapshot of the run.

Progress is published by one task per run after commits, coalesced (a slow chat API delays
the status message, never the run); nothing is announced before it is committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import replace

from host.graph.executor.ready import RunFlags
from host.graph.model import NOT_STARTED_STATES, NodeState
from host.graph.report import not_approved
from host.graph.run_store import NodeRecord, RunRecord
from host.runtime.events import EventBus, RunException, RunFinished, RunProgress
from host.runtime.run_snapshot import NodeSnapshot, RunSnapshot

# A node's live note in the status message, at most.
NOTE_CHARS = 160


def node_snapshot(node: NodeRecord) -> NodeSnapshot:
    """What subscribers see of one committed node."""
    return NodeSnapshot(
        node_id=node.node_id,
        agent=node.agent,
        state=node.state,
        attempts=node.attempts,
        summary=node.summary,
        template=node.template,
        deps=node.deps,
        error=node.error,
        not_approved=not_approved(node),
    )


class Announcer:
    """Publishes one run's progress, exceptions and end; keeps each node's snapshot current
    as commits are applied, so a run snapshot costs one tuple."""

    def __init__(
        self,
        bus: EventBus,
        record: Callable[[], RunRecord],
        nodes: Mapping[str, NodeRecord],
        flags: RunFlags,
    ) -> None:
        self._bus = bus
        self._record = record
        self._flags = flags
        self._views = {node_id: node_snapshot(node) for node_id, node in nodes.items()}
        # Notes of agents that started before their `running` commit arrived.
        self._early: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None
        self._announce = asyncio.Event()
        self._dirty = False
        self._quiet = False

    def snapshot(self) -> RunSnapshot:
        """The run as committed now."""
        record = self._record()
        return RunSnapshot(
            id=record.id,
            conversation=record.conversation,
            task_summary=record.task_summary,
            background=record.background,
            state=record.state,
            submitted_by=record.submitted_by,
            nodes=tuple(self._views.values()),
        )

    def committed(self, record: NodeRecord, previous: NodeState) -> None:
        """A committed node replaces its snapshot."""
        view = node_snapshot(record)
        early = self._early.pop(record.node_id, None)
        if early is not None and view.state == "running":
            view = replace(view, note=early)
        self._views[record.node_id] = view

    def noted(self, node_id: str, note: str) -> None:
        """A running node's agent says what it does: shown with the next progress edit."""
        view = self._views.get(node_id)
        line = " ".join(note.split())[:NOTE_CHARS]
        if view is not None and view.state in NOT_STARTED_STATES:
            # The agent starts before its `running` state is committed: shown once it is.
            self._early[node_id] = line
            return
        if view is None or view.state != "running" or view.note == line:
            return
        self._views[node_id] = replace(view, note=line)
        self.batch_applied()

    def batch_applied(self) -> None:
        """Progress is owed (published by the announcing task)."""
        self._dirty = True
        self._announce.set()

    def start(self) -> None:
        """Start the announcing task (when the run starts)."""
        self._task = asyncio.create_task(self._progress(), name=f"run-progress:{self._run_id}")

    async def exception(self, node_id: str, report: str) -> None:
        """A node was suspended: publish it with the Host's report."""
        await self._bus.publish(RunException(self.snapshot(), node_id, report))

    async def finished(self) -> None:
        """The run ended: publish its final state."""
        await self._bus.publish(RunFinished(self.snapshot()))

    async def stop(self) -> None:
        """Publish what is still owed (not after a halt), then end the announcing task."""
        task = self._task
        if task is None:
            return
        self._quiet = True
        self._announce.set()
        if self._flags.halting:
            task.cancel()
        await asyncio.wait({task})

    async def end(self) -> None:
        """The announcing task never outlives the run: cancel it if it still runs."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task})

    @property
    def _run_id(self) -> str:
        return self._record().id

    async def _progress(self) -> None:
        """Publish progress after commits; changes made during a publish share the next."""
        while True:
            await self._announce.wait()
            self._announce.clear()
            if self._flags.halting:
                return
            if self._dirty:
                self._dirty = False
                await self._bus.publish(RunProgress(self.snapshot()))
            if self._quiet and not self._dirty:
                return
