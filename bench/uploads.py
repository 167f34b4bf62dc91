"""Uploads off the critical path (issue 41): the latency of a run's final reply with and
without attachments, in one run of the bench.

The real assembled bot (`build_runtime` + `serve`, Slack over Socket Mode, offline: the
report is the reply) runs against the loopback FakeSlack in this process. Each sample is one
mention in a new thread with a one-node plan the shell allow list lets run unasked:
`dd if=/dev/urandom of=FILE bs=64k count=64` writes 4 MiB into the conversation's workspace.
With attachments FILE is `design.png` (attached to the run's report); without, it is
`design.bin` (not an attachable kind): the same work, no file. The two kinds alternate, so
the machine's load drifts over both alike.

The figure is the run's end (`graph_runs.finished_at`, written as the run finishes) → the
report's `chat.postMessage` reaching the fake: choosing the run's files and recording them
happen in between; the upload itself must start only after the reply. The upload's own time
(reply → file shared in the thread) is printed too; each sample waits for its file before the
next one starts, so uploads never overlap a measurement. So is the time the bot spent choosing
and recording the run's files (`RunAttachments.choose` + `queue`, timed by wrapping them in
this process): the only work attachments add before the reply, which stays steady when the
shared machine's load makes the end-to-end figures jump.

Goal: the median and p95 with attachments ≤ 1.1 × without. About 30 s.

Run: `.venv/bin/python bench/uploads.py [--runs N]` (or `make bench`)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import contextlib
import functools
import logging
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from bench.lib.figures import FIGURES_ENV, goal, ms, pct
from bot.app import Runtime, build_runtime, serve
from bot.settings import load_settings
from bot.slack.adapter import SlackAdapter
from bot.slack.factory import slack_adapter
from core.ids import ConversationRef
from host.conversation.run_files import RunAttachments
from tests.fakes.slack import FakeSlack, payloads

RUNS = 60  # samples of each kind
RATIO_GOAL = 1.1
WITHIN = 120.0  # hang guard for one wait, not a timing
CHANNEL = "C0BENCH"
USER = "U0BENCH"
ATTACHED = "design.png"
NOT_ATTACHED = "design.bin"  # not an attachable suffix: written, never attached
MIB = 4
# The offline report shows the node's output under this heading (the status message does not).
REPORT = "*Output of `b1`*"
PLAN = "b1: shell: dd if=/dev/urandom of={name} bs=64k count={blocks} status=none"
# Let `dd` run unasked (the bench measures the report, not an approval).
AGENTS_TOML = '[agents.shell]\nallow = ["dd *"]\n'
# Settings a developer's shell may hold that would change what is measured.
_DROPPED = ("RAVEN_", "ANTHROPIC_", "SLACK_", "DISCORD_")
_PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@dataclass
class Sample:
    """One run's figures, in seconds."""

    attached: bool
    reply: float  # the run's end → its report's post reached Slack
    upload: float = float("nan")  # the report's post → its file shared (attached only)
    early: bool = False  # the upload was asked for before the report's post arrived
    files_step: float = 0.0  # choosing and recording the run's files, inside the bot


@dataclass
class Figures:
    """Samples of both kinds."""

    samples: list[Sample] = field(default_factory=list)

    def of(self, attached: bool) -> list[float]:
        return [s.reply for s in self.samples if s.attached == attached]

    def uploads(self) -> list[float]:
        return [s.upload for s in self.samples if s.attached]

    def files_steps(self, attached: bool) -> list[float]:
        return [s.files_step for s in self.samples if s.attached == attached]

    def early(self) -> int:
        return sum(1 for s in self.samples if s.early)


def configure_env(home: Path, api_url: str) -> None:
    """The bot reads its configuration from the environment (no .env: see load_settings):
    the product's defaults, offline, Socket Mode against the fake."""
    for name in list(os.environ):
        if (name.startswith(_DROPPED) and name != FIGURES_ENV) or name in _PROXIES:
            del os.environ[name]
    os.environ.update(
        {
            "RAVEN_HOME": str(home),
            "RAVEN_LOG_LEVEL": "WARNING",
            "SLACK_BOT_TOKEN": "xoxb-bench",
            "SLACK_APP_TOKEN": "xapp-1-A1-bench",
            "RAVEN_SLACK_API_URL": api_url,
        }
    )


@contextlib.asynccontextmanager
async def running_bot(slack: FakeSlack, home: Path) -> AsyncIterator[Runtime]:
    """The assembled bot serving Slack until the block ends."""
    configure_env(home, slack.api_url)
    (home / "agents.toml").write_text(AGENTS_TOML)
    settings = load_settings(_env_file=None)
    runtime = await build_runtime(settings, [functools.partial(slack_adapter, settings)])
    adapter = runtime.adapters[0]
    assert isinstance(adapter, SlackAdapter)
    serving = asyncio.create_task(serve(runtime))
    try:
        async with asyncio.timeout(180):  # start-up loads the memory embedder first
            await adapter.ready.wait()
            await slack.wait_connected(within=180)
        yield runtime
    finally:
        await adapter.close()
        await asyncio.wait_for(serving, 60)


@contextlib.contextmanager
def timing_files_step(spent: list[float]) -> Iterator[None]:
    """Append the duration of every `RunAttachments.choose` and `queue` call to `spent`
    (wrapped for this process while the block runs, then restored)."""
    originals = {name: getattr(RunAttachments, name) for name in ("choose", "queue")}

    def timed(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        async def call(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                spent.append(time.perf_counter() - started)

        return call

    for name, original in originals.items():
        setattr(RunAttachments, name, timed(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(RunAttachments, name, original)


async def until(cond: Callable[[], Any], what: str) -> Any:
    """Poll state another part of the process owns until `cond()` is truthy; its value."""
    deadline = time.monotonic() + WITHIN
    while not (value := cond()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up waiting for {what} after {WITHIN:g} s")
        await asyncio.sleep(0.005)
    return value


def run_end(db: Path, conv: ConversationRef) -> float | None:
    """When the conversation's run finished (wall clock), None while it runs."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
        row = con.execute(
            "SELECT finished_at FROM graph_runs WHERE conversation_id = ? "
            "AND finished_at IS NOT NULL",
            (conv.id,),
        ).fetchone()
    return float(row[0]) if row else None


def report_post(slack: FakeSlack, thread: str) -> Any:
    """The report's `chat.postMessage` in the thread, None before it arrived."""
    for call in slack.calls_to("chat.postMessage"):
        if call.ok and call.args.get("thread_ts") == thread and REPORT in str(call.args["text"]):
            return call
    return None


async def sample(slack: FakeSlack, home: Path, attached: bool, spent: list[float]) -> Sample:
    """One mention, its run and its report (and its file); `spent` gets the files' step."""
    steps = len(spent)
    name = ATTACHED if attached else NOT_ATTACHED
    thread = slack.next_ts()
    seen = len(slack.calls)
    text = PLAN.format(name=name, blocks=MIB * 16)
    event = payloads.app_mention(CHANNEL, USER, f"<@{slack.bot_user_id}> {text}", thread)
    await slack.send_envelope("events_api", payloads.event_callback(event))
    conv = ConversationRef("slack", slack.team_id, CHANNEL, thread)
    call = await until(lambda: report_post(slack, thread), "the run's report")
    ended = await until(lambda: run_end(home / "raven.db", conv), "the run's end")
    # Call.at is time.monotonic() in this process: the same offset turns it into wall time.
    reply_wall = call.at + (time.time() - time.monotonic())
    result = Sample(attached, reply_wall - ended, files_step=sum(spent[steps:]))
    if attached:
        files = await until(lambda: slack.files_in(CHANNEL, thread), "the file in the thread")
        result.upload = files[0].at - reply_wall
        asked = [c.at for c in slack.calls[seen:] if c.method == "files.getUploadURLExternal"]
        result.early = min(asked) < call.at
        if files[0].name != ATTACHED or len(files[0].data) != MIB * 2**20:
            raise RuntimeError(f"the thread got the wrong file: {files[0].name}")
    elif slack.files_in(CHANNEL, thread):
        raise RuntimeError(f"{NOT_ATTACHED} was attached")
    return result


async def bench(runs: int) -> Figures:
    figures = Figures()
    spent: list[float] = []
    home = Path(tempfile.mkdtemp(prefix="raven_uploads_bench_"))
    logging.getLogger().setLevel(logging.WARNING)
    try:
        async with FakeSlack() as slack:
            slack.add_user(USER, "bench", real_name="Bench", display_name="bench")
            with timing_files_step(spent):
                async with running_bot(slack, home):
                    # Warm-up of both kinds (sandbox, SQLite, connections): not counted.
                    for attached in (True, False):
                        await sample(slack, home, attached, spent)
                    for i in range(runs * 2):
                        # A B B A: neither kind always goes first.
                        attached = i % 4 in (0, 3)
                        figures.samples.append(await sample(slack, home, attached, spent))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return figures


def report(figures: Figures) -> None:
    with_files, without = figures.of(True), figures.of(False)
    print(f"uploads asked for before their report's reply arrived: {figures.early()}")
    print(f"{'the run end → its report in Slack':<40} {'n':>5} {'p50 ms':>8} {'p95 ms':>8}")
    for label, values in (("with a 4 MiB attachment", with_files), ("without", without)):
        print(f"  {label:<38} {len(values):>5} {ms(pct(values, 50))} {ms(pct(values, 95))}")
    for attached, label in ((True, "with"), (False, "without")):
        steps = figures.files_steps(attached)
        print(
            f"  {'(choosing + recording files, ' + label + ')':<38} {len(steps):>5} "
            f"{ms(pct(steps, 50))} {ms(pct(steps, 95))}"
        )
    uploads = figures.uploads()
    print(
        f"  {'(the report → its file shared)':<38} {len(uploads):>5} "
        f"{ms(pct(uploads, 50))} {ms(pct(uploads, 95))}"
    )
    median = statistics.median(with_files) / statistics.median(without)
    p95 = pct(with_files, 95) / pct(without, 95)
    print(
        f"median with ÷ without: {median:.2f} "
        f"({goal('report reply p50 with ÷ without files', median, RATIO_GOAL, unit='x')})"
    )
    print(
        f"p95 with ÷ without: {p95:.2f} "
        f"({goal('report reply p95 with ÷ without files', p95, RATIO_GOAL, unit='x')})"
    )


def load() -> str:
    """The machine's 1-minute load average (others share its cores)."""
    return f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "?"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=RUNS, help="samples of each kind")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    print(f"uploads bench: {args.runs} runs of each kind, {os.cpu_count()} CPU(s), load {load()}")
    figures = asyncio.run(bench(args.runs))
    report(figures)
    print(f"total {time.perf_counter() - started:.1f} s, load at end {load()}")


if __name__ == "__main__":
    main()
