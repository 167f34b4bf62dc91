"""Benchmark: the graph scheduler (RunManager + GraphRun) on random layered DAGs.

Runs the real RunManager (SQLite commits, the run journal with batched fsync, output and
memory record files, the real CompletionJudge with a scripted provider, the real
`ConversationRunEvents` announcing progress into an in-memory conversation port) against
simulated agents that only `asyncio.sleep`, and compares it with two plain-asyncio baselines
without persistence on the same DAG and durations:

- superstep: level by level (networkx.topological_generations), each level finishing before
  the next starts;
- dataflow: a node starts as soon as its dependencies finish (the ideal the real scheduler
  aims for, minus its bookkeeping).

Durations are uniform or skewed (lognormal, same mean), both seeded; concurrency limits are
the `--concurrency` values plus an unbounded run (C = node count) on `--unbounded` sizes.

Record files go to `--scratch` (default: the system temp directory). File creation costs
differ a lot between directories on some machines: the probes printed first show what one
costs where this run writes (each completed node writes two files).

Prints figures only; it asserts nothing about time. Run from the repo root:

    .venv/bin/python bench/graph_scheduler.py [--sizes 100,500] [--seed 7] [--scratch DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import math
import os
import platform
import random
import resource
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import networkx as nx

from agents.backends.base import AgentBackend, AgentOutcome, AgentTask
from agents.models.types import Message, ModelReply, ToolCall, ToolSpec, Usage
from agents.registry import AgentEntry, default_registry
from bench.lib.figures import goal
from bot.app import GC_THRESHOLDS, tune_interpreter_for_serving
from bot.schema import all_migrations
from core.files import atomic_write
from core.ids import ConversationRef
from core.store import Store
from host.conversation.run_events import ConversationRunEvents
from host.graph.admission.pipeline import admit
from host.graph.judge import VERDICT_TOOL, CompletionJudge
from host.graph.model import MAX_NODES, GraphSubmission, NodeSpec
from host.graph.records import RunFiles
from host.graph.run_store import RunStore
from host.graph.runs import RunManager, RunParts, RunSettings
from host.runtime.events import EventBus
from host.runtime.run_snapshot import RunSnapshot

SIZES: tuple[int, ...] = (100, 500, 1000)
CONCURRENCY: tuple[int, ...] = (4, 32)
DISTS: tuple[str, ...] = ("uniform", "skewed")
# The largest graph a submission may have (admission's cap), and ten times it.
UNBOUNDED: tuple[int, ...] = (MAX_NODES, 2000)
UNBOUNDED_DISTS: tuple[str, ...] = ("skewed",)
# Above this size the default run is lighter (see `--full`), to stay under four minutes.
LIGHT_ABOVE = 500
AGENT = "research"
# Skewed durations: lognormal with this sigma, median chosen so the mean equals the uniform one.
SKEW_SIGMA = 1.0
UNBOUNDED_LABEL = "unb"

# Goals of issue 22 (printed next to the figures, never asserted).
TARGET_FLOW = 1.05  # raven makespan / dataflow makespan at C=4, at most
TARGET_FLOW_UNBOUNDED = 1.5  # the same on the unbounded 2,000-node runs (stretch: 1.05)
TARGET_STEP = 1.3  # superstep makespan / raven makespan on skewed durations, at least
TARGET_CPU_MS = 0.5  # process CPU per node with zero-duration agents, at most
TARGET_ADMISSION_MS = 50.0  # admission of a 2,000-node graph, at most
# Issue 22's figures when it was filed: what the table's ratios compare with.
BASELINE_FLOW = {True: 4.87, False: 1.09}  # unbounded 2,000 nodes / C=4
BASELINE_STEP = {True: 0.65, False: 1.30}
BASELINE_CPU_MS = 1.27
BASELINE_ADMISSION_MS = 390.0


# --------------------------------------------------------------------------- workload


@dataclass(frozen=True)
class Workload:
    """One random DAG with per-node simulated durations (seconds)."""

    size: int
    layers: int
    graph: nx.DiGraph
    order: tuple[str, ...]
    durations: Mapping[str, float]
    dist: str  # "uniform", "skewed" or "zero"
    label: str  # how the durations were drawn, for the tables

    @property
    def work(self) -> float:
        """Sum of all node durations."""
        return sum(self.durations.values())

    @cached_property
    def _critical(self) -> tuple[float, int]:
        """(duration, nodes) of the longest path by node durations (ties: more nodes)."""
        finish: dict[str, tuple[float, int]] = {}
        for node in nx.topological_sort(self.graph):
            before = max((finish[p] for p in self.graph.predecessors(node)), default=(0.0, 0))
            finish[node] = (before[0] + self.durations[node], before[1] + 1)
        return max(finish.values(), default=(0.0, 0))

    @property
    def critical_path(self) -> float:
        """Longest path through the DAG weighted by node durations."""
        return self._critical[0]

    @property
    def critical_nodes(self) -> int:
        """Nodes on that path (its dependency steps)."""
        return self._critical[1]

    @cached_property
    def generations(self) -> int:
        """Topological generations (superstep levels)."""
        return sum(1 for _ in nx.topological_generations(self.graph))

    def bound(self, concurrency: int) -> float:
        """Lower bound on any schedule's makespan: max(critical path, work / C)."""
        return max(self.critical_path, self.work / concurrency)

    def zeroed(self) -> Workload:
        """The same DAG with zero-duration agents (pure scheduler overhead)."""
        return Workload(
            self.size,
            self.layers,
            self.graph,
            self.order,
            dict.fromkeys(self.durations, 0.0),
            "zero",
            "0",
        )


def duration_range_ms(size: int, *, short: bool | None = None) -> tuple[float, float]:
    """Uniform agent durations: 5–50 ms, or 1–10 ms when `short` (by default: for graphs
    above 500 nodes)."""
    short = size > LIGHT_ABOVE if short is None else short
    return (1.0, 10.0) if short else (5.0, 50.0)


def make_workload(
    size: int, seed: int, dist: str = "uniform", *, short: bool | None = None
) -> Workload:
    """A layered random DAG: 10–40 layers; each node after the first layer depends on 1–3
    random earlier nodes, one of them in the layer just before (so layer = generation).

    The DAG does not depend on `dist`; uniform durations come from the DAG's random stream
    (as they always did), skewed ones from a second seeded stream: lognormal with sigma
    SKEW_SIGMA and the same mean as the uniform range (a long tail of slow nodes)."""
    rng = random.Random(seed * 100_003 + size)
    layers = min(rng.randint(10, 40), size)
    # Every layer gets at least one node; the rest are spread at random.
    counts = [1] * layers
    for _ in range(size - layers):
        counts[rng.randrange(layers)] += 1
    graph = nx.DiGraph()
    order: list[str] = []
    earlier: list[str] = []
    previous: list[str] = []
    number = 0
    for count in counts:
        layer: list[str] = []
        for _ in range(count):
            number += 1
            node = f"n{number:04d}"
            graph.add_node(node)
            if previous:
                graph.add_edge(rng.choice(previous), node)
                for dep in rng.sample(earlier, min(len(earlier), rng.randint(0, 2))):
                    graph.add_edge(dep, node)
            layer.append(node)
            order.append(node)
        earlier.extend(layer)
        previous = layer
    lo, hi = duration_range_ms(size, short=short)
    if dist == "uniform":
        durations = {node: rng.uniform(lo, hi) / 1000.0 for node in order}
        label = f"U {lo:g}-{hi:g}"
    elif dist == "skewed":
        skew = random.Random(seed * 100_003 + size + 50_000_017)
        median = (lo + hi) / 2 / math.exp(SKEW_SIGMA**2 / 2)
        mu = math.log(median)
        durations = {node: skew.lognormvariate(mu, SKEW_SIGMA) / 1000.0 for node in order}
        label = f"LN {median:.3g}~{SKEW_SIGMA:g}"
    else:
        raise ValueError(f"unknown duration distribution {dist!r} (uniform or skewed)")
    return Workload(size, layers, graph, tuple(order), durations, dist, label)


def submission_for(work: Workload) -> GraphSubmission:
    """The DAG as a graph submission; each template pulls in its dependencies' outputs."""
    nodes = []
    for node in work.order:
        deps = sorted(work.graph.predecessors(node))
        refs = " ".join(f"{{{{{d}.output}}}}" for d in deps)
        template = f"Bench step {node}." + (f" Combine: {refs}" if refs else "")
        nodes.append(NodeSpec(id=node, agent=AGENT, template=template, deps=deps))
    # model_construct skips the `nodes` length cap (MAX_NODES) so graphs above it can be
    # measured; admission itself still runs in full on the constructed submission.
    # background=True: the run announces its progress (status message, final report).
    return GraphSubmission.model_construct(
        task_summary=f"bench graph of {work.size} nodes",
        background=True,
        confirm=False,
        nodes=nodes,
    )


# --------------------------------------------------------------------------- fakes


class SleepBackend:
    """A simulated agent: sleeps for the node's duration and returns a short output."""

    def __init__(self, durations: Mapping[str, float]) -> None:
        self._durations = durations
        self._usage = Usage(input_tokens=10, output_tokens=5)  # read only: shared

    async def run(self, task: AgentTask) -> AgentOutcome:
        """Sleep, then report success."""
        seconds = self._durations[task.node_id]
        await asyncio.sleep(seconds)
        text = f"result of {task.node_id}"
        return AgentOutcome(
            output=text,
            transcript=[{"type": "text", "text": text}],
            usage=self._usage,
            model_calls=1,
            seconds=seconds,
            history=list(task.history),
        )


class AcceptingJudgeProvider:
    """A model provider that answers every judge call with an accomplished verdict.

    The reply is built once: a simulated model should cost nothing on our side (building
    the pydantic reply per call was 3-4 % of the event loop's samples at 2,000 nodes)."""

    def __init__(self) -> None:
        call = ToolCall(
            id="verdict",
            name=VERDICT_TOOL.name,
            input={"accomplished": True, "evidence": "bench: simulated agent returned"},
        )
        self._reply = ModelReply(content=[call], stop_reason="tool_use", usage=Usage())

    @property
    def name(self) -> str:
        """Label for logs."""
        return "bench:accepting-judge"

    @property
    def offline(self) -> bool:
        """Pretends to be a real model, so the judge takes its normal path."""
        return False

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        max_tokens: int = 4096,
    ) -> ModelReply:
        """An immediate `record_verdict` tool call (the judge only reads it)."""
        return self._reply


class FakeChannel:
    """An in-memory conversation port: counts what the run announces, sends nothing.

    It stands where the conversation service (outbox → Slack) is in the bot, so the real
    `ConversationRunEvents` builds every status text, reads the run row and stores the
    status message id exactly as in production; only the chat API call is free."""

    def __init__(self) -> None:
        self.notifies = 0
        self.edits = 0
        self.turns = 0
        self.edit_chars = 0

    async def notify(self, conv: ConversationRef, text: str, *, idempotency_key: str) -> str | None:
        """A new message: its fake platform id."""
        self.notifies += 1
        return f"bench-msg-{self.notifies}"

    async def edit(self, conv: ConversationRef, message_id: str, text: str, *, key: str) -> None:
        """An edit of the status message."""
        self.edits += 1
        self.edit_chars += len(text)

    async def system_turn(self, conv: ConversationRef, text: str, *, key: str) -> None:
        """A proactive Host turn (exception or final report)."""
        self.turns += 1


class TimedRunEvents(ConversationRunEvents):
    """The real run events, with the number of progress calls and their summed wall time."""

    def __init__(self, store: RunStore, channel: FakeChannel, reports: RunManager) -> None:
        super().__init__(store, channel, reports)
        self.calls = 0
        self.seconds = 0.0

    async def progress(self, run: RunSnapshot) -> None:
        """Time the real announcement."""
        self.calls += 1
        started = time.perf_counter()
        try:
            await super().progress(run)
        finally:
            self.seconds += time.perf_counter() - started


class NullEvents:
    """Run events that go nowhere (`--events null`: announcements left out)."""

    calls = 0
    seconds = 0.0

    async def progress(self, run: RunSnapshot) -> None:
        """Ignored."""

    async def exception(self, run: RunSnapshot, node_id: str, report: str) -> None:
        """Ignored (never happens: the judge accepts everything)."""

    async def finished(self, run: RunSnapshot) -> None:
        """Ignored."""


# --------------------------------------------------------------------------- raven run


async def admission_seconds(
    manager: RunManager, conv: ConversationRef, submission: GraphSubmission
) -> float:
    """Admission alone (every check, the order and the ancestry), median of 3 runs."""
    ctx = await manager.admission_context(conv)
    took = []
    for _ in range(3):
        started = time.perf_counter()
        admit(submission, ctx)
        took.append(time.perf_counter() - started)
    return sorted(took)[1]


@dataclass(frozen=True)
class RavenTiming:
    """Timings and counts of one real run."""

    admit: float
    admission: float  # admission alone (`admit`, median of 3): the checks and the order
    makespan: float
    cpu: float  # process CPU seconds (all threads) from start of run to `done`
    user: float  # the same window: user-mode CPU seconds (getrusage)
    system: float  # the same window: kernel CPU seconds (file creation, fsync, SQLite I/O)
    after: float  # process CPU seconds from `done` until the manager is idle (view files)
    progress_calls: int
    progress_seconds: float  # summed wall time inside progress() (calls overlap)
    notifies: int
    edits: int
    turns: int


async def run_raven(
    work: Workload, concurrency: int, scratch: Path, *, announce: bool = True
) -> RavenTiming:
    """Submit the DAG to a fresh RunManager (own SQLite DB and run folder) and run it."""
    root = Path(tempfile.mkdtemp(prefix=f"raven_{work.size}_c{concurrency}_", dir=scratch))
    workspace = root / "workspace"
    workspace.mkdir()
    store = Store(root / "raven.db", all_migrations())
    await store.open()
    try:
        backend = SleepBackend(work.durations)

        def backend_for(entry: AgentEntry) -> AgentBackend:
            return backend

        run_store = RunStore(store)
        channel = FakeChannel()
        bus = EventBus()
        manager = RunManager(
            RunParts(
                store=run_store,
                files=RunFiles(root / "runs"),
                registry=default_registry(),
                judge=CompletionJudge(AcceptingJudgeProvider()),
                backend=backend_for,
                workspace=lambda conv: workspace,
                bus=bus,
            ),
            host_reachable=True,
            settings=RunSettings(concurrency=concurrency, dispatch_budget_per_hour=10**9),
        )
        events: TimedRunEvents | NullEvents = NullEvents()
        if announce:
            events = TimedRunEvents(run_store, channel, manager)
            events.subscribe(bus)
        bus.freeze()
        conv = ConversationRef("bench", "ws", "chan", f"{work.size}-{concurrency}")
        submission = submission_for(work)
        admission = await admission_seconds(manager, conv, submission)
        started = time.perf_counter()
        submitted = await manager.submit(conv, submission, submitted_by="bench")
        admitted = time.perf_counter()
        cpu = time.process_time()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        run = submitted.run
        if run is None:
            raise RuntimeError(f"submission was not started: {submitted.status}")
        await run.done.wait()
        finished = time.perf_counter()
        cpu = time.process_time() - cpu
        after = resource.getrusage(resource.RUSAGE_SELF)
        settled = time.process_time()
        await manager.idle()
        settled = time.process_time() - settled
        states = {n.state for n in run.nodes.values()}
        if run.record.state != "completed" or states != {"completed"}:
            raise RuntimeError(f"run ended {run.record.state} with node states {states}")
        return RavenTiming(
            admit=admitted - started,
            admission=admission,
            makespan=finished - admitted,
            cpu=cpu,
            user=after.ru_utime - usage.ru_utime,
            system=after.ru_stime - usage.ru_stime,
            after=settled,
            progress_calls=events.calls,
            progress_seconds=events.seconds,
            notifies=channel.notifies,
            edits=channel.edits,
            turns=channel.turns,
        )
    finally:
        await store.close()
        shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------- baselines


async def run_superstep(work: Workload, concurrency: int) -> float:
    """Level by level: each topological generation finishes before the next starts."""
    semaphore = asyncio.Semaphore(concurrency)

    async def one(node: str) -> None:
        async with semaphore:
            await asyncio.sleep(work.durations[node])

    started = time.perf_counter()
    for generation in nx.topological_generations(work.graph):
        await asyncio.gather(*(one(n) for n in sorted(generation)))
    return time.perf_counter() - started


async def run_dataflow(work: Workload, concurrency: int) -> float:
    """Dependency-driven: a node is started the moment its last dependency finishes."""
    semaphore = asyncio.Semaphore(concurrency)
    waiting = {n: work.graph.in_degree(n) for n in work.order}

    async def one(node: str, group: asyncio.TaskGroup) -> None:
        async with semaphore:
            await asyncio.sleep(work.durations[node])
        for succ in sorted(work.graph.successors(node)):
            waiting[succ] -= 1
            if waiting[succ] == 0:
                group.create_task(one(succ, group))

    started = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for node in work.order:
            if waiting[node] == 0:
                group.create_task(one(node, group))
    return time.perf_counter() - started


# --------------------------------------------------------------------------- report


@dataclass(frozen=True)
class Row:
    """One table row: a DAG size with one duration distribution at one concurrency limit."""

    work: Workload
    concurrency: int
    unbounded: bool
    raven: RavenTiming
    superstep: float
    dataflow: float

    @property
    def c_label(self) -> str:
        """`unb` for C = node count, else C."""
        return UNBOUNDED_LABEL if self.unbounded else f"{self.concurrency}"

    @property
    def name(self) -> str:
        """Short run name for the targets table."""
        name = f"{self.work.size} n, C={self.c_label}, {self.work.dist}"
        return f"{name} {self.work.label}" if self.unbounded else name

    def cells(self) -> list[str]:
        """Makespan table cells in column order."""
        w, c = self.work, self.concurrency
        bound = w.bound(c)
        return [
            f"{w.size}",
            f"{w.layers}/{w.generations}",
            w.label,
            self.c_label,
            f"{w.critical_path:.2f}",
            f"{bound:.2f}",
            f"{self.raven.admit:.2f}",
            f"{self.raven.makespan:.2f}",
            f"{self.raven.makespan / bound:.2f}",
            f"{self.dataflow:.2f}",
            f"{self.dataflow / bound:.2f}",
            f"{self.raven.makespan / self.dataflow:.2f}",
            f"{self.superstep:.2f}",
            f"{self.superstep / bound:.2f}",
            f"{self.superstep / self.raven.makespan:.2f}",
        ]

    def cost_cells(self) -> list[str]:
        """Cost table cells in column order."""
        w, r = self.work, self.raven
        steps = max(1, w.critical_nodes)
        return [
            f"{w.size}",
            w.label,
            self.c_label,
            f"{w.critical_nodes}",
            f"{(r.makespan - w.bound(self.concurrency)) / w.size * 1000:.2f}",
            f"{(r.makespan - w.critical_path) / steps * 1000:.1f}",
            f"{(self.dataflow - w.critical_path) / steps * 1000:.2f}",
            f"{r.cpu / w.size * 1000:.2f}",
            f"{r.after / w.size * 1000:.2f}",
            f"{r.progress_calls}",
            f"{r.progress_seconds:.2f}",
            f"{r.notifies}",
            f"{r.edits}",
            f"{r.turns}",
        ]


HEADERS = [
    "nodes",
    "lay/gen",
    "dur ms",
    "C",
    "CP s",
    "LB s",
    "admit s",
    "raven s",
    "r/LB",
    "flow s",
    "f/LB",
    "r/flow",
    "step s",
    "s/LB",
    "step/raven",
]

LEGEND = """\
Makespan (times are wall-clock seconds unless marked):
  nodes       DAG size; agent `research`, ids n0001…, fixed seed (the same DAG per size)
  lay/gen     layers the generator drew / topological generations (superstep levels)
  dur ms      simulated agent durations: `U lo-hi` uniform per node; `LN m~s` lognormal
              with median m ms and sigma s (same mean as the uniform range, long tail);
              1-10 ms above 500 nodes and on every unbounded run, else 5-50 ms
  C           concurrency limit (RunSettings.concurrency; the same semaphore size for the
              baselines); `unb` = unbounded (C = node count: only dependencies limit)
  CP s        critical path: longest path by node durations (networkx topological order)
  LB s        lower bound max(CP, sum(durations) / C)
  admit s     raven: RunManager.submit (admission + SQLite insert + graph.json), not in makespan
  raven s     raven makespan: real RunManager/GraphRun from start of run to `done`, progress
              announcements (real ConversationRunEvents → in-memory channel) included
  r/LB        raven makespan / LB (1.00 = optimal)
  flow s      plain-asyncio dataflow baseline (start on last dep finished; no persistence)
  f/LB        dataflow makespan / LB
  r/flow      raven makespan / dataflow makespan (target <= 1.05)
  step s      plain-asyncio superstep baseline (level by level; no persistence)
  s/LB        superstep makespan / LB
  step/raven  superstep makespan / raven makespan (>1: raven beats level-by-level;
              target >= 1.3 on skewed durations)"""

COST_HEADERS = [
    "nodes",
    "dur ms",
    "C",
    "CP n",
    "ovh ms/n",
    "ovh ms/step",
    "flow ms/step",
    "cpu ms/n",
    "after ms/n",
    "progress",
    "prog s",
    "notify",
    "edits",
    "turns",
]

COST_LEGEND = """\
Cost of the same runs:
  CP n          nodes on the critical path (its dependency steps)
  ovh ms/n      (raven makespan - LB) / nodes: scheduler overhead per node (upper estimate)
  ovh ms/step   (raven makespan - CP) / CP n: overhead per dependency step (what each hop
                along the critical path costs; at small C it includes waiting for a slot)
  flow ms/step  the same for the dataflow baseline (event-loop cost and timer slack only)
  cpu ms/n      process CPU time (time.process_time: event loop, SQLite and fsync threads)
                from start of run to `done`, per node
  after ms/n    process CPU from `done` until the run's task ended, per node: the output and
                memory record files (views of the journal, written once, before the report)
  progress      ConversationRunEvents.progress calls (a run publishes progress after its
                commits, coalesced: at most one per commit batch)
  prog s        summed wall time inside those calls (they overlap when nodes run in parallel)
  notify/edits  conversation port calls: status message posted / edited (edits per run)
  turns         proactive Host turns (the final run report; after `done`, not in makespan)"""

ZERO_HEADERS = [
    "nodes",
    "C",
    "CP n",
    "admit s",
    "wall s",
    "ms/node",
    "cpu ms/n",
    "user",
    "sys",
    "ms/step",
    "edits",
    "flow ms/node",
    "step ms/node",
]

ZERO_LEGEND = """\
Zero-duration agents (the same DAGs, every sleep 0): pure per-node overhead.
  CP n          nodes on the longest path (= topological generations here)
  wall s        raven makespan with zero-duration agents
  ms/node       wall / nodes: per-node cost of the real path (group-committed state rows
                in SQLite, journal lines with batched fsync, judge call, progress
                announcements; the view files follow `done`: see `after ms/n` above)
  cpu ms/n      process CPU time per node over the run (target <= 1 ms)
  user / sys    the same split into user-mode and kernel time (getrusage): kernel time is
                file creation and fsync, and varies with other I/O on the machine
  ms/step       wall / CP n: overhead per dependency step
  edits         status message edits of the run
  flow ms/node  wall / nodes for the plain-asyncio dataflow baseline (event-loop cost only)
  step ms/node  the same for the superstep baseline"""


def zero_cells(work: Workload, c: int, raven: RavenTiming, flow: float, step: float) -> list[str]:
    """Zero-duration table cells in column order."""
    size = work.size
    return [
        f"{size}",
        f"{c}",
        f"{work.critical_nodes}",
        f"{raven.admit:.2f}",
        f"{raven.makespan:.2f}",
        f"{raven.makespan / size * 1000:.2f}",
        f"{raven.cpu / size * 1000:.2f}",
        f"{raven.user / size * 1000:.2f}",
        f"{raven.system / size * 1000:.2f}",
        f"{raven.makespan / max(1, work.critical_nodes) * 1000:.1f}",
        f"{raven.edits}",
        f"{flow / size * 1000:.3f}",
        f"{step / size * 1000:.3f}",
    ]


def filed(row: Row, figures: Mapping[bool, float]) -> float | None:
    """Issue 22's figure for this kind of run when it was filed (by unbounded or not): the
    C=4 runs, and the unbounded run of 2,000 nodes with 3.3 ms agents; none for the others."""
    if not row.unbounded:
        return figures[False]
    short = row.work.work / row.work.size < 0.010  # 1-10 ms agents, median 3.3 ms
    return figures[True] if row.work.size == 2000 and short else None


def target_rows(
    rows: Sequence[Row], zero: Sequence[tuple[Workload, RavenTiming]]
) -> list[list[str]]:
    """Goals of issue 22 next to the figures: C=4 runs, unbounded runs, CPU per node."""
    out: list[list[str]] = []
    for row in rows:
        if not (row.unbounded or row.concurrency == 4):
            continue
        flow = row.raven.makespan / row.dataflow
        step = row.superstep / row.raven.makespan
        skewed = row.work.dist == "skewed"
        limit = TARGET_FLOW_UNBOUNDED if row.unbounded else TARGET_FLOW
        out.append(
            [
                row.name,
                f"raven/flow {flow:.2f}",
                f"<= {limit:g}",
                goal(
                    f"graph makespan / dataflow, {row.name}",
                    flow,
                    limit,
                    unit="x",
                    baseline=filed(row, BASELINE_FLOW),
                ),
                f"step/raven {step:.2f}",
                f">= {TARGET_STEP:g}" if skewed else "(skewed only)",
                goal(
                    f"graph superstep / raven, {row.name}",
                    step,
                    TARGET_STEP,
                    unit="x",
                    at_least=True,
                    baseline=filed(row, BASELINE_STEP),
                )
                if skewed
                else "-",
            ]
        )
    admitted: dict[int, float] = {}
    for row in rows:
        admitted.setdefault(row.work.size, row.raven.admission)
    for size, seconds in sorted(admitted.items()):
        if size < max(admitted):
            continue
        per_node = {n: s / n * 1000 for n, s in admitted.items()}
        out.append(
            [
                f"{size} n, admission alone",
                f"{seconds * 1000:.1f} ms",
                f"<= {TARGET_ADMISSION_MS:g}",
                goal(
                    f"graph admission, {size} nodes",
                    seconds * 1000,
                    TARGET_ADMISSION_MS,
                    unit="ms",
                    baseline=BASELINE_ADMISSION_MS,
                ),
                "ms/node " + ", ".join(f"{n}: {v:.3f}" for n, v in sorted(per_node.items())),
                "(linear: flat)",
                "",
            ]
        )
    for work, raven in zero:
        cpu = raven.cpu / work.size * 1000
        out.append(
            [
                f"{work.size} n, zero durations",
                f"cpu {cpu:.2f} ms/node",
                f"<= {TARGET_CPU_MS:g}",
                goal(
                    f"graph CPU per node, {work.size} nodes, zero durations",
                    cpu,
                    TARGET_CPU_MS,
                    unit="ms",
                    baseline=BASELINE_CPU_MS,
                ),
                f"user {raven.user / work.size * 1000:.2f}",
                f"sys {raven.system / work.size * 1000:.2f}",
                "",
            ]
        )
    return out


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Right-aligned text table."""
    body = [list(r) for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in body)
    return "\n".join(lines)


def _load() -> str:
    """1/5/15-minute load averages (other work on the machine skews every figure)."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def fsync_probe(scratch: Path, count: int = 50) -> float:
    """Milliseconds per `atomic_write` of 1 KB (write + fsync + rename) in the scratch dir."""
    folder = scratch / "probe"
    started = time.perf_counter()
    for i in range(count):
        atomic_write(folder / f"f{i}.md", "x" * 1024)
    elapsed = time.perf_counter() - started
    shutil.rmtree(folder, ignore_errors=True)
    return elapsed / count * 1000


def create_probe(scratch: Path, count: int = 200) -> tuple[float, float]:
    """(wall, CPU) milliseconds per new 1 KB file without fsync in the scratch dir (what an
    output or memory record file costs)."""
    folder = scratch / "create-probe"
    folder.mkdir()
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(count):
        (folder / f"f{i}.md").write_text("x" * 1024, encoding="utf-8")
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    shutil.rmtree(folder, ignore_errors=True)
    return wall / count * 1000, cpu / count * 1000


def append_probe(scratch: Path, count: int = 100) -> float:
    """Milliseconds per 1 KB journal append followed by fdatasync (one journal batch)."""
    path = scratch / "append-probe.jsonl"
    started = time.perf_counter()
    with path.open("ab") as handle:
        for _ in range(count):
            handle.write(b"x" * 1023 + b"\n")
            handle.flush()
            os.fdatasync(handle.fileno())
    elapsed = time.perf_counter() - started
    path.unlink()
    return elapsed / count * 1000


# --------------------------------------------------------------------------- main


@dataclass(frozen=True)
class Plan:
    """What to run."""

    sizes: tuple[int, ...]
    concurrency: tuple[int, ...]
    dists: tuple[str, ...]
    unbounded: tuple[int, ...]
    unbounded_dists: tuple[str, ...]
    seed: int
    full: bool
    announce: bool
    scratch: Path | None = None
    serving_interpreter: bool = True

    def runs(self) -> list[tuple[int, str, int | None, bool | None]]:
        """(size, dist, C or None for unbounded, short durations or None for by size) in
        run order. An unbounded run has short durations; a big one goes again with the
        small graphs' durations (how far the makespan is from dataflow depends on agent
        time vs per-node cost)."""
        out: list[tuple[int, str, int | None, bool | None]] = []
        for size in self.sizes:
            light = not self.full and size > LIGHT_ABOVE
            for dist in self.dists:
                for c in [max(self.concurrency)] if light else self.concurrency:
                    out.append((size, dist, c, None))
        for size in self.unbounded:
            for dist in self.unbounded_dists:
                out.append((size, dist, None, True))
                if size > LIGHT_ABOVE:
                    out.append((size, dist, None, False))
        return out

    def zero_sizes(self) -> list[int]:
        """Sizes that get a zero-duration run."""
        return [s for s in self.sizes if self.full or s <= LIGHT_ABOVE]


async def run_zero(
    plan: Plan, scratch: Path
) -> tuple[list[list[str]], list[tuple[Workload, RavenTiming]]]:
    """The zero-duration runs: their table rows and timings."""
    zero_rows: list[list[str]] = []
    zero_runs: list[tuple[Workload, RavenTiming]] = []
    for size in plan.zero_sizes():
        zero = make_workload(size, plan.seed).zeroed()
        c = max(plan.concurrency)
        raven = await run_raven(zero, c, scratch, announce=plan.announce)
        flow = await run_dataflow(zero, c)
        step = await run_superstep(zero, c)
        zero_rows.append(zero_cells(zero, c, raven, flow, step))
        zero_runs.append((zero, raven))
        print(f"  {size} n, zero durations: raven {raven.makespan:.2f} s", flush=True)
    return zero_rows, zero_runs


async def bench(plan: Plan) -> None:
    """Run the plan, then print the tables."""
    scratch = Path(tempfile.mkdtemp(prefix="raven_bench_", dir=plan.scratch))
    total = time.perf_counter()
    try:
        print(
            f"graph scheduler bench: python {platform.python_version()}, "
            f"{os.cpu_count()} CPU(s), load {_load()}, seed {plan.seed}, scratch {scratch}"
        )
        print(f"atomic_write probe: {fsync_probe(scratch):.2f} ms per 1 KB record file (fsync)")
        wall, cpu = create_probe(scratch)
        print(
            f"file create probe: {wall:.3f} ms wall, {cpu:.3f} ms CPU per new 1 KB file, no "
            "fsync (a completed node writes two: output and memory record)"
        )
        print(f"journal append probe: {append_probe(scratch):.3f} ms per append + fdatasync")
        # What users run: the runtime serves under the bot's collector and lock settings.
        if plan.serving_interpreter:
            tune_interpreter_for_serving()
            print(
                "interpreter: the serving bot's settings (start-up objects frozen, collector "
                f"thresholds {'/'.join(map(str, GC_THRESHOLDS))})"
            )
        else:
            print("interpreter: Python's default settings (--plain-interpreter)")
        print(
            "progress announcements: "
            + (
                "real ConversationRunEvents into an in-memory channel"
                if plan.announce
                else "none (--events null)"
            )
        )
        sizes = [*plan.sizes, *plan.unbounded]
        if any(size > MAX_NODES for size in sizes):
            print(
                f"note: admission caps a submission at {MAX_NODES} nodes; bigger graphs are "
                "built with model_construct (admission still runs every other check)"
            )
        if not plan.full and any(size > LIGHT_ABOVE for size in plan.sizes):
            print(
                f"note: above {LIGHT_ABOVE} nodes only C={max(plan.concurrency)} runs (and "
                "the unbounded runs) and the zero-duration run is skipped (the "
                "per-node overhead grows with the run size; --full runs everything)"
            )
        print("progress:", flush=True)
        # Warm-up (imports, regex and pydantic caches, SQLite): not reported.
        await run_raven(make_workload(20, plan.seed), max(plan.concurrency), scratch)
        # First, before the big runs: deleting their run folders leaves the file system
        # work (ext4 journal commits) that later fsyncs pay, in this process's kernel time.
        zero_rows, zero_runs = await run_zero(plan, scratch)
        rows: list[Row] = []
        for size, dist, limit, short in plan.runs():
            work = make_workload(size, plan.seed, dist, short=short)
            c = size if limit is None else limit
            raven = await run_raven(work, c, scratch, announce=plan.announce)
            superstep = await run_superstep(work, c)
            dataflow = await run_dataflow(work, c)
            row = Row(work, c, limit is None, raven, superstep, dataflow)
            rows.append(row)
            print(
                f"  {row.name}: raven {raven.makespan:.2f} s, flow {dataflow:.2f} s, "
                f"step {superstep:.2f} s",
                flush=True,
            )
        print()
        if rows:
            print(LEGEND)
            print()
            print(table(HEADERS, (r.cells() for r in rows)))
            print()
            print(COST_LEGEND)
            print()
            print(table(COST_HEADERS, (r.cost_cells() for r in rows)))
        if zero_rows:
            print()
            print(ZERO_LEGEND)
            print()
            print(table(ZERO_HEADERS, zero_rows))
        targets = target_rows(rows, zero_runs)
        if targets:
            print()
            print("Goals of issue 22 (printed next to the figures, not asserted):")
            print()
            headers = ["run", "figure", "target", "", "figure", "target", ""]
            print(table(headers, targets))
        print()
        print(f"total bench time {time.perf_counter() - total:.1f} s, load {_load()}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(s) for s in str(text).split(",") if s.strip())


def _words(text: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in str(text).split(",") if s.strip())


def parse_args(argv: Sequence[str] | None = None) -> Plan:
    """Command-line options (the defaults are what `make bench` runs)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--sizes",
        default=",".join(map(str, SIZES)),
        help="comma-separated DAG sizes at the --concurrency limits (default: %(default)s)",
    )
    parser.add_argument(
        "--concurrency",
        default=",".join(map(str, CONCURRENCY)),
        help="comma-separated concurrency limits (default: %(default)s)",
    )
    parser.add_argument(
        "--dists",
        default=",".join(DISTS),
        help="duration distributions for --sizes: uniform, skewed (default: %(default)s)",
    )
    parser.add_argument(
        "--unbounded",
        default=",".join(map(str, UNBOUNDED)),
        help="comma-separated sizes run with C = node count; empty to skip (default: %(default)s)",
    )
    parser.add_argument(
        "--unbounded-dists",
        default=",".join(UNBOUNDED_DISTS),
        help="duration distributions for --unbounded (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=7, help="DAG/duration seed (default: 7)")
    parser.add_argument(
        "--scratch",
        type=Path,
        default=None,
        help="directory for the databases and run records (default: the system temp dir)",
    )
    parser.add_argument(
        "--events",
        choices=("conversation", "null"),
        default="conversation",
        help="progress announcements: the real ConversationRunEvents into an in-memory "
        "channel, or none (default: %(default)s)",
    )
    parser.add_argument(
        "--plain-interpreter",
        action="store_true",
        help="keep Python's default collector settings instead of the serving bot's "
        "(tune_interpreter_for_serving)",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help=f"above {LIGHT_ABOVE} nodes, also run every C and the zero-duration run (slow)",
    )
    args = parser.parse_args(argv)
    dists = _words(args.dists)
    unbounded_dists = _words(args.unbounded_dists)
    for dist in (*dists, *unbounded_dists):
        if dist not in DISTS:
            parser.error(f"unknown distribution {dist!r} (choose from {', '.join(DISTS)})")
    concurrency = _ints(args.concurrency)
    if not concurrency:
        parser.error("--concurrency needs at least one limit")
    return Plan(
        sizes=_ints(args.sizes),
        concurrency=concurrency,
        dists=dists or DISTS[:1],
        unbounded=_ints(args.unbounded),
        unbounded_dists=unbounded_dists or UNBOUNDED_DISTS,
        seed=int(args.seed),
        full=bool(args.full),
        announce=args.events == "conversation",
        scratch=args.scratch,
        serving_interpreter=not args.plain_interpreter,
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point."""
    asyncio.run(bench(parse_args(argv)))


if __name__ == "__main__":
    main()
