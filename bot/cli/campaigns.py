"""`raven-bot campaigns list|show|stop|run`: campaign records from the command line, and one
campaign run headless in the foreground (scripts and CI) with the configured decider: the
model with ANTHROPIC_API_KEY, else the offline rule-based policy.

Reading commands open RAVEN_HOME/raven.db as `raven-bot runs` does. `stop` works while a bot
(or a headless run) monitors the campaign in another process: it commits the cancelled state
first, so that monitor stops at its next poll and never decides on the stopped round, then
terminates the round on its machine and records how it ended.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import re
import signal
import sqlite3
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final, TextIO

from agents.models.provider import ModelProvider
from agents.models.types import Message, ModelReply, ToolSpec
from bot.app import build_provider, build_sandbox, campaign_site, close_provider
from bot.home import HomeError, check_home
from bot.schema import all_migrations
from bot.settings import Settings
from core.ids import ConversationRef
from core.store import Store
from host.features.oncall.decider import ModelDecider
from host.features.oncall.feature import on_campaign_wake
from host.features.oncall.site import Wiring, machine_specs
from host.features.oncall.tools import StartCampaignInput, campaign_spec
from host.runtime.apscheduler_adapter import ApschedulerScheduler
from host.runtime.events import EventBus, subscribe_job
from host.runtime.scheduling import FiredJob
from oncall.deciders import RuleBasedDecider
from oncall.engine import CampaignEngine, CampaignError, Decider, EngineSettings
from oncall.machines.registry import build_machines
from oncall.model import (
    FINAL_STATES,
    CampaignSpec,
    JobStatus,
    Machine,
    MachineSpec,
    MachineUnavailable,
    Measurement,
)
from oncall.ports import CAMPAIGN_WAKE, PostedHook
from oncall.report_gate import first_value, format_duration
from oncall.store import CampaignRecord, CampaignStore, RoundRecord

log = logging.getLogger(__name__)

PROG: Final = "raven-bot campaigns"
OWNER: Final = "cli"
# How often a headless run re-reads its campaign (a `stop` from another process).
RECHECK_SECONDS: Final = 0.5
TERMINATE_GRACE_SECONDS: Final = 10.0
PLAIN_MEASUREMENTS: Final = 20  # the plain view shows the newest ones; --json has all
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

RUN_HELP = """\
Run one campaign in the foreground until it reaches a final state, then print its record.

The command runs in the current directory (or --workdir), sandboxed: that directory is its
working directory and the only place it may write, so `--run "python train.py"` runs the
train.py found there. Its output and exit code are kept under RAVEN_HOME/campaigns/<id>/.

Decisions are made by the model when ANTHROPIC_API_KEY is set (one call per wake-up, none
while the campaign waits; the policy when a call fails), else by the offline rule-based
policy (continue while improving within budget, stop on divergence or budget, resubmit a
crash once). Notices go to stderr, one line each; the record goes to stdout (--json adds
the model calls measured while the campaign waited). Exit code 0 when the campaign closed,
1 when it failed or was cancelled, 2 for invalid arguments, 130 after Ctrl-C (the round is
terminated and the campaign cancelled).
"""


# --------------------------------------------------------------------------- parser


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `campaigns` subcommand and its actions, on `raven-bot`'s subparsers."""
    campaigns = sub.add_parser(
        "campaigns",
        help="oncall campaign records, stop, and headless runs",
        description="Read campaign records, stop a campaign, or run one headless.",
    )
    actions = campaigns.add_subparsers(dest="campaigns_command", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list", help="recent campaigns", description="List campaigns, newest first."
    )
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    show = actions.add_parser(
        "show",
        help="one campaign's full record",
        description="Spec, state, baseline, rounds, wake-ups, decisions, measurements, report.",
    )
    show.add_argument("campaign", help="campaign id (from `raven-bot campaigns list`)")
    show.add_argument("--json", action="store_true", help="print JSON")
    stop = actions.add_parser(
        "stop",
        help="cancel a campaign (terminates its running round)",
        description="Cancel a campaign and terminate its round; works while a bot runs it.",
    )
    stop.add_argument("campaign", help="campaign id (from `raven-bot campaigns list`)")
    _add_run_parser(actions)


def _add_run_parser(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = actions.add_parser(
        "run",
        help="run one campaign in the foreground (model or rule-based decisions)",
        description=RUN_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--goal", required=True, help="what the campaign is for")
    run.add_argument("--machine", default="local", help="a machine from machines.toml")
    run.add_argument("--run", required=True, metavar="CMD", help="the command one round runs")
    run.add_argument("--metric", required=True, metavar="NAME:min|max", help="e.g. loss:min")
    run.add_argument("--pattern", metavar="REGEX", help="regex with one group around the value")
    run.add_argument("--budget", required=True, metavar="DURATION", help="wall clock, e.g. 2h")
    run.add_argument("--wake-every", metavar="DURATION", help="scheduled wake-ups (default 5m)")
    run.add_argument("--poll", metavar="DURATION", help="how often output is read (default 5s)")
    run.add_argument("--stall", metavar="DURATION", help="no output this long = stalled (10m)")
    run.add_argument("--rounds", metavar="N", help="at most this many rounds (default 5)")
    run.add_argument("--baseline", metavar="X", help="the starting metric value")
    run.add_argument("--margin", metavar="X", help="worse than the baseline by this = diverged")
    run.add_argument(
        "--json-key", metavar="KEY", help="read the metric from JSON lines (a.b for nested)"
    )
    run.add_argument("--partition", metavar="NAME", help="Slurm: the partition to submit to")
    run.add_argument("--cpus", metavar="N", help="cpus per round (Slurm: --cpus-per-task)")
    run.add_argument("--time", metavar="DURATION", help="time limit of one round, e.g. 30m")
    run.add_argument(
        "--workdir",
        metavar="DIR",
        help="where the command runs, writable (default: the current directory; on an ssh "
        "machine its `workdir` unless given)",
    )
    run.add_argument("--json", action="store_true", help="print the final record as JSON")


# ---------------------------------------------------------------------------- entry


def campaigns_command(args: argparse.Namespace, settings: Settings) -> int:
    """Entry for `raven-bot campaigns ACTION`; 2 with one line when RAVEN_HOME is unusable."""
    action: str = args.campaigns_command
    try:
        if action == "run":
            return run_command(args, settings)
        check_home(settings.home)
        if action == "list":
            return asyncio.run(_list(settings, args.json, args.limit, sys.stdout))
        if action == "show":
            return asyncio.run(_show(settings, args.campaign, args.json, sys.stdout))
        return asyncio.run(_stop(settings, args.campaign, sys.stdout))
    except HomeError as exc:
        print(f"raven-bot: {exc}", file=sys.stderr)
        return 2


@asynccontextmanager
async def open_campaigns(home: Path) -> AsyncIterator[CampaignStore]:
    """The campaign records in `home/raven.db` (HomeError naming the file if it won't open)."""
    store = Store(home / "raven.db", all_migrations())
    try:
        await store.open()
    except (OSError, sqlite3.Error) as exc:
        # Close what did open: a connection thread left running keeps the process alive.
        await store.close()
        raise HomeError(f"RAVEN_HOME={home}: cannot open {store.path}: {exc}") from None
    try:
        yield CampaignStore(store)
    finally:
        await store.close()


# --------------------------------------------------------------------------- records


def number(value: float | None) -> float | str | None:
    """A value for JSON: non-finite ones as the strings "nan", "inf" and "-inf"."""
    if value is None or math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _measurement(m: Measurement) -> dict[str, Any]:
    return {
        "id": m.id,
        "round": m.round,
        "at": m.at,
        "name": m.name,
        "value": number(m.value),
        "source_line": m.source_line,
    }


def _round(r: RoundRecord) -> dict[str, Any]:
    handle = r.handle
    return {
        "round": r.round,
        "state": r.state,
        "exit_code": r.exit_code,
        "wake_reason": r.wake_reason,
        "started_at": r.started_at,
        "ended_at": r.ended_at,
        "granted_seconds": r.granted_seconds,
        "note": r.note,
        "job_id": handle.job_id if handle else None,
        "host": handle.host if handle else None,
        "log_path": handle.log_path if handle else None,
        "exit_path": handle.exit_path if handle else None,
    }


def _baseline(
    record: CampaignRecord, measurements: Sequence[Measurement]
) -> tuple[float | str | None, str | None]:
    """The baseline the report gate holds the report to, and where it comes from."""
    if record.baseline is not None:
        return number(record.baseline), "given"
    first = first_value(measurements, record.spec.metric.name)
    if first is None:
        return None, None
    return number(first.value), f"first measurement #{first.id}"


async def campaign_json(campaigns: CampaignStore, record: CampaignRecord) -> dict[str, Any]:
    """A campaign's full record as JSON-ready data (rounds, wake-ups, decisions, values)."""
    measurements = await campaigns.measurements(record.id)
    baseline, source = _baseline(record, measurements)
    return {
        "id": record.id,
        "state": record.state,
        "goal": record.spec.goal,
        "owner": record.owner,
        "conversation": record.conversation.id,
        "spec": record.spec.model_dump(mode="json"),
        "baseline": baseline,
        "baseline_source": source,
        "round": record.round,
        "compute_seconds": record.compute_seconds,
        "model_calls": record.model_calls,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "closed_at": record.closed_at,
        "error": record.error,
        "report": record.report,
        "rounds": [_round(r) for r in await campaigns.rounds(record.id)],
        "wakeups": [
            {
                "id": w.id,
                "round": w.round,
                "reason": w.reason,
                "state": w.state,
                "due_at": w.due_at,
                "fired_at": w.fired_at,
                "lateness": w.lateness,
            }
            for w in await campaigns.wakes(record.id)
        ],
        "decisions": [
            {
                "id": d.id,
                "round": d.round,
                "at": d.at,
                "action": d.action,
                "cite": d.cite,
                "reason": d.reason,
                "detail": d.detail,
            }
            for d in await campaigns.decisions(record.id)
        ],
        "measurements": [_measurement(m) for m in measurements],
    }


async def campaign_summary(campaigns: CampaignStore, record: CampaignRecord) -> dict[str, Any]:
    """One line's worth of a campaign: id, state, machine, metric, round, latest value, goal."""
    metric = record.spec.metric.name
    own = [m for m in await campaigns.measurements(record.id) if m.name == metric]
    return {
        "id": record.id,
        "state": record.state,
        "machine": record.spec.machine,
        "metric": metric,
        "direction": record.spec.direction,
        "round": record.round,
        "latest": {"id": own[-1].id, "value": number(own[-1].value)} if own else None,
        "goal": record.spec.goal,
        "created_at": record.created_at,
    }


def _clock(at: float | None) -> str:
    if at is None:
        return "-"
    return datetime.fromtimestamp(at).astimezone().strftime("%H:%M:%S")


def _value(value: object) -> str:
    return f"{value:g}" if isinstance(value, float | int) else str(value)


def summary_line(row: Mapping[str, Any]) -> str:
    """A `campaign_summary` as one plain line."""
    latest = row["latest"]
    value = f"{_value(latest['value'])} (#{latest['id']})" if latest else "-"
    return (
        f"{row['id']}  {row['state']:<10} {row['machine']:<8} "
        f"{row['metric']} ({row['direction']})  round {row['round']}  latest {value}  "
        f"{str(row['goal'])[:60]}"
    )


def describe(data: Mapping[str, Any]) -> str:
    """A `campaign_json` record as readable text."""
    spec = data["spec"]
    source = f" ({data['baseline_source']})" if data["baseline_source"] else ""
    lines = [
        f"Campaign {data['id']} ({data['state']}): {data['goal']}",
        f"Machine {spec['machine']}, metric {spec['metric']['name']} ({spec['direction']}), "
        f"budget {format_duration(spec['budget']['wall_seconds'])} and "
        f"{spec['budget']['rounds']} round(s); command: {spec['command']}"
        + (f" (in {spec['workdir']})" if spec.get("workdir") else ""),
        f"Baseline {_value(data['baseline'])}{source}; model calls {data['model_calls']}"
        f"{_while_waiting(data)}; compute {data['compute_seconds']:.1f}s.",
    ]
    lines += _section("Rounds", [_round_line(r) for r in data["rounds"]])
    lines += _section("Wake-ups", [_wake_line(w) for w in data["wakeups"]])
    lines += _section("Decisions", [_decision_line(d) for d in data["decisions"]])
    lines += _measurement_lines(data["measurements"])
    if data["error"]:
        lines.append(f"Error: {data['error']}")
    if data["report"]:
        lines += ["Report:", *(f"  {line}" for line in str(data["report"]).splitlines())]
    return "\n".join(lines)


def _while_waiting(data: Mapping[str, Any]) -> str:
    if "model_calls_while_waiting" not in data:  # only a headless run measures it
        return ""
    return f" ({data['model_calls_while_waiting']} while waiting)"


def _section(title: str, lines: list[str]) -> list[str]:
    return [f"{title}:", *(f"  {line}" for line in lines)] if lines else []


def _round_line(r: Mapping[str, Any]) -> str:
    job = f", job {r['job_id']} on {r['host']}" if r["job_id"] else ""
    note = f" ({r['note']})" if r["note"] else ""
    return (
        f"round {r['round']}: {r['state']}, exit code {r['exit_code']}, "
        f"woke: {r['wake_reason'] or '-'}{job}, {_clock(r['started_at'])}–"
        f"{_clock(r['ended_at'])}{note}"
    )


def _wake_line(w: Mapping[str, Any]) -> str:
    late = f", {w['lateness']:.3f}s late" if w["lateness"] is not None else ""
    via = " via APScheduler" if w.get("apscheduler") else ""
    return (
        f"{w['reason']:<9} {w['state']:<9} round {w['round']}, due {_clock(w['due_at'])}, "
        f"fired {_clock(w['fired_at'])}{late}{via}"
    )


def _decision_line(d: Mapping[str, Any]) -> str:
    cite = f" (cites #{d['cite']})" if d["cite"] is not None else ""
    return f"{_clock(d['at'])} round {d['round']}: {d['action']}{cite}: {d['reason']}"


def _measurement_lines(measurements: Sequence[Mapping[str, Any]]) -> list[str]:
    shown = measurements[-PLAIN_MEASUREMENTS:]
    title = f"Measurements ({len(measurements)}"
    title += (
        f", the newest {len(shown)}; --json has all)" if len(shown) < len(measurements) else ")"
    )
    lines = [
        f"#{m['id']} round {m['round']}: {m['name']}={_value(m['value'])}  ← {m['source_line']}"
        for m in shown
    ]
    return _section(title, lines)


# ------------------------------------------------------------------ list, show, stop


async def _list(settings: Settings, as_json: bool, limit: int, out: TextIO) -> int:
    async with open_campaigns(settings.home) as campaigns:
        rows = [await campaign_summary(campaigns, r) for r in await campaigns.recent(limit=limit)]
    if as_json:
        out.write(json.dumps(rows, indent=2) + "\n")
    elif not rows:
        out.write("No campaigns recorded yet.\n")
    else:
        out.writelines(summary_line(row) + "\n" for row in rows)
    return 0


async def _show(settings: Settings, campaign_id: str, as_json: bool, out: TextIO) -> int:
    async with open_campaigns(settings.home) as campaigns:
        record = await campaigns.get(campaign_id)
        if record is None:
            print(_unknown(campaign_id), file=sys.stderr)
            return 2
        data = await campaign_json(campaigns, record)
    out.write((json.dumps(data, indent=2) if as_json else describe(data)) + "\n")
    return 0


def _unknown(campaign_id: str) -> str:
    return f"raven-bot: no campaign `{campaign_id}`; `raven-bot campaigns list` shows them."


@dataclass(frozen=True)
class _NoRounds:
    """The command wrapper of `stop`'s machines: stopping never starts a round."""

    def wrap(
        self,
        argv: Sequence[str],
        *,
        workspace: Path,
        env: Mapping[str, str],
        readonly: Sequence[Path] = (),
    ) -> Sequence[str]:
        """Refuses: `raven-bot campaigns stop` only terminates."""
        raise RuntimeError("`raven-bot campaigns stop` starts no rounds")


async def _stop(settings: Settings, campaign_id: str, out: TextIO) -> int:
    try:
        specs = await asyncio.to_thread(_machine_specs, settings.home)
    except RuntimeError as exc:
        print(f"raven-bot: {exc}", file=sys.stderr)
        return 2
    machines = build_machines(specs, _NoRounds())
    async with open_campaigns(settings.home) as campaigns:
        code, line = await stop_campaign(
            campaigns, machines, campaign_id, by="`raven-bot campaigns stop`"
        )
    print(line, file=out if code == 0 else sys.stderr)
    return code


async def stop_campaign(
    campaigns: CampaignStore,
    machines: Mapping[str, Machine],
    campaign_id: str,
    *,
    by: str,
    grace_seconds: float = TERMINATE_GRACE_SECONDS,
) -> tuple[int, str]:
    """Cancel a campaign from any process: (exit code, one line saying what happened).
    The cancel is committed before the round is signalled, so a monitor in another process
    sees a final campaign (and stops) before it could see the round end and decide on it."""
    record = await campaigns.get(campaign_id)
    if record is None:
        return 2, _unknown(campaign_id)
    if record.state in FINAL_STATES:
        return 0, f"Campaign `{campaign_id}` is already {record.state}; nothing to stop."
    await campaigns.record_decision(
        record.id, record.round, "cancel", None, f"stopped by {by}", {"by": by}
    )
    await campaigns.update(record.id, state="cancelled", closed_at=time.time())
    await campaigns.cancel_pending_wakes(record.id)  # a later firing then does nothing
    current = await campaigns.round(record.id, record.round)
    if current is None or current.handle is None or current.state != "running":
        return 0, f"Campaign `{campaign_id}` cancelled (no round was running)."
    return await _terminate_round(campaigns, machines, record, current, grace_seconds)


async def _terminate_round(
    campaigns: CampaignStore,
    machines: Mapping[str, Machine],
    record: CampaignRecord,
    current: RoundRecord,
    grace_seconds: float,
) -> tuple[int, str]:
    assert current.handle is not None
    where = f"round {current.round} (job `{current.handle.job_id}` on `{record.spec.machine}`)"
    machine = machines.get(record.spec.machine)
    if machine is None:
        return 1, (
            f"Campaign `{record.id}` cancelled, but machine `{record.spec.machine}` is no longer "
            f"in machines.toml: {where} was not terminated; stop it there by hand."
        )
    try:
        await machine.terminate(current.handle, grace_seconds=grace_seconds)
        status = await machine.poll(current.handle)
    except MachineUnavailable as exc:
        await campaigns.set_round(
            record.id, current.round, note=f"cancelled; not terminated: {exc}"
        )
        return 1, f"Campaign `{record.id}` cancelled, but {where} could not be terminated: {exc}"
    now = time.time()
    await campaigns.set_round(
        record.id, current.round, state="ended", ended_at=now, exit_code=status.exit_code
    )
    # The round's compute counts, as when the bot stops it (per cpu, like the engine).
    used = max(0.0, now - current.handle.started_at) * (record.spec.cpus or 1)
    await campaigns.update(record.id, compute_seconds=record.compute_seconds + used)
    return 0, f"Campaign `{record.id}` cancelled: {where} terminated ({_ended(status)})."


def _ended(status: JobStatus) -> str:
    if status.state == "exited":
        return f"exit code {status.exit_code}" if status.exit_code is not None else "ended"
    return f"{status.state}{': ' + status.detail if status.detail else ''}"


# ------------------------------------------------------------------------ headless run


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


def _machine_specs(home: Path) -> dict[str, MachineSpec]:
    """machines.toml as this command sees it: the current directory is the operator's, so a
    machine's `workdir` may be it (`cd project && raven-bot campaigns run`)."""
    return machine_specs(home, Path.cwd(), one_shot=True)


def _on_ssh(home: Path, machine: str) -> bool:
    """Whether `machine` is an ssh host (False when machines.toml cannot say: the run then
    reports that file's problem)."""
    try:
        spec = _machine_specs(home).get(machine)
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
        specs = await asyncio.to_thread(_machine_specs, home)
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
    machines = site.machines(specs)
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
