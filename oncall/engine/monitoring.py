"""Polling a running round without model calls: tail its log, record measurements, keep its
status message current, and wake the campaign early when the round ends, stalls or diverges."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from oncall.engine.core import EngineCore
from oncall.engine.parts import REASON_TEXT, LiveRound, drain
from oncall.engine.status import latest_values
from oncall.model import (
    FINAL_STATES,
    JobHandle,
    JobStatus,
    MachineUnavailable,
    Measurement,
    WakeReason,
)
from oncall.monitor import RoundWatch
from oncall.store import CampaignRecord

if TYPE_CHECKING:
    from oncall.engine.rooms import Rooms


class Monitor:
    """One monitor task per running round, and the round's status message."""

    def __init__(self, core: EngineCore, rooms: Rooms) -> None:
        self._core = core
        self._rooms = rooms

    def watch(
        self,
        record: CampaignRecord,
        round_no: int,
        handle: JobHandle,
        watch: RoundWatch,
        granted_seconds: float | None,
    ) -> None:
        """Start monitoring the round (a task of this engine's loop)."""
        live = LiveRound(watch=watch, handle=handle, granted_seconds=granted_seconds)
        self._core.live[record.id] = live
        live.task = asyncio.get_running_loop().create_task(
            self._run(record.id, round_no, live),
            name=f"campaign-monitor:{record.id}:{round_no}",
        )

    async def _run(self, campaign_id: str, round_no: int, live: LiveRound) -> None:
        """Model-free: tail the round, record measurements, wake early on an event."""
        core = self._core
        while not core.closed:
            record = await core.store.get(campaign_id)
            if record is not None and record.state in FINAL_STATES:
                await self._rooms.slots.closed_elsewhere(record)
                return
            if record is None or record.round != round_no:
                return
            reason = await self._observe_once(record, round_no, live)
            if reason is not None:
                # Edits are throttled: the round's last values are shown once more, now.
                await self.final_status(record, round_no, REASON_TEXT[reason])
                live.final_shown = True
                await self._rooms.wakes.early(record, round_no, reason)
                return
            await asyncio.sleep(record.spec.poll_seconds)

    async def _observe_once(
        self, record: CampaignRecord, round_no: int, live: LiveRound
    ) -> WakeReason | None:
        core = self._core
        machine = core.deps.machines[record.spec.machine]
        try:
            chunk = await machine.read_log(live.handle, live.watch.offset)
            status = await machine.poll(live.handle)
            if status.state != "running":
                chunk += await drain(machine, live.handle, live.watch.offset + len(chunk))
        except MachineUnavailable as exc:
            if not live.unreachable_told:
                live.unreachable_told = True
                await core.store.set_round(record.id, round_no, note=f"unreachable: {exc}")
                await self._rooms.status.show(
                    record,
                    event=f"⚠️ Machine `{record.spec.machine}` is unreachable ({exc}); I keep "
                    "trying and the round keeps its budget.",
                )
            return None
        live.unreachable_told = False
        # In a worker thread: the metric's pattern may be a person's, and RE2 (linear, bounded,
        # releasing the GIL) still costs its program size times the output's length.
        observation = await asyncio.to_thread(live.watch.observe, core.now(), chunk, status)
        if observation.values or chunk:
            values = [(v.name, v.value, v.line) for v in observation.values]
            recorded = await core.store.record_measurements(
                record.id, round_no, values, watch=live.watch.state()
            )
            if recorded:
                await self._edit_status(record, round_no, live, recorded)
        if observation.wake is not None:
            await self._end_round(record, round_no, status, observation.wake)
            return observation.wake
        limit = live.granted_seconds
        if limit is not None and core.now() - live.handle.started_at > limit:
            return "budget"
        return None

    async def _end_round(
        self, record: CampaignRecord, round_no: int, status: JobStatus, reason: WakeReason
    ) -> None:
        if status.state == "running":
            return  # stalled/diverged/budget: the decision terminates it
        core = self._core
        now = core.now()
        await core.store.set_round(
            record.id,
            round_no,
            state="ended",
            ended_at=now,
            exit_code=status.exit_code,
            wake_reason=reason,
        )
        live = core.live.get(record.id)
        started = live.handle.started_at if live is not None else now
        await core.store.update(
            record.id,
            compute_seconds=record.compute_seconds
            + max(0.0, now - started) * (record.spec.cpus or 1),
        )

    async def _edit_status(
        self, record: CampaignRecord, round_no: int, live: LiveRound, recorded: list[Measurement]
    ) -> None:
        """The round's newest values in the status message, at most every few seconds."""
        now = self._core.now()
        if now - live.last_edit < self._core.settings.status_edit_seconds:
            return
        live.last_edit = now
        if recorded:
            await self._rooms.status.show(
                record, latest=latest_values(await self._round_values(record, round_no))
            )

    async def final_status(self, record: CampaignRecord, round_no: int, ended: str) -> None:
        """The round-end edit of the status message (never throttled): its last values."""
        latest = await self._round_values(record, round_no)
        await self._rooms.status.show(
            record, round=round_no, icon="🏁", state=ended, latest=latest_values(latest)
        )

    async def _round_values(self, record: CampaignRecord, round_no: int) -> list[Measurement]:
        return [m for m in await self._core.store.measurements(record.id) if m.round == round_no]
