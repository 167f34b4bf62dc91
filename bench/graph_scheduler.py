"""Benchmark: the graph scheduler (RunManager + GraphRun) on random layered DAGs.

Runs the real RunManager (SQLite commits, record files with fsync, the real CompletionJudge
with a scripted provider) against simulated agents that only `asyncio.sleep`, and compares
it with two plain-asyncio baselines without persistence on the same DAG and durations:

- superstep: level by level (networkx.topological_generations), each level finishing before
  the next starts;
- dataflow: a node starts as soon as its dependencies finish (the ideal the real scheduler
  aims for, minus its bookkeeping).

Prints figures only; it asserts nothing about time. Run from the repo root:

    .venv/bin/python bench/graph_scheduler.py [--sizes 100,500] [--seed 7]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import os
import platform
import random
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import networkx as nx

from agents.backends.base import AgentBackend, AgentOutcome, AgentTask
from agents.models.types import Message, ModelReply, ToolCall, ToolSpec, Usage
from agents.registry import AgentEntry, default_registry
from host.graph.executor import GraphRun
from host.graph.judge import VERDICT_TOOL, CompletionJudge
from host.graph.model import MAX_NODES, GraphSubmission, NodeSpec
from host.graph.records import RunFiles, atomic_write
from host.graph.run_store import RunStore
from host.graph.runs import RunManager, RunSettings
from memory.conversation_log import ConversationRef
from memory.store import Store

SIZES: tuple[int, ...] = (100, 500, 1000, 2000)
CONCURRENCY: tuple[int, ...] = (4, 32)
# Above this size the default run is lighter (see `--full`), to stay near three minutes.
LIGHT_ABOVE = 500
AGENT = "research"


# --------------------------------------------------------------------------- workload


@dataclass(frozen=True)
class Workload:
    """One random DAG with per-node simulated durations (seconds)."""

    size: int
    layers: int
    graph: nx.DiGraph
    order: tuple[str, ...]
    durations: Mapping[str, float]
    duration_range_ms: tuple[float, float]

    @property
    def work(self) -> float:
        """Sum of all node durations."""
        return sum(self.durations.values())

    @property
    def critical_path(self) -> float:
        """Longest path through the DAG weighted by node durations."""
        finish: dict[str, float] = {}
        for node in nx.topological_sort(self.graph):
            before = max((finish[p] for p in self.graph.predecessors(node)), default=0.0)
            finish[node] = before + self.durations[node]
        return max(finish.values(), default=0.0)

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
            (0.0, 0.0),
        )


def duration_range_ms(size: int) -> tuple[float, float]:
    """Simulated agent durations: 5–50 ms, scaled down to 1–10 ms for big graphs."""
    return (5.0, 50.0) if size <= 500 else (1.0, 10.0)


def make_workload(size: int, seed: int) -> Workload:
    """A layered random DAG: 10–40 layers; each node after the first layer depends on 1–3
    random earlier nodes, one of them in the layer just before (so layer = generation)."""
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
    lo, hi = duration_range_ms(size)
    durations = {node: rng.uniform(lo, hi) / 1000.0 for node in order}
    return Workload(size, layers, graph, tuple(order), durations, (lo, hi))


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

    async def run(self, task: AgentTask) -> AgentOutcome:
        """Sleep, then report success."""
        seconds = self._durations[task.node_id]
        await asyncio.sleep(seconds)
        text = f"result of {task.node_id}"
        return AgentOutcome(
            output=text,
            transcript=[{"type": "text", "text": text}],
            usage=Usage(input_tokens=10, output_tokens=5),
            model_calls=1,
            seconds=seconds,
            history=list(task.history),
        )


class AcceptingJudgeProvider:
    """A model provider that answers every judge call with an accomplished verdict."""

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
        """An immediate `record_verdict` tool call."""
        call = ToolCall(
            id="verdict",
            name=VERDICT_TOOL.name,
            input={"accomplished": True, "evidence": "bench: simulated agent returned"},
        )
        return ModelReply(content=[call], stop_reason="tool_use", usage=Usage())


class NullEvents:
    """Run events that go nowhere."""

    async def progress(self, run: GraphRun) -> None:
        """Ignored."""

    async def exception(self, run: GraphRun, node_id: str, report: str) -> None:
        """Ignored (never happens: the judge accepts everything)."""

    async def finished(self, run: GraphRun) -> None:
        """Ignored."""


# --------------------------------------------------------------------------- raven run


@dataclass(frozen=True)
class RavenTiming:
    """Timings of one real run."""

    admit: float
    makespan: float


async def run_raven(work: Workload, concurrency: int, scratch: Path) -> RavenTiming:
    """Submit the DAG to a fresh RunManager (own SQLite DB and run folder) and run it."""
    root = Path(tempfile.mkdtemp(prefix=f"raven_{work.size}_c{concurrency}_", dir=scratch))
    workspace = root / "workspace"
    workspace.mkdir()
    store = Store(root / "raven.db")
    await store.open()
    try:
        backend = SleepBackend(work.durations)

        def backend_for(entry: AgentEntry) -> AgentBackend:
            return backend

        manager = RunManager(
            store=RunStore(store),
            files=RunFiles(root / "runs"),
            registry=default_registry(),
            judge=CompletionJudge(AcceptingJudgeProvider()),
            backend=backend_for,
            workspace=lambda conv: workspace,
            events=NullEvents(),
            host_reachable=True,
            settings=RunSettings(concurrency=concurrency, dispatch_budget_per_hour=10**9),
        )
        conv = ConversationRef("bench", "ws", "chan", f"{work.size}-{concurrency}")
        submission = submission_for(work)
        started = time.perf_counter()
        submitted = await manager.submit(conv, submission, submitted_by="bench")
        admitted = time.perf_counter()
        run = submitted.run
        if run is None:
            raise RuntimeError(f"submission was not started: {submitted.status}")
        await run.done.wait()
        finished = time.perf_counter()
        await manager.idle()
        states = {n.state for n in run.nodes.values()}
        if run.record.state != "completed" or states != {"completed"}:
            raise RuntimeError(f"run ended {run.record.state} with node states {states}")
        return RavenTiming(admit=admitted - started, makespan=finished - admitted)
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
    """One table row: a DAG size at one concurrency limit."""

    work: Workload
    concurrency: int
    raven: RavenTiming
    superstep: float
    dataflow: float

    def cells(self) -> list[str]:
        """Formatted cells in column order."""
        w, c = self.work, self.concurrency
        bound = w.bound(c)
        lo, hi = w.duration_range_ms
        overhead_ms = (self.raven.makespan - bound) / w.size * 1000
        return [
            f"{w.size}",
            f"{w.layers}/{sum(1 for _ in nx.topological_generations(w.graph))}",
            f"{lo:g}-{hi:g}",
            f"{c}",
            f"{w.critical_path:.2f}",
            f"{bound:.2f}",
            f"{self.raven.admit:.2f}",
            f"{self.raven.makespan:.2f}",
            f"{self.raven.makespan / bound:.2f}",
            f"{overhead_ms:.2f}",
            f"{self.dataflow:.2f}",
            f"{self.dataflow / bound:.2f}",
            f"{self.superstep:.2f}",
            f"{self.superstep / bound:.2f}",
            f"{self.superstep / self.raven.makespan:.2f}",
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
    "ovh ms/n",
    "flow s",
    "f/LB",
    "step s",
    "s/LB",
    "step/raven",
]

LEGEND = """\
Columns (times are wall-clock seconds unless marked):
  nodes       DAG size; agent `research`, ids n0001…, fixed seed
  lay/gen     layers the generator drew / topological generations (superstep levels)
  dur ms      simulated agent duration range (uniform, per node; scaled down above 500 nodes)
  C           concurrency limit (RunSettings.concurrency; the same semaphore size for baselines)
  CP s        critical path: longest path by node durations (networkx topological order)
  LB s        lower bound max(CP, sum(durations) / C)
  admit s     raven: RunManager.submit (admission + SQLite insert + graph.json), not in makespan
  raven s     raven makespan: real RunManager/GraphRun from start of run to `done`
  r/LB        raven makespan / LB (1.00 = optimal)
  ovh ms/n    (raven makespan - LB) / nodes: scheduler overhead per node (upper estimate)
  flow s      plain-asyncio dataflow baseline (start on last dep finished; no persistence)
  f/LB        dataflow makespan / LB
  step s      plain-asyncio superstep baseline (level by level; no persistence)
  s/LB        superstep makespan / LB
  step/raven  superstep makespan / raven makespan (>1: raven beats level-by-level)"""

ZERO_HEADERS = ["nodes", "C", "admit s", "wall s", "ms/node", "flow ms/node", "step ms/node"]

ZERO_LEGEND = """\
Zero-duration agents (the same DAGs, every sleep 0): pure per-node overhead.
  wall s        raven makespan with zero-duration agents
  ms/node       wall / nodes: per-node cost of the real path (state commits to SQLite,
                prompt/output/transcript/memory files with fsync, manifest rewrites,
                judge call, ready-set scans)
  flow/step     the same for the plain-asyncio baselines (event-loop cost only)"""


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


# --------------------------------------------------------------------------- main


async def bench(sizes: Sequence[int], concurrency: Sequence[int], seed: int, *, full: bool) -> None:
    """Run every size and concurrency limit, then print both tables."""
    scratch = Path(tempfile.mkdtemp(prefix="raven_bench_"))
    total = time.perf_counter()
    try:
        print(
            f"graph scheduler bench: python {platform.python_version()}, "
            f"{os.cpu_count()} CPU(s), load {_load()}, seed {seed}, scratch {scratch}"
        )
        print(f"atomic_write probe: {fsync_probe(scratch):.2f} ms per 1 KB record file (fsync)")
        if any(size > MAX_NODES for size in sizes):
            print(
                f"note: admission caps a submission at {MAX_NODES} nodes; bigger graphs are "
                "built with model_construct (admission still runs every other check)"
            )
        if not full and any(size > LIGHT_ABOVE for size in sizes):
            print(
                f"note: above {LIGHT_ABOVE} nodes only C={max(concurrency)} runs and the "
                "zero-duration run is skipped (the per-node overhead is quadratic in the "
                "run size; --full runs everything)"
            )
        print("progress:", flush=True)
        # Warm-up (imports, regex and pydantic caches, SQLite): not reported.
        await run_raven(make_workload(20, seed), max(concurrency), scratch)
        rows: list[Row] = []
        zero_rows: list[list[str]] = []
        for size in sizes:
            work = make_workload(size, seed)
            light = not full and size > LIGHT_ABOVE
            for c in [max(concurrency)] if light else concurrency:
                raven = await run_raven(work, c, scratch)
                superstep = await run_superstep(work, c)
                dataflow = await run_dataflow(work, c)
                rows.append(Row(work, c, raven, superstep, dataflow))
                print(f"  {size} nodes, C={c}: raven {raven.makespan:.2f} s", flush=True)
            if light:
                continue
            zero = work.zeroed()
            c = max(concurrency)
            raven = await run_raven(zero, c, scratch)
            flow = await run_dataflow(zero, c)
            step = await run_superstep(zero, c)
            zero_rows.append(
                [
                    f"{size}",
                    f"{c}",
                    f"{raven.admit:.2f}",
                    f"{raven.makespan:.2f}",
                    f"{raven.makespan / size * 1000:.2f}",
                    f"{flow / size * 1000:.3f}",
                    f"{step / size * 1000:.3f}",
                ]
            )
            print(f"  {size} nodes, zero durations: raven {raven.makespan:.2f} s", flush=True)
        print()
        print(LEGEND)
        print()
        print(table(HEADERS, (r.cells() for r in rows)))
        if zero_rows:
            print()
            print(ZERO_LEGEND)
            print()
            print(table(ZERO_HEADERS, zero_rows))
        print()
        print(f"total bench time {time.perf_counter() - total:.1f} s, load {_load()}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options (the defaults are what `make bench` runs)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--sizes",
        default=",".join(map(str, SIZES)),
        help="comma-separated DAG sizes (default: %(default)s)",
    )
    parser.add_argument(
        "--concurrency",
        default=",".join(map(str, CONCURRENCY)),
        help="comma-separated concurrency limits (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=7, help="DAG/duration seed (default: 7)")
    parser.add_argument(
        "--full",
        action="store_true",
        help=f"above {LIGHT_ABOVE} nodes, also run every C and the zero-duration run (slow)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point."""
    args = parse_args(argv)
    sizes = [int(s) for s in str(args.sizes).split(",") if s.strip()]
    concurrency = [int(c) for c in str(args.concurrency).split(",") if c.strip()]
    asyncio.run(bench(sizes, concurrency, int(args.seed), full=bool(args.full)))


if __name__ == "__main__":
    main()
