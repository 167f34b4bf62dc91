"""Scheduled tasks installed into a runtime: the `schedule:` commands and Host tools, the
approval decisions, the firing jobs, the commands approved with a task, and `status` lines."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar

from agents.tools import Tool
from host.agent.host_agent import ContextSource
from host.conversation.service import CommandHandler, ReplyGate
from host.features.feature import BaseFeature, HostParts, StatusSource
from host.features.schedules.checks import Checks
from host.features.schedules.commands import ScheduleCommands
from host.features.schedules.migrations import MIGRATIONS
from host.features.schedules.notify import NotifyGate
from host.features.schedules.settings import SchedulesSettings
from host.features.schedules.store import RECONCILE_SECONDS, TaskStore
from host.features.schedules.tasks import (
    SCHEDULE_APPROVAL,
    SCHEDULED_TASK_JOB,
    ScheduledTasks,
    ScheduleLimits,
    TaskDeps,
)
from host.features.schedules.tools import FiringContext, build_schedule_tools
from host.graph.run_store import RunStore
from host.prompts.clarify import CommandGrants
from host.runtime.events import EventBus, subscribe_decision, subscribe_job
from host.runtime.scheduling import FiredJob
from host.runtime.turn import TurnContext

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SchedulesSection:
    """The zone shared with the Host (named as in Settings), and this capability's own
    settings, read by their model from .env and the environment."""

    timezone: str
    own: SchedulesSettings = field(default_factory=SchedulesSettings)


class TaskGrants:
    """The exact commands approved with a task, for the runs of its firings (not once the
    task is paused or cancelled; a one-shot task is `done` while its firing still runs)."""

    def __init__(self, store: TaskStore) -> None:
        self._store = store

    async def covers(self, task_id: str, requester: str, command: str) -> bool:
        task = await self._store.get(task_id)
        return (
            task is not None
            and task.state in ("active", "done")
            and task.owner == requester
            and command in task.grants
        )


class SchedulesFeature(BaseFeature):
    """Tasks that run later or regularly, approved once by their owner."""

    Section: ClassVar[type[SchedulesSection]] = SchedulesSection
    migrations = MIGRATIONS

    def __init__(self, parts: HostParts, section: SchedulesSection) -> None:
        self._parts = parts
        self.nudges = parts.nudges
        # Set once what came due while the bot was down has fired and every job is armed.
        self.caught_up = asyncio.Event()
        self.tasks = ScheduledTasks(
            TaskStore(parts.store),
            TaskDeps(
                parts.scheduler,
                parts.broker,
                parts.outbox,
                parts.bus,
                parts.roles,
                parts.admission,
                Checks(
                    parts.sandbox,
                    parts.workspace,
                    machines=parts.machines,
                    roles=parts.roles,
                    rounds=parts.home / "campaigns",
                    secret_names=parts.secret_names,
                ),
                parts.people,
                self.nudges,
            ),
            ScheduleLimits(
                max_per_user=section.own.schedule_max_per_user,
                min_interval_seconds=section.own.schedule_min_interval_seconds,
                channel_firings_per_hour=section.own.schedule_channel_per_hour,
                default_tz=section.timezone,
            ),
            offline=parts.provider.offline,
        )

    def host_tools(self) -> Sequence[Tool[TurnContext]]:
        return build_schedule_tools(self.tasks, self._parts.roles)

    def context_sources(self, host_tools: Sequence[str]) -> Sequence[ContextSource]:
        return (FiringContext(),)

    def status_sources(self) -> Sequence[StatusSource]:
        return (self.tasks.status,)

    def commands(self) -> CommandHandler | None:
        return ScheduleCommands(self.tasks, self._parts.roles)

    def command_grants(self) -> Sequence[CommandGrants]:
        return (TaskGrants(self.tasks.store),)

    def reply_gate(self) -> ReplyGate | None:
        tasks = self.tasks
        # The tasks' clock read at each call (tests replace it).
        now = lambda: tasks.clock()  # noqa: E731, PLW0108
        runs = RunStore(self._parts.store)
        return NotifyGate(tasks.store, runs, clock=now, nudges=self.nudges)

    def subscribe(self, bus: EventBus) -> None:
        subscribe_decision(bus, SCHEDULE_APPROVAL, self.tasks.decided)
        subscribe_job(bus, SCHEDULED_TASK_JOB, self._on_job)

    async def _on_job(self, job: FiredJob) -> None:
        due = datetime.fromisoformat(str(job.payload["due"]))
        await self.tasks.fire(str(job.payload["task_id"]), due)

    async def start(self, stack: AsyncExitStack) -> None:
        # In the background, owned by the watcher: what came due while the bot was down
        # fires now (once, as each task's `missed` says) while the bot already serves, so
        # overdue checks (up to a minute each, five on a machine) never keep it deaf.
        watcher = asyncio.create_task(self._watch(), name="scheduled-tasks-watch")

        async def stop() -> None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

        stack.push_async_callback(stop)

    async def _watch(self) -> None:
        """Fire what is overdue after a restart, then pick up what the operator changed
        (pause, resume, run now from the CLI)."""
        try:
            await self.tasks.start()
        except Exception:
            # Each task's job is still armed or overdue: the scheduler fires it in time.
            log.exception("firing scheduled tasks overdue after the restart failed")
        finally:
            self.caught_up.set()
        while True:
            await asyncio.sleep(RECONCILE_SECONDS)
            try:
                await self.tasks.reconcile_operator_changes()
            except Exception:
                log.exception("checking scheduled tasks for changes failed; retrying")
