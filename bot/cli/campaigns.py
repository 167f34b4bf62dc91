"""`raven-bot campaigns list|show|chart|stop|run`: campaign records from the command line (a
campaign's chart as PNG or SVG), and one campaign run headless in the foreground (scripts
and CI) with the configured decider: the model when RAVEN_MODEL has its key, else the offline
rule-based policy.

Reading commands open RAVEN_HOME/raven.db as `raven-bot runs` does. `stop` works while a bot
(or a headless run) monitors the campaign in another process: it commits the cancelled state
first, so that monitor stops at its next poll and never decides on the stopped round, then
terminates the round on its machine and records how it ended.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final, TextIO

from bot.cli.database import open_database
from bot.home import HomeError, check_home
from bot.settings import Settings, declared_secret_names
from core.pictures import PictureError, check_destination, save_picture
from host.features.oncall.site import machine_specs
from oncall.chart import CampaignChart, chart_of, render_chart
from oncall.machines.registry import build_machines
from oncall.model import (
    FINAL_STATES,
    JobStatus,
    Machine,
    MachineSpec,
    MachineUnavailable,
    Measurement,
)
from oncall.report_gate import first_value, format_duration
from oncall.store import CampaignRecord, CampaignStore, RoundRecord

log = logging.getLogger(__name__)

TERMINATE_GRACE_SECONDS: Final = 10.0
PLAIN_MEASUREMENTS: Final = 20  # the plain view shows the newest ones; --json has all

# ---------------------------------------------------------------------------- entry


def campaigns_command(args: argparse.Namespace, settings: Settings) -> int:
    """Entry for `raven-bot campaigns ACTION`; 2 with one line when RAVEN_HOME is unusable."""
    action: str = args.campaigns_command
    try:
        if action == "run":
            from bot.cli.campaign_run import run_command

            return run_command(args, settings)
        check_home(settings.home)
        if action == "list":
            return asyncio.run(_list(settings, args.json, args.limit, sys.stdout))
        if action == "show":
            return asyncio.run(_show(settings, args.campaign, args.json, sys.stdout))
        if action == "chart":
            return asyncio.run(_chart(settings, args.campaign, args.out, sys.stdout))
        return asyncio.run(_stop(settings, args.campaign, sys.stdout))
    except HomeError as exc:
        print(f"raven-bot: {exc}", file=sys.stderr)
        return 2


@asynccontextmanager
async def open_campaigns(home: Path) -> AsyncIterator[CampaignStore]:
    """The campaign records in `home/raven.db` (HomeError naming the file if it won't open)."""
    async with open_database(home) as store:
        yield CampaignStore(store)


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


async def load_chart(campaigns: CampaignStore, campaign_id: str) -> CampaignChart | None:
    """What a campaign's chart shows, from its records (None: no such campaign)."""
    record = await campaigns.get(campaign_id)
    if record is None:
        return None
    rounds = await campaigns.rounds(record.id)
    return chart_of(record, rounds, await campaigns.measurements(record.id))


async def _chart(settings: Settings, campaign_id: str, path: Path, out: TextIO) -> int:
    try:
        fmt = check_destination(path)  # before anything is read or drawn
        async with open_campaigns(settings.home) as campaigns:
            chart = await load_chart(campaigns, campaign_id)
        if chart is None:
            print(_unknown(campaign_id), file=sys.stderr)
            return 2
        save_picture(path, await asyncio.to_thread(render_chart, chart, fmt))
    except PictureError as exc:
        print(f"raven-bot: {exc}", file=sys.stderr)
        return 2
    values = len(chart.points)
    out.write(
        f"Wrote {path}: campaign {chart.campaign_id}'s {chart.metric} over {chart.rounds} "
        f"round(s), {values} value{'s' if values != 1 else ''}.\n"
    )
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
        specs = await asyncio.to_thread(operator_machine_specs, settings.home)
    except RuntimeError as exc:
        print(f"raven-bot: {exc}", file=sys.stderr)
        return 2
    machines = build_machines(specs, _NoRounds(), secret_names=declared_secret_names())
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


def operator_machine_specs(home: Path) -> dict[str, MachineSpec]:
    """machines.toml as this command sees it: the current directory is the operator's, so a
    machine's `workdir` may be it (`cd project && raven-bot campaigns run`)."""
    return machine_specs(home, Path.cwd(), one_shot=True)
