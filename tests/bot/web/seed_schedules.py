"""Scheduled tasks for the viewer's tests, written through the stores as the bot writes them:
a task, its firings (recorded with the move to its next due time, in one commit), and the
runs a firing started (marked with the task, as the core marks them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from core.ids import ConversationRef
from core.store import Store
from host.features.schedules.line import TaskSchedule
from host.features.schedules.store import (
    Firing,
    FiringOutcome,
    ScheduledTask,
    TaskState,
    TaskStore,
)
from host.graph.run_store import RunRecord, RunStore


@dataclass(frozen=True)
class SeedFiring:
    """A fire time, what became of it, how late it fired, and the run it started (if any)."""

    due: datetime
    outcome: FiringOutcome = "ran"
    late_seconds: float = 2.0
    run_id: str | None = None


async def seed_task(
    store: Store,
    conv: ConversationRef,
    schedule: TaskSchedule,
    *,
    task_id: str,
    anchor: datetime,
    next_due: datetime | None,
    firings: Sequence[SeedFiring] = (),
    after_firings: datetime | None = None,
    state: TaskState = "active",
    owner_name: str = "Ada",
    approved_by: str | None = "U2",
    grants: tuple[str, ...] = (),
    last_digest: str | None = None,
    muted: bool = False,
    snoozed_until: datetime | None = None,
) -> ScheduledTask:
    """A task of `conv`, active at its first fire time `next_due`; then `firings` recorded
    (moving it on to `after_firings`, or done when that is None), their runs written, and
    its final `state` and flags set."""
    tasks, runs = TaskStore(store), RunStore(store)
    task = ScheduledTask(
        id=task_id,
        conversation=conv,
        owner="U1",
        owner_name=owner_name,
        schedule=schedule,
        grants=grants,
        anchor=anchor,
        state="active" if firings else state,
        next_due=next_due,
        fired=0,
    )
    if not await tasks.insert(task):
        raise ValueError(f"task {task_id} is already seeded")
    if firings:
        recorded = [
            Firing(task_id, f.due, f.outcome, f.late_seconds, f.due.timestamp() + f.late_seconds)
            for f in firings
        ]
        if not await tasks.record_firings(
            task, recorded, next_due=after_firings, fired=len(firings)
        ):
            raise RuntimeError(f"the firings of {task_id} were not recorded")
        for f, record in zip(firings, recorded, strict=True):
            if f.run_id is not None:
                await _seed_run(runs, conv, task_id, f.run_id, record.fired_at + 0.5)
    fields: dict[str, object] = {
        "approved_by": approved_by,
        "last_digest": last_digest,
        "muted": muted,
        "snoozed_until": snoozed_until,
    }
    if firings and state != "active":
        fields["state"] = state
    await tasks.update(task_id, **fields)
    seeded = await tasks.get(task_id)
    assert seeded is not None
    return seeded


async def _seed_run(
    runs: RunStore, conv: ConversationRef, task_id: str, run_id: str, created_at: float
) -> None:
    """The finished run a firing started (no nodes: the page links to it, no more)."""
    await runs.create_run(
        RunRecord(
            id=run_id,
            conversation=conv,
            task_summary=f"scheduled task {task_id}",
            background=True,
            state="completed",
            submitted_by="U1",
            submission={},
            run_dir=Path("runs") / run_id,
            replaces_run=None,
            status_message=None,
            created_at=created_at,
            finished_at=None,
            for_task=task_id,
        ),
        [],
    )
    await runs.set_run_state(run_id, "completed", finished=True)
