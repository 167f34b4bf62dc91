"""What a scheduled task runs at each firing, read once when it is created: an explicit plan
(its nodes and their exact commands), a campaign line, or a request for the Host.

The approval prompt shows this, and the exact node commands of a plan become the task's
grants: a firing runs them without asking again. Anything else a firing needs is asked for
at that firing (the prompt is posted instead of the work running).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from agents.campaign_syntax import parse_campaign
from agents.plan_syntax import parse_plan
from agents.workspace_tools import denied_reason
from host.features.schedules.line import ScheduleError, is_schedule_line
from host.prompts.clarify import code_block

WorkKind = Literal["plan", "campaign", "request", "check"]
_CONFIRM = re.compile(r"^\s*(confirm|please confirm|ask (me )?first)\s*[.!]?\s*$", re.IGNORECASE)
OFFLINE_ONLY = (
    "Without a model (offline mode) I can schedule only what runs without one: an explicit "
    "plan such as `s1: shell: df -h` (one node per line) or a `campaign:` line. Set "
    "ANTHROPIC_API_KEY to schedule any request."
)


_CHECK = re.compile(r"^\s*check\s*:\s*(?P<command>.+?)\s*$", re.IGNORECASE | re.DOTALL)
_WHEN = re.compile(r"\s\|\s*when\s*:\s*(?P<when>[^|]*?)\s*$", re.IGNORECASE)
_OUTPUT_MATCH = re.compile(r"^output\s*~\s*(?P<pattern>.+)$", re.IGNORECASE)
CHECK_SYNTAX = (
    "`watch: every 30m | check: COMMAND`, optionally `| when: fails` (the default: a non-zero "
    "exit or a timeout trips it) or `| when: output ~ REGEX` (output matching REGEX trips it)"
)


@dataclass(frozen=True)
class Check:
    """A standing check: a command run without a model, and what trips it."""

    command: str
    # None: a failed command (non-zero exit, timeout) trips it; else output matching it.
    pattern: re.Pattern[str] | None

    @property
    def trips_on(self) -> str:
        """What trips it, in words."""
        if self.pattern is None:
            return "the command fails (a non-zero exit or a timeout)"
        return f"its output matches `{self.pattern.pattern}`"


def parse_check(what: str) -> Check | None:
    """The check of a task's WHAT (`check: CMD | when: …`), None when it is no check;
    ScheduleError for a check that cannot be read."""
    match = _CHECK.match(what)
    if match is None:
        return None
    command = match["command"]
    pattern: re.Pattern[str] | None = None
    when = _WHEN.search(command)
    if when is not None:
        command = command[: when.start()].strip()
        condition = when["when"].strip()
        output = _OUTPUT_MATCH.match(condition)
        if output is not None:
            try:
                pattern = re.compile(output["pattern"].strip())
            except re.error as exc:
                raise ScheduleError(
                    f"`when: {condition}`: the pattern is not a regular expression ({exc}). "
                    f"Write {CHECK_SYNTAX}."
                ) from None
        elif condition.lower() != "fails":
            raise ScheduleError(f"`when: {condition}` is not a condition. Write {CHECK_SYNTAX}.")
    if not command or "\n" in command:
        raise ScheduleError(f"A check needs one command line. Write {CHECK_SYNTAX}.")
    if (reason := denied_reason(command)) is not None:
        raise ScheduleError(f"This check is refused: it looks like {reason}, never run here.")
    return Check(command, pattern)


@dataclass(frozen=True)
class TaskWork:
    """What a task runs: its kind, the text each firing submits, the commands approved with
    it, and a description for the approval prompt."""

    kind: WorkKind
    text: str
    grants: tuple[str, ...]
    description: str


def task_work(what: str, *, offline: bool) -> TaskWork:
    """Read WHAT; ScheduleError when it cannot be scheduled (with what to write instead)."""
    if any(is_schedule_line(line) for line in what.splitlines()):
        raise ScheduleError(
            "A scheduled task cannot create scheduled tasks: write what to do at each firing, "
            "not another `schedule:` line."
        )
    check = parse_check(what)
    if check is not None:
        return TaskWork(
            "check",
            what,
            (check.command,),
            f"this check, without a model, in this conversation's sandboxed workspace:\n"
            f"{code_block(check.command)}\nIt trips when {check.trips_on}. While it passes "
            "nothing is said and no model is called; when it trips, and when it passes again, "
            "it says so here.",
        )
    plan = parse_plan(what)
    if plan is not None:
        # Approved now, so a firing does not ask for the whole plan again.
        text = "\n".join(line for line in what.splitlines() if not _CONFIRM.match(line))
        nodes = plan["nodes"]
        lines = [f"{n['id']}: {n['agent']}: {n['template']}" for n in nodes]
        return TaskWork(
            "plan",
            text,
            tuple(dict.fromkeys(str(n["template"]) for n in nodes)),
            f"this plan of {len(nodes)} node(s), exactly as written:\n"
            + code_block("\n".join(lines)),
        )
    campaign = parse_campaign(what)
    if campaign is not None:
        command = campaign.get("run", "")
        return TaskWork(
            "campaign",
            what,
            (),
            f"a campaign ({campaign.get('goal', '')[:200]}) on machine "
            f"`{campaign.get('machine', 'local')}` running:\n{code_block(command)}\n"
            "Its command is approved at each firing, as every campaign's is.",
        )
    if offline:
        raise ScheduleError(OFFLINE_ONLY)
    return TaskWork(
        "request",
        what,
        (),
        f"this request, answered by me (the Host) at each firing:\n{code_block(what)}\n"
        "Commands or plans needing approval are asked for at that firing.",
    )
