"""Scheduled tasks from proposal to firing: approval, one durable wake-up per task, catch-up
after downtime, limits, and who may pause, resume, cancel or run a task.

Each active task has one job in the scheduler (`scheduled-task:<id>`) for its next due time.
A firing is idempotent: it acts only when the task still waits for that due time, each turn
it starts is keyed by task and scheduled time (recorded once, posted once), and the task
moves on to its next due time in the same commit that records the firing. A crash anywhere
in between repeats the firing at the next start, and the keys make the repeat a no-op.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Protocol

from agents.plan_syntax import with_id_suffix
from core.fence import fence, new_marker
from core.ids import ConversationRef
from core.keyed import KeyedLocks
from core.markdown import code_block
from core.pipe_table import pipe_table
from host.conversation.outbox import DeliveryError, Outbox
from host.features.schedules.line import ScheduleError
from host.features.schedules.store import (
    LIVE_STATES,
    Firing,
    FiringOutcome,
    ScheduledTask,
    TaskStore,
    iso,
)
from host.features.schedules.timing import (
    MAX_CATCH_UP,
    checked_schedule,
    describe_schedule,
    due_span,
    fire_times,
    for_readers,
    upcoming,
)
from host.features.schedules.work import Check, parse_check, task_work
from host.nudges.policy import NudgePolicy
from host.prompts.broker import PromptBroker
from host.runtime.admission import Admission, MachineRule, Origin, Verdict
from host.runtime.events import EventBus, TurnRequested
from host.runtime.people import People
from host.runtime.prompt_record import Prompt
from host.runtime.roles import Roles
from host.runtime.scheduling import Scheduler
from oncall.probe import ProbeResult
from oncall.report_gate import format_duration

log = logging.getLogger(__name__)

SCHEDULED_TASK_JOB = "scheduled_task"
# `status` and `schedule: list` count the tasks that ended within this (not listed one by one).
RECENT_SECONDS = 86_400.0
# The columns of `schedule: list` and of the scheduled tasks in `status`.
TABLE_HEADER = ("Task", "Owner", "Schedule", "Next", "What")
SCHEDULE_APPROVAL = "schedule_approval"
# A firing later than this is said to be late (a restart, a long stall).
LATE_GRACE_SECONDS = 120.0
# A firing whose owner's platform did not say whether they may is tried again after this.
ADMISSION_RETRY = timedelta(minutes=1)


@dataclass(frozen=True)
class ScheduleLimits:
    """What one person and one channel may schedule (each refused with the limit named)."""

    max_per_user: int = 20
    min_interval_seconds: float = 300.0
    channel_firings_per_hour: int = 30
    default_tz: str = "UTC"


@dataclass(frozen=True)
class Proposer:
    """Who asks for a task, where, and the key of their request (a redelivery reuses it)."""

    conversation: ConversationRef
    user_id: str
    name: str
    key: str
    roles: tuple[str, ...] = ()


class CheckRunner(Protocol):
    """Runs a standing check's command, without a model (host-provided)."""

    def refusal(self, check: Check, owner: str, roles: tuple[str, ...]) -> str | None:
        """Why `owner` may not run `check` where it says (an unknown or closed machine)."""
        ...

    async def run(self, task: ScheduledTask, check: Check, roles: tuple[str, ...]) -> ProbeResult:
        """Run the check's command once for its owner, who has `roles` now: on its machine,
        else where the task's conversation's work runs."""
        ...


@dataclass(frozen=True)
class TaskDeps:
    """What tasks are run with: durable wake-ups, prompts, posting, the bus for turns and
    the runner of standing checks."""

    scheduler: Scheduler
    broker: PromptBroker
    outbox: Outbox
    bus: EventBus
    roles: Roles
    # Every firing, check and run-now passes the access policy for its owner now.
    admission: Admission
    checks: CheckRunner | None = None
    # Whose zone a schedule without `tz:` is in (a Slack profile's), before the default.
    people: People = field(default_factory=People)
    # Caps and dedup over what firings say (None: no limit).
    nudges: NudgePolicy | None = None


def job_id(task_id: str) -> str:
    """The scheduler job of a task's next firing."""
    return f"scheduled-task:{task_id}"


class ScheduledTasks:
    """Every scheduled task of this bot: proposals, approvals, firings, and actions on them."""

    def __init__(
        self,
        store: TaskStore,
        deps: TaskDeps,
        limits: ScheduleLimits,
        *,
        offline: bool,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = store
        self._deps = deps
        self.limits = limits
        self._offline = offline
        # Public so tests drive time; every decision reads it, nothing reads the wall clock.
        self.clock = now
        # Due times before this were missed while the bot was down (said, however late).
        self.started_at = now()
        self._locks = KeyedLocks()
        self._channels = KeyedLocks()

    # ------------------------------------------------------------------ proposing a task

    async def propose(self, who: Proposer, line: str) -> str:
        """Check a `schedule:` line and ask its author to approve it; the reply to post."""
        now = self.clock()
        try:
            schedule = checked_schedule(
                line,
                now=now,
                default_tz=await self._zone_of(who),
                min_interval=self.limits.min_interval_seconds,
            )
            work = task_work(schedule.what, offline=self._offline)
            self._may_check(who, parse_check(schedule.what))
            if schedule.post == "channel":
                self._posts_in_channel(who.conversation, work.kind)
        except ScheduleError as exc:
            return f"⚠️ {exc}"
        task_id = (
            "t_" + hashlib.sha256(f"{who.conversation.id}\n{who.key}".encode()).hexdigest()[:8]
        )
        existing = await self.store.get(task_id)
        if existing is not None and (existing.prompt_id or existing.state != "proposed"):
            return f"Task `{task_id}` was already proposed ({existing.state})."
        limit = self.limits.max_per_user
        if existing is None and await self.store.live_count(who.user_id) >= limit:
            return (
                f"⚠️ You already have {limit} scheduled tasks, the limit "
                "(RAVEN_SCHEDULE_MAX_PER_USER): cancel one first (`schedule: list` shows them)."
            )
        task = existing or ScheduledTask(
            id=task_id,
            conversation=who.conversation,
            owner=who.user_id,
            owner_name=who.name,
            owner_roles=who.roles,
            schedule=schedule,
            grants=work.grants,
            anchor=now,
            state="proposed",
            next_due=None,
            fired=0,
        )
        # A request seen again after a crash between recording the task and asking: asked now.
        if existing is None and not await self.store.insert(task):
            return f"Task `{task_id}` was already proposed."
        prompt = await self._deps.broker.create(
            conversation=who.conversation,
            kind="approval",
            question=self._question(task, work.description, now),
            requester=who.user_id,
            purpose=SCHEDULE_APPROVAL,
            payload={"task_id": task_id},
        )
        await self.store.update(task_id, prompt_id=prompt.id)
        return (
            f"⏳ Task `{task_id}` waits for approval (the prompt above); nothing is scheduled "
            "until then."
        )

    def _posts_in_channel(self, conv: ConversationRef, kind: str) -> None:
        """Refuse `post: channel` where no fresh thread can be started."""
        if kind == "check":
            raise ScheduleError(
                "A check says what it finds in its own thread: leave `post: channel` out."
            )
        if self._deps.outbox.channel_level(conv) is None:
            raise ScheduleError(
                "`post: channel` needs a Slack or Discord channel to start a thread in at each "
                "firing; here, leave it out and results post in this thread."
            )

    def _may_check(self, who: Proposer, check: Check | None) -> None:
        """Refuse a check its proposer may not run where it says."""
        runner = self._deps.checks
        if check is not None and runner is not None:
            refusal = runner.refusal(check, who.user_id, who.roles)
            if refusal is not None:
                raise ScheduleError(refusal)

    async def _zone_of(self, who: Proposer) -> str:
        """The proposer's own zone where their platform knows it, else RAVEN_TIMEZONE."""
        return await self._deps.people.zone(who.conversation, who.user_id, self.limits.default_tz)

    def _question(self, task: ScheduledTask, description: str, now: datetime) -> str:
        schedule = task.schedule
        times = upcoming(schedule, task.anchor, now, 3)
        nexts = "; ".join(for_readers(t, schedule.zone) for t in times)
        return (
            f"Schedule task `{task.id}`?\n"
            f"- When: {describe_schedule(schedule)}\n"
            f"- Next: {nexts}\n"
            f"- Each firing runs {description}\n"
            "Approving lets exactly this run at each firing without asking again; anything "
            "else a firing needs is asked for then, and nothing else runs unattended."
        )

    async def decided(self, prompt: Prompt) -> None:
        """The approval prompt of a proposed task was answered (or expired)."""
        task_id = str(prompt.payload.get("task_id", ""))
        task = await self.store.get(task_id)
        if task is None or task.state != "proposed":
            return
        if not prompt.approved:
            if await self.store.transition(task_id, ["proposed"], state="denied"):
                outcome = "denied" if prompt.state == "answered" else str(prompt.state)
                await self._say(
                    task.conversation,
                    f"Task `{task_id}` was not scheduled ({outcome}).",
                    key=f"task:{task_id}:denied",
                )
            return
        now = self.clock()
        first = next(fire_times(task.schedule, task.anchor, now), None)
        if first is None and task.schedule.kind in ("in", "at"):
            # Approved after its one time: it runs now, late, rather than never.
            first = now
        if first is None:
            await self.store.transition(task_id, ["proposed"], state="done")
            await self._say(
                task.conversation,
                f"Task `{task_id}` was approved after its last fire time; nothing to run.",
                key=f"task:{task_id}:expired",
            )
            return
        if not await self.store.transition(
            task_id, ["proposed"], state="active", next_due=first, approved_by=prompt.answered_by
        ):
            return
        await self._arm(task_id, first)
        await self._say(
            task.conversation,
            f"✅ Task `{task_id}` is scheduled: {task.schedule.kind} {task.schedule.when}. "
            f"Next: {for_readers(first, task.schedule.zone)}.",
            key=f"task:{task_id}:scheduled",
        )

    # ------------------------------------------------------------------------- firing

    async def fire(self, task_id: str, due: datetime) -> None:
        """Fire the task for `due` (and what an outage missed), once."""
        async with self._locks.hold(task_id):
            task = await self.store.get(task_id)
            if task is None or task.state != "active" or task.next_due is None:
                return  # cancelled, paused or done
            now = self.clock()
            if task.next_due != due:
                # A stale job (this due time was handled, or the task was moved): the task's
                # own job is re-armed, or its own due time, if already past, fires now.
                if task.next_due > now:
                    await self._arm(task.id, task.next_due)
                    return
                due = task.next_due
            nudges = self._deps.nudges
            quiet = None if nudges is None else nudges.quiet
            # Quiet hours are the owner's (their platform's zone), else the task's zone's.
            zone = task.schedule.zone
            if nudges is not None and quiet is not None:
                zone = await nudges.zone(task.conversation, task.owner, default=zone)
            held_until = None if quiet is None else quiet.end_after(now, zone)
            if held_until is not None:
                # Quiet hours: the firing waits for their end (its due time is kept).
                await self._arm(task.id, due, at=held_until)
                return
            try:
                check = parse_check(task.schedule.what)
            except ScheduleError as exc:
                await self._unreadable(task, exc, due)
                return
            verdict = await self._admitted(task, check, "check" if check else "firing", due=due)
            if not verdict.admitted:
                return
            times, total, last = _overdue(task, due, now)
            next_due = next(
                fire_times(task.schedule, task.anchor, max(now, last), fired=task.fired + total),
                None,
            )
            if check is not None:
                due_times = [*dict.fromkeys([*times, last])]
                await self._check(
                    replace(task, owner_roles=verdict.roles),
                    check,
                    due_times,
                    now,
                    next_due,
                    fired=task.fired + total,
                )
                return
            held = quiet is not None and quiet.end_after(due, zone) is not None
            late = (
                _Late(f"in quiet hours ({quiet})", f"quiet hours ({quiet}) held it")
                if held and quiet is not None
                else _DOWN
                if due < self.started_at
                else None
            )
            runs, notice = _catch_up(task, times, total, last, now, late=late)
            # The firing runs with the owner's roles as they are now, never as proposed.
            task = replace(task, owner_roles=verdict.roles)
            firing = _Firing(task, [*dict.fromkeys([*times, last])], total, now, runs, notice)
            # One channel's firings are counted and recorded one at a time: concurrent firings
            # must not all pass the hourly limit before any of them is recorded.
            async with self._channels.hold(task.conversation.channel_key):
                await self._fire(firing, next_due)

    async def _admitted(
        self, task: ScheduledTask, check: Check | None, origin: Origin, *, due: datetime
    ) -> Verdict:
        """The one admission rule, for this task's owner now. Refused: the task is paused
        (not deleted) and its thread told once who may resume it; the platform not
        answering: this firing waits a minute and is tried again."""
        verdict = await self._deps.admission.admit(
            origin,
            task.owner,
            task.conversation,
            subject=task.id,
            owner_name=task.owner_name,
            machine=self._machine_rule(task, check),
        )
        if verdict.admitted:
            return verdict
        if verdict.standing.transient:
            log.warning("task %s: %s", task.id, verdict.notice)
            if origin in ("firing", "check"):
                await self._arm(task.id, due, at=self.clock() + ADMISSION_RETRY)
            return verdict
        if await self.store.transition(task.id, ["active"], state="paused"):
            await self._deps.scheduler.cancel(job_id(task.id))
            # Said whatever the nudge caps: the owner and admins must learn why it stopped.
            await self._say(
                task.conversation,
                f"{verdict.notice} (`schedule: resume {task.id}`)",
                key=f"task:{task.id}:{iso(due)}:access",
            )
        return verdict

    async def _unreadable(self, task: ScheduledTask, exc: ScheduleError, due: datetime) -> str:
        """A stored task its bot can no longer read (a check's pattern from before patterns
        ran on RE2): paused, and said once, rather than failing at every firing."""
        text = (
            f"⏸️ Task `{task.id}` is paused: it can no longer be read ({exc}). Propose it "
            f"again, then `schedule: cancel {task.id}`."
        )
        if await self.store.transition(task.id, ["active"], state="paused"):
            await self._deps.scheduler.cancel(job_id(task.id))
            await self._say(task.conversation, text, key=f"task:{task.id}:{iso(due)}:unreadable")
        return text

    def _machine_rule(self, task: ScheduledTask, check: Check | None) -> MachineRule | None:
        """A check on a machine also needs that machine to admit its owner's current roles."""
        runner = self._deps.checks
        if check is None or check.machine is None or runner is None:
            return None
        return lambda roles: runner.refusal(check, task.owner, roles)

    async def _fire(self, firing: _Firing, next_due: datetime | None) -> None:
        task, now, runs, notice = firing.task, firing.now, firing.runs, firing.notice
        last = firing.due[-1]
        limited = bool(runs) and await self._over_channel_limit(task, now)
        if limited:
            runs = []
            notice = (
                f"⚠️ Task `{task.id}` did not run at {for_readers(last, task.schedule.zone)}: this "
                f"channel had {self.limits.channel_firings_per_hour} scheduled firings in "
                "the last hour, the limit (RAVEN_SCHEDULE_CHANNEL_PER_HOUR)."
            )
        if notice and not task.quiet(now) and await self._admit(task, notice):
            await self._say(task.conversation, notice, key=f"task:{task.id}:{iso(last)}:note")
        for when in runs:
            if not await self._start_turn(task, when):
                return  # not recorded: the next start fires it again (the key dedups)
        not_run: FiringOutcome = "limited" if limited else "skipped"
        firings = [
            Firing(
                task.id,
                when,
                "ran" if when in runs else not_run,
                (now - when).total_seconds(),
                now.timestamp(),
            )
            for when in firing.due
        ]
        if not await self.store.record_firings(
            task, firings, next_due=next_due, fired=task.fired + firing.total
        ):
            return
        if next_due is not None:
            await self._arm(task.id, next_due)

    async def _check(
        self,
        task: ScheduledTask,
        check: Check,
        due: list[datetime],
        now: datetime,
        next_due: datetime | None,
        *,
        fired: int,
    ) -> None:
        """Run a standing check once (however many runs an outage missed: a check says how
        things are now), and speak only when it trips or passes again."""
        if self._deps.checks is None:
            raise RuntimeError("standing checks need a check runner")
        result = await self._deps.checks.run(task, check, task.owner_roles)
        verdict, why = await check.judge(result)
        previous = task.last_digest or "passing"
        # Muted or snoozed: nothing is said, and the state it would have said is not taken
        # in, so a check still tripped when the snooze ends says so then.
        state = previous if task.quiet(now) else verdict
        last = due[-1]
        if state != previous and not await self._announce(task, check, result, state, why, last):
            return  # not recorded: the next start runs it again (the keys dedup the posts)
        firings = [
            Firing(task.id, when, "checked", (now - when).total_seconds(), now.timestamp())
            for when in due
        ]
        # The check's state commits with its firing: a crash cannot say a trip twice.
        if not await self.store.record_firings(
            task, firings, next_due=next_due, fired=fired, digest=state
        ):
            return
        if next_due is not None:
            await self._arm(task.id, next_due)

    async def _announce(
        self,
        task: ScheduledTask,
        check: Check,
        result: ProbeResult,
        state: str,
        why: str,
        due: datetime,
    ) -> bool:
        """Say that a check tripped (and, with a model, wake the Host on it), could not run,
        or passes again."""
        key = f"task:{task.id}:{iso(due)}"
        if state == "passing":
            text = f"✅ Check `{task.id}` passes again."
            if await self._admit(task, text):
                await self._say(task.conversation, text, key=key)
            return True
        if state == "broken":
            # The bot's own trouble, not the watched thing's: said, with no model woken.
            text = f"⚠️ Check `{task.id}` could not run: {why}. It is tried again at each firing."
            if await self._admit(task, text):
                await self._say(task.conversation, text, key=f"{key}:broken")
            return True
        tail = result.output[-1500:].strip() or "(no output)"
        text = f"🔔 Check `{task.id}` tripped: {why}.\n{code_block(tail)}"
        if not await self._admit(task, text):
            return True  # held back (said today already, or over a cap): nobody is woken
        await self._say(task.conversation, text, key=f"{key}:tripped")
        if self._offline:
            return True
        fenced = fence(tail, source=f"output of check {task.id}", marker=new_marker())
        return await self._deps.bus.publish(
            TurnRequested(
                conversation=task.conversation,
                text=(
                    f"Standing check `{task.id}` tripped: {why}. Its command was "
                    f"`{check.command}`. Find out why, from what it printed below, and say "
                    f"what you found.\n{fenced}"
                ),
                key=key,
                author_id=task.owner,
                author_name=task.owner_name,
                roles=task.owner_roles,
                task=task.id,
            )
        )

    async def _admit(self, task: ScheduledTask, text: str) -> bool:
        nudges = self._deps.nudges
        return nudges is None or await nudges.admit(task.nudge(text), now=self.clock().timestamp())

    async def _where(self, task: ScheduledTask, due: datetime, key: str) -> ConversationRef | None:
        """The conversation a firing runs in: the task's thread, or (`post: channel`) a
        thread of its own started by a headline in the channel (None: not posted yet)."""
        if task.schedule.post != "channel":
            return task.conversation
        root = self._deps.outbox.channel_level(task.conversation)
        if root is None:
            return task.conversation
        headline = (
            f"⏰ Scheduled task `{task.id}` of {task.owner_name}, "
            f"{for_readers(due, task.schedule.zone)}: {_gist(task.schedule.what)}"
        )
        try:
            # Keyed by task and time: a repeat after a crash finds the same thread.
            started = await self._deps.outbox.send(root, headline, idempotency_key=f"{key}:thread")
        except DeliveryError as exc:
            log.warning("task %s: starting its thread failed: %s", task.id, exc)
            return None
        return None if not started else replace(task.conversation, thread=started)

    async def _start_turn(self, task: ScheduledTask, due: datetime, *, now: bool = False) -> bool:
        """Request the firing's turn, keyed by task and time (`now`: a run outside the
        schedule, keyed apart from a scheduled firing at the same time)."""
        key = f"task:{task.id}:{iso(due)}" + (":now" if now else "")
        conv = await self._where(task, due, key)
        if conv is None:
            return False
        work = task_work(task.schedule.what, offline=False)
        text = work.text
        if work.kind == "plan":
            # Node ids are unique per conversation: each firing's plan gets its own, named
            # after its time (`s1` fires as `s1_2612240900`); the commands stay as approved.
            local = due.astimezone(task.schedule.zone)
            text = with_id_suffix(
                text, local.strftime("%y%m%d%H%M%S" if local.second else "%y%m%d%H%M")
            )
        return await self._deps.bus.publish(
            TurnRequested(
                conversation=conv,
                text=text,
                key=key,
                author_id=task.owner,
                author_name=task.owner_name,
                roles=task.owner_roles,
                task=task.id,
            )
        )

    async def _over_channel_limit(self, task: ScheduledTask, now: datetime) -> bool:
        since = (now - timedelta(hours=1)).timestamp()
        used = await self.store.channel_runs_since(task.conversation.channel_key, since)
        return used >= self.limits.channel_firings_per_hour

    async def _arm(self, task_id: str, due: datetime, *, at: datetime | None = None) -> None:
        """The task's job for its firing due at `due`, waking at `at` (default: then)."""
        await self._deps.scheduler.schedule_at(
            job_id(task_id),
            due if at is None else at,
            SCHEDULED_TASK_JOB,
            {"task_id": task_id, "due": iso(due)},
        )

    async def run_now(self, task_id: str) -> str:
        """Fire an active task once now, outside its schedule (its next due time stays)."""
        async with self._locks.hold(task_id):
            task = await self.store.get(task_id)
            if task is None:
                return f"No task `{task_id}`."
            if task.run_now:  # the operator's request is taken now, whatever comes of it
                await self.store.update(task_id, run_now=False)
            if task.state != "active":
                return f"Task `{task_id}` is {task.state}; only an active task can run now."
            now = self.clock()
            try:
                check = parse_check(task.schedule.what)
            except ScheduleError as exc:
                return await self._unreadable(task, exc, now)
            verdict = await self._admitted(task, check, "run-now", due=now)
            if not verdict.admitted:
                return verdict.notice
            task = replace(task, owner_roles=verdict.roles)
            if check is not None:
                if refusal := await self._too_soon(task, now):
                    return refusal
                # Asked for explicitly: what it says passes the posting caps.
                await self._grant(task, now)
                await self._check(task, check, [now], now, task.next_due, fired=task.fired)
                await self._withdraw(task)  # unused when the check had nothing new to say
                return f"Check `{task_id}` ran now (its schedule is unchanged)."
            # Counted and recorded under the channel's lock, as a scheduled firing is.
            async with self._channels.hold(task.conversation.channel_key):
                if await self._over_channel_limit(task, now):
                    return (
                        f"⚠️ Task `{task_id}` did not run now: this channel had "
                        f"{self.limits.channel_firings_per_hour} scheduled firings in the last "
                        "hour, the limit (RAVEN_SCHEDULE_CHANNEL_PER_HOUR)."
                    )
                # Asked for explicitly: its result passes the posting caps (granted first,
                # durably, so a restart before the turn ends keeps it).
                await self._grant(task, now)
                if not await self._start_turn(task, now, now=True):
                    return f"Task `{task_id}` could not be started; try again."
                await self.store.record_firings(
                    task,
                    [Firing(task.id, now, "ran", 0.0, now.timestamp())],
                    next_due=task.next_due,
                    fired=task.fired,
                )
            return f"Task `{task_id}` runs now (its schedule is unchanged)."

    async def _grant(self, task: ScheduledTask, now: datetime) -> None:
        if self._deps.nudges is not None:
            await self._deps.nudges.grant(task.nudge("").source, now=now.timestamp())

    async def _withdraw(self, task: ScheduledTask) -> None:
        if self._deps.nudges is not None:
            await self._deps.nudges.withdraw(task.nudge("").source)

    async def _too_soon(self, task: ScheduledTask, now: datetime) -> str | None:
        """A check run now must keep the minimum interval after its last run, as its
        schedule must (else `run` would poll as often as someone types it)."""
        latest = await self.store.firings(task.id, limit=1)
        interval = self.limits.min_interval_seconds
        if not latest or now.timestamp() - latest[0].fired_at >= interval:
            return None
        ready = datetime.fromtimestamp(latest[0].fired_at + interval, UTC)
        return (
            f"⚠️ Check `{task.id}` did not run now: it ran "
            f"{format_duration(now.timestamp() - latest[0].fired_at)} ago, and a check runs at "
            f"most every {format_duration(interval)} (RAVEN_SCHEDULE_MIN_INTERVAL). Try again "
            f"after {for_readers(ready, task.schedule.zone)}."
        )

    # ----------------------------------------------------------- restart and other processes

    async def start(self) -> None:
        """After a restart: fire what came due while the bot was down, and arm the tasks
        whose job is missing (a crash between recording a firing and arming the next)."""
        armed = set(await self._deps.scheduler.pending_job_ids())
        for task in await self.store.active():
            await self._apply(task, armed)

    async def reconcile_operator_changes(self) -> None:
        """Apply what the operator changed from another process (`raven-bot schedules …`)."""
        for task in await self.store.operator_changed():
            await self.store.applied(task)
            if task.state == "active":
                await self._apply(task, None)
            else:
                await self._deps.scheduler.cancel(job_id(task.id))

    async def _apply(self, task: ScheduledTask, armed: set[str] | None) -> None:
        """Act on an active task as stored: run it now if asked, fire it if overdue, else
        arm its job (unless `armed` holds it)."""
        if task.run_now:
            await self.run_now(task.id)
        if task.next_due is None:
            return
        if task.next_due <= self.clock():
            await self.fire(task.id, task.next_due)
        elif armed is None or job_id(task.id) not in armed:
            await self._arm(task.id, task.next_due)

    # -------------------------------------------------------------------- acting on tasks

    def may_act(self, task: ScheduledTask, user_id: str) -> bool:
        """The owner, an approver or an admin."""
        return user_id == task.owner or self._deps.roles.privileged(user_id)

    async def act(
        self, task_id: str, action: str, *, by: str, conversation: ConversationRef | None
    ) -> str:
        """`pause`, `resume`, `cancel` or `run` a task for `by` (None conversation: the operator's
        command line, which may act on any task)."""
        task = await self.store.get(task_id)
        if task is None:
            return f"No task `{task_id}`."
        if conversation is not None:
            if task.conversation.id != conversation.id:
                return f"Task `{task_id}` belongs to another conversation; act on it there."
            if not self.may_act(task, by):
                return (
                    f"You may not {action} task `{task_id}`: only its owner "
                    f"({task.owner_name}), an approver or an admin can."
                )
        actions = {
            "pause": self._pause,
            "resume": self._resume,
            "cancel": self._cancel,
            "run": self._run,
        }
        if action not in actions:
            raise ValueError(f"unknown action {action!r}")
        return await actions[action](task)

    async def _run(self, task: ScheduledTask) -> str:
        return await self.run_now(task.id)

    async def _pause(self, task: ScheduledTask) -> str:
        if not await self.store.transition(task.id, ["active"], state="paused"):
            return f"Task `{task.id}` is {task.state}; only an active task can be paused."
        await self._deps.scheduler.cancel(job_id(task.id))
        return f"Task `{task.id}` is paused; `resume` it to fire again."

    async def _resume(self, task: ScheduledTask) -> str:
        if task.state == "paused":
            try:
                check = parse_check(task.schedule.what)
            except ScheduleError as exc:
                return f"Task `{task.id}` stays paused: it can no longer be read ({exc})."
            # Its owner must pass again, whoever resumes it: it would run on their behalf.
            verdict = await self._deps.admission.admit(
                "resume",
                task.owner,
                task.conversation,
                subject=task.id,
                owner_name=task.owner_name,
                machine=self._machine_rule(task, check),
            )
            if not verdict.admitted:
                return (
                    f"Task `{task.id}` stays paused: {task.owner_name} does not pass this bot's "
                    f"access rules here ({verdict.standing.refusal})."
                )
        # Fire times passed while paused are not missed runs: the task resumes from now.
        nxt = next(fire_times(task.schedule, task.anchor, self.clock(), fired=task.fired), None)
        if nxt is None:
            await self.store.transition(task.id, ["paused"], state="done")
            return f"Task `{task.id}` has no fire time left; it is done."
        if not await self.store.transition(task.id, ["paused"], state="active", next_due=nxt):
            return f"Task `{task.id}` is {task.state}; only a paused task can be resumed."
        await self._arm(task.id, nxt)
        return f"Task `{task.id}` is resumed. Next: {for_readers(nxt, task.schedule.zone)}."

    async def _cancel(self, task: ScheduledTask) -> str:
        if not await self.store.transition(task.id, LIVE_STATES, state="cancelled"):
            return f"Task `{task.id}` is already {task.state}."
        await self._deps.scheduler.cancel(job_id(task.id))
        return f"Task `{task.id}` is cancelled."

    async def hush(
        self,
        conversation: ConversationRef,
        by: str,
        task_id: str | None,
        *,
        muted: bool,
        until: datetime | None = None,
    ) -> str:
        """Mute, unmute (`muted`) or snooze until `until` one task of the conversation, or
        every one here that `by` may act on."""
        tasks = [
            t
            for t in await self.store.of_conversation(conversation.id)
            if task_id is None or t.id == task_id
        ]
        if not tasks:
            return f"No task `{task_id}` here." if task_id else "No scheduled tasks here."
        mine = [t for t in tasks if self.may_act(t, by)]
        if not mine:
            return "Only a task's owner, an approver or an admin can quiet it."
        for task in mine:
            await self.store.update(task.id, muted=muted, snoozed_until=until)
        names = ", ".join(f"`{t.id}`" for t in mine)
        if until is not None:
            zone = mine[0].schedule.zone
            return f"Snoozed {names} until {for_readers(until, zone)}: they run, and say nothing."
        if muted:
            return f"Muted {names}: they run and say nothing until `unmute`."
        return f"Unmuted {names}."

    async def listing(self, conversation: ConversationRef, *, everything: bool = False) -> str:
        """The conversation's live tasks (every task with `everything`: admins), one line
        each, then those that ended in the last 24 h as one `Recent:` line.

        What another conversation's task runs is not shown here: a DM's stays in that DM."""
        tasks = (
            await self.store.listed()
            if everything
            else await self.store.of_conversation(conversation.id)
        )
        recent = await self._recent(None if everything else conversation)
        if not tasks:
            listed = "No scheduled tasks here." if not everything else "No scheduled tasks."
        else:
            listed = self.table(tasks, here=conversation.id)
        # A blank line first: right under a table row it would be read as one more row.
        return listed + (f"\n\n{recent}" if recent else "")

    def table(self, tasks: Sequence[ScheduledTask], *, here: str) -> str:
        """The tasks as a table, one row each: id, owner, schedule, next fire time (or its
        state) and whether it is muted or snoozed, and what it runs when it is the
        conversation `here`'s (another conversation's stays there)."""
        return pipe_table(
            TABLE_HEADER, [self.row(t, here=t.conversation.id == here) for t in tasks]
        )

    def row(self, task: ScheduledTask, *, here: bool = True) -> list[str]:
        """One task's cells, in `TABLE_HEADER`'s order."""
        schedule = task.schedule
        nxt = (
            for_readers(task.next_due, schedule.zone)
            if task.state == "active" and task.next_due is not None
            else task.state
        )
        what = _gist(schedule.what) if here else "(in another conversation)"
        return [
            f"`{task.id}`",
            task.owner_name,
            f"{schedule.kind} {schedule.when} ({schedule.tz})",
            f"{nxt}{self._quiet(task)}",
            what,
        ]

    def _quiet(self, task: ScheduledTask) -> str:
        """` (muted)`, ` (snoozed until …)` or nothing: whether its posts are held back."""
        if task.muted:
            return " (muted until `unmute`)"
        until = task.snoozed_until
        if until is not None and self.clock() < until:
            return f" (snoozed until {for_readers(until, task.schedule.zone)})"
        return ""

    async def _recent(self, conversation: ConversationRef | None) -> str:
        """`Recent: 2 task(s) ended in the last 24 h (latest `t_…`, cancelled)`, or ""."""
        ended = await self.store.ended_within(
            RECENT_SECONDS, None if conversation is None else conversation.id
        )
        if not ended:
            return ""
        last = ended[0]
        return (
            f"Recent: {len(ended)} scheduled task(s) ended in the last 24 h "
            f"(latest `{last.id}`, {last.state})"
        )

    async def status(self, conversation: ConversationRef) -> str:
        """`status` lines: the conversation's live tasks and checks with their next fire time
        and whether they are muted or snoozed, then a `Recent:` line for those that ended."""
        tasks = await self.store.of_conversation(conversation.id)
        recent = await self._recent(conversation)
        lines = (
            ["**Scheduled tasks**:", "", self.table(tasks, here=conversation.id)] if tasks else []
        )
        return "\n".join([*lines, *(["", recent] if recent else [])])

    async def _say(self, conv: ConversationRef, text: str, *, key: str) -> None:
        try:
            await self._deps.outbox.send(conv, text, idempotency_key=key)
        except DeliveryError as exc:
            # Recorded and retried by the outbox; a firing does not stop on it.
            log.warning("posting a scheduled task notice failed: %s", exc)


@dataclass(frozen=True)
class _Late:
    """Why a firing is late, as said: `missed 3 run(s) {during}`, `is 1h late: {cause}`."""

    during: str
    cause: str


_DOWN = _Late("while I was down", "I was down when it came due")
_BUSY = _Late("while I was busy", "I was busy")


@dataclass(frozen=True)
class _Firing:
    """One firing being carried out: the due times it covers (the last one last), how many
    came due in all, which run now and what to say."""

    task: ScheduledTask
    due: list[datetime]
    total: int
    now: datetime
    runs: list[datetime]
    notice: str


def _gist(text: str, limit: int = 80) -> str:
    one = " ".join(text.split())
    return f"`{one[:limit]}{'…' if len(one) > limit else ''}`"


def _overdue(
    task: ScheduledTask, due: datetime, now: datetime
) -> tuple[list[datetime], int, datetime]:
    """The due times from `due` to `now`: the first MAX_CATCH_UP, how many, and the last."""
    span = due_span(
        task.schedule, task.anchor, due - timedelta(microseconds=1), now, fired=task.fired
    )
    if span.last is None:  # a job a little early, or a one-shot approved after its time
        return [due], 1, due
    return span.times, span.total, span.last


def _catch_up(
    task: ScheduledTask,
    times: Sequence[datetime],
    total: int,
    last: datetime,
    now: datetime,
    *,
    late: _Late | None,
) -> tuple[list[datetime], str]:
    """Which due times run now and what to say, by the task's `missed` policy (`late`: why
    it is late, when known: downtime, quiet hours)."""
    seconds = (now - last).total_seconds()
    if total == 1 and seconds <= LATE_GRACE_SECONDS and late is None:
        return [last], ""
    late = late or _BUSY
    tz = task.schedule.zone
    missed = total - 1
    policy = task.schedule.missed
    if policy == "skip":
        return [], (
            f"⏭️ Task `{task.id}` skipped {total} run(s) missed {late.during} (the last was "
            f"due {for_readers(last, tz)}), as its `missed: skip` asks."
        )
    if policy == "all":
        more = total - len(times)
        extra = f"; {more} more were not replayed (the limit is {MAX_CATCH_UP})" if more else ""
        return list(times), (
            f"⏰ Task `{task.id}` missed {total} run(s) {late.during}; running "
            f"{len(times)} of them now{extra}."
        )
    took = format_duration(seconds)
    if missed:
        return [last], (
            f"⏰ Task `{task.id}`: missed {missed} run(s) {late.during}; this one is {took} "
            f"late (due {for_readers(last, tz)})."
        )
    return [last], (
        f"⏰ Task `{task.id}` is {took} late: {late.cause} (due {for_readers(last, tz)})."
    )
