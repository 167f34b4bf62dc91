"""Machine slot accounting: a campaign runs while it holds a slot of its machine, queues
while none is free (or its owner's share is held), and frees it when it ends."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from oncall.access import user_slots
from oncall.engine.core import EngineCore
from oncall.store import CampaignRecord

if TYPE_CHECKING:
    from oncall.engine.rooms import Rooms


class Slots:
    """Takes, queues for and frees machine slots; a freed slot starts the oldest waiter."""

    def __init__(self, core: EngineCore, rooms: Rooms) -> None:
        self._core = core
        self._rooms = rooms

    async def begin_or_queue(self, record: CampaignRecord) -> None:
        """Submit the campaign's next round if it gets a slot, else say it waits for one."""
        share = await self._over_share(record)
        if share is None and await self._core.deps.allocator.acquire(
            record.spec.machine, record.id
        ):
            await self._rooms.rounds.submit(record, record.round + 1)
            return
        why = share or "every slot is held by another campaign"
        await self._core.notify(
            record,
            f"⏳ Campaign `{record.id}` waits for a free slot on `{record.spec.machine}` "
            f"({why}); it starts when one frees.",
            key=f"campaign:{record.id}:queued",
            essential=True,
        )

    async def _over_share(self, record: CampaignRecord) -> str | None:
        """Why the owner may not take another slot on the machine now (their share is held)."""
        machine = self._core.deps.machines.get(record.spec.machine)
        if machine is None:
            return None
        holders = self._core.deps.allocator.holders(record.spec.machine) - {record.id}
        mine = 0
        for campaign_id in holders:
            held = await self._core.store.get(campaign_id)
            mine += held is not None and held.owner == record.owner
        share = user_slots(machine.spec)
        if mine < share:
            return None
        return (
            f"its owner's campaigns already hold {mine} of its {machine.spec.slots} slot(s), "
            f"the most one person may hold there (user_slots = {share})"
        )

    async def start_queued(self, machine: str) -> None:
        """A slot freed on `machine`: start the oldest campaign waiting for it."""
        allocator = self._core.deps.allocator
        for record in reversed(await self._core.store.recent(active_only=True, limit=1000)):
            # One already holding a slot is being started by another caller: `acquire` would
            # say yes again (it keeps a held slot) and its round would be submitted twice.
            if (
                record.spec.machine == machine
                and record.state == "planning"
                and record.id not in allocator.holders(machine)
                and await self._over_share(record) is None
            ):
                if await allocator.acquire(machine, record.id):
                    await self._rooms.rounds.submit(record, record.round + 1)
                return

    async def closed_elsewhere(self, record: CampaignRecord) -> None:
        """A campaign found final that this engine did not close (`campaigns stop` from
        another process): tell its thread, show its round's end in the round's status
        message, and free its slot for the campaigns queued behind it."""
        core = self._core
        if record.id not in core.deps.allocator.holders(record.spec.machine):
            return  # closed here (or already handled): nothing more to say
        live = core.live.get(record.id)
        if live is not None and live.task is asyncio.current_task():
            core.live.pop(record.id, None)
        if record.state == "cancelled":
            decisions = await core.store.decisions(record.id)
            why = next((d.reason for d in reversed(decisions) if d.action == "cancel"), "")
            await core.notify(
                record,
                f"🛑 Campaign `{record.id}` cancelled ({why or 'stopped elsewhere'}).",
                key=f"campaign:{record.id}:cancelled",
                essential=True,
            )
        if record.round and (live is None or not live.final_shown):
            await self._rooms.monitor.final_status(record, record.round, record.state)
        await self.free(record)

    async def free(self, record: CampaignRecord) -> None:
        """Release the campaign's slot and start the oldest campaign waiting for it."""
        await self._core.deps.allocator.release(record.spec.machine, record.id)
        self._core.signal_changed()
        await self.start_queued(record.spec.machine)
