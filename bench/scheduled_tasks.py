"""Benchmark: scheduled tasks (issue 20): registering 10,000 tasks, the restart that reads
them, firing lateness under load, and the model calls a firing makes.

(1) Inserts `--tasks` (10,000) active tasks into a real `Store` (temporary raven.db, every
migration of `bot.schema`) with `TaskStore.insert`, each with a schedule parsed by
`parse_schedule` (every 1h/2h/6h and two cron lines, an explicit one-node plan), its anchor
now and its first fire time from `timing.fire_times`, then arms each one's job
(`scheduled-task:<id>`, kind `scheduled_task`) through the real `ApschedulerScheduler`
(SQLAlchemy job store on a temporary scheduler.db), one at a time as approvals do. Prints the
time per step, the RSS growth (VmRSS) and the size of both databases, then times
`ScheduledTasks.start()`, the restart path that reads every active task and arms the
tasks whose job is missing.

(2) Inserts `--firing` (1,000) more tasks (`every 1h`, an explicit plan, each in its own
channel so the hourly per-channel limit does not apply) whose next due times are spread over
`--spread` seconds once all are stored, arms them, and lets them fire with the 10,000 jobs of
(1) still in the job store. The job handler is the feature's (`ScheduledTasks.on_job`) and a
counting `TurnRequested` subscriber stands in for the conversation service. Prints lateness
p50/p99/max: `FiredJob.fired_at − scheduled_at` (APScheduler), TurnRequested arrival − due
(end to end through the firing path) and handler return − due (after the firing's commit
and the re-arm for the next hour); then the turns requested, `doubled` and `lost` (from the
distinct turn keys) and the firings recorded. Under load by default (`--loads cpu`): a task
on the event loop that spins the CPU in `--slice-ms` slices for `--duty` of the time;
`--loads quiet,cpu` runs it once without that load first, to compare.

(3) Standing checks (`watch:`) are not built yet: no figure. The explicit-plan firings of (2)
made no model call: no provider is reachable from the firing path, a firing only requests
a turn.

Goals of issue 20 are printed next to the figures and never asserted; it exits 1 only when a
turn was doubled or lost. Data goes to a temporary directory removed afterwards. About 45 s
on 2 cores, most of it the 10,000 job commits of arming in (1).
Run from the repo root:

    .venv/bin/python bench/scheduled_tasks.py [--tasks 10000] [--firing 1000] [--spread 3]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import gc
import os
import platform
import shutil
import sqlite3
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import cast

from bot.schema import all_migrations
from core.ids import ConversationRef
from core.store import Store
from host.conversation.outbox import Outbox
from host.features.schedules.line import TaskSchedule, parse_schedule
from host.features.schedules.store import ScheduledTask, TaskStore, iso
from host.features.schedules.tasks import (
    SCHEDULED_TASK_JOB,
    ScheduledTasks,
    ScheduleLimits,
    TaskDeps,
    job_id,
)
from host.features.schedules.timing import fire_times
from host.features.schedules.work import task_work
from host.prompts.broker import PromptBroker
from host.runtime.apscheduler_adapter import ApschedulerScheduler
from host.runtime.events import EventBus, TurnRequested, subscribe_job
from host.runtime.roles import Roles
from host.runtime.scheduling import FiredJob

WHAT = "s1: shell: echo hi"
# What the registered tasks' schedules cycle through.
WHENS = ("every 1h", "every 2h", "every 6h", "cron 0 9 * * 1-5", "cron 30 */4 * * *")
REGISTER_GOAL = 10.0  # seconds for 10,000 tasks
LATENESS_GOAL = 1.0  # seconds, p99 under load
WITHIN = 120.0  # hang guard for a firing run


# ------------------------------------------------------------------------------ figures


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (nearest rank) of `values`; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def ms(seconds: float) -> str:
    """Seconds as milliseconds, right-aligned."""
    return f"{seconds * 1000:8.1f}"


def spread_line(label: str, values: Sequence[float]) -> str:
    """`label  n  p50  p99  max` in milliseconds."""
    return (
        f"  {label:<40} {len(values):>5} {ms(pct(values, 50))} {ms(pct(values, 99))} "
        f"{ms(max(values, default=float('nan')))}"
    )


def verdict(met: bool) -> str:
    """`met` or `MISSED`."""
    return "met" if met else "MISSED"


def rss_mb() -> float:
    """This process's resident set (VmRSS), in MB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def db_mb(path: Path) -> str:
    """A SQLite file's size with its WAL, in MB."""
    main = path.stat().st_size if path.exists() else 0
    wal = path.with_name(path.name + "-wal")
    extra = wal.stat().st_size if wal.exists() else 0
    return f"{main / 1e6:.2f} MB (+ WAL {extra / 1e6:.2f} MB)"


def count_rows(path: Path, sql: str) -> int:
    """One COUNT(*) on a database file, through its own connection."""
    with sqlite3.connect(path) as db:
        return int(db.execute(sql).fetchone()[0])


# ----------------------------------------------------------------------- stand-ins


@dataclass
class CountingOutbox:
    """Counts the notices a firing posts (lateness, limits); sends nothing."""

    sent: Counter[str] = field(default_factory=Counter)

    async def send(
        self,
        conv: ConversationRef,
        text: str,
        *,
        idempotency_key: str,
        turn_id: str | None = None,
    ) -> str | None:
        """Count a notice under its key."""
        self.sent[idempotency_key] += 1
        return None


@dataclass
class Turns:
    """Stands in for the conversation service: counts each requested turn by key, and when
    it arrived against its task's due time (the key's last part)."""

    keys: Counter[str] = field(default_factory=Counter)
    lateness: dict[str, list[float]] = field(default_factory=dict)

    async def on_turn(self, event: TurnRequested) -> None:
        """A firing asked for a turn."""
        arrived = time.time()
        self.keys[event.key] += 1
        due = datetime.fromisoformat(event.key.split(":", 2)[2])
        self.lateness.setdefault(event.task[:2], []).append(arrived - due.timestamp())


@dataclass
class Handled:
    """What the job handler saw, per firing run (the task id's first two characters)."""

    expected: dict[str, int] = field(default_factory=dict)
    fired: dict[str, list[float]] = field(default_factory=dict)
    done: dict[str, list[float]] = field(default_factory=dict)
    took: dict[str, list[float]] = field(default_factory=dict)
    complete: dict[str, asyncio.Event] = field(default_factory=dict)

    def expect(self, run: str, count: int) -> asyncio.Event:
        """Wait for `count` firings of `run`'s tasks."""
        self.expected[run] = count
        for figures in (self.fired, self.done, self.took):
            figures[run] = []
        self.complete[run] = asyncio.Event()
        return self.complete[run]

    def record(self, job: FiredJob, task_id: str, entered: float, due: datetime) -> None:
        """One firing handled: APScheduler's lateness, the handler's end, its duration."""
        run = task_id[:2]
        if run not in self.expected:
            return  # a job of (1): due in an hour at the earliest
        left = time.time()
        self.fired[run].append(job.lateness_seconds)
        self.done[run].append(left - due.timestamp())
        self.took[run].append(left - entered)
        if len(self.done[run]) >= self.expected[run]:
            self.complete[run].set()


@dataclass(frozen=True)
class Rig:
    """The feature's parts as SchedulesFeature wires them, and what the bench counts."""

    tmp: Path
    store: Store
    scheduler: ApschedulerScheduler
    tasks: ScheduledTasks
    outbox: CountingOutbox
    turns: Turns
    handled: Handled


async def build_rig(tmp: Path) -> Rig:
    """Store, scheduler and ScheduledTasks; the job kind and TurnRequested subscribed before
    the scheduler starts."""
    store = Store(tmp / "raven.db", all_migrations())
    await store.open()
    bus = EventBus()
    scheduler = ApschedulerScheduler(tmp / "scheduler.db", bus)
    outbox = CountingOutbox()
    tasks = ScheduledTasks(
        TaskStore(store),
        TaskDeps(scheduler, cast(PromptBroker, object()), cast(Outbox, outbox), bus, Roles()),
        ScheduleLimits(),
        offline=True,
    )
    turns, handled = Turns(), Handled()

    async def on_job(job: FiredJob) -> None:
        # As SchedulesFeature._on_job, timed.
        entered = time.time()
        due = datetime.fromisoformat(str(job.payload["due"]))
        task_id = str(job.payload["task_id"])
        await tasks.on_job(task_id, due)
        handled.record(job, task_id, entered, due)

    subscribe_job(bus, SCHEDULED_TASK_JOB, on_job)
    bus.subscribe(TurnRequested, turns.on_turn)
    bus.freeze()
    await scheduler.start()
    return Rig(tmp, store, scheduler, tasks, outbox, turns, handled)


def bench_task(
    task_id: str,
    conv: ConversationRef,
    owner: str,
    schedule: TaskSchedule,
    anchor: datetime,
    due: datetime,
) -> ScheduledTask:
    """An approved (active) task waiting for `due`."""
    return ScheduledTask(
        id=task_id,
        conversation=conv,
        owner=owner,
        owner_name="bench",
        schedule=schedule,
        grants=task_work(schedule.what, offline=True).grants,
        anchor=anchor,
        state="active",
        next_due=due,
        fired=0,
        approved_by="U000",
    )


# ------------------------------------------------------------------- (1) registration


@dataclass(frozen=True)
class Registration:
    """Seconds per step of (1)."""

    fire_times: float
    inserts: float
    arming: float

    @property
    def total(self) -> float:
        """Insert and arm every task (first fire times included)."""
        return self.fire_times + self.inserts + self.arming


async def registration_phase(rig: Rig, count: int, channels: int) -> Registration:
    """(1): insert `count` active tasks, arm each, then the restart path over them."""
    schedules = [parse_schedule(f"schedule: {when} | {WHAT}") for when in WHENS]
    gc.collect()
    rss0 = rss_mb()
    anchor = datetime.now(UTC)
    armed: list[tuple[str, datetime]] = []
    computing = inserting = 0.0
    for i in range(count):
        schedule = schedules[i % len(schedules)]
        started = time.perf_counter()
        due = next(fire_times(schedule, anchor, anchor))
        task = bench_task(
            f"r_{i:05d}",
            ConversationRef("bench", "local", f"C{i % channels:04d}", f"T{i:05d}"),
            f"U{i % 1000:03d}",
            schedule,
            anchor,
            due,
        )
        stored = time.perf_counter()
        await rig.tasks.store.insert(task)
        inserting += time.perf_counter() - stored
        computing += stored - started
        armed.append((task.id, due))
    started = time.perf_counter()
    for task_id, due in armed:
        await rig.scheduler.schedule_at(
            job_id(task_id), due, SCHEDULED_TASK_JOB, {"task_id": task_id, "due": iso(due)}
        )
    arming = time.perf_counter() - started
    gc.collect()
    rss1 = rss_mb()
    took = Registration(computing, inserting, arming)
    jobs = count_rows(rig.tmp / "scheduler.db", "SELECT COUNT(*) FROM apscheduler_jobs")
    print(
        f"(1) registering {count:,} active tasks ({len(WHENS)} schedules: {', '.join(WHENS)}; "
        f"{channels} channels), one at a time"
    )
    print(f"  {'step':<40} {'total s':>8} {'ms/task':>8}")
    rows = [
        ("first fire time (timing.fire_times)", took.fire_times),
        ("TaskStore.insert (raven.db commit)", took.inserts),
        ("schedule_at (scheduler.db commit)", took.arming),
        ("registration (all three)", took.total),
    ]
    for label, seconds in rows:
        print(f"  {label:<40} {seconds:8.2f} {seconds / count * 1000:8.3f}")
    print(f"  RSS +{rss1 - rss0:.1f} MB (VmRSS {rss0:.0f} → {rss1:.0f} MB); jobs stored {jobs:,}")
    print(
        f"  raven.db {db_mb(rig.tmp / 'raven.db')}; scheduler.db {db_mb(rig.tmp / 'scheduler.db')}"
    )
    await restart_path(rig, count)
    return took


async def restart_path(rig: Rig, count: int) -> None:
    """`ScheduledTasks.start()` over the registered tasks (each re-read; none re-armed: their
    jobs are stored)."""
    started = time.perf_counter()
    active = await rig.tasks.store.active()
    reading = time.perf_counter() - started
    started = time.perf_counter()
    await rig.tasks.start()
    whole = time.perf_counter() - started
    jobs = count_rows(rig.tmp / "scheduler.db", "SELECT COUNT(*) FROM apscheduler_jobs")
    print(
        f"  restart: ScheduledTasks.start() over {len(active):,} active tasks: {whole:.2f} s "
        f"({whole / max(1, count) * 1000:.3f} ms/task); of which reading them "
        f"(TaskStore.active, timed alone) {reading:.2f} s; jobs stored after {jobs:,}; "
        f"notices {sum(rig.outbox.sent.values())}"
    )


# ------------------------------------------------------------------------ (2) firing


@dataclass
class Load:
    """CPU slices on the event loop, and a loop-lag probe."""

    slice_s: float
    duty: float
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    lags: list[float] = field(default_factory=list)

    async def spin(self) -> None:
        """Busy `slice_s`, then idle so the loop is busy `duty` of the time."""
        idle = self.slice_s * (1 - self.duty) / self.duty
        while not self.stop.is_set():
            end = time.perf_counter() + self.slice_s
            while time.perf_counter() < end:
                pass
            await asyncio.sleep(idle)

    async def probe(self) -> None:
        """How late a 10 ms sleep wakes up."""
        while not self.stop.is_set():
            started = time.perf_counter()
            await asyncio.sleep(0.01)
            self.lags.append(time.perf_counter() - started - 0.01)


@dataclass(frozen=True)
class FiringResult:
    """What one firing run measured."""

    run: str
    turn_lateness: list[float]


async def firing_phase(
    rig: Rig, args: argparse.Namespace, load: str, registered: Registration, tasks: int
) -> FiringResult:
    """(2): `args.firing` tasks due over `args.spread` s, fired through the real path."""
    count = args.firing
    run = "fq" if load == "quiet" else "fl"
    schedule = parse_schedule(f"schedule: every 1h | {WHAT}")
    per_task = (registered.inserts + registered.arming) / max(1, tasks)
    lead = 1.0 + 1.5 * per_task * count  # every task stored and armed before the first is due
    first = time.time() + lead
    complete = rig.handled.expect(run, count)
    started = time.perf_counter()
    overdue = 0
    for i in range(count):
        target = datetime.fromtimestamp(first + args.spread * i / count, UTC)
        anchor = target - timedelta(hours=1)  # so its first fire time is `target`
        due = next(fire_times(schedule, anchor, anchor))
        conv = ConversationRef("bench", "local", f"F{run}{i:05d}", "T")
        task = bench_task(f"{run}_{i:05d}", conv, f"U{i % 1000:03d}", schedule, anchor, due)
        await rig.tasks.store.insert(task)
        await rig.scheduler.schedule_at(
            job_id(task.id), due, SCHEDULED_TASK_JOB, {"task_id": task.id, "due": iso(due)}
        )
        overdue += time.time() > due.timestamp()
    stored = time.perf_counter() - started
    probe = Load(args.slice_ms / 1000, args.duty)
    workers = [asyncio.create_task(probe.probe())]
    if load == "cpu":
        workers.append(asyncio.create_task(probe.spin()))
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        async with asyncio.timeout(lead + args.spread + WITHIN):
            await complete.wait()
    finally:
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        probe.stop.set()
        await asyncio.gather(*workers)
    await asyncio.sleep(0.5)  # a doubled firing would arrive now
    result = FiringResult(run, rig.turns.lateness.get(run, []))
    described = (
        "quiet (nothing else on the loop)"
        if load == "quiet"
        else f"CPU on the event loop: {args.slice_ms:g} ms slices, {args.duty:.0%} of the time"
    )
    print(
        f"\n(2) firing {count:,} tasks (every 1h, explicit plan, one channel each) due over "
        f"{args.spread:g} s, {tasks:,} other tasks' jobs in the job store; load: {described}"
    )
    print(
        f"  stored and armed in {stored:.2f} s, first due {lead:.1f} s after the start; "
        f"armed after their due time: {overdue}"
    )
    print(f"  {'lateness (ms)':<40} {'n':>5} {'p50':>8} {'p99':>8} {'max':>8}")
    print(spread_line("APScheduler: fired_at - scheduled_at", rig.handled.fired[run]))
    print(spread_line("TurnRequested arrival - due", result.turn_lateness))
    print(spread_line("firing committed + re-armed - due", rig.handled.done[run]))
    print(spread_line("handler duration (ScheduledTasks.on_job)", rig.handled.took[run]))
    print(spread_line("event-loop lag (10 ms sleep)", probe.lags))
    print(f"  process CPU {cpu / wall:.0%} of one core over {wall:.2f} s (200 % = both cores)")
    await print_counts(rig, run, count)
    return result


async def print_counts(rig: Rig, run: str, count: int) -> None:
    """Turns per key, firings recorded, tasks moved on, notices."""
    keys = {k: n for k, n in rig.turns.keys.items() if k.startswith(f"task:{run}_")}
    turns = sum(keys.values())
    doubled = sum(n - 1 for n in keys.values() if n > 1)
    lost = count - len(keys)
    raven = rig.tmp / "raven.db"
    ran = count_rows(
        raven,
        f"SELECT COUNT(*) FROM scheduled_firings WHERE task_id LIKE '{run}_%' AND outcome = 'ran'",
    )
    moved = count_rows(
        raven,
        f"SELECT COUNT(*) FROM scheduled_tasks WHERE id LIKE '{run}_%' AND fired = 1"
        " AND state = 'active'",
    )
    notices = sum(n for k, n in rig.outbox.sent.items() if k.startswith(f"task:{run}_"))
    print(
        f"  turns requested {turns:,} for {len(keys):,} distinct keys: doubled: {doubled}, "
        f"lost: {lost}; firings recorded 'ran' {ran:,}; tasks moved on to their next hour "
        f"{moved:,}; notices {notices}"
    )


# -------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The bench's options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=10_000, help="tasks registered in (1)")
    parser.add_argument("--channels", type=int, default=500, help="(1): channels they are in")
    parser.add_argument("--firing", type=int, default=1000, help="tasks fired in (2)")
    parser.add_argument("--spread", type=float, default=3.0, help="(2): due over this many s")
    parser.add_argument("--loads", default="cpu", help="(2): runs, of quiet and cpu")
    parser.add_argument("--slice-ms", type=float, default=5.0, help="(2) cpu: busy slice")
    parser.add_argument("--duty", type=float, default=0.5, help="(2) cpu: share of time busy")
    args = parser.parse_args(argv)
    args.loads = [x for x in args.loads.split(",") if x]
    if not set(args.loads) <= {"quiet", "cpu"} or not 0 < args.duty < 1:
        parser.error("--loads takes quiet and/or cpu; --duty is between 0 and 1")
    return args


def print_goals(registered: Registration, tasks: int, loaded: FiringResult | None) -> None:
    """Issue 20's goals next to the figures (never asserted)."""
    print("\ngoals of issue 20 (informational, never asserted)")
    print(
        f"  registration of {tasks:,} tasks <= {REGISTER_GOAL:g} s (goal for 10,000): "
        f"{registered.total:.2f} s  {verdict(registered.total <= REGISTER_GOAL)}"
    )
    if loaded is not None:
        p99 = pct(loaded.turn_lateness, 99)
        print(
            f"  firing lateness p99 <= {LATENESS_GOAL:g} s under load (TurnRequested - due): "
            f"{p99 * 1000:.1f} ms  {verdict(p99 <= LATENESS_GOAL)}"
        )
    else:
        print("  firing lateness p99 under load: not run (--loads without cpu)")
    print("  model calls while standing checks pass = 0: not built yet (issue 20 part 2)")


async def bench(args: argparse.Namespace) -> int:
    """Run every phase in a temporary directory."""
    print(
        f"scheduled_tasks on {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPU(s), load average {os.getloadavg()[0]:.2f}"
    )
    tmp = Path(tempfile.mkdtemp(prefix="raven-bench-schedules-"))
    loaded: FiringResult | None = None
    firings = 0
    try:
        rig = await build_rig(tmp)
        try:
            registered = await registration_phase(rig, args.tasks, args.channels)
            for load in args.loads:
                result = await firing_phase(rig, args, load, registered, args.tasks)
                firings += args.firing
                loaded = result if load == "cpu" else loaded
            keys = rig.turns.keys
            broken = sum(n - 1 for n in keys.values()) + firings - len(keys)
        finally:
            await rig.scheduler.stop()
            await rig.store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        "\n(3) model calls\n"
        "  standing checks (`watch:`): not built yet (issue 20 part 2); no figure\n"
        f"  model calls in the {firings:,} explicit-plan firings of (2), offline: 0 (no provider "
        "is reachable from the firing path: a firing only requests a turn)"
    )
    print_goals(registered, args.tasks, loaded)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
    return 1 if broken else 0


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point."""
    sys.exit(asyncio.run(bench(parse_args(argv))))


if __name__ == "__main__":
    main()
