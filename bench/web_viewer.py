"""The web viewer (issue 43): a 200-node run's page, its node pages and a 40-node run's page
served by the real viewer, and what an unwatched viewer costs a run.

1. Two finished runs, seeded into a fresh RAVEN_HOME as the bot writes them
   (`tests.bot.web.seed`): 200 nodes (10 layers x 20) and INLINE_NODES (40, 2 layers x 20,
   the largest run whose page carries every node's details); each node with a ~2 KB
   Markdown output, its prompt, a 6-step transcript and a verdict. Served by
   `bot.web.server.Viewer` on 127.0.0.1 (aiohttp `AppRunner`, as the bot serves it) from a
   fresh viewer (cold caches) and asked for through a real aiohttp client:
   - the 200-node run's page (its nodes listed): the first GET (cold), then `--gets` GETs;
     goal p95 ≤ 200 ms;
   - its node pages `/node/<i>`: each of `--gets` nodes' first view (its Markdown not yet
     remembered), then each again; informational goal p95 ≤ 200 ms;
   - the 40-node run's page (every output inline): cold, then `--gets` GETs; goal p95
     ≤ 200 ms;
   - the event loop's longest stall meanwhile (a 1 ms ticker; informational).
   Then each run page's work in process, part by part (`load_run`, `graph_svg` with
   `view.hrefs`, the template's render), so a miss says where the time goes.
2. The same small graph workload as `graph_scheduler.py` (its `run_raven`: the real
   RunManager, SQLite, journal, judge and progress announcements; 100 nodes, C=4) run with
   and without the viewer started in this process (no client connected), interleaved
   A/B/B/A in `--pairs` pairs; the median of each pair's ratio with/without and its spread.
   Goal: ratio ≤ 1.05.

The process runs under the serving bot's interpreter settings. Prints figures only; it
asserts nothing about time. Run: `.venv/bin/python bench/web_viewer.py` (or `make bench`).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

import aiohttp
from markupsafe import Markup

from bench.graph_scheduler import make_workload, run_raven
from bench.lib.figures import goal, ms, pct
from bot.app import tune_interpreter_for_serving
from bot.schema import all_migrations
from bot.web.graph_svg import graph_svg
from bot.web.pages import Pages
from bot.web.run_view import INLINE_NODES, RunView, load_run
from core.store import Store
from host.graph.records import RunFiles
from host.graph.run_store import RunStore
from tests.bot.web.seed import CHANNEL, SeedNode, seed_run, serving, token

LAYERS = 10
WIDTH = 20
OUTPUT_CHARS = 2_000
RUN_ID = "run_bench200"
# The largest run whose page still carries every node's output (its own seed: none of its
# outputs is one the viewer has already rendered for the big run's node pages).
INLINE_RUN_ID = "run_bench40"
INLINE_SEED = 44
PAGE_GOAL_MS = 200.0
RATIO_GOAL = 1.05
# The unwatched-viewer workload: graph_scheduler's DAG at 100 nodes, its uniform durations.
IDLE_SIZE = 100
IDLE_CONCURRENCY = 4
SEED = 43
WORDS = ("the", "run", "found", "that", "each", "step", "of", "plan", "needs", "inputs", "checked")


# --------------------------------------------------------------------------- the run


def markdown_output(node: str, rng: random.Random) -> str:
    """About OUTPUT_CHARS of Markdown as an agent writes it: heading, prose, a list, a table
    and a code block."""
    words = WORDS
    parts = [f"## Findings of {node}\n"]
    while sum(map(len, parts)) < OUTPUT_CHARS - 380:
        parts.append(" ".join(rng.choice(words) for _ in range(40)) + ".\n")
    parts.append("\n".join(f"- item {i}: **{rng.choice(words)}** `{node}`" for i in range(5)))
    parts.append("\n| metric | value |\n|---|---|\n| loss | 0.12 |\n| items | 42 |\n")
    parts.append(f"```python\ndef {node}():\n    return {rng.randrange(1000)}\n```\n")
    return "\n".join(parts)[: OUTPUT_CHARS + 200]


def transcript(node: str) -> tuple[dict[str, object], ...]:
    """Six steps: five tool calls with their input and output, then the answer."""
    tools: list[dict[str, object]] = [
        {
            "type": "tool",
            "name": name,
            "input": {"path": f"src/{node}.py", "query": "inputs"},
            "output": f"{name} of src/{node}.py:\n" + "line of output\n" * 8,
            "is_error": False,
        }
        for name in ("read_file", "grep", "shell", "read_file", "web_fetch")
    ]
    return (*tools, {"type": "answer", "text": f"{node} is done: see the output."})


def run_nodes(seed: int, layers: int, prefix: str = "") -> list[SeedNode]:
    """`layers` x WIDTH nodes; each after the first layer depends on 1-3 of the layer before.
    `prefix` starts every node id (a conversation's node ids are unique across its runs)."""
    rng = random.Random(seed)
    nodes: list[SeedNode] = []
    previous: list[str] = []
    for layer in range(layers):
        current = [f"{prefix}l{layer:02d}_n{i:02d}" for i in range(WIDTH)]
        for node in current:
            deps = tuple(sorted(rng.sample(previous, rng.randint(1, 3)))) if previous else ()
            nodes.append(
                SeedNode(
                    id=node,
                    agent=rng.choice(["research", "code", "shell"]),
                    deps=deps,
                    prompt=f"Step {node}: read the inputs of {', '.join(deps) or 'the task'} "
                    "and write what they show, with evidence.",
                    output=markdown_output(node, rng),
                    transcript=transcript(node),
                    verdict={
                        "accomplished": True,
                        "category": "done",
                        "evidence": f"the output of {node} cites its inputs",
                    },
                )
            )
        previous = current
    return nodes


@dataclass(frozen=True)
class Gets:
    """One page's GETs (seconds): the first, cold (nothing of it cached), then the warm ones."""

    cold: float
    warm: list[float]
    page_bytes: int


@dataclass(frozen=True)
class NodeGets:
    """Node pages' GETs (seconds): the very first (templates compiled), each node's first
    view (its Markdown not yet remembered) and views of nodes seen before."""

    first: float
    first_views: list[float]
    repeat_views: list[float]
    page_bytes: int


@dataclass(frozen=True)
class Parts:
    """A run page's handler, part by part, in process (seconds)."""

    load: list[float]
    svg: list[float]
    render: list[float]
    svg_bytes: int
    load_stalls: list[float]  # the loop's lateness while load_run alone runs


@dataclass(frozen=True)
class PageFigures:
    """The served pages' GETs, the big page's parts and the loop's lateness meanwhile."""

    big: Gets
    big_parts: Parts
    nodes: NodeGets
    inline: Gets
    inline_parts: Parts
    stalls: list[float] = field(default_factory=list)


async def page_figures(home: Path, gets: int) -> PageFigures:
    """Seed both runs, serve them from a fresh viewer (cold caches), GET their pages; then
    time the run pages' parts in process."""
    store = Store(home / "raven.db", all_migrations())
    await store.open()
    try:
        await seed_run(
            store, home, CHANNEL, run_nodes(SEED, LAYERS), run_id=RUN_ID, summary="bench"
        )
        inline_nodes = run_nodes(INLINE_SEED, INLINE_NODES // WIDTH, prefix="in_")
        await seed_run(store, home, CHANNEL, inline_nodes, run_id=INLINE_RUN_ID, summary="bench")
        link = token(home, CHANNEL)
        async with serving(store, home) as base, aiohttp.ClientSession() as client:
            run_url = f"{base}/v/{link}/run/"
            async with loop_stalls() as stalls:
                big = await page_gets(client, run_url + RUN_ID, gets)
                nodes = await node_gets(client, f"{run_url}{RUN_ID}/node/", gets)
                inline = await page_gets(client, run_url + INLINE_RUN_ID, gets)
        big_parts = await parts(store, home, RUN_ID, gets)
        inline_parts = await parts(store, home, INLINE_RUN_ID, gets)
        return PageFigures(big, big_parts, nodes, inline, inline_parts, stalls)
    finally:
        await store.close()


async def page_gets(client: aiohttp.ClientSession, url: str, gets: int) -> Gets:
    """The first GET of `url`, then `gets` more."""
    cold, page = await timed_fetch(client, url)
    warm = [(await timed_fetch(client, url))[0] for _ in range(gets)]
    return Gets(cold, warm, len(page))


async def node_gets(client: aiohttp.ClientSession, url: str, gets: int) -> NodeGets:
    """Node pages 0 .. `gets`: each one's first view, then each one viewed again."""
    count = min(gets, LAYERS * WIDTH - 1)
    first, page = await timed_fetch(client, f"{url}{count}")
    first_views = [(await timed_fetch(client, f"{url}{i}"))[0] for i in range(count)]
    repeat_views = [(await timed_fetch(client, f"{url}{i}"))[0] for i in range(count)]
    return NodeGets(first, first_views, repeat_views, len(page))


async def timed_fetch(client: aiohttp.ClientSession, url: str) -> tuple[float, bytes]:
    """How long one GET took, and the page."""
    started = time.perf_counter()
    page = await fetch(client, url)
    return time.perf_counter() - started, page


@asynccontextmanager
async def loop_stalls() -> AsyncIterator[list[float]]:
    """The event loop's lateness (seconds) while the block runs, as a ticker sleeping 1 ms
    at a time sees it: what any other work in the bot's process (a Slack ack, a run) would
    wait while the viewer answers."""
    late: list[float] = []

    async def tick() -> None:
        while True:
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            late.append(time.perf_counter() - started - 0.001)

    ticker = asyncio.create_task(tick())
    try:
        yield late
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker


async def fetch(client: aiohttp.ClientSession, url: str) -> bytes:
    """The page's body; anything but 200 stops the bench (the figures would be an error
    page's)."""
    async with client.get(url) as response:
        body = await response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {url}: {response.status} {body[:200]!r}")
        return body


async def parts(store: Store, home: Path, run_id: str, repeats: int) -> Parts:
    """What the run page's handler does, one part at a time (the same calls, values and
    template; one fresh Pages, so its first render is cold as the server's was)."""
    runs, files, pages = RunStore(store), RunFiles(home / "runs"), Pages(ZoneInfo("UTC"))
    load, svg_times, render, load_stalls = [], [], [], []
    svg = ""
    for _ in range(repeats):
        async with loop_stalls() as stalls:
            started = time.perf_counter()
            view = await load_run(runs, files, run_id)
            load.append(time.perf_counter() - started)
        load_stalls.extend(stalls)
        if view is None:
            raise RuntimeError(f"run {run_id} was not seeded")
        started = time.perf_counter()
        svg = graph_svg(view.picture, view.hrefs)
        svg_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        render_page(pages, view, svg)
        render.append(time.perf_counter() - started)
    return Parts(load, svg_times, render, len(svg), load_stalls)


def render_page(pages: Pages, view: RunView, svg: str) -> str:
    """run.html with the values the server's handler gives it."""
    root = "../../../"
    return pages.render(
        "run.html",
        root=root,
        home=f"{root}v/TOKEN/",
        schedules=f"{root}v/TOKEN/schedules",
        title=f"Run {view.run.id}",
        view=view,
        svg=Markup(svg),
        live=None,
    )


# --------------------------------------------------------------------------- unwatched


@asynccontextmanager
async def idle_viewer(home: Path) -> AsyncIterator[None]:
    """The viewer served on 127.0.0.1 over `home`'s store, with nobody connected."""
    store = Store(home / "raven.db", all_migrations())
    await store.open()
    try:
        async with serving(store, home):
            yield
    finally:
        await store.close()


@dataclass(frozen=True)
class Pair:
    """One run without and one with the viewer: makespans and process CPU (seconds)."""

    without: float
    with_viewer: float
    cpu_without: float
    cpu_with: float

    @property
    def ratio(self) -> float:
        return self.with_viewer / self.without

    @property
    def cpu_ratio(self) -> float:
        return self.cpu_with / self.cpu_without


async def idle_pairs(home: Path, scratch: Path, pairs: int) -> list[Pair]:
    """`pairs` pairs of runs, A B then B A, so drift on the machine falls on both sides."""
    work = make_workload(IDLE_SIZE, SEED)

    async def without() -> tuple[float, float]:
        timing = await run_raven(work, IDLE_CONCURRENCY, scratch)
        return timing.makespan, timing.cpu

    async def with_viewer() -> tuple[float, float]:
        async with idle_viewer(home):
            return await without()

    await without()  # warm-up: imports, caches, SQLite
    await with_viewer()
    out = []
    for i in range(pairs):
        first: Callable[[], Awaitable[tuple[float, float]]] = without if i % 2 == 0 else with_viewer
        second = with_viewer if first is without else without
        a, b = await first(), await second()
        (plain, plain_cpu), (served, served_cpu) = (a, b) if first is without else (b, a)
        out.append(Pair(plain, served, plain_cpu, served_cpu))
        print(
            f"  pair {i + 1}: without {plain:.3f} s, with {served:.3f} s, "
            f"ratio {served / plain:.3f}",
            flush=True,
        )
    return out


# --------------------------------------------------------------------------- report


def spread(label: str, values: Sequence[float]) -> str:
    return f"  {label:<44} {ms(pct(values, 50))} {ms(pct(values, 95))} {ms(max(values))}"


def once(label: str, value: float) -> str:
    return f"  {label:<44} {ms(value)}"


def header() -> str:
    return f"  {'(ms)':<44} {'p50':>8} {'p95':>8} {'max':>8}"


def report_parts(parts: Parts) -> None:
    print(spread("  load_run (rows and journal)", parts.load))
    print(once("    longest loop stall while it runs alone", max(parts.load_stalls, default=0.0)))
    print(spread(f"  graph_svg ({parts.svg_bytes / 1024:.0f} KB SVG)", parts.svg))
    print(once("  template render, first (cold)", parts.render[0]))
    print(spread("  template render, then", parts.render[1:] or parts.render))


def report_page(figures: PageFigures) -> None:
    big, nodes, inline = figures.big, figures.nodes, figures.inline
    size = LAYERS * WIDTH
    print(f"\n1a. A {size}-node run's page ({big.page_bytes / 1024:.0f} KB HTML: nodes listed)")
    print(header())
    print(once("GET through aiohttp, first (cold)", big.cold))
    print(spread(f"GET through aiohttp, then {len(big.warm)} times", big.warm))
    report_parts(figures.big_parts)

    print(f"\n1b. Its node pages ({nodes.page_bytes / 1024:.0f} KB HTML each)")
    print(header())
    print(once("GET, the first node page (cold)", nodes.first))
    print(spread(f"GET, {len(nodes.first_views)} nodes' first views", nodes.first_views))
    print(spread("GET, the same nodes again (Markdown kept)", nodes.repeat_views))

    print(
        f"\n1c. A {INLINE_NODES}-node run's page ({inline.page_bytes / 1024:.0f} KB HTML: every "
        "node's output, task and transcript inline)"
    )
    print(header())
    print(once("GET through aiohttp, first (cold)", inline.cold))
    print(spread(f"GET through aiohttp, then {len(inline.warm)} times", inline.warm))
    report_parts(figures.inline_parts)

    stalls = figures.stalls or [0.0]
    print(
        f"\n1d. The event loop during all these GETs (pages render in a worker thread; the "
        "bench's client shares this loop): "
        f"longest stall {max(stalls) * 1000:.1f} ms, p99 {pct(stalls, 99) * 1000:.1f} ms "
        f"({len(stalls)} ticks of 1 ms)"
    )

    print()
    big_p95 = pct(big.warm, 95) * 1000
    said = goal(f"run page p95, {size} nodes", big_p95, PAGE_GOAL_MS, unit="ms")
    print(f"run page p95, {size} nodes: {big_p95:.0f} ms (goal ≤ {PAGE_GOAL_MS:.0f} ms): {said}")
    inline_p95 = pct(inline.warm, 95) * 1000
    said = goal(f"run page p95, {INLINE_NODES} nodes inline", inline_p95, PAGE_GOAL_MS, unit="ms")
    print(
        f"run page p95, {INLINE_NODES} nodes inline: {inline_p95:.0f} ms "
        f"(goal ≤ {PAGE_GOAL_MS:.0f} ms): {said}"
    )
    node_p95 = pct(nodes.first_views + nodes.repeat_views, 95) * 1000
    print(
        f"node page p95 (first views and repeats): {node_p95:.0f} ms "
        f"(informational, goal ≤ {PAGE_GOAL_MS:.0f} ms: "
        f"{'met' if node_p95 <= PAGE_GOAL_MS else 'MISSED'})"
    )


def report_idle(pairs: Sequence[Pair]) -> None:
    ratios = [p.ratio for p in pairs]
    cpu = [p.cpu_ratio for p in pairs]
    median = statistics.median(ratios)
    print(
        f"\n2. A {IDLE_SIZE}-node run at C={IDLE_CONCURRENCY} with the viewer served and "
        f"nobody watching, against without ({len(pairs)} pairs)"
    )
    print(
        f"  makespan without: median {statistics.median(p.without for p in pairs):.3f} s; "
        f"with: {statistics.median(p.with_viewer for p in pairs):.3f} s"
    )
    print(
        f"  ratio with/without: median {median:.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}"
    )
    print(
        f"  process CPU ratio (start to done): median {statistics.median(cpu):.3f}, "
        f"min {min(cpu):.3f}, max {max(cpu):.3f}"
    )
    said = goal("run makespan with idle viewer / without", median, RATIO_GOAL, unit="x")
    print(f"\nunwatched viewer ratio {median:.3f} (goal ≤ {RATIO_GOAL:g}): {said}")


async def bench(gets: int, pairs: int) -> None:
    tune_interpreter_for_serving()
    print(f"web viewer bench: {os.cpu_count()} CPU(s), load {os.getloadavg()[0]:.1f}")
    root = Path(tempfile.mkdtemp(prefix="raven_bench_web_"))
    try:
        home = root / "home"
        home.mkdir()
        report_page(await page_figures(home, gets))
        scratch = root / "runs"
        scratch.mkdir()
        report_idle(await idle_pairs(home, scratch, pairs))
        print(f"load at the end {os.getloadavg()[0]:.1f} (other work moves every absolute figure)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--gets", type=int, default=40, help="timed GETs (default: 40)")
    parser.add_argument("--pairs", type=int, default=6, help="A/B run pairs (default: 6)")
    args = parser.parse_args(argv)
    asyncio.run(bench(max(1, args.gets), max(1, args.pairs)))


if __name__ == "__main__":
    main()
