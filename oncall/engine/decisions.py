"""Calling the decider for a woken campaign and applying its decision through the same
rule-enforcing operations the tools use; a refused decision falls back to the policy."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from core.call_scope import call_scope
from oncall.deciders import RuleBasedDecider
from oncall.engine.core import EngineCore
from oncall.engine.parts import CRASHES, CampaignError
from oncall.model import WakeReason
from oncall.policy import Decision, DecisionContext
from oncall.store import CampaignRecord

if TYPE_CHECKING:
    from oncall.engine.rooms import Rooms

log = logging.getLogger(__name__)


class Decisions:
    """Decides what a woken campaign does next, and does it."""

    def __init__(self, core: EngineCore, rooms: Rooms) -> None:
        self._core = core
        self._rooms = rooms

    async def decide(self, record: CampaignRecord, reason: WakeReason) -> None:
        """Decide and apply; a refused model decision goes back to the model once with the
        refusal, then the policy decides, so a woken campaign never stalls."""
        core = self._core
        decider = core.deps.decider
        context = await self._context(record, reason)
        by = "agent" if decider.model_backed else "policy"
        try:
            decision = await self._ask(record, context)
            await self._apply(record, decision, by="policy" if decision.by_rules else by)
            return
        except CampaignError as exc:
            refusal = str(exc)
        if decider.model_backed:
            # Most refusals (a stale citation, a spent round budget) say how to fix them.
            log.info("campaign %s: decision refused (%s); asking once more", record.id, refusal)
            retry = await self._ask(record, replace(context, refused=refusal))
            try:
                await self._apply(await core.fresh(record), retry, by=by)
                return
            except CampaignError as exc:
                refusal = str(exc)
        # Refusals come before any change (the rules are checked first): the policy is safe.
        log.warning("campaign %s: decision refused (%s); using the policy", record.id, refusal)
        fallback = await RuleBasedDecider().decide(context)
        await self._apply(await core.fresh(record), fallback, by="policy")

    async def _ask(self, record: CampaignRecord, context: DecisionContext) -> Decision:
        decider = self._core.deps.decider
        # Its model call is counted against the campaign's owner, in its thread.
        with call_scope(person=record.owner, conversation=record.conversation, run=record.id):
            decision = await decider.decide(context)
        if decider.model_backed and not decision.by_rules:
            await self._core.store.add_model_calls(record.id, 1)
        return decision

    async def _context(self, record: CampaignRecord, reason: WakeReason) -> DecisionContext:
        core = self._core
        tail = await core.output_tail(record, record.round) if reason in CRASHES else ""
        return DecisionContext(
            output_tail=tail,
            spec=record.spec,
            baseline=record.spec.baseline,  # the given one (see policy: first-round rule)
            measurements=await core.store.measurements(record.id),
            rounds=await core.summaries(record),
            wall_used_seconds=core.now() - record.created_at,
            compute_used_minutes=record.compute_seconds / 60.0,
            rounds_used=record.round,
            reason=reason,
            owner=record.owner,
            conversation=record.conversation,
        )

    async def _apply(self, record: CampaignRecord, decision: Decision, *, by: str) -> str:
        operations = self._rooms.operations
        if decision.action == "wait":
            return await operations.wait(
                record,
                decision.until_seconds or record.spec.wake_every_seconds,
                decision.cite,
                decision.reason,
                by,
            )
        if decision.action == "resubmit":
            command = decision.changes.get("command")
            return await operations.resubmit(record, decision.cite, decision.reason, command, by)
        if decision.action == "terminate":
            text = await operations.terminate(record, decision.cite, decision.reason, by)
            await self._close_with(await self._core.fresh(record), decision, by)
            return text
        return await self._close_with(record, decision, by)

    async def _close_with(self, record: CampaignRecord, decision: Decision, by: str) -> str:
        """File the decision's report; if the gate rejects it, the factual draft instead.

        A drafted report (the policy's) is drafted again now, from the record as the decision
        left it: a terminated round's end and compute are in it."""
        operations = self._rooms.operations
        if decision.outcome is not None:
            text = await operations.draft(
                record, outcome=decision.outcome, ended_by=decision.ended_by
            )
            outcome = await operations.report(record, text, by, failed=decision.failed)
            if not outcome.startswith("Report rejected"):
                return outcome
        elif decision.report:
            outcome = await operations.report(record, decision.report, by, failed=decision.failed)
            if not outcome.startswith("Report rejected"):
                return outcome
        draft = await operations.draft(record)
        return await operations.report(record, draft, "policy", failed=decision.failed)
