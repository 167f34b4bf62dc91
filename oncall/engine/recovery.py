"""After a restart (or kill -9): hold the slots again, re-attach a monitor to each running
round, ask again for pending approvals, and fire overdue wake-ups once. At shutdown the
monitors stop and the jobs keep running, detached, for the next start to re-attach."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from oncall.engine.core import EngineCore
from oncall.engine.holding import PAUSED
from oncall.monitor import RoundWatch
from oncall.store import CampaignRecord

if TYPE_CHECKING:
    from oncall.engine.rooms import Rooms


class Recovery:
    """Picks up the campaigns a previous process left, and lets go of them at shutdown."""

    def __init__(self, core: EngineCore, rooms: Rooms) -> None:
        self._core = core
        self._rooms = rooms

    async def recover(self) -> None:
        """At startup: hold slots again, re-attach monitors, fire overdue wake-ups once."""
        core = self._core
        active = await core.store.recent(active_only=True, limit=10_000)
        for record in active:
            if record.state not in ("planning", "approval", PAUSED):
                core.deps.allocator.restore([(record.spec.machine, record.id)])
        for record in active:
            # The same status message, edited to what was last committed (an edit the
            # crash cut off is made now; one made already is made again, harmlessly).
            await self._rooms.status.refresh(record)
            await self._reattach(record)
        now = core.now()
        for wake in await core.store.pending_wakes():
            if wake.due_at <= now:
                await self._rooms.wakes.on_job(wake.campaign_id, wake.id)
            else:
                await self._rooms.wakes.put_on_scheduler(wake.campaign_id, wake.id, wake.due_at)

    async def _reattach(self, record: CampaignRecord) -> None:
        core = self._core
        if record.state == "approval":
            # Its prompt's decision starts it (or not); asked again in case the bot died
            # before asking (the port does not ask twice).
            if core.deps.approvals is not None:
                approval = self._rooms.admission.approval(record, "start", record.spec.command)
                await core.deps.approvals.request(approval)
            return
        if record.state == "planning":
            await self._rooms.slots.begin_or_queue(record)
            return
        if record.state == PAUSED:
            return  # no round runs; it waits for a resume
        current = await core.store.round(record.id, record.round)
        if current is None or current.state != "running" or current.handle is None:
            return
        watch = (
            RoundWatch.restore(record.spec, current.watch)
            if current.watch
            else RoundWatch(record.spec, record.baseline, current.handle.started_at)
        )
        self._rooms.monitor.watch(
            record, record.round, current.handle, watch, current.granted_seconds
        )

    async def shutdown(self) -> None:
        """Stop monitoring (jobs keep running detached; the next start re-attaches)."""
        core = self._core
        core.closed = True
        tasks = [live.task for live in core.live.values() if live.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        core.live.clear()
