"""Scheduled tasks from chat without a model: a `schedule:` line proposes a task, and
`schedule: list | pause ID | resume ID | cancel ID | run ID` act on them."""

from __future__ import annotations

import re

from host.features.schedules.line import is_schedule_line
from host.features.schedules.tasks import Proposer, ScheduledTasks
from host.runtime.messages import InboundMessage
from host.runtime.roles import Roles

_ACTION = re.compile(
    r"^\s*schedule\s*:\s*(?P<action>list|pause|resume|cancel|delete|run)\b\s*(?P<arg>\S*)\s*$",
    re.IGNORECASE,
)
HELP = (
    "`schedule: every 2h | WHAT` (or `in 20m`, `at 2026-12-24 09:00`, `cron 0 9 * * 1-5`) runs "
    "WHAT (a plan or a campaign line offline) once you approve it; `schedule: list`, and "
    "`schedule: pause|resume|cancel|run ID`."
)


class ScheduleCommands:
    """The `schedule:` chat commands (the Host has the same as tools)."""

    def __init__(self, tasks: ScheduledTasks, roles: Roles) -> None:
        self._tasks = tasks
        self._roles = roles

    @property
    def help(self) -> str:
        return f"**Scheduled tasks**: {HELP}"

    async def handle(self, msg: InboundMessage) -> str | None:
        """The reply to a `schedule:` message, None for anything else."""
        if msg.origin != "user" or not is_schedule_line(msg.text):
            return None
        conv = msg.conversation
        action = _ACTION.match(msg.text)
        if action is None:
            who = Proposer(conv, msg.author_id, msg.author_name, msg.event_id, msg.roles)
            return await self._tasks.propose(who, msg.text)
        verb, task_id = action["action"].lower(), action["arg"]
        if verb == "list":
            everything = task_id.lower() == "all" and msg.author_id in self._roles.admins
            return await self._tasks.listing(conv, everything=everything)
        if not task_id:
            return f"Name the task: `schedule: {verb} t_…` (`schedule: list` shows the ids)."
        if verb == "run":
            task = await self._tasks.store.get(task_id)
            if task is None or task.conversation.id != conv.id:
                return f"No task `{task_id}` in this conversation."
            if not self._tasks.may_act(task, msg.author_id):
                return (
                    f"You may not run task `{task_id}`: only its owner ({task.owner_name}), "
                    "an approver or an admin can."
                )
            return await self._tasks.run_now(task_id)
        verb = "cancel" if verb == "delete" else verb
        return await self._tasks.act(task_id, verb, by=msg.author_id, conversation=conv)
