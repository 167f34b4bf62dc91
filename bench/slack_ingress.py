"""Benchmark: Slack HTTP Events API ingress (ack latency) while the model is slow.

Starts the real assembled bot (`build_runtime` + `serve`, Slack adapter over the HTTP Events
API) against the loopback FakeSlack and a FakeAnthropic whose every /v1/messages answer is
held for a random 0.5–1.0 s, then POSTs signed `app_mention` event_callbacks at increasing
open-loop target rates from a separate load-generator process, with Slack-style retries
(`X-Slack-Retry-Num: 1` / `2`) and exact duplicates delivered concurrently. Each mention is
a new top-level thread, so every event has its own lane and lanes run in parallel.

Both fakes run in one separate spawned process (each on its own 127.0.0.1 port), as Slack
and Anthropic are remote in production: the bot's process holds only the bot and the
bench's probes (loop lag, store writes, GC), so the fakes' CPU, request handling and
recorded calls neither load its event loop nor lengthen its GC pauses. The bench asks that
process over a Pipe (fresh message ts, the replies seen per thread with their arrival times,
call counts, its CPU time); arrival times are time.monotonic() there and send times
time.monotonic() in the generator (one system-wide CLOCK_MONOTONIC), so they compare.
`--in-process-fakes` serves both fakes on the bot's own event loop instead (the old
topology, which overstates the bot's ack latency), to compare; the header line says which.

Prints ack latency per rate (POST sent → HTTP 200), reply latency, what the ack path costs
in store writes (write units, batches, transactions), GC pauses, and at the end how many
turns and replies each event produced, next to the target line. It asserts nothing about
time; it exits 1 only when some event produced more than one turn (a correctness failure).
Run from the repo root:

    .venv/bin/python bench/slack_ingress.py [--rates 10,25,50,100,200] [--seconds 3]
        [--in-process-fakes]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import functools
import gc
import logging
import math
import multiprocessing
import os
import platform
import random
import shutil
import sqlite3
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import aiosqlite
from aiohttp import web

from bench.lib.figures import goal
from bot.app import build_runtime, serve
from bot.settings import load_settings
from bot.slack.adapter import SlackAdapter
from bot.slack.factory import slack_adapter
from bot.slack.ingress import SlackIngress
from bot.slack.settings import SlackSettings
from core.store import Store, WriteStats
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.slack import FakeSlack, json_body, payloads, sign

SECRET = "bench-signing-secret"
BOT_TOKEN = "xoxb-bench"  # a fake; short so it never looks like a real token
RATES: tuple[int, ...] = (10, 25, 50, 100, 200)
USERS: tuple[str, ...] = tuple(f"U{n:03d}" for n in range(1, 9))
CHANNELS: tuple[str, ...] = tuple(f"C{n:04d}" for n in range(1, 17))
REPLY_TEXT = "Here is a short plain-text answer."
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")

# Delivery kinds: a first delivery, Slack's retries, and a concurrent exact duplicate.
FIRST, RETRY1, RETRY2, DUP = "first", "retry 1", "retry 2", "dup"
KINDS: tuple[str, ...] = (FIRST, RETRY1, RETRY2, DUP)

# Target of issue #8 (printed next to the figures, never asserted).
TARGET_RATE = 200.0  # events/s
TARGET_ACK_P99 = 0.020  # seconds


# --------------------------------------------------------------------------- load generator


@dataclass(frozen=True)
class Delivery:
    """One POST to send: `at` seconds after the phase starts."""

    at: float
    event: int  # index into the bench's event list
    body: bytes
    kind: str
    retry_num: int | None = None


@dataclass(frozen=True)
class Result:
    """What one POST got back (status 0: connection error or client timeout)."""

    event: int
    kind: str
    status: int
    latency: float  # perf_counter: just before the POST → response read
    lag: float  # how much later than scheduled the POST started
    started: float  # perf_counter offset from the phase start
    sent_mono: float  # time.monotonic() at send, comparable with FakeSlack's Call.at


def generate(url: str, deliveries: Sequence[Delivery], within: float) -> list[Result]:
    """Process-pool entry point: send one phase's deliveries on a fresh event loop."""
    return asyncio.run(post_all(url, deliveries, within))


def ping() -> int:
    """Process-pool warm-up (the spawn and imports must not land inside a phase)."""
    return os.getpid()


async def post_all(url: str, deliveries: Sequence[Delivery], within: float) -> list[Result]:
    """Open loop: every POST starts at its scheduled time whatever earlier ones are doing."""
    connector = aiohttp.TCPConnector(limit=0)
    client_timeout = aiohttp.ClientTimeout(total=within)
    async with aiohttp.ClientSession(connector=connector, timeout=client_timeout) as session:
        start = time.perf_counter() + 0.05
        tasks: list[asyncio.Task[Result]] = []
        for delivery in sorted(deliveries, key=lambda d: d.at):
            due = start + delivery.at
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.create_task(post_one(session, url, delivery, start, due)))
        return list(await asyncio.gather(*tasks))


async def post_one(
    session: aiohttp.ClientSession, url: str, delivery: Delivery, start: float, due: float
) -> Result:
    """Sign at send time (Slack signs every delivery afresh) and time the acknowledgement."""
    headers = {**sign(SECRET, delivery.body), "Content-Type": "application/json"}
    if delivery.retry_num is not None:
        headers["X-Slack-Retry-Num"] = str(delivery.retry_num)
        headers["X-Slack-Retry-Reason"] = "http_timeout"
    sent_mono = time.monotonic()
    sent = time.perf_counter()
    try:
        async with session.post(url, data=delivery.body, headers=headers) as resp:
            await resp.read()
            status = resp.status
    except (aiohttp.ClientError, TimeoutError):
        status = 0
    return Result(
        event=delivery.event,
        kind=delivery.kind,
        status=status,
        latency=time.perf_counter() - sent,
        lag=max(0.0, sent - due),
        started=sent - start,
        sent_mono=sent_mono,
    )


# --------------------------------------------------------------------------- fakes and probes


class SlowAnthropic(FakeAnthropic):
    """FakeAnthropic holding every /v1/messages answer for a seeded random delay.

    It counts requests instead of keeping them (each holds the whole system prompt and tool
    schemas; a thousand of them would only make the bot's process collect garbage slower).
    """

    def __init__(self, low: float, high: float, seed: int) -> None:
        super().__init__()
        self.low = low
        self.high = high
        self.answered = 0
        self._rng = random.Random(seed)
        self.responder = lambda _body: {"content": REPLY_TEXT}

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(self._rng.uniform(self.low, self.high))
        response = await super()._messages(request)
        self.answered += 1
        self.requests.clear()
        return response


class Replies:
    """Bot replies seen by FakeSlack, per (channel, thread_ts), read incrementally.

    `at` holds each reply's arrival time at the fake (`time.monotonic()` there: one
    system-wide CLOCK_MONOTONIC, so comparable with the generator's `sent_mono` whichever
    process the fake runs in).
    """

    def __init__(self, fakes: Fakes) -> None:
        self.fakes = fakes
        self.at: dict[tuple[str, str], list[float]] = {}
        self._seen = 0

    async def update(self) -> None:
        new: list[tuple[str, str, float]] = await self.fakes.ask("replies", self._seen)
        for channel, thread, at in new:
            self.at.setdefault((channel, thread), []).append(at)
        self._seen += len(new)


@dataclass(frozen=True)
class FakesInfo:
    """Where the fakes listen, sent back by the fakes' process once they serve."""

    api_url: str  # FakeSlack's Web API (RAVEN_SLACK_API_URL)
    model_url: str  # the model server (ANTHROPIC_BASE_URL)
    bot_user_id: str
    pid: int


@dataclass(frozen=True)
class FakeCounts:
    """What the fakes counted so far."""

    model_calls: int  # /v1/messages answered
    post_messages: int  # chat.postMessage calls, failed ones included
    cpu: float  # time.process_time() of the fakes' process (the bot's when in process)


class FakeHost:
    """FakeSlack and SlowAnthropic together, and the questions the bench asks them.

    It runs in whichever process serves the fakes; `answer` is the whole control protocol
    (`ts` n → n fresh message timestamps, `replies` k → the replies after the first k,
    `counts` → FakeCounts), so both placements answer the same way.
    """

    def __init__(self, delay: tuple[float, float], seed: int) -> None:
        self.slack = FakeSlack()
        self.model = SlowAnthropic(delay[0], delay[1], seed)
        self._replies: list[tuple[str, str, float]] = []  # (channel, thread_ts, arrived)
        self._post_messages = 0
        self._scanned = 0

    async def start(self) -> FakesInfo:
        await self.slack.start()
        await self.model.start()
        for n, user in enumerate(USERS):
            self.slack.add_user(user, f"user{n}", real_name=f"User {n}", display_name=f"user{n}")
        return FakesInfo(
            self.slack.api_url, self.model.base_url, self.slack.bot_user_id, os.getpid()
        )

    async def stop(self) -> None:
        await self.model.stop()
        await self.slack.stop()

    def answer(self, command: str, arg: int) -> Any:
        if command == "ts":
            return [self.slack.next_ts() for _ in range(arg)]
        self._scan()
        if command == "replies":
            return self._replies[arg:]
        if command == "counts":
            return FakeCounts(self.model.answered, self._post_messages, time.process_time())
        raise ValueError(f"unknown fakes command {command!r}")

    def _scan(self) -> None:
        calls = self.slack.calls
        for call in calls[self._scanned :]:
            if call.method != "chat.postMessage":
                continue
            self._post_messages += 1
            thread = call.args.get("thread_ts")
            if call.ok and thread:
                self._replies.append((str(call.args.get("channel")), str(thread), call.at))
        self._scanned = len(calls)


class Fakes:
    """The bench's handle on the fakes, wherever they run."""

    separate = False
    info: FakesInfo

    @property
    def where(self) -> str:
        raise NotImplementedError

    async def start(self) -> None:
        raise NotImplementedError

    async def ask(self, command: str, arg: int = 0) -> Any:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError


class LocalFakes(Fakes):
    """The fakes on the bot's own event loop (`--in-process-fakes`: the old topology)."""

    def __init__(self, delay: tuple[float, float], seed: int) -> None:
        self.host = FakeHost(delay, seed)

    @property
    def where(self) -> str:
        return "in the bot process"

    async def start(self) -> None:
        self.info = await self.host.start()

    async def ask(self, command: str, arg: int = 0) -> Any:
        return self.host.answer(command, arg)

    async def stop(self) -> None:
        await self.host.stop()


class ChildFakes(Fakes):
    """The fakes in one spawned child process, asked over a Pipe.

    The bot's side never blocks its event loop on the pipe: it waits for the answer with
    `add_reader` (answers are small: one phase's replies at most). One question at a time.
    """

    separate = True

    def __init__(self, delay: tuple[float, float], seed: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child_conn = context.Pipe()
        self._process = context.Process(
            target=serve_fakes, args=(child_conn, delay, seed), name="bench-fakes", daemon=True
        )
        self._process.start()  # spawns now; start() waits for it to serve
        child_conn.close()
        self._lock = asyncio.Lock()

    @property
    def where(self) -> str:
        return f"separate process, pid {self.info.pid}"

    async def start(self) -> None:
        self.info = await self._receive(within=60.0)  # spawn + imports: a few seconds

    async def ask(self, command: str, arg: int = 0) -> Any:
        async with self._lock:
            self._conn.send((command, arg))
            return await self._receive(within=30.0)

    async def _receive(self, within: float) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[bool, Any]] = loop.create_future()
        fd = self._conn.fileno()

        def readable() -> None:
            loop.remove_reader(fd)
            if future.done():
                return
            try:
                future.set_result(self._conn.recv())
            except (EOFError, OSError) as exc:
                future.set_exception(RuntimeError(f"the fakes' process went away: {exc!r}"))

        loop.add_reader(fd, readable)
        try:
            async with asyncio.timeout(within):
                ok, value = await future
        finally:
            loop.remove_reader(fd)
        if not ok:
            raise RuntimeError(f"the fakes' process failed: {value}")
        return value

    async def stop(self) -> None:
        if self._process.is_alive():
            with contextlib.suppress(RuntimeError, TimeoutError, OSError):
                await self.ask("stop")
        await asyncio.to_thread(self._process.join, 10)
        if self._process.is_alive():
            self._process.terminate()
            await asyncio.to_thread(self._process.join, 5)
        self._conn.close()


def serve_fakes(conn: Any, delay: tuple[float, float], seed: int) -> None:
    """Child-process entry point: serve both fakes until told to stop (or the bench is gone)."""
    asyncio.run(_serve_fakes(conn, delay, seed))


async def _serve_fakes(conn: Any, delay: tuple[float, float], seed: int) -> None:
    host = FakeHost(delay, seed)
    try:
        info = await host.start()
    except Exception:
        conn.send((False, traceback.format_exc()))
        raise
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()

    def readable() -> None:
        try:
            command, arg = conn.recv()
        except (EOFError, OSError):  # the bench's process is gone
            loop.remove_reader(conn.fileno())
            stopping.set()
            return
        if command == "stop":
            loop.remove_reader(conn.fileno())
            stopping.set()  # answered once both fakes have stopped
            return
        try:
            reply: tuple[bool, Any] = (True, host.answer(command, arg))
        except Exception as exc:
            reply = (False, repr(exc))
        conn.send(reply)

    loop.add_reader(conn.fileno(), readable)
    conn.send((True, info))
    try:
        await stopping.wait()
    finally:
        await host.stop()
    with contextlib.suppress(OSError):
        conn.send((True, None))
    conn.close()


class LagMonitor:
    """Event-loop lag of the bot's process: overshoot of a 10 ms sleep."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.samples: list[float] = []

    async def run(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(self.interval)
            self.samples.append(time.perf_counter() - before - self.interval)

    def take(self) -> list[float]:
        samples, self.samples = self.samples, []
        return samples


@dataclass
class AckScope:
    """The store writes one ack waited for (made by the task that runs `ingest`)."""

    task: asyncio.Task[Any] | None
    waits: list[float] = field(default_factory=list)  # time to enter each transaction()
    held: list[float] = field(default_factory=list)  # enter requested → committed
    units: list[float] = field(default_factory=list)  # each write unit: queued → committed


# Set while the adapter's `ingest` (the part of the request the HTTP ack waits for) runs.
# Tasks spawned meanwhile copy the context, so a transaction counts for the ack only when
# it is entered by the very task that runs `ingest`.
ACK_SCOPE: contextvars.ContextVar[AckScope | None] = contextvars.ContextVar(
    "bench_ack_scope", default=None
)


@dataclass
class TxnSamples:
    """One phase's write transactions: the acks' and everything else's."""

    acks: list[AckScope] = field(default_factory=list)
    other_waits: list[float] = field(default_factory=list)
    other_units: list[float] = field(default_factory=list)  # queued → committed

    @property
    def ack_waits(self) -> list[float]:
        return [w for a in self.acks for w in a.waits]

    @property
    def ack_held(self) -> list[float]:
        return [h for a in self.acks for h in a.held]

    @property
    def ack_units(self) -> list[float]:
        return [u for a in self.acks for u in a.units]


class TxnProbe:
    """The store writes of the listener's claim and of everything else.

    Every event's claim is a store write (a write unit, or a `Store.transaction` in older
    code) queued behind the turns' own; this shows how long that queue is (the ack used
    to wait for it; the HTTP endpoint's own process now answers first). Write units are
    timed from `Store.write` (queued → batch committed), transactions from asking to
    entering (write-lock queue + BEGIN IMMEDIATE). What the
    adapter's `SlackIngress.ingest` writes is kept apart from the rest (turns, outbox). It
    wraps the methods, so the bot's code is used unchanged.
    """

    def __init__(self) -> None:
        self.samples = TxnSamples()
        self._original = Store.transaction
        self._original_write = Store.write
        self._original_ingest = SlackIngress.ingest

    def install(self) -> None:
        original = self._original
        original_write = self._original_write
        original_ingest = self._original_ingest
        probe = self

        async def timed_write(store: Store, fn: Any, **kwargs: Any) -> Any:
            scope = ACK_SCOPE.get()
            on_ack = scope is not None and scope.task is asyncio.current_task()
            before = time.perf_counter()
            try:
                return await original_write(store, fn, **kwargs)
            finally:
                took = time.perf_counter() - before
                if on_ack and scope is not None:
                    scope.units.append(took)
                else:
                    probe.samples.other_units.append(took)

        @contextlib.asynccontextmanager
        async def timed(store: Store) -> AsyncIterator[aiosqlite.Connection]:
            scope = ACK_SCOPE.get()
            on_ack = scope is not None and scope.task is asyncio.current_task()
            before = time.perf_counter()
            entered: float | None = None
            try:
                async with original(store) as db:
                    entered = time.perf_counter()
                    yield db
            finally:
                if entered is not None:
                    if on_ack and scope is not None:
                        scope.waits.append(entered - before)
                        scope.held.append(time.perf_counter() - before)
                    else:
                        probe.samples.other_waits.append(entered - before)

        async def ingest(
            events: SlackIngress, body: dict[str, Any], event: dict[str, Any], *, mentioned: bool
        ) -> None:
            scope = AckScope(asyncio.current_task())
            token = ACK_SCOPE.set(scope)
            try:
                await original_ingest(events, body, event, mentioned=mentioned)
            finally:
                ACK_SCOPE.reset(token)
                probe.samples.acks.append(scope)

        Store.transaction = timed  # type: ignore[method-assign,assignment]
        Store.write = timed_write  # type: ignore[method-assign,assignment]
        SlackIngress.ingest = ingest  # type: ignore[method-assign,assignment]

    def uninstall(self) -> None:
        Store.transaction = self._original  # type: ignore[method-assign]
        Store.write = self._original_write  # type: ignore[method-assign]
        SlackIngress.ingest = self._original_ingest  # type: ignore[method-assign]

    def take(self) -> TxnSamples:
        samples, self.samples = self.samples, TxnSamples()
        return samples


class GcProbe:
    """Garbage-collection pauses of every generation, via `gc.callbacks` (the bot's process:
    the whole event loop stands still meanwhile)."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []  # (generation, seconds)
        self._began = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.pauses.append((int(info.get("generation", -1)), time.perf_counter() - self._began))

    def install(self) -> None:
        gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._callback)

    def take(self) -> list[tuple[int, float]]:
        pauses, self.pauses = self.pauses, []
        return pauses


class CountingHandler(logging.Handler):
    """Counts the bot's warnings and errors (printed as a summary, not interleaved)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: Counter[str] = Counter()
        self.first: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[record.levelname] += 1
        if len(self.first) < 3:
            self.first.append(f"{record.levelname} {record.name}: {record.getMessage()[:160]}")


# --------------------------------------------------------------------------- workload


@dataclass(frozen=True)
class Event:
    """One mention: a new top-level message, answered in the thread rooted at it."""

    channel: str
    ts: str
    body: bytes


@dataclass
class Phase:
    """One target rate and everything measured for it."""

    rate: float
    events: list[int]
    deliveries: list[Delivery]
    results: list[Result] = field(default_factory=list)
    wall: float = 0.0
    drain: float = 0.0
    cpu: float = 0.0
    fakes_cpu: float = math.nan  # the fakes' process, when they run in one of their own
    loop_lag: list[float] = field(default_factory=list)
    txn: TxnSamples = field(default_factory=TxnSamples)
    writes: WriteStats = field(default_factory=WriteStats)  # the store's counters, this phase
    gc_pauses: list[tuple[int, float]] = field(default_factory=list)  # (generation, seconds)
    reply_latency: list[float] = field(default_factory=list)


def make_phase(
    rng: random.Random,
    timestamps: Sequence[str],
    bot_user_id: str,
    events: list[Event],
    rate: float,
    count: int,
    retry_frac: float,
    retry2_frac: float,
    dup_frac: float,
) -> Phase:
    """`count` mentions at `rate`/s, with retries and concurrent duplicates mixed in.

    `timestamps` are `count` fresh message ts issued by FakeSlack (so no reply it posts
    shares one with a mention).
    """
    phase = Phase(rate=rate, events=[], deliveries=[])
    dup_left = max(1, round(count * dup_frac))
    for i in range(count):
        index = len(events)
        user = USERS[index % len(USERS)]
        channel = CHANNELS[index % len(CHANNELS)]
        ts = timestamps[i]
        text = f"<@{bot_user_id}> question {index}: please summarise item {index}"
        event = payloads.app_mention(channel, user, text, ts)
        body = json_body(payloads.event_callback(event, event_id=f"EvBENCH{index:06d}"))
        events.append(Event(channel, ts, body))
        phase.events.append(index)
        at = i / rate
        phase.deliveries.append(Delivery(at, index, body, FIRST))
        if rng.random() < retry_frac:
            at1 = at + rng.uniform(0.05, 0.5)
            phase.deliveries.append(Delivery(at1, index, body, RETRY1, retry_num=1))
            if rng.random() < retry2_frac:
                at2 = at1 + rng.uniform(0.05, 0.5)
                phase.deliveries.append(Delivery(at2, index, body, RETRY2, retry_num=2))
        if dup_left and (rng.random() < dup_frac or count - i <= dup_left):
            dup_left -= 1
            phase.deliveries.append(Delivery(at, index, body, DUP))
    return phase


# --------------------------------------------------------------------------- statistics


def pct(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..1); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    low = math.floor(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value * 1000:.1f}"


def secs(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}"


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
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


HEADERS = ["rate/s", "events", "posts", "got/s", "non200", "p50 ms", "p95 ms", "p99 ms", "max ms"]

LEGEND = """\
Ack latency per target rate (all POSTs of the phase: first deliveries, retries, duplicates).
  rate/s       target rate of first deliveries (open loop: sends never wait for earlier acks)
  events       mentions in the phase, each a new top-level thread (its own lane)
  posts        POSTs sent: events + Slack retries (X-Slack-Retry-Num 1/2) + concurrent dups
  got/s        achieved rate of first deliveries ((events - 1) / first-to-last send)
  non200       POSTs not answered 200 (connection errors and client timeouts count too)
  p50..max ms  ack latency: POST sent → HTTP response read, in the generator process"""

COST_HEADERS = [
    "rate/s",
    "lag99 ms",
    "loop99 ms",
    "loopmax ms",
    "cpu %",
    "fakes cpu %",
    "reply p50 s",
    "reply p95 s",
    "drain s",
]

COST_LEGEND = """\
Where the time goes, per target rate (bot process = {bot_process}).
  lag99 ms     p99 of how late the generator started a POST vs its schedule (generator health)
  loop99/max   p99 and max event-loop lag in the bot's process (overshoot of a 10 ms sleep)
  cpu %        bot process CPU time / phase wall time (200 % = both cores; the HTTP
               endpoint's own process not included); fakes cpu % the same for the fakes'
               own process ("shared" when they run in the bot's)
  reply p50/95 first delivery sent → the reply's chat.postMessage reached FakeSlack
  drain s      last send of the phase → last reply of the phase (lanes then empty)"""

TXN_HEADERS = [
    "rate/s",
    "acks",
    "units/ack",
    "txn/ack",
    "unit50 ms",
    "unit99 ms",
    "unitmax ms",
    "txn99 ms",
    "other u/ev",
    "other txn/ev",
    "other99 ms",
]

TXN_LEGEND = """\
Store writes of the listener's claim (Store.write and Store.transaction, wrapped in the
bench), per target rate: `SlackIngress.ingest` records an event (dedup + persist). The HTTP
ack no longer waits for it: the endpoint's own process answers once the event is in
slack-events.db, so these show the bot's write queue, not the ack.
  acks         `ingest` calls in the phase (one per POST that reached the listener)
  units/ack    write units the ack waited for, per ack (mean); txn/ack transaction() blocks
  unit50/99/max  one such unit: queued → its batch COMMITTED (queue + batch + commit)
  txn99 ms     p99 of an ack's transaction() from asking for it to COMMIT done
  other u/ev   every other write unit (turns, outbox, lanes, …) per event; txn/ev the same
               for transaction() blocks; other99 ms p99 queued → committed of those units"""

BATCH_HEADERS = [
    "rate/s",
    "units",
    "ingress",
    "batches",
    "units/batch",
    "largest",
    "failed",
    "txns",
    "commits/ev",
]

BATCH_LEGEND = """\
The store's writer (Store.stats during the phase): how write units were grouped.
  units        write units run; ingress those queued with priority (the inbound claims)
  batches      batches committed (one thread hop, one BEGIN IMMEDIATE … COMMIT each)
  units/batch  mean units per batch; largest the biggest batch so far (since open)
  failed       units whose caller got an exception
  txns         transaction() blocks (each its own commit)
  commits/ev   (batches + txns) per event of the phase"""

GC_HEADERS = ["rate/s", "gc", "gen0/1/2", "total ms", "max ms", "gc2 max ms"]

GC_LEGEND = """\
Garbage collection in the bot's process (gc.callbacks; the event loop stands still meanwhile;
{fakes_gc}).
  gc           collections of any generation during the phase; gen0/1/2 by generation
  total ms     sum of their pauses; max ms the longest; gc2 max ms the longest full one"""

KIND_HEADERS = ["delivery", "posts", "non200", "p50 ms", "p95 ms", "p99 ms", "max ms"]


def phase_row(phase: Phase) -> list[str]:
    latencies = [r.latency for r in phase.results]
    firsts = sorted(r.started for r in phase.results if r.kind == FIRST)
    span = firsts[-1] - firsts[0] if len(firsts) > 1 else 0.0
    achieved = (len(firsts) - 1) / span if span > 0 else math.nan
    non200 = sum(1 for r in phase.results if r.status != 200)
    return [
        f"{phase.rate:g}",
        f"{len(phase.events)}",
        f"{len(phase.results)}",
        "-" if math.isnan(achieved) else f"{achieved:.1f}",
        f"{non200}",
        ms(pct(latencies, 0.50)),
        ms(pct(latencies, 0.95)),
        ms(pct(latencies, 0.99)),
        ms(max(latencies, default=math.nan)),
    ]


def cost_row(phase: Phase) -> list[str]:
    return [
        f"{phase.rate:g}",
        ms(pct([r.lag for r in phase.results], 0.99)),
        ms(pct(phase.loop_lag, 0.99)),
        ms(max(phase.loop_lag, default=math.nan)),
        f"{phase.cpu * 100:.0f}",
        "shared" if math.isnan(phase.fakes_cpu) else f"{phase.fakes_cpu * 100:.0f}",
        secs(pct(phase.reply_latency, 0.50)),
        secs(pct(phase.reply_latency, 0.95)),
        secs(phase.drain),
    ]


def txn_row(phase: Phase) -> list[str]:
    txn = phase.txn
    units = txn.ack_units
    acks = max(1, len(txn.acks))
    events = max(1, len(phase.events))
    return [
        f"{phase.rate:g}",
        f"{len(txn.acks)}",
        f"{len(units) / acks:.2f}",
        f"{len(txn.ack_waits) / acks:.2f}",
        ms(pct(units, 0.50)),
        ms(pct(units, 0.99)),
        ms(max(units, default=math.nan)),
        ms(pct(txn.ack_held, 0.99)),
        f"{len(txn.other_units) / events:.1f}",
        f"{len(txn.other_waits) / events:.1f}",
        ms(pct(txn.other_units, 0.99)),
    ]


def batch_row(phase: Phase) -> list[str]:
    w = phase.writes
    return [
        f"{phase.rate:g}",
        f"{w.units}",
        f"{w.ingress_units}",
        f"{w.batches}",
        f"{w.units / max(1, w.batches):.1f}",
        f"{w.largest_batch}",
        f"{w.failed_units}",
        f"{w.transactions}",
        f"{(w.batches + w.transactions) / max(1, len(phase.events)):.2f}",
    ]


def stats_delta(after: WriteStats, before: WriteStats) -> WriteStats:
    """Counters of one phase (largest_batch is a running maximum: kept as is)."""
    delta = {
        f.name: getattr(after, f.name) - getattr(before, f.name)
        for f in dataclasses.fields(WriteStats)
    }
    delta["largest_batch"] = after.largest_batch
    return WriteStats(**delta)


def gc_row(phase: Phase) -> list[str]:
    pauses = [p for _, p in phase.gc_pauses]
    by_gen = Counter(g for g, _ in phase.gc_pauses)
    full = [p for g, p in phase.gc_pauses if g == 2]
    return [
        f"{phase.rate:g}",
        f"{len(pauses)}",
        f"{by_gen[0]}/{by_gen[1]}/{by_gen[2]}",
        ms(sum(pauses)) if pauses else "0.0",
        ms(max(pauses, default=math.nan)),
        ms(max(full, default=math.nan)),
    ]


def target_line(phases: Sequence[Phase], duplicate_turns: int, missing_replies: int) -> str:
    """Issue #8's target next to the figures (printed, never asserted)."""
    at = [p for p in phases if p.rate == TARGET_RATE]
    if at:
        p99 = pct([r.latency for r in at[0].results], 0.99)
        where = f"ack p99 at {TARGET_RATE:g}/s {ms(p99)} ms"
    else:
        p99 = math.nan
        where = f"no {TARGET_RATE:g}/s phase (--rates)"
    lost = duplicate_turns + missing_replies
    said = goal(
        f"Slack ack p99 at {TARGET_RATE:g} events/s",
        p99 * 1000 if lost == 0 else math.inf,  # doubled or lost work misses whatever the time
        TARGET_ACK_P99 * 1000,
        unit="ms",
        baseline=24.0,  # issue 22 when filed
    )
    return (
        f"target (issue #8): Slack ack p99 <= {TARGET_ACK_P99 * 1000:g} ms at "
        f"{TARGET_RATE:g} events/s with 0 duplicate turns and 0 missing replies: {where}, "
        f"{duplicate_turns} duplicate turns, {missing_replies} missing replies: {said}"
    )


def kind_rows(phases: Sequence[Phase]) -> list[list[str]]:
    rows = []
    for kind in KINDS:
        results = [r for p in phases for r in p.results if r.kind == kind]
        latencies = [r.latency for r in results]
        rows.append(
            [
                kind,
                f"{len(results)}",
                f"{sum(1 for r in results if r.status != 200)}",
                ms(pct(latencies, 0.50)),
                ms(pct(latencies, 0.95)),
                ms(pct(latencies, 0.99)),
                ms(max(latencies, default=math.nan)),
            ]
        )
    return rows


# --------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class Options:
    rates: tuple[float, ...]
    seconds: float
    min_events: int
    delay: tuple[float, float]
    user_pool: int
    retry_frac: float
    retry2_frac: float
    dup_frac: float
    seed: int
    in_process: bool
    in_process_fakes: bool
    drain_within: float


def configure_env(fakes: FakesInfo, home: Path, opts: Options) -> None:
    """The bot reads its configuration from the environment (no .env: see load_settings)."""
    for name in PROXY_VARS:
        os.environ.pop(name, None)  # slack_sdk and httpx would route loopback via a proxy
    os.environ.update(
        {
            "RAVEN_HOME": str(home),
            "RAVEN_LOG_LEVEL": "WARNING",
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SECRET,
            "RAVEN_SLACK_API_URL": fakes.api_url,
            "RAVEN_SLACK_HTTP_HOST": "127.0.0.1",
            "RAVEN_SLACK_HTTP_PORT": "0",
            "ANTHROPIC_API_KEY": "sk-ant-bench",
            "ANTHROPIC_BASE_URL": fakes.model_url,
            "RAVEN_MODEL_MAX_RETRIES": "0",
            "RAVEN_MODEL_TIMEOUT": "30",
            "RAVEN_LANE_QUEUE_CAP": "10000",
            "RAVEN_USER_POOL": str(opts.user_pool),
        }
    )
    for key in ("SLACK_APP_TOKEN", "RAVEN_ALLOWED_USERS", "RAVEN_ALLOWED_CHANNELS"):
        os.environ.pop(key, None)


async def wait_replies(
    replies: Replies, keys: Sequence[tuple[str, str]], within: float
) -> float | None:
    """Wait until each key has a reply; the monotonic time of the last first-reply, or None."""
    deadline = time.monotonic() + within
    while True:
        await replies.update()
        if all(key in replies.at for key in keys):
            return max((replies.at[key][0] for key in keys), default=time.monotonic())
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(0.05)


def count_turns(db_path: Path) -> dict[tuple[str, str], tuple[int, int, int]]:
    """Per (channel, thread): turns, inbound messages and turns that did not complete."""
    uri = f"file:{db_path}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        rows = db.execute(
            "SELECT c.channel, c.thread,"
            " (SELECT COUNT(*) FROM turns t WHERE t.conversation_id = c.id),"
            " (SELECT COUNT(*) FROM messages m"
            "   WHERE m.conversation_id = c.id AND m.direction = 'in'),"
            " (SELECT COUNT(*) FROM turns t"
            "   WHERE t.conversation_id = c.id AND t.status != 'completed')"
            " FROM conversations c WHERE c.platform = 'slack'"
        ).fetchall()
    return {(str(r[0]), str(r[1])): (int(r[2]), int(r[3]), int(r[4])) for r in rows}


@dataclass
class Rig:
    """Everything a phase runs against."""

    url: str
    events: list[Event]
    replies: Replies
    fakes: Fakes
    monitor: LagMonitor
    probe: TxnProbe
    gc_probe: GcProbe
    pool: concurrent.futures.ProcessPoolExecutor | None
    within: float
    store: Store


async def run_phase(phase: Phase, rig: Rig) -> None:
    """Send the phase, then wait until every one of its events got its reply."""
    rig.monitor.take()
    rig.probe.take()
    rig.gc_probe.take()
    writes_before = rig.store.stats
    fakes_before = await rig.fakes.ask("counts") if rig.fakes.separate else None
    cpu = time.process_time()
    started = time.perf_counter()
    if rig.pool is None:
        phase.results = await post_all(rig.url, phase.deliveries, rig.within)
    else:
        loop = asyncio.get_running_loop()
        phase.results = await loop.run_in_executor(
            rig.pool, generate, rig.url, phase.deliveries, rig.within
        )
    phase.wall = time.perf_counter() - started
    last_send = max(r.sent_mono for r in phase.results)
    keys = [(rig.events[i].channel, rig.events[i].ts) for i in phase.events]
    accepted = {r.event for r in phase.results if r.status == 200}
    waited = [rig.events[i] for i in phase.events if i in accepted]
    done = await wait_replies(rig.replies, [(e.channel, e.ts) for e in waited], rig.within)
    phase.cpu = (time.process_time() - cpu) / (time.perf_counter() - started)
    if fakes_before is not None:
        fakes_after: FakeCounts = await rig.fakes.ask("counts")
        phase.fakes_cpu = (fakes_after.cpu - fakes_before.cpu) / (time.perf_counter() - started)
    phase.loop_lag = rig.monitor.take()
    phase.txn = rig.probe.take()
    phase.writes = stats_delta(rig.store.stats, writes_before)
    phase.gc_pauses = rig.gc_probe.take()
    phase.drain = math.nan if done is None else max(0.0, done - last_send)
    sent_at = {r.event: r.sent_mono for r in phase.results if r.kind == FIRST}
    phase.reply_latency = [
        rig.replies.at[key][0] - sent_at[i]
        for i, key in zip(phase.events, keys, strict=True)
        if key in rig.replies.at and i in sent_at
    ]


async def bench(opts: Options) -> int:
    """Start the fakes and the bot, run every phase, print the tables; the exit code."""
    home = Path(tempfile.mkdtemp(prefix="raven_slack_bench_"))
    total = time.perf_counter()
    handler = CountingHandler()
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.WARNING)
    rng = random.Random(opts.seed)
    pool: concurrent.futures.ProcessPoolExecutor | None = None
    print(
        f"slack ingress bench: python {platform.python_version()}, {os.cpu_count()} CPU(s), "
        f"load at start {_load()}, seed {opts.seed}"
    )
    print(
        f"model delay {opts.delay[0]:g}–{opts.delay[1]:g} s per call, user pool "
        f"{opts.user_pool}, phases of ~{opts.seconds:g} s (at least {opts.min_events} events), "
        f"retries {opts.retry_frac:.0%} of events ({opts.retry2_frac:.0%} of those twice), "
        f"concurrent dups {opts.dup_frac:.0%} (≥1 per phase), generator: "
        f"{'in the bot process' if opts.in_process else 'separate process'}, fakes "
        f"(FakeSlack + model server): "
        f"{'in the bot process' if opts.in_process_fakes else 'separate process'}"
    )
    # Spawned first, so its start-up overlaps the generator's.
    fakes: Fakes = (
        LocalFakes(opts.delay, opts.seed)
        if opts.in_process_fakes
        else ChildFakes(opts.delay, opts.seed)
    )
    events: list[Event] = []
    ran: list[Phase] = []  # the warm-up first, then one per rate
    replies = Replies(fakes)
    counts = FakeCounts(0, 0, math.nan)
    probe = TxnProbe()
    probe.install()
    gc_probe = GcProbe()
    gc_probe.install()
    try:
        if not opts.in_process:
            context = multiprocessing.get_context("spawn")
            pool = concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context)
            await asyncio.get_running_loop().run_in_executor(pool, ping)
        await fakes.start()
        configure_env(fakes.info, home, opts)
        settings = load_settings(_env_file=None)
        runtime = await build_runtime(settings, [functools.partial(slack_adapter, settings)])
        adapter = runtime.adapters[0]
        assert isinstance(adapter, SlackAdapter)
        serving = asyncio.create_task(serve(runtime))
        monitor = LagMonitor()
        lag_task = asyncio.create_task(monitor.run())
        try:
            # Startup loads the memory embedder first.
            async with asyncio.timeout(180):
                await adapter.ready.wait()
            url = f"http://127.0.0.1:{adapter.http_port}{SlackSettings().slack_http_path}"
            rig = Rig(
                url,
                events,
                replies,
                fakes,
                monitor,
                probe,
                gc_probe,
                pool,
                opts.drain_within,
                runtime.store,
            )
            print(f"progress (fakes: {fakes.where}):", flush=True)
            # Warm-up (auth.test, users.info cache, SQLite, connections): not reported.
            bot_user_id = fakes.info.bot_user_id
            warm_ts = await fakes.ask("ts", 10)
            warm = make_phase(rng, warm_ts, bot_user_id, events, 10, 10, 0.0, 0.0, 0.0)
            await run_phase(warm, rig)
            ran.append(warm)
            print(f"  warm-up: {len(warm.events)} events, drain {secs(warm.drain)} s", flush=True)
            for rate in opts.rates:
                count = max(opts.min_events, round(rate * opts.seconds))
                phase = make_phase(
                    rng,
                    await fakes.ask("ts", count),
                    bot_user_id,
                    events,
                    rate,
                    count,
                    opts.retry_frac,
                    opts.retry2_frac,
                    opts.dup_frac,
                )
                await run_phase(phase, rig)
                ran.append(phase)
                print(
                    f"  {rate:g}/s: {len(phase.results)} posts in {phase.wall:.1f} s, "
                    f"ack p99 {ms(pct([r.latency for r in phase.results], 0.99))} ms, "
                    f"drain {secs(phase.drain)} s",
                    flush=True,
                )
            # A late duplicate would show up after its twin's reply: give it a moment.
            await asyncio.sleep(1.5)
            await replies.update()
        finally:
            lag_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await lag_task
            await adapter.close()
            await asyncio.wait_for(serving, 30)
        counts = await fakes.ask("counts")
        turns = count_turns(home / "raven.db")
    finally:
        probe.uninstall()
        gc_probe.uninstall()
        if pool is not None:
            pool.shutdown()
        await fakes.stop()
        shutil.rmtree(home, ignore_errors=True)

    phases = ran[1:]
    accepted = {r.event for p in ran for r in p.results if r.status == 200}
    keys = [(e.channel, e.ts) for e in events]
    duplicate_turns = sum(max(0, turns.get(k, (0, 0, 0))[0] - 1) for k in keys)
    missing_turns = sum(1 for i, k in enumerate(keys) if i in accepted and turns.get(k) is None)
    not_completed = sum(turns.get(k, (0, 0, 0))[2] for k in keys)
    extra_inbound = sum(max(0, turns.get(k, (0, 0, 0))[1] - 1) for k in keys)
    reply_counts = [len(replies.at.get(k, [])) for k in keys]
    duplicate_replies = sum(max(0, n - 1) for n in reply_counts)
    missing_replies = sum(1 for i, n in enumerate(reply_counts) if i in accepted and n == 0)
    never_acked = len(events) - len(accepted)
    statuses = Counter(r.status for p in phases for r in p.results if r.status != 200)

    print()
    print(LEGEND)
    print()
    print(table(HEADERS, (phase_row(p) for p in phases)))
    print()
    together = "the bot, both fakes, SQLite threads"
    print(
        COST_LEGEND.format(
            bot_process=together if not fakes.separate else "the bot, SQLite threads"
        )
    )
    print()
    print(table(COST_HEADERS, (cost_row(p) for p in phases)))
    print()
    print(TXN_LEGEND)
    print()
    print(table(TXN_HEADERS, (txn_row(p) for p in phases)))
    if any(p.txn.acks and not (p.txn.ack_waits or p.txn.ack_units) for p in phases):
        print(
            "note: some acks made no store write in their own task (the claim may now be "
            "written by another task: see other u/ev)"
        )
    print()
    print(BATCH_LEGEND)
    print()
    print(table(BATCH_HEADERS, (batch_row(p) for p in phases)))
    print()
    fakes_gc = "the fakes' objects count too" if not fakes.separate else "the fakes' do not"
    print(GC_LEGEND.format(fakes_gc=fakes_gc))
    print()
    print(table(GC_HEADERS, (gc_row(p) for p in phases)))
    print()
    print("Ack latency by delivery kind, all phases together:")
    print()
    print(table(KIND_HEADERS, kind_rows(phases)))
    print()
    if statuses:
        shown = ", ".join(f"{s or 'error'}×{n}" for s, n in sorted(statuses.items()))
        print(f"non-200 statuses: {shown}")
    print(
        f"events: {len(events)} (warm-up included), model calls: {counts.model_calls}, "
        f"chat.postMessage calls: {counts.post_messages}, "
        f"events never acked 200: {never_acked}"
    )
    print(
        f"turns not completed: {not_completed}, extra inbound rows: {extra_inbound}, "
        f"missing turns: {missing_turns}, duplicate replies: {duplicate_replies}"
    )
    if handler.counts:
        levels = ", ".join(f"{n} {level.lower()}" for level, n in sorted(handler.counts.items()))
        print(f"bot log: {levels}; first: " + " | ".join(handler.first))
    print(f"duplicate turns: {duplicate_turns}")
    print(f"missing replies: {missing_replies}")
    print(target_line(phases, duplicate_turns, missing_replies))
    print(f"total bench time {time.perf_counter() - total:.1f} s, load at end {_load()}")
    return 1 if duplicate_turns > 0 else 0


def parse_args(argv: Sequence[str] | None = None) -> Options:
    """Command-line options (the defaults are what `make bench` runs)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--rates",
        default=",".join(map(str, RATES)),
        help="comma-separated target rates in events/s (default: %(default)s)",
    )
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="length of each phase (default: %(default)s)"
    )
    parser.add_argument(
        "--min-events", type=int, default=30, help="events per phase at least (default: 30)"
    )
    parser.add_argument(
        "--model-delay",
        default="0.5,1.0",
        help="min,max seconds each model answer is held (default: %(default)s)",
    )
    parser.add_argument(
        "--user-pool",
        type=int,
        default=32,
        help="RAVEN_USER_POOL, concurrent user turns (default: 32; the bot's default is 4)",
    )
    parser.add_argument(
        "--retry-frac", type=float, default=0.10, help="events retried (default: 0.10)"
    )
    parser.add_argument(
        "--retry2-frac",
        type=float,
        default=0.30,
        help="retried events retried a second time (default: 0.30)",
    )
    parser.add_argument(
        "--dup-frac",
        type=float,
        default=0.02,
        help="events also delivered twice at the same moment (default: 0.02)",
    )
    parser.add_argument("--seed", type=int, default=7, help="workload seed (default: 7)")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run the load generator on the bot's event loop instead of a child process",
    )
    parser.add_argument(
        "--in-process-fakes",
        action="store_true",
        help="serve FakeSlack and the model server on the bot's event loop (the old topology) "
        "instead of one child process",
    )
    parser.add_argument(
        "--drain-within",
        type=float,
        default=60.0,
        help="give up waiting for an ack or for a phase's replies after this long (default: 60)",
    )
    args = parser.parse_args(argv)
    low, high = (float(x) for x in str(args.model_delay).split(","))
    return Options(
        rates=tuple(float(r) for r in str(args.rates).split(",") if r.strip()),
        seconds=float(args.seconds),
        min_events=int(args.min_events),
        delay=(low, high),
        user_pool=int(args.user_pool),
        retry_frac=float(args.retry_frac),
        retry2_frac=float(args.retry2_frac),
        dup_frac=float(args.dup_frac),
        seed=int(args.seed),
        in_process=bool(args.in_process),
        in_process_fakes=bool(args.in_process_fakes),
        drain_within=float(args.drain_within),
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: exit 1 only on duplicate turns."""
    sys.exit(asyncio.run(bench(parse_args(argv))))


if __name__ == "__main__":
    main()
