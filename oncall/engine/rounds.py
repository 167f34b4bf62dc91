"""Launching and stopping a round: its time limit within the budget, its submission to the
machine, its status message and first wake-up, and its termination with the compute used."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from oncall.engine.core import EngineCore
from oncall.model import JobRequest, MachineUnavailable
from oncall.monitor import RoundWatch
from oncall.policy import clamp_to_budget
from oncall.report_gate import format_duration
from oncall.store import CampaignRecord

if TYPE_CHECKING:
    from oncall.engine.rooms import Rooms


class Rounds:
    """Submits a campaign's rounds and terminates the running one."""

    def __init__(self, core: EngineCore, rooms: Rooms) -> None:
        self._core = core
        self._rooms = rooms

    async def submit(
        self, record: CampaignRecord, round_no: int, command: str | None = None
    ) -> None:
        """Run round `round_no` (the spec's command unless a changed one was approved)."""
        core = self._core
        spec = record.spec
        requested, granted, note = self._grant(record)
        await core.store.start_round(record.id, round_no, granted, note)
        if note:
            await core.store.record_decision(
                record.id,
                round_no,
                "clamp",
                None,
                note,
                {"by": "budget", "requested_seconds": requested, "granted_seconds": granted},
            )
        machine = core.deps.machines[spec.machine]
        request = JobRequest(
            campaign_id=record.id,
            round=round_no,
            command=command or spec.command,
            workdir=core.config.root / record.id / f"round-{round_no}",
            cwd=spec.workdir,
            time_limit_seconds=granted,
            cpus=spec.cpus,
            partition=spec.partition,
        )
        try:
            handle = await machine.submit(request)
        except MachineUnavailable as exc:
            await core.store.set_round(
                record.id, round_no, state="failed", ended_at=core.now(), note=str(exc)
            )
            await self._rooms.closing.fail(record, f"the machine refused round {round_no}: {exc}")
            return
        await core.store.set_round(record.id, round_no, state="running", handle=handle)
        # The campaign's one status message (posted with the first round, edited after).
        await self._rooms.status.show(
            record,
            round=round_no,
            icon="▶️",
            state=f"running on `{spec.machine}` (job `{handle.job_id}`)",
            latest="",
            note=note or "",
        )
        await self._rooms.wakes.schedule(record, round_no, spec.wake_every_seconds)
        watch = RoundWatch(spec, record.baseline, handle.started_at)
        self._rooms.monitor.watch(record, round_no, handle, watch, granted)

    def _grant(self, record: CampaignRecord) -> tuple[float, float, str | None]:
        """A round's time limit: (requested, granted, note) within the remaining wall clock
        and the remaining compute minutes (spread over the round's cpus)."""
        spec = record.spec
        remaining = self._core.remaining_wall(record)
        requested = spec.round_time_limit_seconds or remaining
        granted, note = clamp_to_budget(requested, remaining)
        if spec.budget.compute_minutes is None:
            return requested, granted, note
        cpus = spec.cpus or 1
        left = max(0.0, spec.budget.compute_minutes * 60.0 - record.compute_seconds)
        if granted <= left / cpus:
            return requested, granted, note
        compute_note = (
            f"requested {format_duration(granted)}, granted {format_duration(left / cpus)}: the "
            f"remaining compute budget ({left / 60.0:g} cpu-minute(s) over {cpus} cpu(s))"
        )
        return requested, left / cpus, "; ".join(filter(None, [note, compute_note]))

    async def stop_job(self, record: CampaignRecord) -> None:
        """Stop monitoring the current round and terminate its job, recording its end and
        the compute it used."""
        core = self._core
        live = core.live.pop(record.id, None)
        if live is not None and live.task is not None and live.task is not asyncio.current_task():
            live.task.cancel()
            await asyncio.gather(live.task, return_exceptions=True)
        current = await core.store.round(record.id, record.round)
        if current is None or current.handle is None or current.state != "running":
            return
        machine = core.deps.machines.get(record.spec.machine)
        exit_code = None
        if machine is not None:
            with contextlib.suppress(MachineUnavailable):
                await machine.terminate(
                    current.handle, grace_seconds=core.settings.terminate_grace_seconds
                )
                exit_code = (await machine.poll(current.handle)).exit_code
        now = core.now()
        await core.store.set_round(
            record.id, record.round, state="ended", ended_at=now, exit_code=exit_code
        )
        used = max(0.0, now - current.handle.started_at) * (record.spec.cpus or 1)
        fresh = await core.fresh(record)
        await core.store.update(record.id, compute_seconds=fresh.compute_seconds + used)
        if live is None or not live.final_shown:
            await self._rooms.monitor.final_status(fresh, record.round, "terminated")
