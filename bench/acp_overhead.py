"""Benchmark: the per-turn overhead of the `acp` backend, the bot-side CPU and latency that
`AcpBackend.run` adds to a trivial turn, against the bare SDK client on the same agent.

The agent is the loopback ACP agent of the tests (`tests/fakes/acp_agent.py`, built on the
SDK's agent side), copied into each workspace as `agent/acp_agent.py` and run as
`(sys.executable, "agent/acp_agent.py")` with the workspace as cwd, inside the real
bubblewrap sandbox (`select_sandbox(hidden=(), unsandboxed=False)`), as the backend's tests
run it. A prompt "hello" gets "echo: hello" back in two chunks, with a plan, a tool call
(start and update) and a usage update: six `session/update` frames, then the response. The
workspaces go to /dev/shm when it is writable (`--tmp` to choose): the fake rewrites its
session-notes file after every prompt, and on a disk the writeback stalls (ext4 flushes a
file replaced by rename) made 100-400 ms tails in every path, the agent's and not the bot's.

(1) Cold start, `--cold` (5) times each, alternating: a fresh `AcpProcesses` pool's
`acquire` (spawn in bwrap + `initialize`), then the first `AcpBackend.run` on that process
(`session/new` + prompt), then `close()`; and the bare SDK's spawn (the same argv from
`sandbox.launch`, environment, cwd and process group) + `initialize`, then its first
`session/new` + prompt.

(2) `--turns` (400) trivial turns per path, one at a time, in `--rounds` (8) rounds whose
order rotates (drift on the machine falls on every path alike), after `--warmup` (20) turns
per path that are not counted. Each path has its own agent process and workspace (the
fake's work per prompt grows with the sessions its process holds: it rewrites the notes of
every session); a bot path's first turn starts its pooled process. Paths:

- **bare SDK, one session**: a `ClientSideConnection` straight over the agent's stdin and
  stdout, a client that only collects the message chunks, `session/prompt` on one session;
- **bare SDK + FrameGuard**: the same through the bot's `FrameGuard` (each frame read and
  parsed once more, then fed to the SDK's reader): that part of the bot's path alone;
- **bare SDK, new session per prompt**: a `session/new` before each prompt, what a stateless
  node does: the like-for-like baseline of the stateless path;
- **bot, stateless**: `AcpBackend.run(AgentTask(...))` with a stateless entry (a fresh
  session per turn) on the warm pooled process, no history;
- **bot, stateful, 2nd turn of a session**: a stateful entry, every task carrying the
  history of the lane's first outcome, so each turn continues that session with a
  three-message history (a young instance);
- **bot, stateful, history growing**: each task carrying the previous outcome's history, as
  an instance's nodes do one after another: the session continues and the history grows by
  two messages a turn (its figures depend on `--turns`).

Latency is the wall time of the awaited call (perf_counter); CPU is this process's
`time.process_time` delta over it (the agent is a child: its CPU is not counted). Building
the `AgentTask` is outside the timed call (the graph runtime does it).

(3) The bot paths against the baselines: added ms (p50 difference), ratio of p50s, added CPU
per turn; the FrameGuard's and `session/new`'s shares.

(4) What a stateful instance's history costs: `--history-turns` (100) turns with the
3-message history against as many with `--history` (2001) messages (the growing lane's real
messages, repeated as copies), alternating turn by turn, both continuing a session the
agent holds; the difference per history message, and the history length at which a turn's
CPU reaches the goal. (The growing lane's own figures mix its length with the run's drift.)

Goals (informational, never asserted): added latency per trivial turn ≤ 5 ms at p50 (bot path
p50 − bare one-session p50), bot-side CPU ≤ 2 ms per turn (the bot path's whole CPU in this
process, SDK included; mean). `--profile` adds a cProfile of more bot turns (top functions by
own time; coroutine resumptions count as calls). Every process is closed at the end. About
15 s on 2 cores, 10 of them the cold starts. Run from the repo root:

    .venv/bin/python bench/acp_overhead.py [--turns 400] [--rounds 8] [--cold 5]
        [--history 2001] [--history-turns 100] [--tmp DIR] [--profile]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import contextlib
import cProfile
import dataclasses
import gc
import io
import os
import platform
import pstats
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from acp import PROTOCOL_VERSION, text_block
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AgentMessageChunk,
    ClientCapabilities,
    PermissionOption,
    RequestPermissionResponse,
    TextContentBlock,
    ToolCallUpdate,
)

from agents.backends import AcpProcesses, AgentTask
from agents.backends.acp.backend import AcpBackend
from agents.backends.acp.client import RavenClient, rejected
from agents.backends.acp.frames import FrameGuard
from agents.backends.acp.process import CLIENT_INFO
from agents.models.types import Message
from agents.process import scrub_env
from agents.registry import AgentEntry
from agents.sandbox import Sandbox, select_sandbox
from bench.lib.figures import goal, pct
from core.secret_names import SecretNames

REPO = Path(__file__).resolve().parent.parent
# Only its path: the script is copied into each workspace (the sandbox shows nothing else).
FAKE = REPO / "tests" / "fakes" / "acp_agent.py"
AGENT_DIR = "agent"
PROMPT = "hello"
EXPECTED = f"echo: {PROMPT}"
ADDED_GOAL = 0.005  # seconds added per trivial turn, at p50
CPU_GOAL = 0.002  # seconds of this process's CPU per turn
WITHIN = 30.0  # hang guard for one turn or one start
# The bench reads no settings: only names that look secret are withheld (the pattern).
SECRETS = SecretNames()


def entry(**changes: Any) -> AgentEntry:
    """The agent as the backend's tests register it."""
    base = AgentEntry(
        name="fake",
        description="a loopback ACP agent",
        backend="acp",
        stateful=True,
        file_capable=True,
        progress=True,
        enabled=True,
        role="raven",
        command=(sys.executable, f"{AGENT_DIR}/acp_agent.py"),
        timeout_seconds=30,
        init_timeout_seconds=10,
    )
    return dataclasses.replace(base, **changes)


def workspace(root: Path, name: str) -> Path:
    """A workspace holding the fake agent's script."""
    where = (root / name).resolve()
    (where / AGENT_DIR).mkdir(parents=True)
    shutil.copy(FAKE, where / AGENT_DIR / "acp_agent.py")
    return where


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.2f}"


# ------------------------------------------------------------------- the bare SDK client


class TextClient(RavenClient):
    """The least a client does: keep the agent's message text, refuse what it asks.
    (RavenClient only for its refusals of fs/terminal requests, which never come here.)"""

    def __init__(self) -> None:
        super().__init__()
        self.words: list[str] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if isinstance(update, AgentMessageChunk) and isinstance(update.content, TextContentBlock):
            self.words.append(update.content.text)

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        return rejected(options)


@dataclass
class BareAgent:
    """The fake agent in the sandbox, spoken to by the SDK's client side and nothing else
    (with `guard`, through the bot's `FrameGuard`, to see what that costs alone)."""

    process: asyncio.subprocess.Process
    conn: ClientSideConnection
    client: TextClient
    where: Path
    pump: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls, sandbox: Sandbox, agent: AgentEntry, where: Path, *, guard: bool = False
    ) -> BareAgent:
        """Spawned as `AcpProcess.start` spawns it (argv, network, environment, cwd, own
        process group)."""
        env = scrub_env(os.environ, secret_names=SECRETS, allow=agent.env_allow)
        launch = sandbox.launch(
            list(agent.command), workspace=where, env=env, network=agent.network
        )
        process = await asyncio.create_subprocess_exec(
            *launch.argv,
            preexec_fn=launch.preexec,
            cwd=str(where),
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
        assert process.stdin is not None and process.stdout is not None
        client = TextClient()
        reader, pump = process.stdout, None
        if guard:
            frames = FrameGuard(process.stdout)
            reader, pump = frames.reader, asyncio.create_task(frames.pump())
        conn = ClientSideConnection(client, process.stdin, reader)
        bare = cls(process, conn, client, where, pump)
        try:
            async with asyncio.timeout(WITHIN):
                await bare.conn.initialize(
                    protocol_version=PROTOCOL_VERSION,
                    client_capabilities=ClientCapabilities(),
                    client_info=CLIENT_INFO,
                )
        except BaseException:
            await asyncio.shield(bare.close())
            raise
        return bare

    async def prompt(self, session_id: str) -> str:
        self.client.words.clear()
        await self.conn.prompt(session_id=session_id, prompt=[text_block(PROMPT)])
        return "".join(self.client.words)

    async def fresh_prompt(self, cwd: str) -> str:
        created = await self.conn.new_session(cwd=cwd)
        return await self.prompt(created.session_id)

    async def close(self) -> None:
        """EOF on its stdin ends the agent; its group is killed if it lingers."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.conn.close(), 2.0)
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 5.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            await self.process.wait()
        if self.pump is not None:
            self.pump.cancel()
            await asyncio.gather(self.pump, return_exceptions=True)


# ------------------------------------------------------------------------------- paths


@dataclass
class Lane:
    """One path: `make` builds a turn (untimed) and returns the awaitable timed."""

    label: str
    make: Callable[[], Awaitable[str]]
    # The history length each counted turn was given (the bot's stateful lanes).
    size: Callable[[], int] | None = None
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)


@dataclass
class BotLane:
    """The bot's path: one `AcpBackend.run` per turn. A stateful one passes the history of
    an earlier outcome: the previous one's if `grow` (as an instance's node after node, two
    messages longer each turn), else its first one's (every turn the second of a session)."""

    backend: AcpBackend
    agent: AgentEntry
    where: Path
    grow: bool = True
    history: list[Message] = field(default_factory=list)

    def make(self) -> Awaitable[str]:
        task = AgentTask(
            node_id="n1",
            agent=self.agent,
            prompt=PROMPT,
            workspace=self.where,
            history=list(self.history),
        )
        return self._run(task)

    async def _run(self, task: AgentTask) -> str:
        outcome = await self.backend.run(task)
        if outcome.error is not None:
            raise SystemExit(f"a bot turn failed: {outcome.error}")
        if self.agent.stateful and (self.grow or not self.history):
            self.history = outcome.history
        return outcome.output

    def size(self) -> int:
        return len(self.history)


async def timed(lane: Lane, count: int, *, keep: bool = True) -> None:
    """`count` turns of `lane`, one at a time; their wall and CPU time kept if `keep`."""
    for _ in range(count):
        size = lane.size() if lane.size is not None else 0
        turn = lane.make()
        cpu, wall = time.process_time(), time.perf_counter()
        async with asyncio.timeout(WITHIN):
            text = await turn
        took, used = time.perf_counter() - wall, time.process_time() - cpu
        if text != EXPECTED:
            raise SystemExit(f"{lane.label}: expected {EXPECTED!r}, got {text!r}")
        if keep:
            lane.wall.append(took)
            lane.cpu.append(used)
            lane.sizes.append(size)


# ------------------------------------------------------------------------- (1) cold start


@dataclass
class Cold:
    """Cold-start figures, in seconds."""

    bot_start: list[float] = field(default_factory=list)
    bot_start_cpu: list[float] = field(default_factory=list)
    bot_first: list[float] = field(default_factory=list)
    bot_close: list[float] = field(default_factory=list)
    bare_start: list[float] = field(default_factory=list)
    bare_start_cpu: list[float] = field(default_factory=list)
    bare_first: list[float] = field(default_factory=list)

    @property
    def bot_total(self) -> list[float]:
        return [a + b for a, b in zip(self.bot_start, self.bot_first, strict=True)]


async def cold_bot(sandbox: Sandbox, where: Path, cold: Cold) -> None:
    agent = entry(stateful=False)
    pool = AcpProcesses(sandbox, secret_names=SECRETS)
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        async with asyncio.timeout(WITHIN):
            process = await pool.acquire(agent, where)
        pool.release(process, where)
        started = time.perf_counter()
        cold.bot_start.append(started - wall)
        cold.bot_start_cpu.append(time.process_time() - cpu)
        lane = BotLane(AcpBackend(agent, pool), agent, where)
        await timed(Lane("bot cold", lane.make), 1, keep=False)
        cold.bot_first.append(time.perf_counter() - started)
    finally:
        closing = time.perf_counter()
        await pool.close()
        cold.bot_close.append(time.perf_counter() - closing)


async def cold_bare(sandbox: Sandbox, where: Path, cold: Cold) -> None:
    cpu, wall = time.process_time(), time.perf_counter()
    bare = await BareAgent.start(sandbox, entry(), where)
    try:
        started = time.perf_counter()
        cold.bare_start.append(started - wall)
        cold.bare_start_cpu.append(time.process_time() - cpu)
        await timed(Lane("bare cold", lambda: bare.fresh_prompt(str(where))), 1, keep=False)
        cold.bare_first.append(time.perf_counter() - started)
    finally:
        await bare.close()


async def cold_phase(sandbox: Sandbox, root: Path, count: int) -> None:
    cold = Cold()
    bot_where, bare_where = workspace(root, "cold-bot"), workspace(root, "cold-bare")
    for _ in range(count):
        await cold_bot(sandbox, bot_where, cold)
        await cold_bare(sandbox, bare_where, cold)
    print(f"\n(1) cold start, {count} fresh processes each (ms)        p50      min      max")
    rows = [
        ("bot: pool.acquire (spawn in bwrap + initialize)", cold.bot_start),
        ("bare: spawn in bwrap + initialize", cold.bare_start),
        ("bot: first turn (session/new + prompt)", cold.bot_first),
        ("bare: first turn (session/new + prompt)", cold.bare_first),
        ("bot: cold start + first turn", cold.bot_total),
        ("bot: this process's CPU in pool.acquire", cold.bot_start_cpu),
        ("bare: this process's CPU in spawn + initialize", cold.bare_start_cpu),
        ("bot: pool.close()", cold.bot_close),
    ]
    for label, values in rows:
        print(
            f"  {label:<50} {ms(pct(values, 50))}  {ms(min(values))}  {ms(max(values))}"
            f"   [{' '.join(f'{v * 1000:.0f}' for v in values)}]"
        )


# --------------------------------------------------------------------- (2) per-turn


@dataclass
class Steady:
    """The paths' figures and what is needed to compare them."""

    bare_one: Lane
    bare_guard: Lane
    bare_new: Lane
    stateless: Lane
    stateful: Lane
    growing: Lane
    young_bot: BotLane
    growing_bot: BotLane
    # The bot lanes' first turns, each of which started its pooled process.
    first: list[float] = field(default_factory=list)

    @property
    def lanes(self) -> list[Lane]:
        return [
            self.bare_one,
            self.bare_guard,
            self.bare_new,
            self.stateless,
            self.stateful,
            self.growing,
        ]


async def steady_phase(
    sandbox: Sandbox, root: Path, args: argparse.Namespace, pool: AcpProcesses
) -> Steady:
    """(2) Each path on its own agent process and workspace: the fake's per-prompt work
    grows with the sessions its process holds, so a one-session path never shares an agent
    with a new-session-per-turn one."""
    async with contextlib.AsyncExitStack() as stack:
        bare = await bare_lane(sandbox, root, "bare-one", stack)
        guarded = await bare_lane(sandbox, root, "bare-guard", stack, guard=True)
        fresh = await bare_lane(sandbox, root, "bare-new", stack)
        one = (await bare.conn.new_session(cwd=str(bare.where))).session_id
        guarded_one = (await guarded.conn.new_session(cwd=str(guarded.where))).session_id
        stateless_entry, stateful_entry = entry(stateful=False), entry(stateful=True)
        stateless = BotLane(
            AcpBackend(stateless_entry, pool), stateless_entry, workspace(root, "bot-stateless")
        )
        young = BotLane(
            AcpBackend(stateful_entry, pool),
            stateful_entry,
            workspace(root, "bot-young"),
            grow=False,
        )
        growing = BotLane(
            AcpBackend(stateful_entry, pool), stateful_entry, workspace(root, "bot-growing")
        )
        steady = Steady(
            Lane("bare SDK, one session", lambda: bare.prompt(one)),
            Lane("bare SDK + FrameGuard, one session", lambda: guarded.prompt(guarded_one)),
            Lane("bare SDK, new session per prompt", lambda: fresh.fresh_prompt(str(fresh.where))),
            Lane("bot, stateless (new session per turn)", stateless.make),
            Lane("bot, stateful, 2nd turn of a session", young.make, young.size),
            Lane("bot, stateful, history growing", growing.make, growing.size),
            young,
            growing,
        )
        for lane in (steady.stateless, steady.stateful, steady.growing):
            started = time.perf_counter()
            await timed(lane, 1, keep=False)  # starts its pooled process
            steady.first.append(time.perf_counter() - started)
        for lane in steady.lanes:
            await timed(lane, args.warmup, keep=False)
        gc.collect()
        per_round = max(1, args.turns // args.rounds)
        lanes = steady.lanes
        for index in range(args.rounds):
            shift = index % len(lanes)
            for lane in lanes[shift:] + lanes[:shift]:
                await timed(lane, per_round)
        return steady


async def bare_lane(
    sandbox: Sandbox,
    root: Path,
    name: str,
    stack: contextlib.AsyncExitStack,
    *,
    guard: bool = False,
) -> BareAgent:
    """A bare agent in its own workspace, closed when `stack` closes."""
    bare = await BareAgent.start(sandbox, entry(), workspace(root, name), guard=guard)
    stack.push_async_callback(bare.close)
    return bare


def print_steady(steady: Steady, args: argparse.Namespace) -> None:
    count = len(steady.bare_one.wall)
    firsts = ", ".join(f"{t * 1000:.0f}" for t in steady.first)
    print(
        f"\n(2) per trivial turn, {count} per path ({args.rounds} rounds, order rotated; "
        f"{args.warmup} warm-up turns each not counted; the bot lanes' first turns, which "
        f"started their pooled processes, took {firsts} ms)"
    )
    print(
        f"  {'path (ms)':<38} {'p50':>7} {'p95':>7} {'p99':>7} {'max':>7}   "
        f"{'cpu mean':>8} {'cpu p50':>7} {'cpu p99':>7}"
    )
    for lane in steady.lanes:
        print(
            f"  {lane.label:<38} {ms(pct(lane.wall, 50))} {ms(pct(lane.wall, 95))} "
            f"{ms(pct(lane.wall, 99))} {ms(max(lane.wall))}   {ms(statistics.fmean(lane.cpu))}  "
            f"{ms(pct(lane.cpu, 50))} {ms(pct(lane.cpu, 99))}"
        )


def added(lane: Lane, base: Lane) -> tuple[float, float, float]:
    """Added p50 latency, ratio of p50s, added mean CPU."""
    p50, base50 = pct(lane.wall, 50), pct(base.wall, 50)
    cpu = statistics.fmean(lane.cpu) - statistics.fmean(base.cpu)
    return p50 - base50, p50 / base50, cpu


def print_added(steady: Steady) -> None:
    print(f"\n(3) what the bot's path adds (ms) {'added p50':>16} {'ratio':>7}  added cpu mean")
    pairs = [
        ("stateful 2nd turn vs bare one session", steady.stateful, steady.bare_one),
        ("stateful growing vs bare one session", steady.growing, steady.bare_one),
        ("stateless vs bare one session", steady.stateless, steady.bare_one),
        ("stateless vs bare new session (like for like)", steady.stateless, steady.bare_new),
        ("FrameGuard alone (bare + guard vs bare)", steady.bare_guard, steady.bare_one),
        ("session/new alone (bare new vs bare one)", steady.bare_new, steady.bare_one),
    ]
    for label, lane, base in pairs:
        more, ratio, cpu = added(lane, base)
        print(f"  {label:<46} {ms(more)}  {ratio:5.2f}x  {ms(cpu)}")


async def history_phase(steady: Steady, args: argparse.Namespace) -> None:
    """(4) A stateful turn with a 3-message history against one with `--history` messages,
    alternating turn by turn (drift on the machine falls on both alike). The long history is
    the growing lane's real messages, repeated as copies (the graph runtime loads an
    instance's history from the store for each node: its messages are fresh objects), after
    that session's first message: both continue a session the agent holds and differ only
    in what the bot carries along."""
    real = steady.growing_bot.history
    if len(real) < 3:
        return
    marker, rest = real[0], real[1:]
    repeated = (rest * (args.history // len(rest) + 1))[: args.history - 1]
    long = [marker, *(message.model_copy(deep=True) for message in repeated)]
    young = steady.young_bot
    fixed = BotLane(young.backend, young.agent, steady.growing_bot.where, grow=False, history=long)
    short_lane = Lane(f"history of {len(young.history)} messages", young.make)
    long_lane = Lane(f"history of {len(long)} messages", fixed.make)
    for _ in range(args.warmup):
        await timed(short_lane, 1, keep=False)
        await timed(long_lane, 1, keep=False)
    for _ in range(args.history_turns):
        await timed(short_lane, 1)
        await timed(long_lane, 1)
    print(
        f"\n(4) stateful turns (session continued), {args.history_turns} each, alternating"
        f"\n  {'path (ms)':<38} {'p50':>7} {'p95':>7}   {'cpu mean':>8}"
    )
    for lane in (short_lane, long_lane):
        print(
            f"  {lane.label:<38} {ms(pct(lane.wall, 50))} {ms(pct(lane.wall, 95))}   "
            f"{ms(statistics.fmean(lane.cpu))}"
        )
    extra = len(long) - len(young.history)
    cpu = (statistics.fmean(long_lane.cpu) - statistics.fmean(short_lane.cpu)) / extra
    wall = (pct(long_lane.wall, 50) - pct(short_lane.wall, 50)) / extra
    print(f"  per history message: CPU {cpu * 1e6:+.2f} µs, latency {wall * 1e6:+.2f} µs per turn")
    # An instance keeps its session id and its last exchanges only (the agent holds the
    # session), so its history stops growing at HISTORY_KEPT + 1 messages.
    if cpu > 0:
        reach = max(0.0, len(young.history) + (CPU_GOAL - statistics.fmean(short_lane.cpu)) / cpu)
        print(f"  {CPU_GOAL * 1000:g} ms of CPU per turn at ≈ {reach:.0f} history messages")


def print_goals(steady: Steady) -> None:
    lanes = (steady.stateful, steady.stateless, steady.growing)
    width = max(len(lane.label) for lane in lanes)
    print("\ngoals (informational, never asserted):")
    print(
        f"  added latency per trivial turn ≤ {ADDED_GOAL * 1000:g} ms at p50 "
        "(bot path p50 − bare one-session p50):"
    )
    for lane in lanes:
        more, _, _ = added(lane, steady.bare_one)
        said = goal(
            f"ACP added latency p50, {lane.label}", more * 1000, ADDED_GOAL * 1000, unit="ms"
        )
        print(f"    {lane.label:<{width}} {more * 1000:+6.2f} ms  {said}")
    print(
        f"  bot-side CPU ≤ {CPU_GOAL * 1000:g} ms per turn "
        "(this process's CPU over the turn, SDK included, mean):"
    )
    for lane in lanes:
        cpu = statistics.fmean(lane.cpu)
        said = goal(
            f"ACP bot-side CPU per turn, {lane.label}", cpu * 1000, CPU_GOAL * 1000, unit="ms"
        )
        print(f"    {lane.label:<{width}} {cpu * 1000:6.2f} ms  {said}")
    print(
        f"  (the growing lane's figures depend on --turns: its history went from "
        f"{steady.growing.sizes[0]} to {steady.growing.sizes[-1]} messages)"
    )


async def profile(steady: Steady, count: int) -> None:
    """cProfile of `count` more turns of each bot path: the top functions by own time."""
    profiler = cProfile.Profile()
    profiler.enable()
    await timed(steady.stateless, count, keep=False)
    await timed(steady.stateful, count, keep=False)
    await timed(steady.growing, count, keep=False)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(25)
    print(f"\nprofile of {count} more turns of each bot path:")
    print(out.getvalue())


# -------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The bench's options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=400, help="(2): counted turns per path")
    parser.add_argument("--rounds", type=int, default=8, help="(2): rounds, order rotated")
    parser.add_argument("--warmup", type=int, default=20, help="(2): uncounted turns per path")
    parser.add_argument("--cold", type=int, default=5, help="(1): fresh processes per path")
    parser.add_argument("--history", type=int, default=2001, help="(4): the long history")
    parser.add_argument("--history-turns", type=int, default=100, help="(4): turns of each")
    parser.add_argument(
        "--tmp", default=None, help="where the workspaces go (default /dev/shm if writable)"
    )
    parser.add_argument("--profile", action="store_true", help="cProfile extra bot turns")
    return parser.parse_args(argv)


def scratch(asked: str | None) -> str | None:
    """The workspaces' parent: tmpfs when there is one (the fake agent rewrites its session
    notes file after every prompt; on a disk, writeback stalls would show as the agent's
    latency tail in every path), else the system's temporary directory."""
    if asked is not None:
        return asked
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


async def bench(args: argparse.Namespace) -> int:
    """Every phase, in a temporary directory; every process closed at the end."""
    sandbox = select_sandbox(hidden=(), unsandboxed=False)
    print(
        f"acp_overhead on {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPU(s), load average {os.getloadavg()[0]:.2f}; "
        f"sandbox: {sandbox.description}"
    )
    if sandbox.kind != "bwrap":
        print("bubblewrap is needed (apt-get install bubblewrap): nothing measured")
        return 1
    print(
        f'agent: {FAKE.relative_to(REPO)} copied into each workspace; prompt "{PROMPT}" → '
        f'"{EXPECTED}" (6 session/update frames + the response)'
    )
    root = Path(tempfile.mkdtemp(prefix="raven-bench-acp-", dir=scratch(args.tmp)))
    print(f"workspaces under {root.parent}")
    pool = AcpProcesses(sandbox, secret_names=SECRETS)
    started = time.perf_counter()
    try:
        await cold_phase(sandbox, root, args.cold)
        steady = await steady_phase(sandbox, root, args, pool)
        print_steady(steady, args)
        print_added(steady)
        await history_phase(steady, args)
        print_goals(steady)
        if args.profile:
            await profile(steady, args.turns)
    finally:
        await pool.close()
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"\n{time.perf_counter() - started:.1f} s in all; "
        f"load average at the end {os.getloadavg()[0]:.2f}"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point."""
    sys.exit(asyncio.run(bench(parse_args(argv))))


if __name__ == "__main__":
    main()
