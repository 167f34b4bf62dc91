"""Benchmark: the latency one MCP tool call gains by going through the bot, against the bare
SDK calling the same tool the same way.

The server is the tests' loopback MCP server (`tests/fakes/mcp_server.py`, built on the SDK's
server side) and the tool its `echo` (text in, the same text out), over two transports:

- **stdio**: each path starts its own copy of the server as a child process (a stdio session
  has one client);
- **streamable HTTP**: one server process (`--http PORT` on 127.0.0.1) that every path talks
  to, each in a session of its own.

Paths, per transport:

- **bare SDK**: `mcp.ClientSession` over `stdio_client` / `streamable_http_client`, opened and
  initialized once, then `session.call_tool("echo", {"text": ...})`;
- **bot, McpServers.call**: `mcp_client.McpServers(config).start()`, `settled(name)`, then
  `call(server, "echo", args)` (the session in its own task, the timeout, the result made
  text for a model, capped), the stdio server unsandboxed, as the bot's McpFeature starts it;
- **bot, agent tool**: the agent-facing tool from `host/features/mcp/tools.py`'s
  `mcp_tools(servers, names)`, dispatched through `agents.tools.ToolRegistry.dispatch` with a
  `ToolContext` whose permit is the real `PermissionGate` (mode ask-everything, nobody to
  ask, the allow rule `mcp:bench:*`, `MemoryRemembered`, `ListAudit`): the whole path an
  in-process agent's call takes, the gate's decision, its audit record and the fencing of the
  server's answer included.

Calls are interleaved one by one: each of `--calls` (500) rounds makes one call on every path
of both transports, in a random order drawn afresh each round (`--seed`), after `--warmup` (30)
uncounted rounds, so drift and noise on the machine fall on every path alike. Latency is the
wall time of the awaited call (perf_counter); CPU is this process's `time.process_time` over it
(a server is another process: its CPU is not counted). Besides each path's percentiles it
prints what a bot path adds: the difference of p50s and p95s against the bare SDK on the same
transport, and the paired difference (the median over rounds of the bot call − the bare call of
the same round: drift over the run cannot move it), and the added CPU per call.

Goal (informational, never asserted): added latency ≤ 2 ms at p50 (a bot path's p50 − the
bare SDK's p50 on the same transport). Every process is closed at the end. About 25 s on 2
cores. Run from the repo root:

    .venv/bin/python bench/mcp_calls.py [--calls 500] [--warmup 30] [--seed 7]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import random
import socket
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from agents.models.types import ToolCall
from agents.permissions import (
    Decision,
    ListAudit,
    MemoryRemembered,
    PermissionGate,
    PermissionRules,
    ToolCallRequest,
    ToolTrust,
)
from agents.tools import ToolRegistry
from agents.workspace_tools import ToolContext
from bench.lib.figures import goal, pct
from host.features.mcp.tools import mcp_tools
from mcp_client import McpServers, parse_mcp_config

REPO = Path(__file__).resolve().parent.parent
FAKE = str(REPO / "tests" / "fakes" / "mcp_server.py")
SERVER = "bench"
RULE = "mcp:bench:*"
TEXT = "ping"
ADDED_GOAL = 0.002  # seconds added per call, at p50
WITHIN = 30.0  # hang guard for one call or one start


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.3f}"


@dataclass
class Lane:
    """One path on one transport: `call` makes one echo call and returns its text."""

    label: str
    transport: str
    call: Callable[[], Awaitable[str]]
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    @property
    def bare(self) -> bool:
        return self.label == "bare SDK"


async def once(lane: Lane, *, keep: bool) -> None:
    """One call on `lane`, timed; its answer checked (a wrong one stops the bench)."""
    cpu, wall = time.process_time(), time.perf_counter()
    async with asyncio.timeout(WITHIN):
        text = await lane.call()
    took, used = time.perf_counter() - wall, time.process_time() - cpu
    if TEXT not in text:
        raise SystemExit(f"{lane.transport} / {lane.label}: expected {TEXT!r}, got {text[:300]!r}")
    if keep:
        lane.wall.append(took)
        lane.cpu.append(used)


# ------------------------------------------------------------------------------ the server


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def http_server() -> Any:
    """The fake server over streamable HTTP on 127.0.0.1; yields its URL once it accepts
    connections."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        FAKE,
        "--http",
        str(port),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + WITHIN
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                if process.returncode is not None or time.monotonic() > deadline:
                    raise SystemExit("the HTTP MCP server did not start") from None
                await asyncio.sleep(0.05)
                continue
            writer.close()
            await writer.wait_closed()
            break
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        await process.wait()


# ------------------------------------------------------------------------------- bare SDK


def echo_text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def bare_session(
    stack: contextlib.AsyncExitStack, transport: str, url: str
) -> Callable[[], Awaitable[str]]:
    """A bare SDK session, opened and initialized; returns its echo call."""
    if transport == "stdio":
        devnull = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115, ASYNC230 (never blocks)
        params = StdioServerParameters(command=sys.executable, args=[FAKE])
        read, write = await stack.enter_async_context(stdio_client(params, errlog=devnull))
    else:
        read, write = await stack.enter_async_context(streamable_http_client(url))
    session = await stack.enter_async_context(ClientSession(read, write))
    async with asyncio.timeout(WITHIN):
        await session.initialize()

    async def call() -> str:
        return echo_text(await session.call_tool("echo", {"text": TEXT}))

    return call


# ------------------------------------------------------------------------------------ bot


def bench_config(transport: str, url: str) -> dict[str, Any]:
    """mcp.json's entry for the server: the fake over stdio, or the HTTP one (loopback, so
    allowed explicitly)."""
    if transport == "stdio":
        entry: dict[str, Any] = {"command": sys.executable, "args": [FAKE]}
    else:
        entry = {"type": "http", "url": url, "allow_private_network": True}
    return {"mcpServers": {SERVER: entry}}


async def bot_servers(stack: contextlib.AsyncExitStack, transport: str, url: str) -> McpServers:
    config = parse_mcp_config(json.dumps(bench_config(transport, url)), {}, source="mcp.json")
    servers = McpServers(config)
    await stack.enter_async_context(servers)
    async with asyncio.timeout(WITHIN):
        state = await servers.settled(SERVER)
    if state.status != "ready":
        raise SystemExit(f"{transport}: McpServers did not connect: {state.error}")
    return servers


def servers_call(servers: McpServers) -> Callable[[], Awaitable[str]]:
    async def call() -> str:
        result = await servers.call(SERVER, "echo", {"text": TEXT})
        if result.is_error:
            raise SystemExit(f"McpServers.call failed: {result.text}")
        return result.text

    return call


class GatePermit:
    """The real gate, as the bot builds one for a task nobody can be asked about: it refuses
    whatever the allow rule does not cover, so a call that passes went through the rule."""

    def __init__(self, audit: ListAudit) -> None:
        self._gate = PermissionGate(
            PermissionRules(mode="ask-everything", allow=[RULE]),
            asker=None,
            remembered=MemoryRemembered(),
            audit=audit,
        )

    async def __call__(
        self, tool: str, subject: str, detail: str = "", *, trust: ToolTrust | None = None
    ) -> Decision:
        call = ToolCallRequest(tool, subject, "bench-conv", "bench-user", "bench", detail, trust)
        return await self._gate.check(call)


def tool_call(
    servers: McpServers, workspace: Path, audit: ListAudit
) -> Callable[[], Awaitable[str]]:
    """The agent-facing echo tool, dispatched as an in-process agent's call is."""
    tools = list(mcp_tools(servers, [SERVER]))
    echo = [tool for tool in tools if tool.name.endswith("echo")]
    if len(echo) != 1:
        raise SystemExit(f"mcp_tools offers no single echo tool: {[t.name for t in tools]}")
    registry: ToolRegistry[ToolContext] = ToolRegistry(tools)
    ctx = ToolContext(workspace=workspace, permit=GatePermit(audit))
    name, count = echo[0].name, 0

    async def call() -> str:
        nonlocal count
        count += 1
        result = await registry.dispatch(
            ToolCall(id=f"c{count}", name=name, input={"text": TEXT}), ctx
        )
        if result.is_error:
            raise SystemExit(f"the agent tool {name} failed: {result.content}")
        return result.content

    return call


# ----------------------------------------------------------------------------------- main


async def build_lanes(stack: contextlib.AsyncExitStack, url: str, audit: ListAudit) -> list[Lane]:
    lanes: list[Lane] = []
    for transport in ("stdio", "http"):
        lanes.append(Lane("bare SDK", transport, await bare_session(stack, transport, url)))
        servers = await bot_servers(stack, transport, url)
        lanes.append(Lane("bot, McpServers.call", transport, servers_call(servers)))
        lanes.append(
            Lane("bot, agent tool via the gate", transport, tool_call(servers, REPO, audit))
        )
    return lanes


async def interleaved(
    lanes: Sequence[Lane], rounds: int, order: random.Random, *, keep: bool
) -> None:
    """`rounds` rounds, one call per lane each, in a fresh random order each round. (A
    rotating order keeps every lane behind the same neighbour, and what a call leaves behind
    on the loop, an HTTP call's trailing stream work, then always lands on the same lane.)"""
    for _ in range(rounds):
        for lane in order.sample(lanes, len(lanes)):
            await once(lane, keep=keep)


def print_lanes(lanes: Sequence[Lane], calls: int) -> None:
    print(f"\n(1) one echo call, {calls} per path, interleaved")
    print(
        f"  {'transport':<9} {'path (ms)':<30} {'p50':>7} {'p95':>7} {'p99':>7} {'max':>7}"
        f"   {'cpu mean':>8}"
    )
    for lane in lanes:
        print(
            f"  {lane.transport:<9} {lane.label:<30} {ms(pct(lane.wall, 50))} "
            f"{ms(pct(lane.wall, 95))} {ms(pct(lane.wall, 99))} {ms(max(lane.wall))}   "
            f"{ms(statistics.fmean(lane.cpu))}"
        )


def print_added(lanes: Sequence[Lane]) -> None:
    bare = {lane.transport: lane for lane in lanes if lane.bare}
    print(
        f"\n(2) what the bot adds (ms, bot − bare SDK on the same transport; paired: the median"
        f"\n    of each round's bot call − that round's bare call, which drift cannot move)"
        f"\n  {'transport':<9} {'path':<30} {'added p50':>9} {'added p95':>9} {'paired':>9}"
        f" {'ratio p50':>9}   {'added cpu':>9}"
    )
    for lane in lanes:
        if lane.bare:
            continue
        base = bare[lane.transport]
        p50, p95 = pct(lane.wall, 50) - pct(base.wall, 50), pct(lane.wall, 95) - pct(base.wall, 95)
        paired = statistics.median(a - b for a, b in zip(lane.wall, base.wall, strict=True))
        cpu = statistics.fmean(lane.cpu) - statistics.fmean(base.cpu)
        print(
            f"  {lane.transport:<9} {lane.label:<30} {ms(p50):>9} {ms(p95):>9} {ms(paired):>9} "
            f"{pct(lane.wall, 50) / pct(base.wall, 50):8.2f}x   {ms(cpu):>9}"
        )
    print(
        f"\ngoal (informational, never asserted): added latency ≤ {ADDED_GOAL * 1000:g} ms at p50"
    )
    for lane in lanes:
        if lane.bare:
            continue
        more = pct(lane.wall, 50) - pct(bare[lane.transport].wall, 50)
        said = goal(
            f"MCP added latency p50, {lane.transport}, {lane.label}",
            more * 1000,
            ADDED_GOAL * 1000,
            unit="ms",
        )
        print(f"  {lane.transport:<9} {lane.label:<30} {more * 1000:+7.3f} ms  {said}")


async def bench(args: argparse.Namespace) -> int:
    print(
        f"mcp_calls on {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPU(s), load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"server: {Path(FAKE).relative_to(REPO)}, tool echo({TEXT!r}); agent tool: mcp_tools "
        f"through ToolRegistry.dispatch and the PermissionGate (mode ask-everything, allow {RULE})"
    )
    started = time.perf_counter()
    audit = ListAudit()
    async with http_server() as url, contextlib.AsyncExitStack() as stack:
        lanes = await build_lanes(stack, url, audit)
        order = random.Random(args.seed)
        await interleaved(lanes, args.warmup, order, keep=False)
        gc.collect()
        await interleaved(lanes, args.calls, order, keep=True)
        print_lanes(lanes, args.calls)
        print_added(lanes)
        tiers = {decision.tier for decision in audit.decisions}
        allowed = all(decision.allowed for decision in audit.decisions)
        print(
            f"  (the gate decided {len(audit.decisions)} calls, tiers {sorted(tiers)}, "
            f"{'all allowed' if allowed else 'SOME REFUSED'})"
        )
    print(
        f"\n{time.perf_counter() - started:.1f} s in all; "
        f"load average at the end {os.getloadavg()[0]:.2f}"
    )
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=500, help="counted calls per path")
    parser.add_argument("--warmup", type=int, default=30, help="uncounted calls per path")
    parser.add_argument("--seed", type=int, default=7, help="the rounds' call order")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point."""
    sys.exit(asyncio.run(bench(parse_args(argv))))


if __name__ == "__main__":
    main()
