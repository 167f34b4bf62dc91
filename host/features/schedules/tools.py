"""The Host's scheduled-task tools (`schedule_task`, `list_tasks`, `cancel_task`) and what a
scheduled firing's turn is told."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.tools import Tool
from host.features.schedules.tasks import Proposer, ScheduledTasks
from host.runtime.roles import Roles
from host.runtime.turn import TurnContext


class ScheduleTaskInput(BaseModel):
    """Input of `schedule_task`: the parts of a `schedule:` line."""

    model_config = ConfigDict(extra="forbid")
    when: str = Field(
        description="`in 20m`, `at 2026-12-24 09:00`, `every 2h` or `cron 0 9 * * 1-5`",
        min_length=3,
        max_length=200,
    )
    what: str = Field(
        description="the request to handle at each firing, as the person would write it",
        min_length=1,
        max_length=8000,
    )
    tz: str | None = Field(default=None, description="IANA time zone, e.g. Europe/Paris")
    until: str | None = Field(default=None, description="last date, e.g. 2027-01-31")
    count: int | None = Field(default=None, ge=1, description="at most this many firings")
    missed: Literal["skip", "once", "all"] | None = None
    notify: Literal["always", "changes", "failures"] | None = None

    def line(self) -> str:
        """The `schedule:` line these fields make (checked like one a person typed)."""
        fields = {
            "tz": self.tz,
            "until": self.until,
            "count": self.count,
            "missed": self.missed,
            "notify": self.notify,
        }
        tail = "".join(f" | {k}: {v}" for k, v in fields.items() if v is not None)
        return f"schedule: {self.when.strip()} | {self.what.strip()}{tail}"


class WatchInput(BaseModel):
    """Input of `watch`: a standing check."""

    model_config = ConfigDict(extra="forbid")
    every: str = Field(description="how often, e.g. 30m or 2h", min_length=2, max_length=20)
    check: str = Field(
        description="one shell command run in the conversation's workspace; it passes when it "
        "exits 0",
        min_length=1,
        max_length=2000,
    )
    output_matches: str | None = Field(
        default=None, description="a regex: the check trips when the output matches it instead"
    )
    metric_above_or_below: str | None = Field(
        default=None,
        description="instead, a condition on the last value of a metric the command prints "
        "as `NAME value`, e.g. `temp > 85` (>, >=, <, <=)",
        max_length=200,
    )
    machine: str | None = Field(
        default=None,
        description="a machine of machines.toml to run it on, as a campaign round runs "
        "(default: this conversation's sandboxed workspace)",
        max_length=64,
    )

    def line(self) -> str:
        """The `schedule:` line of this check (checked like one a person typed)."""
        fields = {
            "machine": self.machine,
            "when": f"output ~ {self.output_matches}"
            if self.output_matches
            else self.metric_above_or_below,
        }
        tail = "".join(f" | {k}: {v.strip()}" for k, v in fields.items() if v)
        return f"schedule: every {self.every.strip()} | check: {self.check.strip()}{tail}"


class TaskRef(BaseModel):
    """A task id."""

    model_config = ConfigDict(extra="forbid")
    task_id: str = Field(min_length=1, max_length=64)


class ListInput(BaseModel):
    """Input of `list_tasks`."""

    model_config = ConfigDict(extra="forbid")
    everywhere: bool = Field(default=False, description="every conversation's (admins only)")


class ScheduleTools:
    """The tools, bound to the bot's tasks."""

    def __init__(self, tasks: ScheduledTasks, roles: Roles) -> None:
        self._tasks = tasks
        self._roles = roles

    async def schedule_task(self, ctx: TurnContext, args: ScheduleTaskInput) -> str:
        """Propose a task; its owner approves it from the prompt."""
        if ctx.origin != "user":
            return (
                "Refused: only a person's own message can schedule a task (a scheduled or "
                "system turn cannot create scheduled tasks)."
            )
        who = Proposer(ctx.conversation, ctx.author_id, ctx.author_name, ctx.turn_id, ctx.roles)
        return await self._tasks.propose(who, args.line())

    async def watch(self, ctx: TurnContext, args: WatchInput) -> str:
        """Propose a standing check; its owner approves it from the prompt."""
        if ctx.origin != "user":
            return "Refused: only a person's own message can set up a check."
        who = Proposer(ctx.conversation, ctx.author_id, ctx.author_name, ctx.turn_id, ctx.roles)
        return await self._tasks.propose(who, args.line())

    async def list_tasks(self, ctx: TurnContext, args: ListInput) -> str:
        everything = args.everywhere and ctx.author_id in self._roles.admins
        return await self._tasks.listing(ctx.conversation, everything=everything)

    async def cancel_task(self, ctx: TurnContext, args: TaskRef) -> str:
        if ctx.origin != "user":
            return "Refused: only a person's own message cancels a scheduled task."
        return await self._tasks.act(
            args.task_id, "cancel", by=ctx.author_id, conversation=ctx.conversation
        )


def build_schedule_tools(tasks: ScheduledTasks, roles: Roles) -> list[Tool[TurnContext]]:
    """The scheduled-task tools."""
    t = ScheduleTools(tasks, roles)
    return [
        Tool(
            "schedule_task",
            "Propose a task that runs later or regularly (the person approves it in the "
            "thread before anything is scheduled).",
            ScheduleTaskInput,
            t.schedule_task,
        ),
        Tool(
            "watch",
            "Propose a standing check: a command run on schedule without a model, which "
            "speaks (and wakes you) only when it trips. The person approves it first.",
            WatchInput,
            t.watch,
        ),
        Tool(
            "list_tasks",
            "The scheduled tasks of this conversation with their next fire times.",
            ListInput,
            t.list_tasks,
        ),
        Tool(
            "cancel_task",
            "Cancel a scheduled task (its owner, an approver or an admin).",
            TaskRef,
            t.cancel_task,
        ),
    ]


class FiringContext:
    """Tells the Host that a turn is a scheduled task's firing, run unattended."""

    async def context(self, ctx: TurnContext) -> str:
        if ctx.origin != "scheduled":
            return ""
        return (
            f"## This turn is a scheduled firing\nScheduled task `{ctx.task}` of "
            f"{ctx.author_name} fired: do what its message asks now and report the result "
            "briefly. Nobody is watching: commands approved with the task run, anything else "
            "posts an approval prompt. A scheduled turn cannot create scheduled tasks."
        )
