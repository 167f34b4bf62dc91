"""Wake-ups through the scheduling port: one pending wake-up per campaign, claimed once in
the ledger (scheduled or early), then handed to the decisions under the campaign's lock."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from core.markdown import code_block
from oncall.engine.core import EngineCore
from oncall.engine.holding import PAUSED
from oncall.engine.parts import CRASHES, REASON_TEXT
from oncall.model import FINAL_STATES, WakeReason
from oncall.ports import CAMPAIGN_WAKE
from oncall.report_gate import format_duration
from oncall.store import CampaignRecord

if TYPE_CHECKING:
    from oncall.engine.rooms import Rooms


class Wakes:
    """Schedules, cancels and fires a campaign's wake-ups."""

    def __init__(self, core: EngineCore, rooms: Rooms) -> None:
        self._core = core
        self._rooms = rooms

    async def schedule(self, record: CampaignRecord, round_no: int, after_seconds: float) -> str:
        """The campaign's next wake-up, in `after_seconds` (never after its deadline)."""
        core = self._core
        due = min(core.now() + after_seconds, core.deadline(record))
        # One pending wake-up per campaign: the one it replaces is cancelled in the same
        # commit, then unscheduled (a stale job that still fires finds it cancelled).
        wake_id, replaced = await core.store.replace_wake(record.id, round_no, due)
        for old in replaced:
            with contextlib.suppress(Exception):
                await core.deps.scheduler.cancel(old)
        await self.put_on_scheduler(record.id, wake_id, due)
        return wake_id

    async def put_on_scheduler(self, campaign_id: str, wake_id: str, due: float) -> None:
        """Ask the scheduler to fire the ledger's wake-up `wake_id` at `due`."""
        await self._core.deps.scheduler.schedule_at(
            wake_id,
            datetime.fromtimestamp(due, UTC),
            CAMPAIGN_WAKE,
            {"campaign_id": campaign_id, "wake_id": wake_id},
        )

    async def cancel_pending(self, record: CampaignRecord) -> None:
        """Cancel the campaign's pending wake-ups in the ledger, then on the scheduler."""
        for pending in await self._core.store.cancel_pending_wakes(record.id):
            with contextlib.suppress(Exception):
                await self._core.deps.scheduler.cancel(pending)

    async def on_job(self, campaign_id: str, wake_id: str) -> None:
        """A scheduled wake-up fired (the scheduler's job handler)."""
        core = self._core
        record = await core.store.get(campaign_id)
        if record is None:
            return
        claimed = await core.store.claim_wake(wake_id, fired_at=core.now())
        if claimed is None:
            return  # already fired, or cancelled by an early wake: the ledger says once
        if claimed.lateness and claimed.lateness > 1.0:
            await self._rooms.status.show(
                record,
                event=f"⏰ A wake-up fired {format_duration(claimed.lateness)} late (the bot "
                "was down or busy).",
            )
        await self._wake(record, claimed.round, "scheduled")

    async def early(self, record: CampaignRecord, round_no: int, reason: WakeReason) -> None:
        """The monitor saw the round end, stall or diverge: wake the campaign now."""
        core = self._core
        current = await core.store.get(record.id)
        if current is None or current.state in FINAL_STATES or current.state == PAUSED:
            if current is not None and current.state != PAUSED:
                await self._rooms.slots.closed_elsewhere(current)
            return  # stopped meanwhile: nothing to wake
        text = f"🔔 Woke early: round {round_no} {REASON_TEXT[reason]}."
        if reason in CRASHES:  # read first: the notice follows its claim at once
            tail = await core.output_tail(record, round_no)
            text += f"\nLast lines of its output:\n{code_block(tail)}" if tail else ""
        now = core.now()
        await self.cancel_pending(record)
        wake_id = f"wake:{record.id}:{round_no}:early:{reason}"
        await core.store.set_round(record.id, round_no, wake_reason=reason)
        await core.store.schedule_wake(wake_id, record.id, round_no, reason, now)
        if await core.store.claim_wake(wake_id, fired_at=now) is None:
            return
        await self._rooms.status.show(record, event=text)
        await self._wake(record, round_no, reason)

    async def _wake(self, record: CampaignRecord, round_no: int, reason: WakeReason) -> None:
        core = self._core
        if await self._rooms.holding.owner_refused(record, "wake-up"):
            return  # stopped, and said: a removed owner's campaign decides nothing more
        async with core.locks.hold(record.id):
            current = await core.store.get(record.id)
            if (
                current is None
                or current.state in FINAL_STATES
                or current.state == PAUSED
                or current.round != round_no
            ):
                return
            await core.store.update(record.id, state="deciding")
            await self._rooms.decisions.decide(current, reason)
