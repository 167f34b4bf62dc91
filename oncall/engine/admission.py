"""Starting a campaign: the machine and limit checks, its working directory, and the
approval of its command (asked for, granted or refused)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Literal

from core.ids import ConversationRef
from oncall.access import Requester, machine_refusal
from oncall.engine.core import EngineCore
from oncall.engine.parts import CampaignError
from oncall.model import FINAL_STATES, CampaignSpec, MachineSpec
from oncall.ports import CommandApproval
from oncall.report_gate import format_duration
from oncall.store import CampaignRecord
from oncall.workdirs import workdir_problem

if TYPE_CHECKING:
    from oncall.engine.rooms import Rooms


class Admission:
    """Admits campaigns: checks, records, asks approval, then hands them to the slots."""

    def __init__(self, core: EngineCore, rooms: Rooms) -> None:
        self._core = core
        self._rooms = rooms

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
        core = self._core
        who = requester or Requester(owner, admin=True)
        machine = core.deps.machines.get(spec.machine)
        if machine is None:
            known = ", ".join(sorted(core.deps.machines)) or "none"
            raise CampaignError(
                f"Unknown machine {spec.machine!r}. Registered machines: {known} "
                "(add one in RAVEN_HOME/machines.toml)."
            )
        if spec.partition is not None and machine.spec.kind != "slurm":
            raise CampaignError(
                f"The partition `{spec.partition}` is for Slurm machines, and `{spec.machine}` "
                f"is a {machine.spec.kind} machine: drop the partition or pick a slurm machine."
            )
        await self._check_limits(who, machine.spec, spec)
        spec = spec.model_copy(
            update={"workdir": await self._workdir(machine.spec, conv, spec, requester)}
        )
        campaign_id = core.config.new_id()
        approvals = core.deps.approvals
        if approvals is None:
            record = await core.store.create(campaign_id, owner, conv, spec)
            await self.announce(record)
            await self._rooms.slots.begin_or_queue(record)
            return record
        record = await core.store.create(campaign_id, owner, conv, spec, state="approval")
        await approvals.request(self.approval(record, "start", spec.command))
        return record

    async def _workdir(
        self,
        machine: MachineSpec,
        conv: ConversationRef,
        spec: CampaignSpec,
        requester: Requester | None,
    ) -> str | None:
        """Where the campaign's command runs: the operator's explicit choice (`campaigns
        run`), else the machine's `workdir`, else (not over ssh: another host) the
        conversation's workspace. Never the bot's own files (`CampaignError` saying why)."""
        if spec.workdir is not None and requester is not None:
            raise CampaignError(
                "The working directory of a campaign started from chat is the machine's "
                "`workdir` (machines.toml) or this conversation's workspace; it cannot be chosen "
                "here."
            )
        explicit = spec.workdir is not None
        chosen = spec.workdir or machine.workdir
        workspace = self._core.config.workspace
        if chosen is None and machine.kind != "ssh" and workspace is not None:
            chosen = str(await asyncio.to_thread(workspace, conv))
        if chosen is None or machine.kind == "ssh":
            return chosen  # an ssh workdir is a path on that host (checked there)
        problem = workdir_problem(chosen, self._core.bot_paths, explicit=explicit)
        if problem is not None:
            raise CampaignError(f"Refused: the campaign's {problem}.")
        return chosen

    async def _check_limits(self, who: Requester, machine: MachineSpec, spec: CampaignSpec) -> None:
        """Refuse, naming the limit, what this person may not start."""
        refusal = machine_refusal(machine, who)
        if refusal is not None:
            raise CampaignError(refusal)
        limits = self._core.settings.limits
        if spec.budget.wall_seconds > limits.max_budget_seconds:
            raise CampaignError(
                f"A budget of {format_duration(spec.budget.wall_seconds)} is over the limit of "
                f"{format_duration(limits.max_budget_seconds)} (RAVEN_CAMPAIGN_MAX_BUDGET_HOURS): "
                "ask for less, or continue with a new campaign later."
            )
        if who.admin:
            return
        active = [
            r
            for r in await self._core.store.recent(active_only=True, limit=10_000)
            if r.owner == who.id
        ]
        if len(active) >= limits.max_active_per_user:
            raise CampaignError(
                f"You already have {len(active)} active campaign(s), the most one person may "
                f"run at once (RAVEN_CAMPAIGN_MAX_PER_USER = {limits.max_active_per_user}): "
                "stop or finish one first."
            )

    def approval(
        self,
        record: CampaignRecord,
        kind: Literal["start", "resubmit"],
        command: str,
        *,
        cite: int | None = None,
        reason: str = "",
    ) -> CommandApproval:
        """The approval prompt's content for running `command` in the campaign."""
        spec = record.spec
        machine = self._core.deps.machines[spec.machine].spec
        if spec.workdir is None:
            workdir = "an empty directory per round (`work/` of the round's directory)"
        elif machine.workdir is None and machine.kind != "ssh":
            # The conversation's workspace (chat cannot choose a workdir): named, not its
            # path on the bot's host, which nobody in the thread can open.
            workdir = "this conversation's workspace, on the bot's host"
        else:
            workdir = f"`{spec.workdir}`" + (
                f" on `{machine.host}`" if machine.kind == "ssh" else ""
            )
        rounds = f"{spec.budget.rounds} round(s)"
        compute = spec.budget.compute_minutes
        budget = f"{format_duration(spec.budget.wall_seconds)} wall clock, {rounds}" + (
            f", {compute:g} cpu-minutes" if compute is not None else ""
        )
        return CommandApproval(
            campaign_id=record.id,
            kind=kind,
            command=command,
            requester=record.owner,
            conversation=record.conversation,
            machine=machine,
            goal=spec.goal,
            workdir=workdir,
            directory=spec.workdir if machine.kind != "ssh" else None,
            budget=budget,
            cite=cite,
            reason=reason,
        )

    async def announce(self, record: CampaignRecord) -> None:
        """The campaign's start notice."""
        spec = record.spec
        await self._core.notify(
            record,
            f"🛰️ Campaign `{record.id}` started: {spec.goal}\nMachine `{spec.machine}`, "
            f"metric `{spec.metric.name}` ({spec.direction}), budget "
            f"{format_duration(spec.budget.wall_seconds)} and {spec.budget.rounds} round(s). "
            "I watch it without model calls and report here.",
            key=f"campaign:{record.id}:started",
            essential=True,
        )

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
        core = self._core
        async with core.locks.hold(campaign_id):
            record = await core.store.get(campaign_id)
            if record is None or record.state in FINAL_STATES:
                return f"Campaign `{campaign_id}` has ended; nothing ran."
            if kind == "start":
                if record.state != "approval" or record.spec.command != command:
                    return f"Campaign `{campaign_id}` was already decided; nothing more ran."
                # The budget's clock starts now, not when the approval was asked for.
                await core.store.update(record.id, state="planning", created_at=core.now())
                record = await core.fresh(record)
                await core.store.record_decision(
                    record.id, 0, "approve", None, f"approved by {by}", {"by": by}
                )
                await self.announce(record)
                await self._rooms.slots.begin_or_queue(record)
                return f"Campaign `{record.id}` started."
        # The owner, on whose behalf the round runs, must still pass (not only the approver).
        if await self._rooms.holding.owner_refused(record, "resubmit"):
            return f"Campaign `{campaign_id}` is paused (its owner's access); nothing ran."
        return await self._rooms.operations.resubmit(
            record, cite, reason or "approved change", command, by, approved=True
        )

    async def not_approved(
        self, campaign_id: str, *, kind: Literal["start", "resubmit"], outcome: str
    ) -> None:
        """Denied, expired or cancelled: nothing runs; say so in the thread."""
        core = self._core
        async with core.locks.hold(campaign_id):
            record = await core.store.get(campaign_id)
            if record is None:
                return
            if kind == "start":
                if record.state != "approval":
                    return
                await core.store.record_decision(record.id, 0, "cancel", None, outcome, {})
                await self._rooms.closing.close(record, "cancelled")
                text = f"🚫 Campaign `{record.id}` not started ({outcome}): nothing ran."
            else:
                text = (
                    f"🚫 Campaign `{record.id}`: the changed command was not approved "
                    f"({outcome}); nothing new ran."
                )
        await core.notify(
            record,
            text,
            key=f"campaign:{record.id}:not-approved:{kind}:{record.round}",
            essential=True,
        )
