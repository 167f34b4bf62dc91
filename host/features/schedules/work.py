"""What a scheduled task runs at each firing, read once when it is created: an explicit plan
(its nodes and their exact commands), a campaign line, or a request for the Host.

The approval prompt shows this, and the exact node commands of a plan become the task's
grants: a firing runs them without asking again. Anything else a firing needs is asked for
at that firing (the prompt is posted instead of the work running).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Literal

from pydantic import ValidationError

from agents.campaign_syntax import parse_campaign
from agents.plan_syntax import PlanSyntaxError, parse_plan
from agents.workspace_tools import denied_reason
from core.markdown import code_block
from core.patterns import PatternError, UserPattern
from host.features.schedules.line import ScheduleError, is_schedule_line
from oncall.metrics import MetricReader, parse_number
from oncall.model import MetricSpec
from oncall.probe import ProbeResult

WorkKind = Literal["plan", "campaign", "request", "check"]
_CONFIRM = re.compile(r"^\s*(confirm|please confirm|ask (me )?first)\s*[.!]?\s*$", re.IGNORECASE)
OFFLINE_ONLY = (
    "Without a model (offline mode) I can schedule only what runs without one: an explicit "
    "plan such as `s1: shell: df -h` (one node per line) or a `campaign:` line. Give "
    "RAVEN_MODEL its key (ANTHROPIC_API_KEY or OPENAI_API_KEY) to schedule any request."
)


_CHECK = re.compile(r"^\s*check\s*:\s*(?P<command>.+?)\s*$", re.IGNORECASE | re.DOTALL)
# `| machine: …`, `| metric: …` and `| when: …` after a check's command, in any order.
_CHECK_FIELD = re.compile(r"\s\|\s*(?P<name>machine|metric|when)\s*:", re.IGNORECASE)
_OUTPUT_MATCH = re.compile(r"^output\s*~\s*(?P<pattern>.+)$", re.IGNORECASE)
_THRESHOLD = re.compile(r"^(?P<metric>[A-Za-z_][\w.\-/]*)\s*(?P<op>>=|<=|>|<)\s*(?P<value>\S+)$")
CHECK_SYNTAX = (
    "`watch: every 30m | check: COMMAND`, optionally with `| machine: NAME` (a machine of "
    "machines.toml; default: this conversation's sandboxed workspace) and `| when: fails` "
    "(the default: a non-zero exit or a timeout trips it), `| when: output ~ REGEX` (output "
    "matching REGEX trips it) or `| when: METRIC > NUMBER` (also >=, <, <=: the last "
    "`METRIC value` it prints; `| metric: METRIC` names it, or `| metric: METRIC /REGEX/` "
    "with one group around the value)"
)


@dataclass(frozen=True)
class Threshold:
    """A metric's last printed value compared with a number."""

    metric: MetricSpec
    op: str
    value: float

    def crossed(self, seen: float) -> bool:
        return {
            ">": seen > self.value,
            ">=": seen >= self.value,
            "<": seen < self.value,
            "<=": seen <= self.value,
        }[self.op]

    def __str__(self) -> str:
        return f"{self.metric.name} {self.op} {self.value:g}"


@dataclass(frozen=True)
class Check:
    """A standing check: a command run without a model (here or on a registered machine),
    and what trips it."""

    command: str
    # None: a failed command (non-zero exit, timeout) trips it; else output matching it.
    pattern: UserPattern | None
    machine: str | None = None
    threshold: Threshold | None = None

    @property
    def trips_on(self) -> str:
        """What trips it, in words."""
        if self.threshold is not None:
            return (
                f"the last `{self.threshold.metric.name}` it prints is "
                f"{self.threshold.op} {self.threshold.value:g}, or it prints none, or fails"
            )
        if self.pattern is None:
            return "the command fails (a non-zero exit or a timeout)"
        return f"its output matches `{self.pattern.pattern}`"

    @property
    def where(self) -> str:
        """Where it runs, in words."""
        if self.machine is None:
            return "in this conversation's sandboxed workspace"
        return f"on machine `{self.machine}`, as a campaign round runs"

    def verdict(self, result: ProbeResult) -> tuple[CheckState, str]:
        """`passing`, `tripped` or `broken` (it could not run), and why in words."""
        if result.error:
            return "broken", result.error
        if result.timed_out:
            return "tripped", "its command timed out"
        if self.pattern is not None:
            if self.pattern.matches(result.output):
                return "tripped", f"its output matched `{self.pattern.pattern}`"
            return "passing", ""
        if result.exit_code != 0:
            return "tripped", f"its command exited with {result.exit_code}"
        if self.threshold is not None:
            reader = MetricReader(self.threshold.metric)
            values = [*reader.feed(result.output.encode()), *reader.flush()]
            if not values:
                return "tripped", f"it printed no `{self.threshold.metric.name}` value"
            last = values[-1].value
            if self.threshold.crossed(last):
                return "tripped", f"{self.threshold.metric.name} is {last:g} ({self.threshold})"
        return "passing", ""

    async def judge(self, result: ProbeResult) -> tuple[CheckState, str]:
        """`verdict` in a worker thread: RE2 releases the GIL while it matches, so however
        costly a person's pattern (bounded, linear), the event loop goes on meanwhile."""
        return await asyncio.to_thread(self.verdict, result)


CheckState = Literal["passing", "tripped", "broken"]


def parse_check(what: str) -> Check | None:
    """The check of a task's WHAT (`check: CMD | machine: … | metric: … | when: …`), None
    when it is no check; ScheduleError for a check that cannot be read."""
    match = _CHECK.match(what)
    if match is None:
        return None
    text = match["command"]
    found = list(_CHECK_FIELD.finditer(text))
    command = text[: found[0].start()].strip() if found else text.strip()
    fields: dict[str, str] = {}
    ends = [field.start() for field in found[1:]] + [len(text)]
    for field, end in zip(found, ends, strict=False):  # no fields: nothing to read
        name = field["name"].lower()
        if name in fields:
            raise ScheduleError(f"`{name}:` is given twice. Write {CHECK_SYNTAX}.")
        fields[name] = text[field.end() : end].strip()
    if not command or "\n" in command:
        raise ScheduleError(f"A check needs one command line. Write {CHECK_SYNTAX}.")
    if (reason := denied_reason(command)) is not None:
        raise ScheduleError(f"This check is refused: it looks like {reason}, never run here.")
    machine = fields.get("machine")
    if machine is not None and not re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", machine):
        raise ScheduleError(f"`machine: {machine}` is not a machine name. Write {CHECK_SYNTAX}.")
    pattern, threshold = _condition(fields.get("when", "fails"), fields.get("metric"))
    return Check(command, pattern, machine, threshold)


def _condition(condition: str, metric: str | None) -> tuple[UserPattern | None, Threshold | None]:
    """What `when:` (and `metric:`) say trips the check."""
    output = _OUTPUT_MATCH.match(condition)
    if output is not None and metric is None:
        try:
            return UserPattern(output["pattern"].strip()), None
        except PatternError as exc:
            raise ScheduleError(f"`when: {condition}`: {exc}. Write {CHECK_SYNTAX}.") from None
    if condition.lower() == "fails" and metric is None:
        return None, None
    threshold = _THRESHOLD.match(condition)
    number = parse_number(threshold["value"]) if threshold is not None else None
    if threshold is None or number is None:
        raise ScheduleError(
            f"`when: {condition}` is not a condition"
            + (" on a metric" if metric is not None else "")
            + f". Write {CHECK_SYNTAX}."
        )
    spec = _metric(metric, threshold["metric"])
    return None, Threshold(spec, threshold["op"], number)


def _metric(declared: str | None, named: str) -> MetricSpec:
    """The metric `when:` compares: `metric: NAME [/REGEX/]`, else the name alone."""
    name, _, rest = (declared or named).partition(" ")
    if name != named:
        raise ScheduleError(
            f"`when:` compares `{named}` but `metric:` names `{name}`. Write {CHECK_SYNTAX}."
        )
    pattern = rest.strip()
    if pattern.startswith("/") and pattern.endswith("/") and len(pattern) > 1:
        pattern = pattern[1:-1]
    try:
        return MetricSpec(name=name, pattern=pattern or None)
    except ValidationError as exc:
        why = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise ScheduleError(
            f"`metric: {declared or named}`: {why}. Write {CHECK_SYNTAX}."
        ) from None


@dataclass(frozen=True)
class TaskWork:
    """What a task runs: its kind, the text each firing submits, the commands approved with
    it, and a description for the approval prompt."""

    kind: WorkKind
    text: str
    grants: tuple[str, ...]
    description: str


def _granted(node: dict[str, object]) -> str:
    """The tool servers a plan line grants its node, as written (approved with the task: its
    firings may call them)."""
    servers = node.get("mcp")
    if servers is None:
        return ""
    return f" [mcp {', '.join(map(str, servers)) or 'none'}]" if isinstance(servers, list) else ""


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
            f"this check, without a model, {check.where}:\n"
            f"{code_block(check.command)}\nIt trips when {check.trips_on}. While it passes "
            "nothing is said and no model is called; when it trips, and when it passes again, "
            "it says so here.",
        )
    try:
        plan = parse_plan(what)
    except PlanSyntaxError as exc:
        raise ScheduleError(exc.refusal(nothing="scheduled")) from None
    if plan is not None:
        # Approved now, so a firing does not ask for the whole plan again.
        text = "\n".join(line for line in what.splitlines() if not _CONFIRM.match(line))
        nodes = plan["nodes"]
        lines = [f"{n['id']}: {n['agent']}: {n['template']}{_granted(n)}" for n in nodes]
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
