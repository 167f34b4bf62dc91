"""The rule-enforcing operations a decision (the decider's or a tool's) goes through: wait,
resubmit, terminate and report. Each checks its rules before it changes anything, so a
refused operation leaves the campaign as it was."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.markdown import code_block
from oncall.citations import check_citation
from oncall.engine.core import EngineCore
from oncall.engine.parts import CRASHES, CampaignError, cites
from oncall.model import DecisionAction, WakeReason
from oncall.policy import clamp_to_budget
from oncall.report_gate import check_report, draft_report, format_duration
from oncall.round_table import rounds_table
from oncall.store import CampaignRecord

if TYPE_CHECKING:
    from oncall.engine.rooms import Rooms


class Operations:
    """wait / resubmit / terminate / report on a campaign record, by an agent or the policy."""

    def __init__(self, core: EngineCore, rooms: Rooms) -> None:
        self._core = core
        self._rooms = rooms

    async def wait(
        self, record: CampaignRecord, seconds: float, cite: int | None, reason: str, by: str
    ) -> str:
        """Keep the round running and wake again in `seconds` (clamped to the budget)."""
        core = self._core
        await self._cite(record, cite, "wait")
        remaining = core.remaining_wall(record)
        granted, note = clamp_to_budget(seconds, remaining)
        await core.store.record_decision(
            record.id,
            record.round,
            "wait",
            cite,
            reason,
            {"by": by, "seconds": granted, "note": note},
        )
        await core.store.update(record.id, state="waiting")
        await self._rooms.wakes.schedule(record, record.round, granted)
        said = reason.rstrip(".")
        if "wait" not in said.lower():  # the policy's reasons already say how long
            said = f"waiting {format_duration(granted)}: {said}"
        text = f"⏸️ {said[:1].upper()}{said[1:]}{cites(cite, ' (cites #{})')}."
        if note:
            text += f" {note}"
        await self._rooms.status.show(record, event=text)
        return f"Campaign `{record.id}`: {text}"

    async def resubmit(
        self,
        record: CampaignRecord,
        cite: int | None,
        reason: str,
        command: str | None,
        by: str,
        *,
        approved: bool = False,
    ) -> str:
        """End the current round and submit the next; a changed command not yet `approved`
        is asked about first."""
        core = self._core
        if not approved:
            await self._cite(record, cite, "resubmit")
        if command is not None and command.strip() == record.spec.command.strip():
            command = None  # the approved command: no new approval needed
        if command is not None and not approved:
            return await self._ask_change(record, cite, reason, command)
        if record.round >= record.spec.budget.rounds:
            raise CampaignError(
                f"The round budget is used up ({record.round}/{record.spec.budget.rounds}); "
                "report instead."
            )
        compute = record.spec.budget.compute_minutes
        if compute is not None and record.compute_seconds >= compute * 60.0:
            raise CampaignError(
                f"The compute budget is used up ({record.compute_seconds / 60.0:.1f} of "
                f"{compute:g} cpu-minutes); report instead."
            )
        await self._rooms.rounds.stop_job(record)
        await core.store.record_decision(
            record.id, record.round, "resubmit", cite, reason, {"by": by, "command": command}
        )
        why = reason.strip().rstrip(".")
        said = f"🔁 Resubmitting: {why}{cites(cite, ' (cites #{})')}."
        if approved:
            # A person's approval of the change is answered with a post of its own.
            await core.notify(
                record,
                f"🔁 Campaign `{record.id}`: resubmitting ({reason}{cites(cite, '; cites #{}')}).",
                key=f"campaign:{record.id}:decision:resubmit:{record.round}",
                essential=True,
            )
        await self._rooms.status.show(record, event=said)
        await self._rooms.rounds.submit(await core.fresh(record), record.round + 1, command)
        return f"Round {record.round + 1} submitted."

    async def _ask_change(
        self, record: CampaignRecord, cite: int | None, reason: str, command: str
    ) -> str:
        """A changed command runs only once a person approves it; the round goes on until."""
        approvals = self._core.deps.approvals
        if approvals is None:
            raise CampaignError(
                "A changed command needs a person's approval, and nobody can be asked here: "
                "resubmit without changes, or start a new campaign with the new command."
            )
        await self._core.store.record_decision(
            record.id,
            record.round,
            "resubmit",
            cite,
            f"asked approval for a changed command: {reason}",
            {"command": command, "state": "awaiting approval"},
        )
        await approvals.request(
            self._rooms.admission.approval(record, "resubmit", command, cite=cite, reason=reason)
        )
        return (
            "The changed command needs approval first: I asked in the thread. Round "
            f"{record.round} keeps running until someone allowed to approve it does."
        )

    async def terminate(
        self, record: CampaignRecord, cite: int | None, reason: str, by: str
    ) -> str:
        """Stop the running round (the campaign then needs a report to close)."""
        core = self._core
        await self._cite(record, cite, "terminate")
        await self._rooms.rounds.stop_job(record)
        await core.store.record_decision(
            record.id, record.round, "terminate", cite, reason, {"by": by}
        )
        await core.store.update(record.id, state="reporting")
        text = f"⏹️ Round {record.round} terminated ({reason})."
        await self._rooms.status.show(record, event=text)
        return f"Campaign `{record.id}`: {text}"

    async def report(
        self, record: CampaignRecord, text: str, by: str, *, failed: bool = False
    ) -> str:
        """Close the campaign with `text` if the report gate accepts it."""
        core = self._core
        measurements = await core.store.measurements(record.id)
        gate = check_report(
            text,
            metric=record.spec.metric.name,
            baseline=record.baseline,
            measurements=measurements,
            tolerance=core.settings.report_tolerance,
        )
        if not gate.accepted:
            await core.store.record_decision(
                record.id,
                record.round,
                "report",
                None,
                "rejected by the report gate",
                {"by": by, "mismatches": gate.mismatches},
            )
            await core.store.update(record.id, state="reporting")
            return "Report rejected:\n" + "\n".join(f"- {m}" for m in gate.mismatches)
        await self._rooms.rounds.stop_job(record)
        await core.store.record_decision(
            record.id, record.round, "report", None, "accepted", {"by": by}
        )
        # The gate checked what the reporter wrote; the crashed rounds' own last lines are
        # quoted after it, as the job's words (no claim of the reporter's).
        text += await self._crash_tails(record)
        await self._rooms.closing.close(record, "failed" if failed else "closed", report=text)
        table = rounds_table(
            record.spec.metric.name,
            record.spec.direction,
            await core.summaries(await core.fresh(record)),
            measurements,
            tolerance=core.settings.report_tolerance,
        )
        await core.notify(
            record,
            f"📋 Campaign `{record.id}` report:\n\n{text}" + (f"\n\n{table}" if table else ""),
            key=f"campaign:{record.id}:report",
            essential=True,
        )
        return "Report accepted; the campaign is closed."

    async def _crash_tails(self, record: CampaignRecord) -> str:
        """The last lines of the (last two) rounds that died or vanished, as plain blocks."""
        core = self._core
        crashed = [r for r in await core.store.rounds(record.id) if r.wake_reason in CRASHES]
        parts = []
        for r in crashed[-2:]:
            tail = await core.output_tail(record, r.round)
            if tail:
                parts.append(f"\n\nLast lines of round {r.round}'s output:\n{code_block(tail)}")
        return "".join(parts)

    async def _cite(self, record: CampaignRecord, cite: int | None, action: DecisionAction) -> None:
        result = check_citation(
            cite,
            await self._core.store.measurements(record.id),
            record.round,
            action=action,
            campaign_id=record.id,
        )
        if not result.ok:
            raise CampaignError(result.message)

    async def draft(
        self, record: CampaignRecord, *, outcome: str = "", ended_by: WakeReason | None = None
    ) -> str:
        """The factual report from the record; `ended_by` says how the current round ended
        when the record does not (a round stopped by a decision)."""
        core = self._core
        fresh = await core.fresh(record)
        rounds = [
            r.model_copy(update={"wake_reason": ended_by})
            if r.round == fresh.round and r.wake_reason is None and ended_by is not None
            else r
            for r in await core.summaries(fresh)
        ]
        return draft_report(
            metric=fresh.spec.metric.name,
            direction=fresh.spec.direction,
            baseline=fresh.baseline,
            measurements=await core.store.measurements(fresh.id),
            rounds=rounds,
            wall_used_seconds=core.now() - fresh.created_at,
            compute_used_minutes=fresh.compute_seconds / 60.0,
            budget=fresh.spec.budget,
            outcome=outcome,
            tolerance=core.settings.report_tolerance,
        )
