"""The campaign engine: rounds on machines, the model-free monitor, wake-ups and decisions.

One round at a time: submit it, register a wake-up under the campaign id, and wait without
model calls while a monitor task tails the round's output. The monitor records measurements
and wakes the campaign early when the round finishes, dies, stalls or diverges. A wake-up
(scheduled or early) is claimed once in the ledger, then the decider picks an action, which
goes through the same rule-enforcing operations the tools use (`wait`, `resubmit`,
`terminate`, `report`). State is committed before it is announced.

`CampaignEngine` is the one object callers hold; the work is done in the rooms of this
package (admission, slots, rounds, monitoring, wakes, decisions, operations, closing,
recovery, describe), which share an `EngineCore`.
"""

from __future__ import annotations

import asyncio
from typing import Literal

from core.ids import ConversationRef
from oncall.access import Requester
from oncall.engine.core import EngineCore
from oncall.engine.describe import Describer
from oncall.engine.parts import EngineConfig, EngineDeps
from oncall.engine.rooms import Rooms
from oncall.model import CampaignSpec
from oncall.store import CampaignRecord, CampaignStore


class CampaignEngine:
    """Owns every campaign of this process: start, monitor, wake, decide, close."""

    def __init__(self, deps: EngineDeps, config: EngineConfig) -> None:
        self._core = EngineCore(deps, config)
        self._rooms = Rooms(self._core)
        self._describer = Describer(deps.store)

    @property
    def store(self) -> CampaignStore:
        """The campaign records."""
        return self._core.store

    @property
    def changed(self) -> asyncio.Event:
        """Set whenever a campaign reaches a final state (waiters re-check their condition);
        take it before reading the records, then wait on it."""
        return self._core.changed

    # --------------------------------------------------------------------------- start

    async def start(
        self,
        owner: str,
        conv: ConversationRef,
        spec: CampaignSpec,
        *,
        requester: Requester | None = None,
    ) -> CampaignRecord:
        """Record a campaign; ask for its command's approval, or (already approved: the
        operator's own shell) submit its first round or queue it for a machine slot.

        Without `requester` the caller is the operator (`campaigns run`, tests of the engine),
        who may use every machine; chat passes the person asking."""
        return await self._rooms.admission.start(owner, conv, spec, requester=requester)

    async def approved(
        self,
        campaign_id: str,
        *,
        kind: Literal["start", "resubmit"],
        command: str,
        by: str,
        cite: int | None = None,
        reason: str = "",
    ) -> str:
        """A person approved the command: start the campaign or run the changed round.

        The command that runs is the one shown in the prompt; if the campaign changed since
        (another command, a final state), nothing runs."""
        return await self._rooms.admission.approved(
            campaign_id, kind=kind, command=command, by=by, cite=cite, reason=reason
        )

    async def not_approved(
        self, campaign_id: str, *, kind: Literal["start", "resubmit"], outcome: str
    ) -> None:
        """Denied, expired or cancelled: nothing runs; say so in the thread."""
        await self._rooms.admission.not_approved(campaign_id, kind=kind, outcome=outcome)

    # --------------------------------------------------------------------------- wakes

    async def on_wake_job(self, campaign_id: str, wake_id: str) -> None:
        """A scheduled wake-up fired (the scheduler's job handler)."""
        await self._rooms.wakes.on_job(campaign_id, wake_id)

    # ---------------------------------------------------------- operations (the tools)

    async def wait(
        self, campaign_id: str, until_seconds: float, cite: int | None, reason: str = ""
    ) -> str:
        """Tool: keep the round running and wake again in `until_seconds` (clamped)."""
        record = await self._core.active(campaign_id)
        return await self._rooms.operations.wait(
            record, until_seconds, cite, reason or "waiting for more output", "agent"
        )

    async def resubmit(
        self, campaign_id: str, cite: int | None, reason: str = "", command: str | None = None
    ) -> str:
        """Tool: end the current round and start the next (a changed command allowed)."""
        record = await self._core.active(campaign_id)
        return await self._rooms.operations.resubmit(
            record, cite, reason or "resubmitting", command, "agent"
        )

    async def terminate(self, campaign_id: str, reason: str, cite: int | None) -> str:
        """Tool: stop the running round (the campaign then needs a report to close)."""
        record = await self._core.active(campaign_id)
        return await self._rooms.operations.terminate(record, cite, reason, "agent")

    async def report(self, campaign_id: str, text: str) -> str:
        """Tool: close the campaign with `text` if the report gate accepts it."""
        record = await self._core.active(campaign_id)
        return await self._rooms.operations.report(record, text, "agent")

    # ------------------------------------------------------------------ stop and close

    async def stop(self, campaign_id: str, *, by: str, by_name: str | None = None) -> bool:
        """Cancel a campaign: terminate its job, cancel its wake-ups; False if it had ended.
        The notice names `by_name` (the stopper's display name) when given, else `by`."""
        return await self._rooms.closing.stop(campaign_id, by=by, by_name=by_name)

    async def resume(self, campaign_id: str) -> str:
        """Resume a campaign paused because its owner no longer passed the access rules (the
        caller checked who may): they must pass again."""
        return await self._rooms.holding.resume(campaign_id)

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
        return await self._rooms.closing.stop_conversation(
            conversation_id, by=by, privileged=privileged, by_name=by_name
        )

    def may_act(self, record: CampaignRecord, actor: str, *, privileged: bool) -> bool:
        """Whether `actor` may act on the campaign: its owner, an approver or admin
        (`privileged`), or one of its machine's approvers."""
        return self._rooms.closing.may_act(record, actor, privileged=privileged)

    async def close(self) -> None:
        """Stop monitoring (jobs keep running detached; the next start re-attaches)."""
        await self._rooms.recovery.shutdown()

    # ----------------------------------------------------------------------- recovery

    async def recover(self) -> None:
        """At startup: hold slots again, re-attach monitors, fire overdue wake-ups once."""
        await self._rooms.recovery.recover()

    # ------------------------------------------------------------------------- status

    async def status(self, conv: ConversationRef) -> str:
        """One line per campaign of the conversation, for `status`."""
        return await self._describer.status(conv)

    async def describe(self, campaign_id: str) -> str:
        """A campaign's full state as text: rounds, wake-ups, decisions, measurements."""
        return await self._describer.describe(campaign_id)
