"""Scheduled tasks in SQLite. Every change is committed here before it is announced or a
job is scheduled for it; a firing's rows and the task's next due time commit together."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from core.ids import ConversationRef
from core.store import Row, Store
from host.features.schedules.line import TaskSchedule
from host.nudges.policy import Nudge

TaskState = Literal["proposed", "active", "paused", "done", "cancelled", "denied"]
# States in which a task may still fire (after approval, or after a resume).
LIVE_STATES: tuple[TaskState, ...] = ("proposed", "active", "paused")
FiringOutcome = Literal["ran", "skipped", "limited", "checked"]
# How often a running bot re-reads tasks another process changed (`raven-bot schedules …`).
RECONCILE_SECONDS = 10.0


def iso(when: datetime) -> str:
    """A time as stored: UTC, ISO 8601 (so text order is time order)."""
    return when.astimezone(UTC).isoformat()


def _when(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


@dataclass(frozen=True)
class ScheduledTask:
    """One task: whose it is, where it posts, when it fires, and what was approved."""

    id: str
    conversation: ConversationRef
    owner: str
    owner_name: str
    schedule: TaskSchedule
    # The exact commands approved with the task (a firing runs these without asking).
    grants: tuple[str, ...]
    # When it was created: every fire time is computed from it (the phase of `every`).
    anchor: datetime
    state: TaskState
    next_due: datetime | None
    fired: int
    owner_roles: tuple[str, ...] = ()
    prompt_id: str | None = None
    approved_by: str | None = None
    last_digest: str | None = None
    run_now: bool = False
    created_at: float = 0.0
    updated_at: float = 0.0
    # Its firings say nothing: muted until unmuted, or snoozed until a time.
    muted: bool = False
    snoozed_until: datetime | None = None

    def quiet(self, now: datetime) -> bool:
        """Whether its posts are held back (muted, or snoozed at `now`)."""
        return self.muted or (self.snoozed_until is not None and now < self.snoozed_until)

    def nudge(self, text: str) -> Nudge:
        """`text` said by the task on its own, for its owner."""
        return Nudge(self.conversation, self.owner, text, f"task {self.id}")


@dataclass(frozen=True)
class Firing:
    """One scheduled time of a task and what became of it."""

    task_id: str
    due: datetime
    outcome: FiringOutcome
    late_seconds: float
    fired_at: float


def _task(row: Row) -> ScheduledTask:
    return ScheduledTask(
        id=row["id"],
        conversation=ConversationRef.parse(row["conversation_id"]),
        owner=row["owner"],
        owner_name=row["owner_name"],
        owner_roles=tuple(json.loads(row["owner_roles"])),
        schedule=TaskSchedule.model_validate_json(row["schedule"]),
        grants=tuple(json.loads(row["grants"])),
        anchor=datetime.fromisoformat(row["anchor"]),
        state=row["state"],
        next_due=_when(row["next_due"]),
        fired=int(row["fired"]),
        prompt_id=row["prompt_id"],
        approved_by=row["approved_by"],
        last_digest=row["last_digest"],
        run_now=bool(row["run_now"]),
        muted=bool(row["muted"]),
        snoozed_until=_when(row["snoozed_until"]),
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
    )


_COLUMNS = {
    "state",
    "next_due",
    "fired",
    "prompt_id",
    "approved_by",
    "last_digest",
    "run_now",
    "muted",
    "snoozed_until",
    "operator_changed",
}


class TaskStore:
    """Reads and writes the scheduled task tables."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock

    async def insert(self, task: ScheduledTask) -> bool:
        """Store a new task; False when one with its id exists (a redelivered request)."""
        now = self._clock()
        written = await self._store.execute(
            "INSERT OR IGNORE INTO scheduled_tasks (id, conversation_id, channel_key, owner,"
            " owner_name, owner_roles, schedule, grants, anchor, state, next_due, fired,"
            " prompt_id, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
            " ?, ?)",
            (
                task.id,
                task.conversation.id,
                task.conversation.channel_key,
                task.owner,
                task.owner_name,
                json.dumps(list(task.owner_roles)),
                task.schedule.model_dump_json(),
                json.dumps(list(task.grants)),
                iso(task.anchor),
                task.state,
                None if task.next_due is None else iso(task.next_due),
                task.fired,
                task.prompt_id,
                now,
                now,
            ),
        )
        return written > 0

    async def get(self, task_id: str) -> ScheduledTask | None:
        row = await self._store.fetchone("SELECT * FROM scheduled_tasks WHERE id = ?", (task_id,))
        return None if row is None else _task(row)

    async def of_conversation(self, conversation_id: str) -> list[ScheduledTask]:
        """The conversation's tasks that may still fire, oldest first."""
        return await self._select(
            "conversation_id = ? AND state IN ('proposed', 'active', 'paused')",
            (conversation_id,),
        )

    async def listed(self, *, live_only: bool = True, limit: int = 500) -> list[ScheduledTask]:
        """Every task (those that may still fire, unless `live_only` is False), newest first."""
        where = "state IN ('proposed', 'active', 'paused')" if live_only else "1"
        rows = await self._store.fetchall(
            f"SELECT * FROM scheduled_tasks WHERE {where} ORDER BY created_at DESC LIMIT ?",
            (limit,),
        )
        return [_task(row) for row in rows]

    async def ended_within(
        self, seconds: float, conversation_id: str | None = None
    ) -> list[ScheduledTask]:
        """Tasks that ended (done, cancelled, denied) in the last `seconds`, of one
        conversation when given, the latest first."""
        since = self._clock() - seconds
        where = "state NOT IN ('proposed', 'active', 'paused') AND updated_at >= ?"
        params: tuple[object, ...] = (since,)
        if conversation_id is not None:
            where += " AND conversation_id = ?"
            params = (since, conversation_id)
        rows = await self._store.fetchall(
            f"SELECT * FROM scheduled_tasks WHERE {where} ORDER BY updated_at DESC", params
        )
        return [_task(row) for row in rows]

    async def active(self) -> list[ScheduledTask]:
        """Tasks waiting for their next firing."""
        return await self._select("state = 'active'", ())

    async def operator_changed(self) -> list[ScheduledTask]:
        """Tasks the operator changed (`raven-bot schedules …`) that the bot has not applied."""
        return await self._select("operator_changed = 1", ())

    async def applied(self, task: ScheduledTask) -> None:
        """The operator's change of `task` is applied (unless another came since)."""
        await self._store.execute(
            "UPDATE scheduled_tasks SET operator_changed = 0 WHERE id = ? AND updated_at = ?",
            (task.id, task.updated_at),
        )

    async def live_count(self, owner: str) -> int:
        """How many tasks `owner` has that may still fire (the per-user limit)."""
        row = await self._store.fetchone(
            "SELECT COUNT(*) AS n FROM scheduled_tasks WHERE owner = ?"
            " AND state IN ('proposed', 'active', 'paused')",
            (owner,),
        )
        return 0 if row is None else int(row["n"])

    async def _select(self, where: str, params: Sequence[Any]) -> list[ScheduledTask]:
        rows = await self._store.fetchall(
            f"SELECT * FROM scheduled_tasks WHERE {where} ORDER BY created_at, id", params
        )
        return [_task(row) for row in rows]

    async def update(self, task_id: str, **fields: Any) -> None:
        """Change some of a task's columns (state, next_due, …)."""
        unknown = set(fields) - _COLUMNS
        if unknown:
            raise ValueError(f"not task columns: {sorted(unknown)}")
        values = [_column_value(v) for v in fields.values()]
        sets = ", ".join(f"{name} = ?" for name in fields)
        await self._store.execute(
            f"UPDATE scheduled_tasks SET {sets}, updated_at = ? WHERE id = ?",
            (*values, self._clock(), task_id),
        )

    async def transition(self, task_id: str, expected: Sequence[TaskState], **fields: Any) -> bool:
        """`update` only when the task is in one of `expected` states; True when it was."""
        unknown = set(fields) - _COLUMNS
        if unknown:
            raise ValueError(f"not task columns: {sorted(unknown)}")
        values = [_column_value(v) for v in fields.values()]
        sets = ", ".join(f"{name} = ?" for name in fields)
        marks = ", ".join("?" for _ in expected)
        changed = await self._store.execute(
            f"UPDATE scheduled_tasks SET {sets}, updated_at = ? WHERE id = ? AND state IN"
            f" ({marks})",
            (*values, self._clock(), task_id, *expected),
        )
        return changed > 0

    async def record_firings(
        self,
        task: ScheduledTask,
        firings: Sequence[Firing],
        *,
        next_due: datetime | None,
        fired: int,
        digest: str | None = None,
    ) -> bool:
        """Record `firings` and move the task on to `next_due` (and its result's `digest`,
        when given), in one commit, only if the task still waits for the firing it had
        (False: another firing or a change won)."""
        now = self._clock()
        key = task.conversation.channel_key

        def write(db: sqlite3.Connection) -> bool:
            moved = db.execute(
                "UPDATE scheduled_tasks SET next_due = ?, fired = ?, state = ?,"
                " updated_at = ? WHERE id = ? AND state = 'active' AND fired = ?"
                " AND next_due IS ?",
                (
                    None if next_due is None else iso(next_due),
                    fired,
                    "active" if next_due is not None else "done",
                    now,
                    task.id,
                    task.fired,
                    None if task.next_due is None else iso(task.next_due),
                ),
            ).rowcount
            if not moved:
                return False
            if digest is not None:
                db.execute(
                    "UPDATE scheduled_tasks SET last_digest = ? WHERE id = ?", (digest, task.id)
                )
            db.executemany(
                "INSERT OR IGNORE INTO scheduled_firings (task_id, due, channel_key, outcome,"
                " late_seconds, fired_at) VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (f.task_id, iso(f.due), key, f.outcome, f.late_seconds, f.fired_at)
                    for f in firings
                ],
            )
            return True

        return await self._store.write(write)

    async def firing_counts(self, task_id: str) -> dict[str, int]:
        """How many firings of the task were recorded, by outcome (runs now included)."""
        rows = await self._store.fetchall(
            "SELECT outcome, COUNT(*) AS n FROM scheduled_firings WHERE task_id = ?"
            " GROUP BY outcome ORDER BY outcome",
            (task_id,),
        )
        return {str(row["outcome"]): int(row["n"]) for row in rows}

    async def firings(self, task_id: str, *, limit: int = 20) -> list[Firing]:
        """The task's latest firings, newest first."""
        rows = await self._store.fetchall(
            "SELECT * FROM scheduled_firings WHERE task_id = ? ORDER BY due DESC LIMIT ?",
            (task_id, limit),
        )
        return [
            Firing(
                row["task_id"],
                datetime.fromisoformat(row["due"]),
                row["outcome"],
                float(row["late_seconds"]),
                float(row["fired_at"]),
            )
            for row in rows
        ]

    async def channel_runs_since(self, key: str, since: float) -> int:
        """Firings that ran in channel `key` after `since` (the per-channel hourly limit)."""
        row = await self._store.fetchone(
            "SELECT COUNT(*) AS n FROM scheduled_firings WHERE channel_key = ? AND fired_at > ?"
            " AND outcome = 'ran'",
            (key, since),
        )
        return 0 if row is None else int(row["n"])


def _column_value(value: object) -> object:
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, bool):
        return int(value)
    return value
