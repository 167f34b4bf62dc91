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
from host.features.schedules.line import ScheduleError, is_schedule_line
from host.prompts.clarify import code_block

WorkKind = Literal["plan", "campaign", "request"]
_CONFIRM = re.compile(r"^\s*(confirm|please confirm|ask (me )?first)\s*[.!]?\s*$", re.IGNORECASE)
OFFLINE_ONLY = (
    "Without a model (offline mode) I can schedule only what runs without one: an explicit "
    "plan such as `s1: shell: df -h` (one node per line) or a `campaign:` line. Set "
    "ANTHROPIC_API_KEY to schedule any request."
)


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
