"""Holding a campaign whose owner no longer passes the bot's access rules: paused (its round
ended, its slot freed, nothing deleted), and resumed once they pass again.

The owner is judged at each wake-up and before an approved resubmit runs (the `OwnerAccess`
port: the host's one admission rule). A paused campaign's budget keeps running on the wall
clock; resumed with none left, it reports instead of starting a round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from oncall.engine.core import EngineCore
from oncall.model import FINAL_STATES
from oncall.store import CampaignRecord

if TYPE_CHECKING:
    from oncall.engine.rooms import Rooms

PAUSED = "paused"


class Holding:
    """Pauses and resumes campaigns on their owner's access."""

    def __init__(self, core: EngineCore, rooms: Rooms) -> None:
        self._core = core
        self._rooms = rooms

    async def owner_refused(
        self, record: CampaignRecord, origin: Literal["wake-up", "resubmit"]
    ) -> bool:
        """The owner judged now, before a wake-up decides or a resubmit starts a round:
        refused, the campaign is paused and its thread told why and who may resume it."""
        why = await self._refusal(record, origin)
        if why is None:
            return False
        core = self._core
        async with core.locks.hold(record.id):
            current = await core.store.get(record.id)
            if current is None or current.state in FINAL_STATES or current.state == PAUSED:
                return True
            await core.store.record_decision(
                current.id, current.round, "pause", None, why, {"by": "access"}
            )
            # Committed before the job is signalled: its end is no crash to wake on.
            await core.store.update(current.id, state=PAUSED)
            await self._rooms.rounds.stop_job(current)
            await self._rooms.wakes.cancel_pending(current)
            await self._rooms.slots.free(current)
        await core.notify(
            record,
            f"⏸️ Campaign `{record.id}` is paused: its owner no longer passes this bot's access "
            f"rules here ({why}). Its round was stopped; its rounds and measurements are "
            f"kept. An admin, or its owner once admitted again, can resume it with "
            f"`campaign: resume {record.id}`.",
            key=f"campaign:{record.id}:paused:{record.round}",
            essential=True,
        )
        return True

    async def resume(self, campaign_id: str) -> str:
        """Resume a paused campaign (the caller checked who may): its owner must pass again;
        its next round starts (or waits for a slot), or, with its budget spent, it reports."""
        core = self._core
        record = await core.store.get(campaign_id)
        if record is None or record.state != PAUSED:
            state = "unknown" if record is None else record.state
            return f"Campaign `{campaign_id}` is {state}; only a paused campaign can be resumed."
        why = await self._refusal(record, "resume")
        if why is not None:
            return (
                f"Campaign `{campaign_id}` stays paused: its owner does not pass this bot's "
                f"access rules here ({why})."
            )
        async with core.locks.hold(record.id):
            current = await core.store.get(record.id)
            if current is None or current.state != PAUSED:
                return f"Campaign `{campaign_id}` was resumed already."
            await core.store.record_decision(current.id, current.round, "resume", None, "resumed")
            spent = core.remaining_wall(current) <= 0 or current.round >= current.spec.budget.rounds
            if spent:
                # Nothing left to run: the decision (the policy or the model) reports.
                await core.store.update(current.id, state="deciding")
                await self._rooms.decisions.decide(await core.fresh(current), "budget")
                return f"Campaign `{campaign_id}` had no budget left; it reports instead."
            await core.store.update(current.id, state="planning")
            await self._rooms.slots.begin_or_queue(await core.fresh(current))
        return f"Campaign `{campaign_id}` is resumed: its next round starts (or waits for a slot)."

    async def _refusal(
        self, record: CampaignRecord, origin: Literal["wake-up", "resubmit", "resume"]
    ) -> str | None:
        owners = self._core.deps.owners
        machine = self._core.deps.machines.get(record.spec.machine)
        if owners is None or machine is None:
            return None
        return await owners.refusal(
            record.id, record.owner, record.conversation, machine.spec, origin
        )
