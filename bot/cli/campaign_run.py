"""`raven-bot campaigns run`: one campaign run headless in the foreground (scripts and CI),
with the configured decider: the model when RAVEN_MODEL has its key, else the rule-based
policy. Kept apart from the reading commands, which need none of the runtime."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import re
import signal
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final, TextIO

from agents.models.provider import ModelProvider
from agents.models.types import Message, ModelReply, ToolSpec
from bot.app import build_provider, build_sandbox, campaign_site, close_provider
from bot.cli.campaigns import (
    campaign_json,
    describe,
    operator_machine_specs,
)
from bot.home import check_home
from bot.schema import all_migrations
from bot.settings import Settings, declared_secret_names
from core.ids import ConversationRef
from core.store import Store
from host.features.oncall.decider import ModelDecider
from host.features.oncall.feature import on_campaign_wake
from host.features.oncall.site import Wiring
from host.features.oncall.tools import StartCampaignInput, campaign_spec
from host.runtime.apscheduler_adapter import ApschedulerScheduler
from host.runtime.events import EventBus, subscribe_job
from host.runtime.scheduling import FiredJob
from oncall.deciders import RuleBasedDecider
from oncall.engine import CampaignEngine, CampaignError, Decider, EngineSettings
from oncall.model import (
    FINAL_STATES,
    CampaignSpec,
    Machine,
    MachineUnavailable,
)
from oncall.ports import CAMPAIGN_WAKE, PostedHook
from oncall.store import CampaignRecord, CampaignStore

log = logging.getLogger(__name__)

PROG: Final = "raven-bot campaigns"
OWNER: Final = "cli"
# How often a headless run re-reads its campaign (a `stop` from another process).
RECHECK_SECONDS: Final = 0.5
# Chat field names (and CampaignSpec fields) in campaign_spec's messages → the flags here.
_FLAGS: Final = {
    "goal": "--goal",
    "machine": "--machine",
    "run": "--run",
    "command": "--run",
    "metric": "--metric",
    "metric.name": "--metric",
    "name": "--metric",
    "metric.pattern": "--pattern",
    "pattern": "--pattern",
    "budget": "--budget",
    "budget.wall_seconds": "--budget",
    "wall_seconds": "--budget",
    "budget.rounds": "--rounds",
    "rounds": "--rounds",
    "wake": "--wake-every",
    "wake_every_seconds": "--wake-every",
    "poll": "--poll",
    "poll_seconds": "--poll",
    "stall": "--stall",
    "stall_seconds": "--stall",
    "baseline": "--baseline",
    "margin": "--margin",
    "divergence_margin": "--margin",
    "json_key": "--json-key",
    "metric.json_key": "--json-key",
    "partition": "--partition",
    "cpus": "--cpus",
    "time": "--time",
    "round_time_limit_seconds": "--time",
    "workdir": "--workdir",
}
_FIELD = re.compile(r"^`([A-Za-z_.]+)(:?)( [^`]*)?`")
_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)


def run_spec(args: argparse.Namespace, *, ssh: bool = False) -> CampaignSpec:
    """The CampaignSpec of `campaigns run`'s flags; ValueError with one line per problem.

    The checks and their words are `campaign_spec`'s (what chat says), with flag names. The
    command runs in --workdir or the current directory (`ssh`: the machine is an ssh host,
    where --workdir names a path and the default is the machine's `workdir`).
    """
    problems: list[str] = []
    name, _, direction = (part.strip() for part in str(args.metric).partition(":"))
    direction = direction.lower()
    if not name or direction not in ("min", "max"):
        problems.append(f"--metric {args.metric}: write NAME:min or NAME:max, e.g. loss:min")
        name, direction = name or "metric", "min"  # the other checks still run
    try:
        spec = campaign_spec(
            StartCampaignInput(
                goal=args.goal,
                run=args.run,
                machine=args.machine,
                metric=f"{name} {direction}",
                budget=args.budget,
                pattern=args.pattern,
                wake=args.wake_every,
                baseline=args.baseline,
                rounds=args.rounds,
                stall=args.stall,
                margin=args.margin,
                poll=args.poll,
                json_key=args.json_key,
                partition=args.partition,
                cpus=args.cpus,
                time=args.time,
            ),
            # The operator acting in their own shell: the chat's abuse bound does not apply.
            min_poll_seconds=0.0,
        )
    except ValueError as exc:
        problems += [_flagged(line[2:]) for line in str(exc).splitlines() if line.startswith("- ")]
        if not problems:
            problems.append(str(exc))
    workdir = _workdir(args, problems, ssh=ssh)
    if problems:
        raise ValueError("\n".join(problems))
    return spec.model_copy(update={"workdir": workdir})


def _workdir(args: argparse.Namespace, problems: list[str], *, ssh: bool) -> str | None:
    """The directory the command runs in: --workdir, else the current directory (on an ssh
    machine: --workdir as a path on that host, else the machine's own `workdir`)."""
    given: str | None = getattr(args, "workdir", None)
    if ssh:
        return given
    if given is None:
        return str(Path.cwd().resolve())
    path = Path(given).expanduser()
    if not path.is_dir():
        problems.append(f"--workdir {given}: no such directory (create it, or pick another)")
        return None
    return str(path.resolve())


def _flagged(problem: str) -> str:
    """A campaign_spec problem with the chat field (`budget:`) named by its flag."""
    match = _FIELD.match(problem)
    if match is None:
        return problem
    name, colon, value = match.groups()
    flag = _FLAGS.get(name, f"--{name}")
    return f"{flag}{value or colon}{problem[match.end() :]}"


def run_command(args: argparse.Namespace, settings: Settings) -> int:
    """`raven-bot campaigns run`: 0 closed, 1 failed/cancelled, 2 invalid, 128+N on signal N."""
    try:
        spec = run_spec(args, ssh=_on_ssh(settings.home, args.machine))
    except ValueError as exc:
        for line in str(exc).splitlines():
            print(f"{PROG} run: {line}", file=sys.stderr)
        return 2
    check_home(settings.home)
    try:
        return asyncio.run(run_headless(settings, spec, as_json=args.json, out=sys.stdout))
    except KeyboardInterrupt:  # before the handler was installed, or after it was removed
        return 128 + signal.SIGINT
    except (MachinesError, CampaignError) as exc:  # machines.toml, an unknown machine
        print(f"raven-bot: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"raven-bot: {exc}", file=sys.stderr)
        return 1


def _on_ssh(home: Path, machine: str) -> bool:
    """Whether `machine` is an ssh host (False when machines.toml cannot say: the run then
    reports that file's problem)."""
    try:
        spec = operator_machine_specs(home).get(machine)
    except RuntimeError:
        return False
    return spec is not None and spec.kind == "ssh"


class MachinesError(ValueError):
    """RAVEN_HOME/machines.toml is invalid (the message names the file, machine and field)."""


@dataclass
class StderrNotifier:
    """Campaign notices as one line each, prefixed with the time (to stderr by default)."""

    stream: TextIO = field(default_factory=lambda: sys.stderr)
    seen: set[str] = field(default_factory=set)

    async def send(
        self,
        conv: ConversationRef,
        text: str,
        *,
        idempotency_key: str,
        on_posted: PostedHook | None = None,
        recipient: str = "",
        essential: bool = False,
    ) -> None:
        """Print a notice once per key; the key serves as its message id."""
        if idempotency_key in self.seen:
            return
        self.seen.add(idempotency_key)
        self._line(text)
        if on_posted is not None:
            await on_posted(idempotency_key)

    async def posted_id(self, conv: ConversationRef, idempotency_key: str) -> str | None:
        """A printed notice's id is its key."""
        return idempotency_key if idempotency_key in self.seen else None

    async def edit(self, conv: ConversationRef, message_id: str, text: str, *, key: str) -> None:
        """A status edit is printed as a new line."""
        self._line(text)

    def _line(self, text: str) -> None:
        stamp = datetime.now().astimezone().strftime("%H:%M:%S")
        self.stream.write(f"{stamp} {' '.join(text.split())}\n")
        self.stream.flush()


@dataclass
class _Interrupt:
    """The first SIGINT/SIGTERM received while a headless campaign runs."""

    event: asyncio.Event = field(default_factory=asyncio.Event)
    signum: int | None = None

    def receive(self, signum: int) -> None:
        if self.signum is None:
            self.signum = signum
        self.event.set()


@contextlib.contextmanager
def _interrupts() -> Iterator[_Interrupt]:
    loop = asyncio.get_running_loop()
    interrupt = _Interrupt()
    for sig in _SIGNALS:
        loop.add_signal_handler(sig, interrupt.receive, int(sig))
    try:
        yield interrupt
    finally:
        for sig in _SIGNALS:
            loop.remove_signal_handler(sig)


@dataclass
class CountingProvider:
    """The configured model, counting its calls: in all, and those made while the campaign
    was not deciding (read from its record at each call; a waiting campaign makes none)."""

    inner: ModelProvider
    campaigns: CampaignStore
    campaign_id: str
    calls: int = 0
    while_waiting: int = 0

    @property
    def name(self) -> str:
        """The wrapped provider's name."""
        return self.inner.name

    @property
    def offline(self) -> bool:
        """Whether the wrapped provider is the offline stand-in."""
        return self.inner.offline

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        max_tokens: int = 4096,
    ) -> ModelReply:
        """Count the call against the campaign's recorded state, then make it."""
        record = await self.campaigns.get(self.campaign_id)
        self.calls += 1
        if record is None or record.state != "deciding":
            self.while_waiting += 1
        return await self.inner.complete(
            system=system, messages=messages, tools=tools, max_tokens=max_tokens
        )


@dataclass
class Headless:
    """One headless campaign: the engine assembled as bot/app.py does, on its own bus."""

    engine: CampaignEngine
    scheduler: ApschedulerScheduler
    machines: Mapping[str, Machine]
    notifier: StderrNotifier
    campaign_id: str
    model: CountingProvider | None = None  # None: the rule-based policy decides
    # Wake-ups APScheduler fired in this process, by job id (the JSON marks them).
    fired: dict[str, FiredJob] = field(default_factory=dict)

    async def on_wake(self, job: FiredJob) -> None:
        """The CAMPAIGN_WAKE handler: note APScheduler's firing, then wake the campaign."""
        self.fired[job.job_id] = job
        await on_campaign_wake(self.engine, job)


async def build_headless(settings: Settings, store: Store) -> Headless:
    """Machines, the detached sandbox, the slot allocator, APScheduler on a fresh bus, the
    decider the bot would use and a stderr notifier around one new campaign id."""
    home = settings.home
    try:
        specs = await asyncio.to_thread(operator_machine_specs, home)
    except RuntimeError as exc:
        raise MachinesError(str(exc)) from None
    sandbox = await asyncio.to_thread(build_sandbox, settings)
    if sandbox.kind != "bwrap":
        log.warning("campaign sandbox %s", sandbox.description)
    campaign_id = "cmp_" + uuid.uuid4().hex[:10]
    bus = EventBus()
    # Its own job store: APScheduler 3 does not support two running schedulers sharing one
    # (each would fire the other's jobs), and a bot may be serving RAVEN_HOME/scheduler.db.
    scheduler = ApschedulerScheduler(
        home / "campaigns" / campaign_id / "scheduler.db",
        bus,
        misfire_grace_seconds=settings.scheduler_misfire_grace_seconds,
    )
    notifier = StderrNotifier()
    campaigns = CampaignStore(store)
    # The bot's selection: the model with a key, the offline provider (so the policy) without.
    provider = build_provider(settings)
    model = None if provider.offline else CountingProvider(provider, campaigns, campaign_id)
    decider: Decider = RuleBasedDecider() if model is None else ModelDecider(model)
    # The bot's own site and engine, wired to this terminal.
    site = campaign_site(settings, sandbox, one_shot=True)
    machines = site.machines(specs, secret_names=declared_secret_names())
    engine = site.engine(
        specs,
        Wiring(campaigns, scheduler, notifier, decider),
        EngineSettings(report_tolerance=settings.campaign_report_tolerance),
        machines=machines,
        new_id=lambda: campaign_id,
    )
    headless = Headless(engine, scheduler, machines, notifier, campaign_id, model)
    subscribe_job(bus, CAMPAIGN_WAKE, headless.on_wake)
    bus.freeze()
    return headless


async def run_headless(
    settings: Settings, spec: CampaignSpec, *, as_json: bool, out: TextIO
) -> int:
    """Run one campaign to a final state and print its record; the exit code."""
    if logging.getLogger().getEffectiveLevel() >= logging.INFO:
        logging.getLogger("apscheduler").setLevel(logging.WARNING)  # three lines a job else
    store = Store(settings.home / "raven.db", all_migrations())
    async with AsyncExitStack() as stack:
        await store.open()
        stack.push_async_callback(store.close)
        headless = await build_headless(settings, store)
        if headless.model is not None:
            stack.push_async_callback(close_provider, headless.model.inner)
        await headless.scheduler.start()
        stack.push_async_callback(headless.scheduler.stop)
        stack.push_async_callback(headless.engine.close)
        with _interrupts() as interrupt:
            final = await _drive(headless, spec, interrupt)
            await _unschedule(headless)
        data = await campaign_json(headless.engine.store, final)
    _mark_fired(data, headless.fired)
    data["decider"] = "policy" if headless.model is None else "model"
    # Measured at the provider, apart from the engine's own count (`model_calls`).
    data["model_calls_while_waiting"] = (
        0 if headless.model is None else headless.model.while_waiting
    )
    out.write((json.dumps(data, indent=2) if as_json else describe(data)) + "\n")
    out.flush()
    if interrupt.signum is not None and final.state == "cancelled":
        return 128 + interrupt.signum
    return 0 if final.state == "closed" else 1


async def _drive(headless: Headless, spec: CampaignSpec, interrupt: _Interrupt) -> CampaignRecord:
    engine = headless.engine
    conv = ConversationRef("cli", "local", "campaigns", headless.campaign_id)
    record = await engine.start(OWNER, conv, spec)
    final = await _until_final(engine, record.id, interrupt.event)
    if final is not None:
        if final.state == "cancelled":  # only a `stop` from another process does that here
            decisions = await engine.store.decisions(record.id)
            why = decisions[-1].reason if decisions else "stopped"
            await headless.notifier.send(
                conv, f"🛑 Campaign `{record.id}` cancelled ({why}).", idempotency_key="cancelled"
            )
        return final
    name = signal.Signals(interrupt.signum or signal.SIGINT).name
    await engine.stop(record.id, by="Ctrl-C" if name == "SIGINT" else name)
    stopped = await engine.store.get(record.id)
    assert stopped is not None
    await _record_exit(headless, stopped)
    return stopped


async def _record_exit(headless: Headless, record: CampaignRecord) -> None:
    """The exit code of the round `engine.stop` terminated (it records only that it ended)."""
    current = await headless.engine.store.round(record.id, record.round)
    machine = headless.machines.get(record.spec.machine)
    if machine is None or current is None or current.handle is None:
        return
    if current.exit_code is not None:
        return
    with contextlib.suppress(MachineUnavailable):
        status = await machine.poll(current.handle)
        if status.state == "exited":
            await headless.engine.store.set_round(
                record.id, record.round, exit_code=status.exit_code
            )


async def _until_final(
    engine: CampaignEngine, campaign_id: str, interrupted: asyncio.Event
) -> CampaignRecord | None:
    """The campaign once final; None as soon as `interrupted` is set first."""
    while True:
        changed = engine.changed  # taken before reading, so a change in between is seen
        record = await engine.store.get(campaign_id)
        if record is None:
            raise CampaignError(f"campaign `{campaign_id}` disappeared from the store")
        if record.state in FINAL_STATES:
            return record
        if interrupted.is_set():
            return None
        # Re-read on a timer too: `campaigns stop` in another process sets no event here.
        waits = [asyncio.ensure_future(changed.wait()), asyncio.ensure_future(interrupted.wait())]
        await asyncio.wait(waits, timeout=RECHECK_SECONDS, return_when=asyncio.FIRST_COMPLETED)
        for task in waits:
            task.cancel()
        await asyncio.gather(*waits, return_exceptions=True)


async def _unschedule(headless: Headless) -> None:
    """Drop APScheduler jobs of wake-ups the ledger no longer waits for (a `stop` from
    another process cancels them in the ledger only)."""
    for wake in await headless.engine.store.wakes(headless.campaign_id):
        if wake.state != "pending":
            await headless.scheduler.cancel(wake.id)


def _mark_fired(data: dict[str, Any], fired: Mapping[str, FiredJob]) -> None:
    """Add APScheduler's own account to the wake-ups it fired in this run."""
    for wake in data["wakeups"]:
        job = fired.get(wake["id"])
        wake["apscheduler"] = (
            None
            if job is None
            else {
                "scheduled_at": job.scheduled_at.isoformat(),
                "fired_at": job.fired_at.isoformat(),
                "lateness": job.lateness_seconds,
            }
        )
