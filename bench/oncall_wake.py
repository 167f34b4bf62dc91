"""Benchmark: oncall wake-ups: APScheduler lateness, the early wake after a job exits, model
calls while campaigns wait, and the CPU the model-free monitor costs.

(a) Schedules `--wakes` (1,000) one-shot wake-ups through the real `ApschedulerScheduler`
(AsyncIOScheduler + SQLAlchemy job store on a temporary scheduler.db, subscribed on an
`EventBus` with `subscribe_job` for `CAMPAIGN_WAKE`, as bot/app.py wires it), due evenly over
`--spread` seconds once every job is stored, and prints wake lateness p50/p99/max: fired_at −
scheduled_at as `FiredJob` records it (APScheduler starting the job) and as the handler sees it.

(b) Starts `--campaigns` (20) campaigns on a real `CampaignEngine` with the local machine (the
real sandbox in detached mode, real subprocesses, the same scheduler) whose jobs print a loss,
sleep a known time and exit; the monitor polls every `--poll` seconds. Prints the delay from a
job's exit (its exit_code file's mtime) to the engine's early wake (the ledger's fired_at),
p50/p99/max: about U(0, poll) plus the cost of one poll.

(c) Counts decider calls through a counting wrapper around the rule-based decider while every
campaign waits (after all rounds run, before the first exits), and the model calls the decider
and the store account for: all of them must be 0 (printed, not asserted).

(d) Process CPU (`time.process_time`: event loop, SQLite and worker threads) over that waiting
window per campaign-second of monitoring, next to the same process idle.

It asserts nothing about time. Data goes to a temporary directory removed afterwards. About
20 s on 2 cores (more on a slow disk: each stored job is one SQLite commit). Run from the
repo root:

    .venv/bin/python bench/oncall_wake.py [--wakes 1000] [--spread 3] [--campaigns 20] [--poll 1]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import functools
import os
import platform
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from agents.sandbox import DetachedSandbox, select_sandbox
from bench.lib.figures import pct, spread_line
from bot.schema import all_migrations
from core.ids import ConversationRef
from core.secret_names import SecretNames
from core.store import Store
from host.features.oncall.feature import on_campaign_wake
from host.runtime.apscheduler_adapter import ApschedulerScheduler
from host.runtime.events import EventBus, subscribe_job
from host.runtime.scheduling import FiredJob
from oncall.deciders import RuleBasedDecider
from oncall.engine import CampaignEngine, Decider, EngineConfig, EngineDeps
from oncall.machines.registry import Allocator, build_machines
from oncall.model import FINAL_STATES, Budget, CampaignSpec, MachineSpec, MetricSpec
from oncall.policy import Decision, DecisionContext
from oncall.ports import CAMPAIGN_WAKE
from oncall.store import CampaignStore

CONV = ConversationRef("bench", "local", "oncall", "wake")
# Far-future jobs timed first (after a warm-up), to size the lead before the first due time.
PROBES, WARMUP = 30, 5
WITHIN = 120.0  # hang guard for each phase


# ------------------------------------------------------------------------------ figures


# ------------------------------------------------------------------- (a) APScheduler


@dataclass
class Firings:
    """What the CAMPAIGN_WAKE handler saw: FiredJob lateness and its own."""

    expected: int
    fired: list[float] = field(default_factory=list)
    handled: list[float] = field(default_factory=list)
    all_fired: asyncio.Event = field(default_factory=asyncio.Event)

    async def on_job(self, job: FiredJob) -> None:
        """The wake-up handler: record both latenesses."""
        self.fired.append(job.lateness_seconds)
        self.handled.append(time.time() - job.scheduled_at.timestamp())
        if len(self.fired) >= self.expected:
            self.all_fired.set()


async def scheduler_phase(tmp: Path, count: int, spread: float) -> None:
    """(a) `count` wake-ups due over `spread` s through the real scheduler; print lateness."""
    firings = Firings(count)
    bus = EventBus()
    subscribe_job(bus, CAMPAIGN_WAKE, firings.on_job)
    bus.freeze()
    scheduler = ApschedulerScheduler(tmp / "scheduler-a.db", bus)
    await scheduler.start()
    try:
        per_job = await _probe(scheduler)
        lead = 0.5 + 1.25 * per_job * count  # every job stored before the first is due
        first = time.time() + lead
        started = time.perf_counter()
        overdue = 0
        for i in range(count):
            due = first + spread * i / count
            overdue += time.time() > due
            await scheduler.schedule_at(
                f"bench-wake-{i}", _at(due), CAMPAIGN_WAKE, {"campaign_id": "bench", "i": i}
            )
        stored = time.perf_counter() - started
        async with asyncio.timeout(lead + spread + WITHIN):
            await firings.all_fired.wait()
    finally:
        await scheduler.stop()
    print(
        f"(a) {count} wake-ups through ApschedulerScheduler (SQLAlchemy job store), due over "
        f"{spread:g} s from {lead:.1f} s after the first was stored"
    )
    print(
        f"  stored in {stored:.2f} s ({stored / count * 1000:.2f} ms per job, probe "
        f"{per_job * 1000:.2f} ms); stored after their due time: {overdue}"
    )
    print(f"  {'lateness (ms)':<34} {'n':>5} {'p50':>8} {'p99':>8} {'max':>8}")
    print(spread_line("fired_at - scheduled_at (FiredJob)", firings.fired, width=34))
    print(spread_line("handler entry - scheduled_at", firings.handled, width=34))


async def _probe(scheduler: ApschedulerScheduler) -> float:
    """Seconds one schedule_at takes: the median over far-future jobs, cancelled again."""
    took = []
    for i in range(WARMUP + PROBES):
        started = time.perf_counter()
        await scheduler.schedule_at(
            f"bench-probe-{i}", _at(time.time() + 3600), CAMPAIGN_WAKE, {"campaign_id": "probe"}
        )
        took.append(time.perf_counter() - started)
    for i in range(WARMUP + PROBES):
        await scheduler.cancel(f"bench-probe-{i}")
    return pct(took[WARMUP:], 50)


def _at(when: float) -> datetime:
    return datetime.fromtimestamp(when, UTC)


# ------------------------------------------------------------ (b)-(d) the engine


@dataclass
class CountingDecider:
    """Counts every decision (by wake reason) and the model-backed ones."""

    inner: Decider
    calls: Counter[str] = field(default_factory=Counter)
    model_calls: int = 0

    @property
    def model_backed(self) -> bool:
        """As the wrapped decider."""
        return self.inner.model_backed

    async def decide(self, context: DecisionContext) -> Decision:
        """Count, then ask the wrapped decider."""
        self.calls[context.reason] += 1
        self.model_calls += int(self.inner.model_backed)
        return await self.inner.decide(context)


@dataclass
class CountingNotifier:
    """Drops notices; counts them."""

    sent: int = 0
    edits: int = 0

    async def send(
        self,
        conv: ConversationRef,
        text: str,
        *,
        idempotency_key: str,
        on_posted: Callable[[str], Awaitable[None]] | None = None,
        recipient: str = "",
        essential: bool = False,
    ) -> None:
        """Count a notice."""
        self.sent += 1
        if on_posted is not None:
            await on_posted(idempotency_key)

    async def posted_id(self, conv: ConversationRef, idempotency_key: str) -> str | None:
        """Every notice counts as posted under its key."""
        return idempotency_key

    async def edit(self, conv: ConversationRef, message_id: str, text: str, *, key: str) -> None:
        """Count a status edit."""
        self.edits += 1


@dataclass(frozen=True)
class EngineParts:
    """A campaign engine as bot/app.py assembles it, and what the bench reads from it."""

    engine: CampaignEngine
    campaigns: CampaignStore
    scheduler: ApschedulerScheduler
    decider: CountingDecider
    notifier: CountingNotifier
    sandbox_kind: str


async def build_engine(tmp: Path, store: Store, slots: int) -> EngineParts:
    """Real parts: the local machine in the detached sandbox, APScheduler, the store."""
    sandbox = await asyncio.to_thread(select_sandbox, hidden=(Path.cwd(),), unsandboxed=False)
    specs = {"local": MachineSpec(name="local", kind="local", slots=slots)}
    bus = EventBus()
    scheduler = ApschedulerScheduler(tmp / "scheduler-b.db", bus)
    decider = CountingDecider(RuleBasedDecider())
    notifier = CountingNotifier()
    campaigns = CampaignStore(store)
    engine = CampaignEngine(
        EngineDeps(
            campaigns,
            build_machines(specs, DetachedSandbox(sandbox), secret_names=SecretNames()),
            Allocator(specs),
            scheduler,
            notifier,
            decider,
        ),
        EngineConfig(root=tmp / "campaigns"),
    )
    subscribe_job(bus, CAMPAIGN_WAKE, functools.partial(on_campaign_wake, engine))
    bus.freeze()
    return EngineParts(engine, campaigns, scheduler, decider, notifier, sandbox.kind)


def job_spec(index: int, sleep_seconds: float, poll: float) -> CampaignSpec:
    """One round that prints a loss, sleeps, prints another and exits 0."""
    return CampaignSpec(
        goal=f"bench campaign {index}",
        command=f"echo loss=0.9; sleep {sleep_seconds:.2f}; echo loss=0.5",
        metric=MetricSpec(name="loss"),
        budget=Budget(wall_seconds=3600, rounds=1),
        wake_every_seconds=3600,
        poll_seconds=poll,
        stall_seconds=3600,
    )


async def engine_phase(tmp: Path, count: int, poll: float) -> None:
    """(b), (c), (d): `count` campaigns on the real engine until each closes."""
    store = Store(tmp / "raven.db", all_migrations())
    await store.open()
    parts = await build_engine(tmp, store, slots=count)
    await parts.scheduler.start()
    try:
        idle_cpu = await _idle_cpu(1.0)
        await _run_campaigns(parts, count, poll, idle_cpu)
    finally:
        for record in await parts.campaigns.recent(active_only=True, limit=count):
            await parts.engine.stop(record.id, by="bench teardown")
        await parts.engine.close()
        await parts.scheduler.stop()
        await store.close()


async def _idle_cpu(seconds: float) -> float:
    """Process CPU per wall second with the store and scheduler open and nothing to do."""
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.sleep(seconds)
    return (time.process_time() - cpu) / (time.perf_counter() - wall)


async def _run_campaigns(parts: EngineParts, count: int, poll: float, idle_cpu: float) -> None:
    started = time.perf_counter()
    # Every job sleeps past the time all are started, then they exit 0.1 s apart.
    base = 3.0 + 0.15 * count
    records = await asyncio.gather(
        *(
            parts.engine.start("bench", CONV, job_spec(i, base + 0.1 * i, poll))
            for i in range(count)
        )
    )
    ids = [r.id for r in records]
    start_wall = time.perf_counter() - started
    first_exit = min(await _exit_eta(parts.campaigns, ids, base))
    window = await _waiting_window(parts, first_exit)
    await _until_all_final(parts.campaigns, ids)
    delays = await _wake_delays(parts.campaigns, ids)
    print(
        f"\n(b) {count} campaigns on CampaignEngine, local machine in the {parts.sandbox_kind} "
        f"sandbox (detached), poll every {poll:g} s; started in {start_wall:.2f} s"
    )
    print(f"  {'delay (ms)':<34} {'n':>5} {'p50':>8} {'p99':>8} {'max':>8}")
    print(spread_line("job exit (mtime) -> early wake", delays, width=34))
    states = Counter(r.state for r in [await parts.campaigns.get(i) for i in ids] if r)
    print(
        f"  final states: {dict(states)}; notices {parts.notifier.sent}, edits "
        f"{parts.notifier.edits}"
    )
    store_calls = sum(r.model_calls for r in await parts.campaigns.recent(limit=count))
    _print_waiting(parts, count, window, store_calls, idle_cpu)


async def _exit_eta(campaigns: CampaignStore, ids: Sequence[str], base: float) -> list[float]:
    """perf_counter times at which each job is due to exit (its start + its sleep)."""
    now_wall, now_perf = time.time(), time.perf_counter()
    etas = []
    for i, campaign_id in enumerate(ids):
        current = await campaigns.round(campaign_id, 1)
        assert current is not None and current.handle is not None, current
        etas.append(now_perf + current.handle.started_at + base + 0.1 * i - now_wall)
    return etas


@dataclass(frozen=True)
class Window:
    """The stretch when every campaign waited: wall seconds, CPU seconds, decisions in it."""

    wall: float
    cpu: float
    decisions: int
    model_calls: int


async def _waiting_window(parts: EngineParts, first_exit: float) -> Window:
    """Measure from now until shortly before the first job exits (every campaign waits)."""
    await asyncio.sleep(0.3)  # past the first polls of the rounds started last
    decisions, model_calls = sum(parts.decider.calls.values()), parts.decider.model_calls
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.sleep(max(0.0, first_exit - 0.2 - wall))
    return Window(
        wall=time.perf_counter() - wall,
        cpu=time.process_time() - cpu,
        decisions=sum(parts.decider.calls.values()) - decisions,
        model_calls=parts.decider.model_calls - model_calls,
    )


def _print_waiting(
    parts: EngineParts, count: int, window: Window, store_calls: int, idle_cpu: float
) -> None:
    print(
        f"\n(c) model calls while all {count} campaigns waited ({window.wall:.2f} s): "
        f"{window.model_calls} (decider calls in that time: {window.decisions})"
    )
    print(
        f"  after every campaign closed: decisions by wake reason {dict(parts.decider.calls)}, "
        f"model calls {parts.decider.model_calls} (decider), {store_calls} (campaign records)"
    )
    campaign_seconds = count * window.wall
    per = window.cpu / campaign_seconds if campaign_seconds > 0 else float("nan")
    net = (window.cpu - idle_cpu * window.wall) / campaign_seconds if campaign_seconds else per
    print(
        f"\n(d) monitoring CPU: {window.cpu * 1000:.1f} ms over {window.wall:.2f} s for {count} "
        f"campaigns = {per * 1000:.3f} ms CPU per campaign-second ({net * 1000:.3f} ms net of "
        f"the idle process, which used {idle_cpu * 1000:.3f} ms per second)"
    )


async def _until_all_final(campaigns: CampaignStore, ids: Sequence[str]) -> None:
    async with asyncio.timeout(WITHIN):
        while True:
            records = [await campaigns.get(i) for i in ids]
            if all(r is not None and r.state in FINAL_STATES for r in records):
                return
            await asyncio.sleep(0.1)  # the state lives in SQLite: poll it


async def _wake_delays(campaigns: CampaignStore, ids: Sequence[str]) -> list[float]:
    """Per campaign: the early wake's fired_at minus the exit_code file's mtime."""
    delays = []
    for campaign_id in ids:
        current = await campaigns.round(campaign_id, 1)
        wakes = [w for w in await campaigns.wakes(campaign_id) if w.reason == "finished"]
        if current is None or current.handle is None or not wakes or wakes[0].fired_at is None:
            continue
        exited_at = os.stat(current.handle.exit_path).st_mtime
        delays.append(wakes[0].fired_at - exited_at)
    return delays


# -------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The bench's options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--wakes", type=int, default=1000, help="wake-ups in (a)")
    parser.add_argument("--spread", type=float, default=3.0, help="(a): due over this many s")
    parser.add_argument("--campaigns", type=int, default=20, help="campaigns in (b)-(d)")
    parser.add_argument("--poll", type=float, default=1.0, help="(b): monitor poll seconds")
    return parser.parse_args(argv)


async def bench(args: argparse.Namespace) -> int:
    """Run every phase in a temporary directory."""
    print(
        f"oncall_wake on {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPU(s), load average {os.getloadavg()[0]:.2f}"
    )
    tmp = Path(tempfile.mkdtemp(prefix="raven-bench-oncall-"))
    try:
        await scheduler_phase(tmp, args.wakes, args.spread)
        await engine_phase(tmp, args.campaigns, args.poll)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point."""
    sys.exit(asyncio.run(bench(parse_args(argv))))


if __name__ == "__main__":
    main()
