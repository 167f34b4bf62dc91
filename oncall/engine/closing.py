"""Ending a campaign: a person's stop (who may), and the final state committed with its
wake-ups cancelled and its slot freed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncall.engine.core import EngineCore
from oncall.model import FINAL_STATES
from oncall.store import CampaignRecord

if TYPE_CHECKING:
    from oncall.engine.rooms import Rooms


class Closing:
    """Stops, fails and closes campaigns."""

    def __init__(self, core: EngineCore, rooms: Rooms) -> None:
        self._core = core
        self._rooms = rooms

    async def stop(self, campaign_id: str, *, by: str, by_name: str | None = None) -> bool:
        """Cancel a campaign: terminate its job, cancel its wake-ups; False if it had ended.
        The notice names `by_name` (the stopper's display name) when given, else `by`."""
        core = self._core
        async with core.locks.hold(campaign_id):
            record = await core.store.get(campaign_id)
            if record is None or record.state in FINAL_STATES:
                return False
            await core.store.record_decision(
                record.id, record.round, "cancel", None, f"stopped by {by}", {"by": by}
            )
            # Committed before the job is signalled: a monitor (here or in another process)
            # must not see the round die and take it for a crash to resubmit.
            await core.store.update(record.id, state="cancelled", closed_at=core.now())
            await self._rooms.rounds.stop_job(record)
            await self.close(record, "cancelled")
        await core.notify(
            record,
            f"🛑 Campaign `{record.id}` cancelled by {by_name or by}.",
            key=f"campaign:{record.id}:cancelled",
            essential=True,
        )
        return True

    async def stop_conversation(
        self,
        conversation_id: str,
        *,
        by: str = "stop",
        privileged: bool = True,
        by_name: str | None = None,
    ) -> list[CampaignRecord]:
        """`stop` in a thread cancels the campaigns there that `by` may act on.

        Returns the active campaigns it left running (someone else's to stop)."""
        left: list[CampaignRecord] = []
        for record in await self._core.store.of_conversation(conversation_id):
            if record.state in FINAL_STATES:
                continue
            if self.may_act(record, by, privileged=privileged):
                await self.stop(record.id, by=by, by_name=by_name)
            else:
                left.append(record)
        return left

    def may_act(self, record: CampaignRecord, actor: str, *, privileged: bool) -> bool:
        """Whether `actor` may act on the campaign: its owner, an approver or admin
        (`privileged`), or one of its machine's approvers."""
        if privileged or actor == record.owner:
            return True
        machine = self._core.deps.machines.get(record.spec.machine)
        return machine is not None and actor in machine.spec.approvers

    async def close(
        self,
        record: CampaignRecord,
        state: str,
        *,
        report: str | None = None,
        error: str | None = None,
    ) -> None:
        """Commit the final `state`, cancel the wake-ups, free the slot."""
        core = self._core
        await self._rooms.wakes.cancel_pending(record)
        await core.store.update(
            record.id, state=state, report=report, error=error, closed_at=core.now()
        )
        await self._rooms.slots.free(record)

    async def fail(self, record: CampaignRecord, why: str) -> None:
        """Close the campaign as failed and say why."""
        await self.close(record, "failed", error=why)
        await self._core.notify(
            record,
            f"❌ Campaign `{record.id}` failed: {why}",
            key=f"campaign:{record.id}:failed",
            essential=True,
        )
