"""`raven-bot schedules list|show|pause|resume|delete|run`: scheduled tasks from the command
line, for the operator (who may act on any task).

Each action commits to RAVEN_HOME/raven.db; a running bot picks the change up within
`RECONCILE_SECONDS` (a paused or deleted task's job is dropped, a resumed one is armed, `run`
fires once now); a bot that is not running applies it when it starts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from bot.cli.database import open_database
from bot.home import HomeError, check_home
from bot.settings import Settings
from host.features.schedules.store import (
    LIVE_STATES,
    RECONCILE_SECONDS,
    ScheduledTask,
    TaskStore,
)
from host.features.schedules.timing import describe_schedule, fire_times, shown

_APPLIED = f"a running bot applies it within {RECONCILE_SECONDS:.0f} s, or when it next starts"


def schedules_command(args: argparse.Namespace, settings: Settings) -> int:
    """Entry for `raven-bot schedules ACTION`; 2 with one line for an unknown task or an
    unusable RAVEN_HOME."""
    try:
        check_home(settings.home)
        return asyncio.run(_command(settings, args, sys.stdout))
    except HomeError as exc:
        print(f"raven-bot: {exc}", file=sys.stderr)
        return 2


async def _command(settings: Settings, args: argparse.Namespace, out: TextIO) -> int:
    action: str = args.schedules_command
    async with open_database(settings.home) as store:
        tasks = TaskStore(store)
        if action == "list":
            return await _list(tasks, args.json, args.all, out)
        task = await tasks.get(args.task)
        if task is None:
            print(
                f"raven-bot: no task {args.task!r} (`raven-bot schedules list` shows the ids)",
                file=sys.stderr,
            )
            return 2
        if action == "show":
            return await _show(tasks, task, args.json, out)
        line = await _act(tasks, task, action)
        out.write(line + "\n")
        return 0


async def _list(tasks: TaskStore, as_json: bool, everything: bool, out: TextIO) -> int:
    records = await tasks.listed(live_only=not everything)
    if as_json:
        out.write(json.dumps([task_json(t) for t in records], indent=2) + "\n")
        return 0
    if not records:
        out.write(
            "No scheduled tasks." + ("" if everything else " (`--all` shows ended ones)") + "\n"
        )
    for task in records:
        out.write(f"{_summary(task)}\n")
    return 0


def _summary(task: ScheduledTask) -> str:
    schedule = task.schedule
    when = (
        f"next {shown(task.next_due, schedule.zone)}"
        if task.state == "active" and task.next_due is not None
        else task.state
    )
    what = " ".join(schedule.what.split())
    what = what if len(what) <= 60 else what[:59] + "…"
    return (
        f"{task.id}  {task.state:<9}  {schedule.kind} {schedule.when} ({schedule.tz})  {when}  "
        f"by {task.owner_name} in {task.conversation.id}  — {what}"
    )


async def _show(tasks: TaskStore, task: ScheduledTask, as_json: bool, out: TextIO) -> int:
    firings = await tasks.firings(task.id)
    counts = await tasks.firing_counts(task.id)
    if as_json:
        record = task_json(task)
        record["firings"] = [
            {
                "due": f.due.isoformat(),
                "outcome": f.outcome,
                "late_seconds": round(f.late_seconds, 3),
                "fired_at": datetime.fromtimestamp(f.fired_at, UTC).isoformat(),
            }
            for f in firings
        ]
        out.write(json.dumps(record, indent=2) + "\n")
        return 0
    zone = task.schedule.zone
    lines = [
        _summary(task),
        f"When: {describe_schedule(task.schedule)}",
        f"Owner: {task.owner_name} ({task.owner}); approved by {task.approved_by or 'nobody yet'}",
        _fired(task, counts),
        "Runs:",
        *(f"    {line}" for line in task.schedule.what.splitlines()),
        "Latest firings:" if firings else "No firings yet.",
        *(f"- {shown(f.due, zone)}: {f.outcome}, {f.late_seconds:.1f} s late" for f in firings),
    ]
    out.write("\n".join(lines) + "\n")
    return 0


def _fired(task: ScheduledTask, counts: dict[str, int]) -> str:
    """Every firing recorded (runs now included), by outcome, as listed below it; with a
    `count:`, how many of its fire times are used (runs now do not use one)."""
    total = sum(counts.values())
    by_outcome = ", ".join(f"{n} {outcome}" for outcome, n in counts.items())
    line = f"Fired: {total} time(s)" + (f" ({by_outcome})" if total else "")
    if task.schedule.count is not None:
        line += f"; {task.fired} of its {task.schedule.count} fire times used"
    return line


async def _act(tasks: TaskStore, task: ScheduledTask, action: str) -> str:
    if action == "pause":
        if not await tasks.transition(task.id, ["active"], state="paused", operator_changed=True):
            return f"Task {task.id} is {task.state}; only an active task can be paused."
        return f"Task {task.id} paused ({_APPLIED})."
    if action == "resume":
        nxt = next(
            fire_times(task.schedule, task.anchor, datetime.now(UTC), fired=task.fired), None
        )
        if nxt is None:
            await tasks.transition(task.id, ["paused"], state="done")
            return f"Task {task.id} has no fire time left; it is done."
        if not await tasks.transition(
            task.id, ["paused"], state="active", next_due=nxt, operator_changed=True
        ):
            return f"Task {task.id} is {task.state}; only a paused task can be resumed."
        return f"Task {task.id} resumed, next {shown(nxt, task.schedule.zone)} ({_APPLIED})."
    if action == "delete":
        if not await tasks.transition(
            task.id, LIVE_STATES, state="cancelled", operator_changed=True
        ):
            return f"Task {task.id} is already {task.state}."
        return f"Task {task.id} cancelled ({_APPLIED})."
    if not await tasks.transition(task.id, ["active"], run_now=True, operator_changed=True):
        return f"Task {task.id} is {task.state}; only an active task can run now."
    return f"Task {task.id} will run once now ({_APPLIED})."


def task_json(task: ScheduledTask) -> dict[str, Any]:
    """A task as `--json` prints it."""
    return {
        "id": task.id,
        "state": task.state,
        "owner": task.owner,
        "owner_name": task.owner_name,
        "conversation": task.conversation.id,
        "schedule": task.schedule.model_dump(mode="json"),
        "next_due": None if task.next_due is None else task.next_due.isoformat(),
        "fired": task.fired,
        "approved_by": task.approved_by,
        "created_at": datetime.fromtimestamp(task.created_at, UTC).isoformat(),
    }
