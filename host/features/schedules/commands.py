"""Scheduled tasks from chat without a model: a `schedule:` line proposes a task, and
`schedule: list | pause ID | resume ID | cancel ID | run ID` act on them."""

from __future__ import annotations

import re
from datetime import timedelta

from host.features.schedules.line import is_schedule_line
from host.features.schedules.tasks import Proposer, ScheduledTasks
from host.features.schedules.work import CHECK_SYNTAX
from host.runtime.messages import InboundMessage
from host.runtime.roles import Roles
from oncall.durations import DAY_SECONDS, parse_duration

# The longest snooze: for longer, `mute` (until `unmute`) says what is meant.
MAX_SNOOZE_SECONDS = 30 * DAY_SECONDS

_ACTION = re.compile(
    r"^\s*schedule\s*:\s*(?P<action>list|pause|resume|cancel|delete|run)\b\s*(?P<arg>\S*)\s*$",
    re.IGNORECASE,
)
_WATCH = re.compile(
    r"^\s*watch\s*:\s*(?P<when>[^|]+?)\s*\|\s*check\s*:\s*(?P<rest>.+)$",
    re.IGNORECASE | re.DOTALL,
)
_BARE_WATCH = re.compile(r"^\s*watch\s*:", re.IGNORECASE)
_HUSH = re.compile(
    r"^\s*(?:(?P<mute>mute|unmute)|snooze\s+(?P<snooze>\d+\s*[smhd]\w*))"
    r"(?:\s+(?P<task>t_[0-9a-f]{8}))?\s*[.!]?\s*$",
    re.IGNORECASE,
)
HELP = (
    "`schedule: every 2h | WHAT` (or `in 20m`, `at …`, `cron …`) runs WHAT once you approve "
    "it; `watch: every 30m | check: CMD` runs a check with no model, speaking only when it "
    "trips; `schedule: list|pause|resume|cancel|run ID`; `mute`, `unmute`, `snooze 2h`."
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
        """The reply to a `schedule:` or `watch:` message, None for anything else."""
        if msg.origin != "user":
            return None
        watch = _WATCH.match(msg.text)
        if watch is not None:
            # A standing check is a scheduled task whose work is a model-free check.
            return await self._propose(msg, f"schedule: {watch['when']} | check: {watch['rest']}")
        hush = _HUSH.match(msg.text)
        if hush is not None:
            return await self._hush(msg, hush)
        if _BARE_WATCH.match(msg.text):
            return f"⚠️ I could not read this check. Write {CHECK_SYNTAX}."
        if not is_schedule_line(msg.text):
            return None
        action = _ACTION.match(msg.text)
        if action is None:
            return await self._propose(msg, msg.text)
        verb, task_id = action["action"].lower(), action["arg"]
        conv = msg.conversation
        if verb == "list":
            everything = task_id.lower() == "all" and msg.author_id in self._roles.admins
            return await self._tasks.listing(conv, everything=everything)
        if not task_id:
            return f"Name the task: `schedule: {verb} t_…` (`schedule: list` shows the ids)."
        verb = "cancel" if verb == "delete" else verb
        return await self._tasks.act(task_id, verb, by=msg.author_id, conversation=conv)

    async def _hush(self, msg: InboundMessage, hush: re.Match[str]) -> str:
        conv, by, task = msg.conversation, msg.author_id, hush["task"]
        if hush["mute"]:
            muted = hush["mute"].lower() == "mute"
            return await self._tasks.hush(conv, by, task, muted=muted)
        written = hush["snooze"].replace(" ", "")
        try:
            seconds = parse_duration(written, most=MAX_SNOOZE_SECONDS, name="snooze")
        except ValueError as exc:
            return (
                f"⚠️ {exc}. Write it like `snooze 2h` (or `snooze 30m t_…`); `mute` silences "
                "a task until `unmute`."
            )
        until = self._tasks.clock() + timedelta(seconds=seconds)
        return await self._tasks.hush(conv, by, task, muted=False, until=until)

    async def _propose(self, msg: InboundMessage, line: str) -> str:
        who = Proposer(msg.conversation, msg.author_id, msg.author_name, msg.event_id, msg.roles)
        return await self._tasks.propose(who, line)
