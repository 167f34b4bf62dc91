"""What a conversation's scheduled-work page shows: each task's schedule in words, its next
fire times (computed by the scheduler's own timing code), its state said plainly, standing
checks' commands and last result, and its latest firings with the runs they started.

Only the link's conversation is read: its tasks by conversation id, and a firing's runs only
when they belong to that conversation too (a task posting to the channel may start runs
elsewhere; those stay unlinked rather than leaking ids of another conversation).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from bot.web.run_view import RECORD_ID
from core.ids import ConversationRef
from host.features.schedules.line import ScheduleError
from host.features.schedules.store import LIVE_STATES, Firing, ScheduledTask, TaskStore
from host.features.schedules.timing import describe_schedule, fire_times
from host.features.schedules.work import Check, CheckState, parse_check
from host.graph.run_store import RunRecord, RunStore

# How many fire times ahead, and firings back, each task shows.
NEXT_TIMES: Final = 5
FIRINGS_SHOWN: Final = 10
# Ended tasks (done, cancelled, denied) stay on the page this long after they ended.
ENDED_DAYS: Final = 14

_STATES: Final = {
    "proposed": "Waiting for approval: it fires only once someone approves it.",
    "active": "Active.",
    "paused": "Paused: it does not fire until someone resumes it.",
    "done": "Ended: it has no fire time left.",
    "cancelled": "Cancelled.",
    "denied": "Not approved: it never fired.",
}
_OUTCOMES: Final = {
    "ran": "ran",
    "skipped": "skipped (missed while the bot was down or held back)",
    "limited": "not run (the channel's hourly limit of scheduled firings)",
    "checked": "checked",
}


@dataclass(frozen=True)
class CheckView:
    """A standing check: its command verbatim, what trips it, where it runs, and the state
    its last firing left (None before its first)."""

    command: str
    trips_on: str
    where: str
    last: CheckState | None


@dataclass(frozen=True)
class FiringView:
    """One fire time of a task, what became of it, and the runs it started here."""

    due: datetime
    outcome: str
    outcome_text: str
    late_seconds: float
    fired_at: float
    runs: tuple[RunRecord, ...]


@dataclass(frozen=True)
class TaskView:
    """A task as the page shows it."""

    task: ScheduledTask
    described: str
    state_text: str
    # Plain notes on how it fires now: muted, snoozed until, overdue, unreadable.
    notes: tuple[str, ...]
    snoozed_until: datetime | None
    next_times: tuple[datetime, ...]
    # What the next times mean (overdue, if approved), or why there are none.
    next_note: str
    check: CheckView | None
    firings: tuple[FiringView, ...]
    counts: tuple[tuple[str, int], ...]

    @property
    def live(self) -> bool:
        return self.task.state in LIVE_STATES

    @property
    def fired_total(self) -> int:
        return sum(n for _, n in self.counts)


@dataclass(frozen=True)
class SchedulesView:
    """A conversation's scheduled tasks as the page shows them: live ones, then the ones
    that ended in the last ENDED_DAYS days (latest first)."""

    live: tuple[TaskView, ...]
    ended: tuple[TaskView, ...]
    ended_days: int = ENDED_DAYS

    @property
    def tasks(self) -> tuple[TaskView, ...]:
        return self.live + self.ended


async def load_schedules(
    tasks: TaskStore, runs: RunStore, conv: ConversationRef, *, now: float
) -> SchedulesView:
    """The conversation's scheduled tasks, live ones first."""
    live = await tasks.of_conversation(conv.id)
    ended = await tasks.ended_within(ENDED_DAYS * 86_400.0, conv.id)
    moment = datetime.fromtimestamp(now, UTC)
    return SchedulesView(
        tuple([await _task_view(tasks, runs, conv, t, moment) for t in live]),
        tuple([await _task_view(tasks, runs, conv, t, moment) for t in ended]),
    )


async def _task_view(
    tasks: TaskStore, runs: RunStore, conv: ConversationRef, task: ScheduledTask, now: datetime
) -> TaskView:
    notes: list[str] = []
    check: CheckView | None = None
    try:
        parsed = parse_check(task.schedule.what)
    except ScheduleError as exc:
        parsed = None
        notes.append(f"This check can no longer be read ({exc}).")
    if parsed is not None:
        check = _check_view(parsed, task.last_digest)
    live = task.state in LIVE_STATES
    if live and task.muted:
        notes.append("Muted: its firings say nothing until it is unmuted.")
    until = task.snoozed_until
    snoozed = until if live and until is not None and now < until else None
    times, next_note = _next(task, now)
    firings = await tasks.firings(task.id, limit=FIRINGS_SHOWN)
    counts = await tasks.firing_counts(task.id)
    return TaskView(
        task=task,
        described=describe_schedule(task.schedule),
        state_text=_STATES.get(task.state, task.state),
        notes=tuple(notes),
        snoozed_until=snoozed,
        next_times=times,
        next_note=next_note,
        check=check,
        firings=await _firings(runs, conv, task.id, firings),
        counts=tuple(counts.items()),
    )


def _check_view(check: Check, last_digest: str | None) -> CheckView:
    # A check's firing stores its state (passing, tripped, broken) as the task's digest.
    last: CheckState | None = None
    if last_digest in ("passing", "tripped", "broken"):
        last = last_digest  # type: ignore[assignment]
    return CheckView(check.command, check.trips_on, check.where, last)


def _next(task: ScheduledTask, now: datetime) -> tuple[tuple[datetime, ...], str]:
    """The task's next fire times and what they mean, from the scheduler's timing code: an
    active task's stored next due time, then the ones after it (its `count` respected)."""
    schedule = task.schedule
    try:
        if task.state == "active":
            if task.next_due is None:
                return (), "No fire time is set."
            after = fire_times(schedule, task.anchor, task.next_due, fired=task.fired + 1)
            times = (task.next_due, *itertools.islice(after, NEXT_TIMES - 1))
            late = (
                "The first is overdue: it fires as soon as the bot runs." if times[0] < now else ""
            )
            return times, late
        if task.state == "proposed":
            start = max(now, task.anchor)
            planned = fire_times(schedule, task.anchor, start, fired=task.fired)
            return tuple(itertools.islice(planned, NEXT_TIMES)), "If it is approved:"
    except ValueError as exc:
        return (), f"Its fire times cannot be computed: {exc}"
    if task.state == "paused":
        return (), "No fire times while it is paused."
    return (), "It fires no more."


async def _firings(
    runs: RunStore, conv: ConversationRef, task_id: str, firings: list[Firing]
) -> tuple[FiringView, ...]:
    """The firings with the runs each started: a firing's runs are the task's runs created
    from its firing time until the next firing's (one firing time may hold several due
    times after an outage: their runs are handed out in due order)."""
    if not firings:
        return ()
    since = min(f.fired_at for f in firings)
    started = [
        r
        for r in await runs.runs_for_task(task_id, since=since)
        if r.conversation.id == conv.id and RECORD_ID.match(r.id)
    ]
    by_firing: dict[tuple[str, datetime], list[RunRecord]] = {}
    moments = sorted({f.fired_at for f in firings})
    for start, end in zip(moments, [*moments[1:], float("inf")], strict=True):
        window = [r for r in started if start <= r.created_at < end]
        ran = sorted(
            (f for f in firings if f.fired_at == start and f.outcome == "ran"), key=lambda f: f.due
        )
        for i, firing in enumerate(ran):
            mine = window[i : i + 1] if i < len(ran) - 1 else window[i:]
            by_firing[(firing.task_id, firing.due)] = mine
    return tuple(
        FiringView(
            due=f.due,
            outcome=f.outcome,
            outcome_text=_OUTCOMES.get(f.outcome, f.outcome),
            late_seconds=f.late_seconds,
            fired_at=f.fired_at,
            runs=tuple(by_firing.get((f.task_id, f.due), ())),
        )
        for f in firings
    )
