"""The Host's campaign tools: start a campaign, read its state, and decide on it.

Decisions (`campaign_wait`, `campaign_resubmit`, `campaign_terminate`) must cite a recorded
measurement; `campaign_report` closes a campaign only through the report gate.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents.tools import Tool, ToolOutput
from core.errors import FieldError, describe_validation_error
from core.ids import ConversationRef
from host.runtime.people import People
from host.runtime.roles import Roles
from host.runtime.turn import TurnContext
from oncall.access import Requester
from oncall.durations import DAY_SECONDS, TooLong, parse_duration, shortened
from oncall.engine import CampaignEngine, CampaignError
from oncall.model import (
    MAX_BUDGET_SECONDS,
    MAX_POLL_SECONDS,
    MAX_ROUNDS,
    MAX_WAKE_SECONDS,
    Budget,
    CampaignSpec,
    MetricSpec,
    check_partition,
)
from oncall.store import CampaignRecord

MAX_CPUS = 1024
# The monitor reads a round's output at most this often: a faster poll only burns a core.
MIN_POLL_SECONDS = 1.0
# A round silent for longer than this is stalled whatever was asked (a week of no output).
MAX_STALL_SECONDS = 7 * DAY_SECONDS
CAMPAIGN_SYNTAX = (
    "campaign: <goal> | machine: local | run: <command> | metric: <name> <min|max> | budget: 2h"
)


class StartCampaignInput(BaseModel):
    """Input of `start_campaign` (also what the offline campaign syntax produces).

    Unknown fields are kept (not refused here) so that `campaign_spec` can name them with the
    valid ones, among the other problems of the line."""

    model_config = ConfigDict(extra="allow")
    goal: str = Field(description="what the campaign is for, one sentence")
    run: str | None = Field(default=None, description="the command one round runs")
    machine: str = Field(default="local", description="a machine from machines.toml")
    metric: str | None = Field(default=None, description="`<name> <min|max>`, e.g. `loss min`")
    budget: str | None = Field(default=None, description="wall-clock budget, e.g. 2h or 90m")
    pattern: str | None = Field(default=None, description="regex, one group around the value")
    wake: str | None = Field(default=None, description="scheduled wake-up interval, e.g. 5m")
    baseline: str | None = Field(default=None, description="the starting metric value")
    rounds: str | None = Field(default=None, description="at most this many rounds")
    stall: str | None = Field(default=None, description="no output for this long = stalled")
    margin: str | None = Field(default=None, description="worse than baseline by this = diverged")
    poll: str | None = Field(default=None, description="how often the monitor reads output")
    json_key: str | None = Field(
        default=None, description="read the metric from JSON lines under this key (a.b for nested)"
    )
    partition: str | None = Field(default=None, description="Slurm: the partition to submit to")
    cpus: str | None = Field(default=None, description="cpus per round (Slurm: --cpus-per-task)")
    time: str | None = Field(default=None, description="time limit of one round, e.g. 30m")


class CampaignRef(BaseModel):
    """A campaign id (optional: the conversation's campaigns)."""

    model_config = ConfigDict(extra="forbid")
    campaign_id: str | None = None


class WaitInput(BaseModel):
    """Input of `campaign_wait`."""

    model_config = ConfigDict(extra="forbid")
    campaign_id: str
    until: str = Field(description="how long to wait before the next wake-up, e.g. 10m")
    cite: int = Field(description="id of the newest measurement this decision rests on")
    reason: str = Field(default="", max_length=500)


class ResubmitInput(BaseModel):
    """Input of `campaign_resubmit`."""

    model_config = ConfigDict(extra="forbid")
    campaign_id: str
    cite: int
    changes: str | None = Field(default=None, description="the changed command, if any")
    reason: str = Field(default="", max_length=500)


class TerminateInput(BaseModel):
    """Input of `campaign_terminate`."""

    model_config = ConfigDict(extra="forbid")
    campaign_id: str
    reason: str = Field(min_length=1, max_length=500)
    cite: int | None = None


class ReportInput(BaseModel):
    """Input of `campaign_report`."""

    model_config = ConfigDict(extra="forbid")
    campaign_id: str
    text: str = Field(min_length=1, max_length=20_000)


def campaign_spec(
    args: StartCampaignInput, *, min_poll_seconds: float = MIN_POLL_SECONDS
) -> CampaignSpec:
    """A validated CampaignSpec; ValueError listing every problem and the syntax.

    `min_poll_seconds` bounds what people in a channel may ask for; the operator's own shell
    (`campaigns run`) passes 0."""
    problems: list[str] = []
    if not args.goal.strip():
        problems.append(
            "the goal is missing: say what the campaign is for right after `campaign:` "
            "(or as `| goal: …`)"
        )
    for name in args.model_extra or {}:
        known = ", ".join(f"`{f}`" for f in StartCampaignInput.model_fields if f != "goal")
        problems.append(f"unknown field `{name}`: the fields are {known}")
    if not args.run:
        problems.append("`run:` is missing: the command one round runs")
    name, direction = _metric(args.metric, problems)
    budget = _duration("budget", args.budget, problems, most=MAX_BUDGET_SECONDS)
    # A wake-up or a round's time limit longer than the budget would never come.
    within = budget or MAX_BUDGET_SECONDS
    wake_most = min(MAX_WAKE_SECONDS, within)
    optional = {
        "wake_every_seconds": _duration(
            "wake", args.wake, problems, most=wake_most, required=False, why=_why(budget, wake_most)
        ),
        "stall_seconds": _duration(
            "stall", args.stall, problems, most=MAX_STALL_SECONDS, required=False
        ),
        "poll_seconds": _duration(
            "poll", args.poll, problems, most=MAX_POLL_SECONDS, required=False
        ),
        "baseline": _number("baseline", args.baseline, problems),
        "divergence_margin": _number("margin", args.margin, problems),
        "round_time_limit_seconds": _duration(
            "time", args.time, problems, most=within, required=False, why=_why(budget, within)
        ),
        "cpus": _cpus(args.cpus, problems),
        "partition": _partition(args.partition, problems),
    }
    rounds = _rounds(args.rounds, problems)
    poll = optional["poll_seconds"]
    if isinstance(poll, float) and poll < min_poll_seconds:
        problems.append(
            f"`poll: {shortened(args.poll or '')}`: at least {min_poll_seconds:g}s (the monitor "
            "reads output at most once a second)"
        )
    if problems:
        raise ValueError(_problems(problems))
    try:
        return CampaignSpec(
            goal=args.goal,
            machine=args.machine,
            command=str(args.run),
            metric=MetricSpec(name=name, pattern=args.pattern, json_key=_text(args.json_key)),
            direction=direction,
            budget=Budget(wall_seconds=budget or 0, rounds=rounds or 5),
            **{k: v for k, v in optional.items() if v is not None},
        )
    except ValidationError as exc:
        raise ValueError(_problems(describe_validation_error(exc, label=_quoted_path))) from None


def _quoted_path(err: FieldError) -> str:
    """A campaign field as the `field`: problem lines name it."""
    return f"`{err.path()}`"


def _metric(raw: str | None, problems: list[str]) -> tuple[str, str]:
    parts = (raw or "").split()
    if not parts:
        problems.append("`metric:` is missing: write the name and min or max, e.g. `loss min`")
        return "metric", "min"
    direction = parts[1].lower() if len(parts) > 1 else "min"
    if direction not in ("min", "max") or len(parts) > 2:
        problems.append(f"`metric: {raw}`: write the name then min or max, e.g. `loss min`")
    return parts[0], direction if direction in ("min", "max") else "min"


def _duration(
    field: str,
    raw: str | None,
    problems: list[str],
    *,
    most: float,
    required: bool = True,
    why: str = "",
) -> float | None:
    """The seconds of a duration field, at most `most` (`why`: what that maximum is)."""
    if raw is None or not raw.strip():
        if required:
            problems.append(f"`{field}:` is missing: a duration like 2h or 90m")
        return None
    try:
        return parse_duration(raw, most=most, name=f"{field}:")
    except TooLong as exc:
        problems.append(f"{exc}{why}")
    except ValueError as exc:
        problems.append(f"`{field}:` {exc}")
    return None


def _why(budget: float | None, most: float) -> str:
    """What a maximum taken from the budget is, for its refusal."""
    return " (the campaign's budget)" if budget is not None and most == budget else ""


def _number(field: str, raw: str | None, problems: list[str]) -> float | None:
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw)
    except ValueError:
        problems.append(f"`{field}: {shortened(raw)}` is not a number")
        return None
    if not math.isfinite(value):
        problems.append(f"`{field}: {shortened(raw)}` is not a finite number")
        return None
    return value


def _rounds(raw: str | None, problems: list[str]) -> int | None:
    """`rounds:` as a whole number from 1 to MAX_ROUNDS."""
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw)  # a 400-digit number is infinity here, and out of bounds
    except ValueError:
        value = math.nan
    if math.isnan(value) or (math.isfinite(value) and not value.is_integer()):
        problems.append(f"`rounds: {shortened(raw)}` is not a whole number of rounds, e.g. 3")
        return None
    if not 1 <= value <= MAX_ROUNDS:
        problems.append(f"`rounds: {shortened(raw)}`: between 1 and {MAX_ROUNDS}")
        return None
    return int(value)


def _cpus(raw: str | None, problems: list[str]) -> int | None:
    if raw is None or not raw.strip():
        return None
    try:
        cpus = int(raw)
    except ValueError:
        problems.append(f"`cpus: {shortened(raw)}` is not a whole number of cpus, e.g. 4")
        return None
    if not 1 <= cpus <= MAX_CPUS:
        problems.append(f"`cpus: {shortened(raw)}`: between 1 and {MAX_CPUS}")
        return None
    return cpus


def _partition(raw: str | None, problems: list[str]) -> str | None:
    name = _text(raw)
    if name is None:
        return None
    try:
        return check_partition(name)
    except ValueError as exc:
        problems.append(f"`partition:` {exc}")
        return None


def _text(raw: str | None) -> str | None:
    """An optional text field: None when absent or blank."""
    return raw.strip() if raw is not None and raw.strip() else None


def _problems(problems: list[str]) -> str:
    lines = "\n".join(f"- {p}" for p in problems)
    # A blank line after the list, so Markdown does not read the last line as part of it.
    return f"The campaign was not started:\n{lines}\n\nThe syntax is: `{CAMPAIGN_SYNTAX}`"


# Tells one person something privately (conversation, user id, text).
PrivateNote = Callable[[ConversationRef, str, str], Awaitable[object]]


class CampaignTools:
    """The campaign tool implementations, bound to one engine.

    Only a person's own message starts a campaign; only its owner, an approver or an admin,
    from the campaign's own conversation, reads its details or decides on it. Others are
    refused privately as well as in the tool's answer."""

    def __init__(
        self,
        engine: CampaignEngine,
        *,
        roles: Roles | None = None,
        private: PrivateNote | None = None,
        people: People | None = None,
    ) -> None:
        self.engine = engine
        self._roles = roles or Roles()
        self._private = private
        self._people = people or People()

    async def start_campaign(self, ctx: TurnContext, args: StartCampaignInput) -> str | ToolOutput:
        """The `start_campaign` tool (what happened also in plain words, for people)."""
        # A person's message, or their approved scheduled task firing on their behalf.
        if ctx.origin == "system":
            return "Refused: a campaign starts only from a person's own message or task."
        who = Requester(ctx.author_id, ctx.roles, admin=ctx.author_id in self._roles.admins)
        try:
            spec = campaign_spec(args)
            record = await self.engine.start(ctx.author_id, ctx.conversation, spec, requester=who)
        except (ValueError, CampaignError) as exc:
            return str(exc)
        if record.state == "approval":
            return ToolOutput(
                f"Campaign `{record.id}` waits for approval: I showed its exact command in the "
                f"thread, and nothing runs until {ctx.author_name}, an approver or an admin "
                "approves it.",
                f"Campaign `{record.id}` is waiting for approval: nothing runs until you, an "
                "approver or an admin approve its command.",
            )
        return ToolOutput(
            f"Campaign `{record.id}` started on `{record.spec.machine}`; it is watched without "
            "model calls and reports in this thread.",
            f"Started campaign `{record.id}` on `{record.spec.machine}`; I'll post its "
            "progress and report here.",
        )

    async def campaign_status(self, ctx: TurnContext, args: CampaignRef) -> str:
        """The `campaign_status` tool."""
        if args.campaign_id is None:
            return await self.engine.status(ctx.conversation) or "No campaigns in this thread."
        refusal = await self._refusal(ctx, args.campaign_id, "see the details of", read=True)
        return refusal or await self.engine.describe(args.campaign_id)

    async def campaign_wait(self, ctx: TurnContext, args: WaitInput) -> str:
        """The `campaign_wait` tool."""
        if refusal := await self._refusal(ctx, args.campaign_id, "decide on"):
            return refusal
        try:
            seconds = parse_duration(args.until, most=MAX_BUDGET_SECONDS, name="until:")
        except TooLong as exc:
            return f"Refused: {exc} (the longest budget)"
        except ValueError as exc:
            return f"Refused: `until`: {exc}"
        return await self._refusing(
            self.engine.wait, args.campaign_id, seconds, args.cite, args.reason
        )

    async def campaign_resubmit(self, ctx: TurnContext, args: ResubmitInput) -> str:
        """The `campaign_resubmit` tool."""
        if refusal := await self._refusal(ctx, args.campaign_id, "resubmit"):
            return refusal
        return await self._refusing(
            self.engine.resubmit, args.campaign_id, args.cite, args.reason, args.changes
        )

    async def campaign_terminate(self, ctx: TurnContext, args: TerminateInput) -> str:
        """The `campaign_terminate` tool."""
        if refusal := await self._refusal(ctx, args.campaign_id, "terminate"):
            return refusal
        return await self._refusing(self.engine.terminate, args.campaign_id, args.reason, args.cite)

    async def campaign_report(self, ctx: TurnContext, args: ReportInput) -> str:
        """The `campaign_report` tool."""
        if refusal := await self._refusal(ctx, args.campaign_id, "close"):
            return refusal
        return await self._refusing(self.engine.report, args.campaign_id, args.text)

    async def _refusal(
        self, ctx: TurnContext, campaign_id: str, action: str, *, read: bool = False
    ) -> str | None:
        """Why this turn may not act on the campaign (also told to its author privately)."""
        record = await self.engine.store.get(campaign_id)
        if record is None:
            return f"Refused: No campaign `{campaign_id}`."
        reason = await self._why_not(ctx, record, read=read)
        if reason is None:
            return None
        text = f"You may not {action} campaign `{campaign_id}`: {reason}"
        if self._private is not None and ctx.origin == "user":
            await self._private(ctx.conversation, ctx.author_id, text)
        return f"Refused: {text}"

    async def _why_not(self, ctx: TurnContext, record: CampaignRecord, *, read: bool) -> str | None:
        if record.conversation.id != ctx.conversation.id:
            return "it belongs to another conversation; act on it from its own thread."
        if ctx.origin != "user":
            return None if read else "only a person's own message decides on a campaign."
        privileged = self._roles.privileged(ctx.author_id)
        if self.engine.may_act(record, ctx.author_id, privileged=privileged):
            return None
        owner = await self._people.name(record.conversation, record.owner)
        return f"only its owner ({owner}), an approver or an admin can."

    async def _refusing(self, operation: object, *args: object) -> str:
        try:
            return await operation(*args)  # type: ignore[operator, no-any-return]
        except (ValueError, CampaignError) as exc:
            return f"Refused: {exc}"


def start_campaign_tool(t: CampaignTools) -> Tool[TurnContext]:
    """`start_campaign`, offered in every conversation."""
    return Tool(
        "start_campaign",
        "Start an Oncall campaign: run a long job round by round on a registered machine, "
        "watch its metric without model calls, wake on schedule or on events, report here.",
        StartCampaignInput,
        t.start_campaign,
    )


def follow_up_tools(t: CampaignTools) -> list[Tool[TurnContext]]:
    """The tools that read or decide on a campaign of this conversation."""
    return [
        Tool(
            "campaign_status",
            "State, rounds, wake-ups and recent measurements of a campaign (or all here).",
            CampaignRef,
            t.campaign_status,
        ),
        Tool(
            "campaign_wait",
            "Let the running round continue and wake again later; cite the newest measurement.",
            WaitInput,
            t.campaign_wait,
        ),
        Tool(
            "campaign_resubmit",
            "End the round and start the next (optionally with a changed command); cite the "
            "newest measurement.",
            ResubmitInput,
            t.campaign_resubmit,
        ),
        Tool(
            "campaign_terminate",
            "Stop the running round; the campaign then closes with campaign_report.",
            TerminateInput,
            t.campaign_terminate,
        ),
        Tool(
            "campaign_report",
            "Close the campaign with a report that states the baseline; every number about "
            "the metric must match a recorded measurement, else it is rejected.",
            ReportInput,
            t.campaign_report,
        ),
    ]


class CampaignFollowUps:
    """A tool source: the tools that read or decide on a campaign, offered only in a
    conversation that has one (any state: a finished one is still read and reported on).
    Elsewhere they could only answer "no campaign here" or refuse a campaign of another
    thread, and every Host call would pay for their schemas."""

    def __init__(self, tools: CampaignTools) -> None:
        self._store = tools.engine.store
        self._tools = tuple(follow_up_tools(tools))

    async def tools(self, ctx: TurnContext) -> Sequence[Tool[TurnContext]]:
        """The follow-up tools when this turn's conversation has a campaign, else none."""
        if await self._store.of_conversation(ctx.conversation.id):
            return self._tools
        return ()
