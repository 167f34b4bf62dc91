"""The campaign engine: rounds on machines, the model-free monitor, wake-ups and decisions.

One round at a time: submit it, register a wake-up under the campaign id, and wait without
model calls while a monitor task tails the round's output. The monitor records measurements
and wakes the campaign early when the round finishes, dies, stalls or diverges. A wake-up
(scheduled or early) is claimed once in the ledger, then the decider picks an action, which
goes through the same rule-enforcing operations the tools use (`wait`, `resubmit`,
`terminate`, `report`). State is committed before it is announced.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Protocol

from core.ids import ConversationRef
from core.keyed import KeyedLocks
from oncall.access import CampaignLimits, Requester, machine_refusal, user_slots
from oncall.citations import check_citation
from oncall.deciders import RuleBasedDecider
from oncall.machines.registry import Allocator
from oncall.model import (
    FINAL_STATES,
    CampaignSpec,
    DecisionAction,
    JobHandle,
    JobRequest,
    JobStatus,
    Machine,
    MachineSpec,
    MachineUnavailable,
    Measurement,
    WakeReason,
)
from oncall.monitor import RoundWatch
from oncall.output_tail import TAIL_BYTES, code_block, last_lines
from oncall.policy import Decision, DecisionContext, RoundSummary, clamp_to_budget
from oncall.ports import (
    CAMPAIGN_WAKE,
    CampaignNotifier,
    CommandApproval,
    CommandApprovals,
    PostedHook,
    WakeScheduler,
)
from oncall.report_gate import check_report, draft_report, format_duration
from oncall.store import CampaignRecord, CampaignStore
from oncall.workdirs import BotPaths, workdir_problem

log = logging.getLogger(__name__)


class CampaignError(ValueError):
    """A campaign operation was refused; the message says why and what to do."""


class Decider(Protocol):
    """Chooses what a woken campaign does next (rule-based offline, a model online)."""

    @property
    def model_backed(self) -> bool:
        """True when deciding spends model calls."""
        ...

    async def decide(self, context: DecisionContext) -> Decision:
        """One decision for the campaign in `context`."""
        ...


@dataclass(frozen=True)
class EngineSettings:
    """Tunables of the engine."""

    report_tolerance: float = 1e-3
    terminate_grace_seconds: float = 10.0
    status_edit_seconds: float = 5.0  # at most one status edit per round this often
    limits: CampaignLimits = field(default_factory=CampaignLimits)


@dataclass
class _Live:
    """In-memory state of one monitored round (the durable state is in the store)."""

    watch: RoundWatch
    handle: JobHandle
    granted_seconds: float | None = None  # the round's time limit (read once, not per poll)
    last_edit: float = -math.inf
    unreachable_told: bool = False
    final_shown: bool = False  # the round-end status edit was made (by the monitor)
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class CampaignEngine:
    """Owns every campaign of this process: start, monitor, wake, decide, close."""

    def __init__(
        self,
        *,
        store: CampaignStore,
        machines: Mapping[str, Machine],
        allocator: Allocator,
        scheduler: WakeScheduler,
        notifier: CampaignNotifier,
        decider: Decider,
        root: Path,
        settings: EngineSettings = EngineSettings(),
        clock: Callable[[], float] = time.time,
        new_id: Callable[[], str] = lambda: "cmp_" + uuid.uuid4().hex[:10],
        approvals: CommandApprovals | None = None,
        workspace: Callable[[ConversationRef], Path] | None = None,
        bot_paths: BotPaths | None = None,
    ) -> None:
        """`workspace`: a conversation's workspace (created on use), where a chat campaign
        runs when its machine has no `workdir`; `bot_paths`: RAVEN_HOME and the bot's working
        directory, which no campaign may run in (default: `root`'s parent and the current
        directory)."""
        self._workspace = workspace
        self._bot_paths = bot_paths or BotPaths.of(root.parent)
        # Without `approvals` (`raven-bot campaigns run`) the operator typed the command in
        # their own shell: that is the approval, and a changed command cannot be asked about.
        self._approvals = approvals
        self._store = store
        self._machines = machines
        self._allocator = allocator
        self._scheduler = scheduler
        self._notifier = notifier
        self._decider = decider
        self._root = root
        self._settings = settings
        self._clock = clock
        self._new_id = new_id
        self._locks = KeyedLocks()
        self._live: dict[str, _Live] = {}
        self._closed = False
        # Set whenever a campaign reaches a final state (waiters re-check their condition).
        self.changed = asyncio.Event()

    @property
    def store(self) -> CampaignStore:
        """The campaign records."""
        return self._store

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
        who = requester or Requester(owner, admin=True)
        machine = self._machines.get(spec.machine)
        if machine is None:
            known = ", ".join(sorted(self._machines)) or "none"
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
        campaign_id = self._new_id()
        if self._approvals is None:
            record = await self._store.create(campaign_id, owner, conv, spec)
            await self._announce(record)
            await self._begin_or_queue(record)
            return record
        record = await self._store.create(campaign_id, owner, conv, spec, state="approval")
        await self._approvals.request(self._approval(record, "start", spec.command))
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
        if chosen is None and machine.kind != "ssh" and self._workspace is not None:
            chosen = str(await asyncio.to_thread(self._workspace, conv))
        if chosen is None or machine.kind == "ssh":
            return chosen  # an ssh workdir is a path on that host (checked there)
        problem = workdir_problem(chosen, self._bot_paths, explicit=explicit)
        if problem is not None:
            raise CampaignError(f"Refused: the campaign's {problem}.")
        return chosen

    async def _check_limits(self, who: Requester, machine: MachineSpec, spec: CampaignSpec) -> None:
        """Refuse, naming the limit, what this person may not start."""
        refusal = machine_refusal(machine, who)
        if refusal is not None:
            raise CampaignError(refusal)
        limits = self._settings.limits
        if spec.budget.wall_seconds > limits.max_budget_seconds:
            raise CampaignError(
                f"A budget of {format_duration(spec.budget.wall_seconds)} is over the limit of "
                f"{format_duration(limits.max_budget_seconds)} (RAVEN_CAMPAIGN_MAX_BUDGET_HOURS): "
                "ask for less, or continue with a new campaign later."
            )
        if who.admin:
            return
        active = [
            r for r in await self._store.recent(active_only=True, limit=10_000) if r.owner == who.id
        ]
        if len(active) >= limits.max_active_per_user:
            raise CampaignError(
                f"You already have {len(active)} active campaign(s), the most one person may "
                f"run at once (RAVEN_CAMPAIGN_MAX_PER_USER = {limits.max_active_per_user}): "
                "stop or finish one first."
            )

    def _approval(
        self,
        record: CampaignRecord,
        kind: Literal["start", "resubmit"],
        command: str,
        *,
        cite: int | None = None,
        reason: str = "",
    ) -> CommandApproval:
        spec = record.spec
        machine = self._machines[spec.machine].spec
        if spec.workdir is None:
            workdir = "an empty directory per round (`work/` of the round's directory)"
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
            budget=budget,
            cite=cite,
            reason=reason,
        )

    async def _announce(self, record: CampaignRecord) -> None:
        spec = record.spec
        await self._notify(
            record,
            f"🛰️ Campaign `{record.id}` started: {spec.goal}\nMachine `{spec.machine}`, "
            f"metric `{spec.metric.name}` ({spec.direction}), budget "
            f"{format_duration(spec.budget.wall_seconds)} and {spec.budget.rounds} round(s). "
            "I watch it without model calls and report here.",
            key=f"campaign:{record.id}:started",
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
        async with self._locks.hold(campaign_id):
            record = await self._store.get(campaign_id)
            if record is None or record.state in FINAL_STATES:
                return f"Campaign `{campaign_id}` has ended; nothing ran."
            if kind == "start":
                if record.state != "approval" or record.spec.command != command:
                    return f"Campaign `{campaign_id}` was already decided; nothing more ran."
                # The budget's clock starts now, not when the approval was asked for.
                await self._store.update(record.id, state="planning", created_at=self._clock())
                record = await self._fresh(record)
                await self._store.record_decision(
                    record.id, 0, "approve", None, f"approved by {by}", {"by": by}
                )
                await self._announce(record)
                await self._begin_or_queue(record)
                return f"Campaign `{record.id}` started."
        return await self._resubmit(
            record, cite, reason or "approved change", command, by, approved=True
        )

    async def not_approved(
        self, campaign_id: str, *, kind: Literal["start", "resubmit"], outcome: str
    ) -> None:
        """Denied, expired or cancelled: nothing runs; say so in the thread."""
        async with self._locks.hold(campaign_id):
            record = await self._store.get(campaign_id)
            if record is None:
                return
            if kind == "start":
                if record.state != "approval":
                    return
                await self._store.record_decision(record.id, 0, "cancel", None, outcome, {})
                await self._close(record, "cancelled")
                text = f"🚫 Campaign `{record.id}` not started ({outcome}): nothing ran."
            else:
                text = (
                    f"🚫 Campaign `{record.id}`: the changed command was not approved "
                    f"({outcome}); nothing new ran."
                )
        await self._notify(
            record, text, key=f"campaign:{record.id}:not-approved:{kind}:{record.round}"
        )

    async def _begin_or_queue(self, record: CampaignRecord) -> None:
        share = await self._over_share(record)
        if share is None and await self._allocator.acquire(record.spec.machine, record.id):
            await self._submit_round(record, record.round + 1)
            return
        why = share or "every slot is held by another campaign"
        await self._notify(
            record,
            f"⏳ Campaign `{record.id}` waits for a free slot on `{record.spec.machine}` "
            f"({why}); it starts when one frees.",
            key=f"campaign:{record.id}:queued",
        )

    async def _over_share(self, record: CampaignRecord) -> str | None:
        """Why the owner may not take another slot on the machine now (their share is held)."""
        machine = self._machines.get(record.spec.machine)
        if machine is None:
            return None
        holders = self._allocator.holders(record.spec.machine) - {record.id}
        mine = 0
        for campaign_id in holders:
            held = await self._store.get(campaign_id)
            mine += held is not None and held.owner == record.owner
        share = user_slots(machine.spec)
        if mine < share:
            return None
        return (
            f"its owner's campaigns already hold {mine} of its {machine.spec.slots} slot(s), "
            f"the most one person may hold there (user_slots = {share})"
        )

    async def _start_queued(self, machine: str) -> None:
        """A slot freed on `machine`: start the oldest campaign waiting for it."""
        for record in reversed(await self._store.recent(active_only=True, limit=1000)):
            # One already holding a slot is being started by another caller: `acquire` would
            # say yes again (it keeps a held slot) and its round would be submitted twice.
            if (
                record.spec.machine == machine
                and record.state == "planning"
                and record.id not in self._allocator.holders(machine)
                and await self._over_share(record) is None
            ):
                if await self._allocator.acquire(machine, record.id):
                    await self._submit_round(record, record.round + 1)
                return

    async def _closed_elsewhere(self, record: CampaignRecord) -> None:
        """A campaign found final that this engine did not close (`campaigns stop` from
        another process): tell its thread, show its round's end in the round's status
        message, and free its slot for the campaigns queued behind it."""
        if record.id not in self._allocator.holders(record.spec.machine):
            return  # closed here (or already handled): nothing more to say
        live = self._live.get(record.id)
        if live is not None and live.task is asyncio.current_task():
            self._live.pop(record.id, None)
        if record.state == "cancelled":
            decisions = await self._store.decisions(record.id)
            why = next((d.reason for d in reversed(decisions) if d.action == "cancel"), "")
            await self._notify(
                record,
                f"🛑 Campaign `{record.id}` cancelled ({why or 'stopped elsewhere'}).",
                key=f"campaign:{record.id}:cancelled",
            )
        if record.round and (live is None or not live.final_shown):
            await self._final_status(record, record.round, record.state)
        await self._free_slot(record)

    async def _free_slot(self, record: CampaignRecord) -> None:
        """Release the campaign's slot and start the oldest campaign waiting for it."""
        await self._allocator.release(record.spec.machine, record.id)
        self.changed.set()
        self.changed = asyncio.Event()
        await self._start_queued(record.spec.machine)

    # --------------------------------------------------------------------------- rounds

    async def _submit_round(
        self, record: CampaignRecord, round_no: int, command: str | None = None
    ) -> None:
        spec = record.spec
        requested, granted, note = self._grant(record)
        await self._store.start_round(record.id, round_no, granted, note)
        if note:
            await self._store.record_decision(
                record.id,
                round_no,
                "clamp",
                None,
                note,
                {"by": "budget", "requested_seconds": requested, "granted_seconds": granted},
            )
        machine = self._machines[spec.machine]
        request = JobRequest(
            campaign_id=record.id,
            round=round_no,
            command=command or spec.command,
            workdir=self._root / record.id / f"round-{round_no}",
            cwd=spec.workdir,
            time_limit_seconds=granted,
            cpus=spec.cpus,
            partition=spec.partition,
        )
        try:
            handle = await machine.submit(request)
        except MachineUnavailable as exc:
            await self._store.set_round(
                record.id, round_no, state="failed", ended_at=self._clock(), note=str(exc)
            )
            await self._fail(record, f"the machine refused round {round_no}: {exc}")
            return
        await self._store.set_round(record.id, round_no, state="running", handle=handle)
        text = (
            f"▶️ Campaign `{record.id}` round {round_no} running on `{spec.machine}` "
            f"(job `{handle.job_id}`)."
        )
        if note:
            text += f"\n{note}"
        # Posted later, in the conversation's lane: the hook records the id for the edits.
        await self._notify(
            record,
            text,
            key=_status_key(record.id, round_no),
            on_posted=self._status_posted(record.id, round_no),
        )
        await self._schedule_wake(record, round_no, spec.wake_every_seconds)
        watch = RoundWatch(spec, record.baseline, handle.started_at)
        self._watch(record, round_no, handle, watch, granted)

    def _grant(self, record: CampaignRecord) -> tuple[float, float, str | None]:
        """A round's time limit: (requested, granted, note) within the remaining wall clock
        and the remaining compute minutes (spread over the round's cpus)."""
        spec = record.spec
        remaining = self._remaining_wall(record)
        requested = spec.round_time_limit_seconds or remaining
        granted, note = clamp_to_budget(requested, remaining)
        if spec.budget.compute_minutes is None:
            return requested, granted, note
        cpus = spec.cpus or 1
        left = max(0.0, spec.budget.compute_minutes * 60.0 - record.compute_seconds)
        if granted <= left / cpus:
            return requested, granted, note
        compute_note = (
            f"requested {format_duration(granted)}, granted {format_duration(left / cpus)}: the "
            f"remaining compute budget ({left / 60.0:g} cpu-minute(s) over {cpus} cpu(s))"
        )
        return requested, left / cpus, "; ".join(filter(None, [note, compute_note]))

    def _status_posted(self, campaign_id: str, round_no: int) -> PostedHook:
        """Records the round's status message id once it is posted (if still that round)."""

        async def record(message_id: str) -> None:
            current = await self._store.get(campaign_id)
            if current is not None and current.round == round_no:
                await self._store.update(campaign_id, status_message=message_id)

        return record

    def _watch(
        self,
        record: CampaignRecord,
        round_no: int,
        handle: JobHandle,
        watch: RoundWatch,
        granted_seconds: float | None,
    ) -> None:
        live = _Live(watch=watch, handle=handle, granted_seconds=granted_seconds)
        self._live[record.id] = live
        live.task = asyncio.get_running_loop().create_task(
            self._monitor(record.id, round_no, live),
            name=f"campaign-monitor:{record.id}:{round_no}",
        )

    async def _monitor(self, campaign_id: str, round_no: int, live: _Live) -> None:
        """Model-free: tail the round, record measurements, wake early on an event."""
        while not self._closed:
            record = await self._store.get(campaign_id)
            if record is not None and record.state in FINAL_STATES:
                await self._closed_elsewhere(record)
                return
            if record is None or record.round != round_no:
                return
            reason = await self._observe_once(record, round_no, live)
            if reason is not None:
                # Edits are throttled: the round's last values are shown once more, now.
                await self._final_status(record, round_no, _REASON_TEXT[reason])
                live.final_shown = True
                await self._early_wake(record, round_no, reason)
                return
            await asyncio.sleep(record.spec.poll_seconds)

    async def _observe_once(
        self, record: CampaignRecord, round_no: int, live: _Live
    ) -> WakeReason | None:
        machine = self._machines[record.spec.machine]
        try:
            chunk = await machine.read_log(live.handle, live.watch.offset)
            status = await machine.poll(live.handle)
            if status.state != "running":
                chunk += await _drain(machine, live.handle, live.watch.offset + len(chunk))
        except MachineUnavailable as exc:
            if not live.unreachable_told:
                live.unreachable_told = True
                await self._store.set_round(record.id, round_no, note=f"unreachable: {exc}")
                await self._notify(
                    record,
                    f"⚠️ Campaign `{record.id}`: machine `{record.spec.machine}` is unreachable "
                    f"({exc}); I keep trying and the round keeps its budget.",
                    key=f"campaign:{record.id}:round:{round_no}:unreachable",
                )
            return None
        live.unreachable_told = False
        observation = live.watch.observe(self._clock(), chunk, status)
        if observation.values or chunk:
            values = [(v.name, v.value, v.line) for v in observation.values]
            recorded = await self._store.record_measurements(
                record.id, round_no, values, watch=live.watch.state()
            )
            if recorded:
                await self._edit_status(record, round_no, live, recorded)
        if observation.wake is not None:
            await self._end_round(record, round_no, status, observation.wake)
            return observation.wake
        limit = live.granted_seconds
        if limit is not None and self._clock() - live.handle.started_at > limit:
            return "budget"
        return None

    async def _end_round(
        self, record: CampaignRecord, round_no: int, status: JobStatus, reason: WakeReason
    ) -> None:
        if status.state == "running":
            return  # stalled/diverged/budget: the decision terminates it
        now = self._clock()
        await self._store.set_round(
            record.id,
            round_no,
            state="ended",
            ended_at=now,
            exit_code=status.exit_code,
            wake_reason=reason,
        )
        live = self._live.get(record.id)
        started = live.handle.started_at if live is not None else now
        await self._store.update(
            record.id,
            compute_seconds=record.compute_seconds
            + max(0.0, now - started) * (record.spec.cpus or 1),
        )

    async def _edit_status(
        self, record: CampaignRecord, round_no: int, live: _Live, recorded: list[Measurement]
    ) -> None:
        now = self._clock()
        if now - live.last_edit < self._settings.status_edit_seconds:
            return
        if await self._show_status(
            record, round_no, recorded, f"running on `{record.spec.machine}`", icon="▶️"
        ):
            live.last_edit = now

    async def _final_status(self, record: CampaignRecord, round_no: int, ended: str) -> None:
        """The round-end edit of the status message (never throttled): its last values."""
        latest = [m for m in await self._store.measurements(record.id) if m.round == round_no]
        await self._show_status(record, round_no, latest, ended, icon="🏁")

    async def _show_status(
        self,
        record: CampaignRecord,
        round_no: int,
        measurements: Sequence[Measurement],
        state: str,
        *,
        icon: str,
    ) -> bool:
        """Edit the round's status message; False when it is not posted yet."""
        key = _status_key(record.id, round_no)
        message_id = record.status_message
        if message_id is None:
            # Posted by a retry or by the redelivery after a restart: no hook ran.
            message_id = await self._notifier.posted_id(record.conversation, key)
            if message_id is None:
                return False
            await self._store.update(record.id, status_message=message_id)
        latest = ", ".join(f"{m.name}={m.value:g} (#{m.id})" for m in measurements[-3:])
        text = (
            f"{icon} Campaign `{record.id}` round {round_no} {state}: "
            f"latest {latest or 'none yet'}."
        )
        with contextlib.suppress(Exception):
            await self._notifier.edit(record.conversation, message_id, text, key=key)
        return True

    # --------------------------------------------------------------------------- wakes

    async def _schedule_wake(
        self, record: CampaignRecord, round_no: int, after_seconds: float
    ) -> str:
        due = min(self._clock() + after_seconds, self._deadline(record))
        # One pending wake-up per campaign: the one it replaces is cancelled in the same
        # commit, then unscheduled (a stale job that still fires finds it cancelled).
        wake_id, replaced = await self._store.replace_wake(record.id, round_no, due)
        for old in replaced:
            with contextlib.suppress(Exception):
                await self._scheduler.cancel(old)
        await self._scheduler.schedule_at(
            wake_id,
            datetime.fromtimestamp(due, UTC),
            CAMPAIGN_WAKE,
            {"campaign_id": record.id, "wake_id": wake_id},
        )
        return wake_id

    async def on_wake_job(self, campaign_id: str, wake_id: str) -> None:
        """A scheduled wake-up fired (the scheduler's job handler)."""
        record = await self._store.get(campaign_id)
        if record is None:
            return
        claimed = await self._store.claim_wake(wake_id, fired_at=self._clock())
        if claimed is None:
            return  # already fired, or cancelled by an early wake: the ledger says once
        if claimed.lateness and claimed.lateness > 1.0:
            await self._notify(
                record,
                f"⏰ Campaign `{record.id}`: a wake-up fired "
                f"{format_duration(claimed.lateness)} late (the bot was down or busy).",
                key=f"campaign:{record.id}:late:{wake_id}",
            )
        await self._wake(record, claimed.round, "scheduled")

    async def _early_wake(self, record: CampaignRecord, round_no: int, reason: WakeReason) -> None:
        current = await self._store.get(record.id)
        if current is None or current.state in FINAL_STATES:
            if current is not None:
                await self._closed_elsewhere(current)
            return  # stopped meanwhile: nothing to wake
        text = f"🔔 Campaign `{record.id}` woke early: round {round_no} {_REASON_TEXT[reason]}."
        if reason in _CRASHES:  # read first: the notice follows its claim at once
            tail = await self._output_tail(record, round_no)
            text += f"\nLast lines of its output:\n{code_block(tail)}" if tail else ""
        now = self._clock()
        for pending in await self._store.cancel_pending_wakes(record.id):
            with contextlib.suppress(Exception):
                await self._scheduler.cancel(pending)
        wake_id = f"wake:{record.id}:{round_no}:early:{reason}"
        await self._store.set_round(record.id, round_no, wake_reason=reason)
        await self._store.schedule_wake(wake_id, record.id, round_no, reason, now)
        if await self._store.claim_wake(wake_id, fired_at=now) is None:
            return
        await self._notify(record, text, key=f"campaign:{record.id}:{wake_id}")
        await self._wake(record, round_no, reason)

    async def _output_tail(self, record: CampaignRecord, round_no: int) -> str:
        """The last lines of the round's log (read from the machine, never through a link);
        empty when there are none or the machine cannot be read."""
        current = await self._store.round(record.id, round_no)
        machine = self._machines.get(record.spec.machine)
        if current is None or current.handle is None or machine is None:
            return ""
        read = int((current.watch or {}).get("offset", 0))
        try:
            data = await _drain(machine, current.handle, max(0, read - TAIL_BYTES))
        except MachineUnavailable:
            return ""
        return last_lines(data[-TAIL_BYTES:])

    async def _wake(self, record: CampaignRecord, round_no: int, reason: WakeReason) -> None:
        async with self._locks.hold(record.id):
            current = await self._store.get(record.id)
            if current is None or current.state in FINAL_STATES or current.round != round_no:
                return
            await self._store.update(record.id, state="deciding")
            await self._decide(current, await self._context(current, reason))

    async def _decide(self, record: CampaignRecord, context: DecisionContext) -> None:
        """Decide and apply; a refused model decision goes back to the model once with the
        refusal, then the policy decides, so a woken campaign never stalls."""
        by = "agent" if self._decider.model_backed else "policy"
        try:
            await self._apply(record, await self._ask(record, context), by=by)
            return
        except CampaignError as exc:
            refusal = str(exc)
        if self._decider.model_backed:
            # Most refusals (a stale citation, a spent round budget) say how to fix them.
            log.info("campaign %s: decision refused (%s); asking once more", record.id, refusal)
            retry = await self._ask(record, replace(context, refused=refusal))
            try:
                await self._apply(await self._fresh(record), retry, by=by)
                return
            except CampaignError as exc:
                refusal = str(exc)
        # Refusals come before any change (the rules are checked first): the policy is safe.
        log.warning("campaign %s: decision refused (%s); using the policy", record.id, refusal)
        fallback = await RuleBasedDecider().decide(context)
        await self._apply(await self._fresh(record), fallback, by="policy")

    async def _ask(self, record: CampaignRecord, context: DecisionContext) -> Decision:
        decision = await self._decider.decide(context)
        if self._decider.model_backed:
            await self._store.add_model_calls(record.id, 1)
        return decision

    async def _context(self, record: CampaignRecord, reason: WakeReason) -> DecisionContext:
        tail = await self._output_tail(record, record.round) if reason in _CRASHES else ""
        return DecisionContext(
            output_tail=tail,
            spec=record.spec,
            baseline=record.spec.baseline,  # the given one (see policy: first-round rule)
            measurements=await self._store.measurements(record.id),
            rounds=await self._summaries(record),
            wall_used_seconds=self._clock() - record.created_at,
            compute_used_minutes=record.compute_seconds / 60.0,
            rounds_used=record.round,
            reason=reason,
        )

    async def _apply(self, record: CampaignRecord, decision: Decision, *, by: str) -> str:
        if decision.action == "wait":
            return await self._wait(
                record,
                decision.until_seconds or record.spec.wake_every_seconds,
                decision.cite,
                decision.reason,
                by,
            )
        if decision.action == "resubmit":
            command = decision.changes.get("command")
            return await self._resubmit(record, decision.cite, decision.reason, command, by)
        if decision.action == "terminate":
            text = await self._terminate(record, decision.cite, decision.reason, by)
            await self._close_with(await self._fresh(record), decision, by)
            return text
        return await self._close_with(record, decision, by)

    async def _close_with(self, record: CampaignRecord, decision: Decision, by: str) -> str:
        """File the decision's report; if the gate rejects it, the factual draft instead.

        A drafted report (the policy's) is drafted again now, from the record as the decision
        left it: a terminated round's end and compute are in it."""
        if decision.outcome is not None:
            text = await self._draft(record, outcome=decision.outcome, ended_by=decision.ended_by)
            outcome = await self._report(record, text, by, failed=decision.failed)
            if not outcome.startswith("Report rejected"):
                return outcome
        elif decision.report:
            outcome = await self._report(record, decision.report, by, failed=decision.failed)
            if not outcome.startswith("Report rejected"):
                return outcome
        draft = await self._draft(record)
        return await self._report(record, draft, "policy", failed=decision.failed)

    # ---------------------------------------------------------- operations (the tools)

    async def wait(
        self, campaign_id: str, until_seconds: float, cite: int | None, reason: str = ""
    ) -> str:
        """Tool: keep the round running and wake again in `until_seconds` (clamped)."""
        record = await self._active(campaign_id)
        return await self._wait(
            record, until_seconds, cite, reason or "waiting for more output", "agent"
        )

    async def resubmit(
        self, campaign_id: str, cite: int | None, reason: str = "", command: str | None = None
    ) -> str:
        """Tool: end the current round and start the next (a changed command allowed)."""
        record = await self._active(campaign_id)
        return await self._resubmit(record, cite, reason or "resubmitting", command, "agent")

    async def terminate(self, campaign_id: str, reason: str, cite: int | None) -> str:
        """Tool: stop the running round (the campaign then needs a report to close)."""
        record = await self._active(campaign_id)
        return await self._terminate(record, cite, reason, "agent")

    async def report(self, campaign_id: str, text: str) -> str:
        """Tool: close the campaign with `text` if the report gate accepts it."""
        record = await self._active(campaign_id)
        return await self._report(record, text, "agent")

    async def _wait(
        self, record: CampaignRecord, seconds: float, cite: int | None, reason: str, by: str
    ) -> str:
        await self._cite(record, cite, "wait")
        remaining = self._remaining_wall(record)
        granted, note = clamp_to_budget(seconds, remaining)
        await self._store.record_decision(
            record.id,
            record.round,
            "wait",
            cite,
            reason,
            {"by": by, "seconds": granted, "note": note},
        )
        await self._store.update(record.id, state="waiting")
        await self._schedule_wake(record, record.round, granted)
        said = reason.rstrip(".")
        if "wait" not in said.lower():  # the policy's reasons already say how long
            said = f"waiting {format_duration(granted)}: {said}"
        text = f"⏸️ Campaign `{record.id}`: {said}{_cites(cite, ' (cites #{})')}."
        if note:
            text += f" {note}"
        await self._notify(
            record,
            text,
            key=f"campaign:{record.id}:decision:wait:{record.round}:{int(self._clock())}",
        )
        return text

    async def _resubmit(
        self,
        record: CampaignRecord,
        cite: int | None,
        reason: str,
        command: str | None,
        by: str,
        *,
        approved: bool = False,
    ) -> str:
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
        await self._stop_job(record)
        await self._store.record_decision(
            record.id, record.round, "resubmit", cite, reason, {"by": by, "command": command}
        )
        await self._notify(
            record,
            f"🔁 Campaign `{record.id}`: resubmitting ({reason}{_cites(cite, '; cites #{}')}).",
            key=f"campaign:{record.id}:decision:resubmit:{record.round}",
        )
        await self._submit_round(await self._fresh(record), record.round + 1, command)
        return f"Round {record.round + 1} submitted."

    async def _ask_change(
        self, record: CampaignRecord, cite: int | None, reason: str, command: str
    ) -> str:
        """A changed command runs only once a person approves it; the round goes on until."""
        if self._approvals is None:
            raise CampaignError(
                "A changed command needs a person's approval, and nobody can be asked here: "
                "resubmit without changes, or start a new campaign with the new command."
            )
        await self._store.record_decision(
            record.id,
            record.round,
            "resubmit",
            cite,
            f"asked approval for a changed command: {reason}",
            {"command": command, "state": "awaiting approval"},
        )
        await self._approvals.request(
            self._approval(record, "resubmit", command, cite=cite, reason=reason)
        )
        return (
            "The changed command needs approval first: I asked in the thread. Round "
            f"{record.round} keeps running until someone allowed to approve it does."
        )

    async def _terminate(
        self, record: CampaignRecord, cite: int | None, reason: str, by: str
    ) -> str:
        await self._cite(record, cite, "terminate")
        await self._stop_job(record)
        await self._store.record_decision(
            record.id, record.round, "terminate", cite, reason, {"by": by}
        )
        await self._store.update(record.id, state="reporting")
        text = f"⏹️ Campaign `{record.id}`: round {record.round} terminated ({reason})."
        await self._notify(
            record, text, key=f"campaign:{record.id}:decision:terminate:{record.round}"
        )
        return text

    async def _report(
        self, record: CampaignRecord, text: str, by: str, *, failed: bool = False
    ) -> str:
        measurements = await self._store.measurements(record.id)
        gate = check_report(
            text,
            metric=record.spec.metric.name,
            baseline=record.baseline,
            measurements=measurements,
            tolerance=self._settings.report_tolerance,
        )
        if not gate.accepted:
            await self._store.record_decision(
                record.id,
                record.round,
                "report",
                None,
                "rejected by the report gate",
                {"by": by, "mismatches": gate.mismatches},
            )
            await self._store.update(record.id, state="reporting")
            return "Report rejected:\n" + "\n".join(f"- {m}" for m in gate.mismatches)
        await self._stop_job(record)
        await self._store.record_decision(
            record.id, record.round, "report", None, "accepted", {"by": by}
        )
        # The gate checked what the reporter wrote; the crashed rounds' own last lines are
        # quoted after it, as the job's words (no claim of the reporter's).
        text += await self._crash_tails(record)
        await self._close(record, "failed" if failed else "closed", report=text)
        await self._notify(
            record,
            f"📋 Campaign `{record.id}` report:\n\n{text}",
            key=f"campaign:{record.id}:report",
        )
        return "Report accepted; the campaign is closed."

    async def _crash_tails(self, record: CampaignRecord) -> str:
        """The last lines of the (last two) rounds that died or vanished, as plain blocks."""
        crashed = [r for r in await self._store.rounds(record.id) if r.wake_reason in _CRASHES]
        parts = []
        for r in crashed[-2:]:
            tail = await self._output_tail(record, r.round)
            if tail:
                parts.append(f"\n\nLast lines of round {r.round}'s output:\n{code_block(tail)}")
        return "".join(parts)

    async def _cite(self, record: CampaignRecord, cite: int | None, action: DecisionAction) -> None:
        result = check_citation(
            cite,
            await self._store.measurements(record.id),
            record.round,
            action=action,
            campaign_id=record.id,
        )
        if not result.ok:
            raise CampaignError(result.message)

    async def _draft(
        self, record: CampaignRecord, *, outcome: str = "", ended_by: WakeReason | None = None
    ) -> str:
        """The factual report from the record; `ended_by` says how the current round ended
        when the record does not (a round stopped by a decision)."""
        fresh = await self._fresh(record)
        rounds = [
            r.model_copy(update={"wake_reason": ended_by})
            if r.round == fresh.round and r.wake_reason is None and ended_by is not None
            else r
            for r in await self._summaries(fresh)
        ]
        return draft_report(
            metric=fresh.spec.metric.name,
            direction=fresh.spec.direction,
            baseline=fresh.baseline,
            measurements=await self._store.measurements(fresh.id),
            rounds=rounds,
            wall_used_seconds=self._clock() - fresh.created_at,
            compute_used_minutes=fresh.compute_seconds / 60.0,
            budget=fresh.spec.budget,
            outcome=outcome,
            tolerance=self._settings.report_tolerance,
        )

    async def _summaries(self, record: CampaignRecord) -> list[RoundSummary]:
        return [
            RoundSummary(
                round=r.round, wake_reason=r.wake_reason, exit_code=r.exit_code, state=r.state
            )
            for r in await self._store.rounds(record.id)
        ]

    # ------------------------------------------------------------------ stop and close

    async def stop(self, campaign_id: str, *, by: str, by_name: str | None = None) -> bool:
        """Cancel a campaign: terminate its job, cancel its wake-ups; False if it had ended.
        The notice names `by_name` (the stopper's display name) when given, else `by`."""
        async with self._locks.hold(campaign_id):
            record = await self._store.get(campaign_id)
            if record is None or record.state in FINAL_STATES:
                return False
            await self._store.record_decision(
                record.id, record.round, "cancel", None, f"stopped by {by}", {"by": by}
            )
            # Committed before the job is signalled: a monitor (here or in another process)
            # must not see the round die and take it for a crash to resubmit.
            await self._store.update(record.id, state="cancelled", closed_at=self._clock())
            await self._stop_job(record)
            await self._close(record, "cancelled")
        await self._notify(
            record,
            f"🛑 Campaign `{record.id}` cancelled by {by_name or by}.",
            key=f"campaign:{record.id}:cancelled",
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
        for record in await self._store.of_conversation(conversation_id):
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
        machine = self._machines.get(record.spec.machine)
        return machine is not None and actor in machine.spec.approvers

    async def _stop_job(self, record: CampaignRecord) -> None:
        live = self._live.pop(record.id, None)
        if live is not None and live.task is not None and live.task is not asyncio.current_task():
            live.task.cancel()
            await asyncio.gather(live.task, return_exceptions=True)
        current = await self._store.round(record.id, record.round)
        if current is None or current.handle is None or current.state != "running":
            return
        machine = self._machines.get(record.spec.machine)
        exit_code = None
        if machine is not None:
            with contextlib.suppress(MachineUnavailable):
                await machine.terminate(
                    current.handle, grace_seconds=self._settings.terminate_grace_seconds
                )
                exit_code = (await machine.poll(current.handle)).exit_code
        now = self._clock()
        await self._store.set_round(
            record.id, record.round, state="ended", ended_at=now, exit_code=exit_code
        )
        used = max(0.0, now - current.handle.started_at) * (record.spec.cpus or 1)
        fresh = await self._fresh(record)
        await self._store.update(record.id, compute_seconds=fresh.compute_seconds + used)
        if live is None or not live.final_shown:
            await self._final_status(fresh, record.round, "terminated")

    async def _close(
        self,
        record: CampaignRecord,
        state: str,
        *,
        report: str | None = None,
        error: str | None = None,
    ) -> None:
        for pending in await self._store.cancel_pending_wakes(record.id):
            with contextlib.suppress(Exception):
                await self._scheduler.cancel(pending)
        await self._store.update(
            record.id, state=state, report=report, error=error, closed_at=self._clock()
        )
        await self._free_slot(record)

    async def _fail(self, record: CampaignRecord, why: str) -> None:
        await self._close(record, "failed", error=why)
        await self._notify(
            record, f"❌ Campaign `{record.id}` failed: {why}", key=f"campaign:{record.id}:failed"
        )

    async def close(self) -> None:
        """Stop monitoring (jobs keep running detached; the next start re-attaches)."""
        self._closed = True
        tasks = [live.task for live in self._live.values() if live.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._live.clear()

    # ----------------------------------------------------------------------- recovery

    async def recover(self) -> None:
        """At startup: hold slots again, re-attach monitors, fire overdue wake-ups once."""
        active = await self._store.recent(active_only=True, limit=10_000)
        for record in active:
            if record.state not in ("planning", "approval"):
                self._allocator.restore([(record.spec.machine, record.id)])
        for record in active:
            await self._reattach(record)
        now = self._clock()
        for wake in await self._store.pending_wakes():
            if wake.due_at <= now:
                await self.on_wake_job(wake.campaign_id, wake.id)
            else:
                await self._scheduler.schedule_at(
                    wake.id,
                    datetime.fromtimestamp(wake.due_at, UTC),
                    CAMPAIGN_WAKE,
                    {"campaign_id": wake.campaign_id, "wake_id": wake.id},
                )

    async def _reattach(self, record: CampaignRecord) -> None:
        if record.state == "approval":
            # Its prompt's decision starts it (or not); asked again in case the bot died
            # before asking (the port does not ask twice).
            if self._approvals is not None:
                await self._approvals.request(self._approval(record, "start", record.spec.command))
            return
        if record.state == "planning":
            await self._begin_or_queue(record)
            return
        current = await self._store.round(record.id, record.round)
        if current is None or current.state != "running" or current.handle is None:
            return
        watch = (
            RoundWatch.restore(record.spec, current.watch)
            if current.watch
            else RoundWatch(record.spec, record.baseline, current.handle.started_at)
        )
        self._watch(record, record.round, current.handle, watch, current.granted_seconds)

    # ------------------------------------------------------------------------- status

    async def status(self, conv: ConversationRef) -> str:
        """One line per campaign of the conversation, for `status`."""
        lines = []
        for record in (await self._store.of_conversation(conv.id))[:5]:
            values = [
                m
                for m in await self._store.measurements(record.id)
                if m.name == record.spec.metric.name
            ]
            latest = (
                f", {record.spec.metric.name}={values[-1].value:g} (#{values[-1].id})"
                if values
                else ""
            )
            lines.append(
                f"- campaign `{record.id}` {record.state}, round {record.round}{latest}: "
                f"{record.spec.goal[:60]}"
            )
        return "\n".join(lines)

    async def describe(self, campaign_id: str) -> str:
        """A campaign's full state as text: rounds, wake-ups, decisions, measurements."""
        record = await self._store.get(campaign_id)
        if record is None:
            raise CampaignError(f"No campaign `{campaign_id}`.")
        measurements = await self._store.measurements(record.id)
        lines = [
            f"Campaign `{record.id}` ({record.state}): {record.spec.goal}",
            f"Machine `{record.spec.machine}`, metric `{record.spec.metric.name}` "
            f"({record.spec.direction}), baseline {record.baseline}, model calls "
            f"{record.model_calls}.",
        ]
        lines += [
            f"- round {r.round}: {r.state}, exit {r.exit_code}, woke: {r.wake_reason or '-'}"
            for r in await self._store.rounds(record.id)
        ]
        lines += [
            f"- wake-up {w.id}: {w.state} ({w.reason}), late {w.lateness or 0:.1f}s"
            for w in (await self._store.wakes(record.id))[-5:]
        ]
        lines += [
            f"- decision {d.action}{_cites(d.cite, ' (cites #{})')}: {d.reason}"
            for d in (await self._store.decisions(record.id))[-5:]
        ]
        lines += [f"- #{m.id} round {m.round}: {m.name}={m.value:g}" for m in measurements[-5:]]
        return "\n".join(lines)

    # -------------------------------------------------------------------------- helpers

    async def _active(self, campaign_id: str) -> CampaignRecord:
        record = await self._store.get(campaign_id)
        if record is None:
            raise CampaignError(
                f"No campaign `{campaign_id}`; `raven-bot campaigns list` shows them."
            )
        if record.state in FINAL_STATES:
            raise CampaignError(
                f"Campaign `{campaign_id}` is {record.state}; nothing more can be done."
            )
        return record

    async def _fresh(self, record: CampaignRecord) -> CampaignRecord:
        current = await self._store.get(record.id)
        assert current is not None
        return current

    def _deadline(self, record: CampaignRecord) -> float:
        return record.created_at + record.spec.budget.wall_seconds

    def _remaining_wall(self, record: CampaignRecord) -> float:
        return max(0.0, self._deadline(record) - self._clock())

    async def _notify(
        self, record: CampaignRecord, text: str, *, key: str, on_posted: PostedHook | None = None
    ) -> None:
        try:
            await self._notifier.send(
                record.conversation, text, idempotency_key=key, on_posted=on_posted
            )
        except Exception:
            # The campaign's state is committed already; a notice must not undo it.
            log.warning("campaign %s: notice %s was not recorded", record.id, key, exc_info=True)


_CRASHES: frozenset[str | None] = frozenset({"died", "vanished"})
_REASON_TEXT: Mapping[str, str] = {
    "scheduled": "reached its scheduled wake-up",
    "finished": "finished (exit code 0)",
    "died": "died (non-zero exit code)",
    "stalled": "stalled (no new output)",
    "diverged": "diverged",
    "vanished": "vanished (its process is gone without an exit code)",
    "budget": "used up its time budget",
}


def _cites(cite: int | None, template: str) -> str:
    """`template` filled with the cited measurement id; nothing when no measurement is cited
    (a round that died before printing a value)."""
    return "" if cite is None else template.format(cite)


def _status_key(campaign_id: str, round_no: int) -> str:
    """The idempotency key of a round's status message (its edits use it too)."""
    return f"campaign:{campaign_id}:round:{round_no}:status"


async def _drain(machine: Machine, handle: JobHandle, offset: int) -> bytes:
    """The rest of an ended round's log (read_log returns bounded chunks)."""
    out = b""
    while True:
        chunk = await machine.read_log(handle, offset + len(out))
        if not chunk:
            return out
        out += chunk
