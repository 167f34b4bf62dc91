"""The offline, rule-based decision policy (no model key, and the fallback of a model policy).

`decide(context)` answers one wake-up with one `Decision`. The rules, by the wake reason:

- **diverged** (NaN/inf, or past the divergence margin) → terminate the round and report.
- **budget** (the wall-clock budget ran out while the round ran) → terminate and report.
- **died / vanished** → resubmit once per campaign (the first crash), then report as failed;
  a round that died before any value because the file its command runs is missing is
  reported as failed at once (another round could only fail the same way).
- **stalled** → resubmit once per campaign (the engine stops the silent job first), then
  terminate and report.
- **finished** → report when the budget (rounds, wall clock or compute) is used up, or when
  the metric stopped improving: the finished round did not beat the best of the earlier
  rounds (and the given baseline) by the relative `IMPROVEMENT_EPSILON`. A first round has
  nothing earlier to beat unless a baseline was given, so a one-shot job is reported when it
  finishes instead of being run again (saying there was nothing to compare it with, not that
  it stopped improving). Otherwise resubmit (the next round, no changes).
- **scheduled** (the job still runs) → wait until the next wake-up, clamped to the remaining
  wall clock; a plateau alone is no reason to kill a running job (divergence, stalls and the
  budget are), so the reason only says whether the metric is still improving.

Every decision cites the campaign's newest measurement when one exists (citations.py). An
action outside `spec.permitted_actions` becomes a report (the one way a campaign closes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from pydantic import BaseModel, ConfigDict, Field

from core.ids import ConversationRef
from oncall.citations import check_citation, newest_measurement
from oncall.missing_file import missing_file
from oncall.model import (
    CampaignSpec,
    DecisionAction,
    Direction,
    Measurement,
    RoundSummary,
    WakeReason,
)
from oncall.report_gate import draft_report, format_duration

# RoundSummary lives in oncall.model (report_gate needs it too) and is re-exported here.
__all__ = (
    "IMPROVEMENT_EPSILON",
    "Decision",
    "DecisionContext",
    "RoundSummary",
    "clamp_to_budget",
    "decide",
    "improved",
)

# A new best must beat the old one by this fraction of it to count as an improvement, so
# that noise in the last digits does not keep a campaign resubmitting.
IMPROVEMENT_EPSILON = 1e-3
_CRASHES: frozenset[str] = frozenset({"died", "vanished"})


class Decision(BaseModel):
    """What to do after a wake-up, with the measurement it cites and one sentence why."""

    model_config = ConfigDict(frozen=True)
    action: DecisionAction
    cite: int | None = None
    reason: str  # one human sentence for the campaign's thread
    until_seconds: float | None = None  # wait: seconds from now to the next wake-up
    changes: dict[str, str] = Field(default_factory=dict)  # resubmit: e.g. {"command": ...}
    # report: the text to file; terminate: the report to file right after stopping the job.
    report: str | None = None
    failed: bool = False  # the report closes the campaign as failed
    notes: tuple[str, ...] = ()  # clamping and citation notes for the decision record
    # Made by the rules in a model-backed decider's place (the owner's budget is spent): no
    # model call to count, and recorded as the policy's.
    by_rules: bool = False
    # A drafted (factual) report's opening sentence and the wake that ends its last round:
    # the engine drafts the report again from the record when it closes the campaign, so
    # what a terminate changed (the round's end, its compute) is in it.
    outcome: str | None = None
    ended_by: WakeReason | None = None


@dataclass(frozen=True)
class DecisionContext:
    """Everything a decision may look at; the engine builds it at each wake-up.

    `baseline` is the campaign's *given* baseline (None when it would only be the first
    measurement: that one cannot be "beaten" by the round it came from). `rounds` are all
    rounds so far, the current one last; `rounds_used` is the current round's number.
    """

    spec: CampaignSpec
    baseline: float | None
    measurements: Sequence[Measurement]
    rounds: Sequence[RoundSummary]
    wall_used_seconds: float
    compute_used_minutes: float
    rounds_used: int
    reason: WakeReason
    now: float | None = None  # clock at the wake-up (None: the newest measurement's time)
    refused: str | None = None  # why this wake-up's previous decision was refused (retry)
    # The last lines of a round that died or vanished (the job's own words: untrusted).
    output_tail: str = ""
    # Whose campaign it is and where it reports: its decisions count against the owner's
    # model budget (None outside the engine).
    owner: str = ""
    conversation: ConversationRef | None = None


def clamp_to_budget(requested_seconds: float, remaining_seconds: float) -> tuple[float, str | None]:
    """Grant at most the remaining budget; the note says what was cut, for the record."""
    requested = max(0.0, requested_seconds)
    if requested <= remaining_seconds:
        return requested, None
    granted = max(0.0, remaining_seconds)
    asked = "unlimited" if math.isinf(requested) else format_duration(requested)
    return granted, (
        f"requested {asked}, granted {format_duration(granted)}: the campaign's remaining budget"
    )


def improved(new: float, old: float, direction: Direction) -> bool:
    """Whether `new` beats `old` in `direction` by more than the relative epsilon."""
    margin = IMPROVEMENT_EPSILON * max(abs(old), 1e-12)
    return new < old - margin if direction == "min" else new > old + margin


# ---------------------------------------------------------------------------- facts


def _latest_round(ctx: DecisionContext) -> int:
    return max([ctx.rounds_used, *(r.round for r in ctx.rounds)])


def _current(ctx: DecisionContext) -> RoundSummary:
    latest = _latest_round(ctx)
    return next((r for r in ctx.rounds if r.round == latest), RoundSummary(round=latest))


def _metric_values(ctx: DecisionContext, round_no: int | None = None) -> list[Measurement]:
    name = ctx.spec.metric.name
    return [
        m
        for m in ctx.measurements
        if m.name == name and math.isfinite(m.value) and (round_no is None or m.round == round_no)
    ]


def _best(values: Sequence[Measurement], direction: Direction) -> Measurement | None:
    if not values:
        return None
    pick = min if direction == "min" else max
    return pick(values, key=lambda m: m.value)


def _earlier(ctx: DecisionContext, reasons: frozenset[str]) -> int:
    """How many earlier rounds (not the current one) ended for one of `reasons`."""
    latest = _latest_round(ctx)
    return sum(1 for r in ctx.rounds if r.round != latest and r.wake_reason in reasons)


def _exhausted(ctx: DecisionContext) -> str | None:
    """Which budget (rounds, wall clock, compute) is used up, as a phrase, or None."""
    budget = ctx.spec.budget
    if ctx.rounds_used >= budget.rounds:
        return f"the round budget is used up ({ctx.rounds_used} of {budget.rounds} rounds)"
    return _time_exhausted(ctx)


def _time_exhausted(ctx: DecisionContext) -> str | None:
    """Which time budget (wall clock, compute) is used up: these stop a running round."""
    budget = ctx.spec.budget
    if ctx.wall_used_seconds >= budget.wall_seconds:
        return f"the wall-clock budget of {format_duration(budget.wall_seconds)} is used up"
    if budget.compute_minutes is not None and ctx.compute_used_minutes >= budget.compute_minutes:
        return f"the compute budget of {format_duration(budget.compute_minutes * 60)} is used up"
    return None


def _remaining_wall(ctx: DecisionContext) -> float:
    return ctx.spec.budget.wall_seconds - ctx.wall_used_seconds


def _set_record(ctx: DecisionContext) -> bool:
    """Whether the current round beat the earlier rounds' best (and the given baseline)."""
    latest = _latest_round(ctx)
    direction = ctx.spec.direction
    best_now = _best(_metric_values(ctx, latest), direction)
    if best_now is None:
        return False
    earlier = [m.value for m in _metric_values(ctx) if m.round < latest]
    if ctx.baseline is not None:
        earlier.append(ctx.baseline)
    if not earlier:
        return False  # nothing to beat: no evidence that another round would improve
    previous = min(earlier) if direction == "min" else max(earlier)
    return improved(best_now.value, previous, direction)


def _nothing_to_beat(ctx: DecisionContext) -> bool:
    """No baseline was given and no earlier round measured the metric: the round's result
    stands alone (it neither improved nor stopped improving)."""
    if ctx.baseline is not None:
        return False
    latest = _latest_round(ctx)
    return not any(m.round < latest for m in _metric_values(ctx))


def _improving_now(ctx: DecisionContext) -> bool | None:
    """Whether the running round set its best within the last wake interval (None: no data)."""
    values = _metric_values(ctx, _latest_round(ctx))
    best = _best(values, ctx.spec.direction)
    if best is None:
        return None
    now = ctx.now if ctx.now is not None else max(m.at for m in values)
    return best.at >= now - ctx.spec.wake_every_seconds


# ------------------------------------------------------------------------- decisions


@dataclass(frozen=True)
class _Evidence:
    cite: int | None
    newest: Measurement | None
    notes: tuple[str, ...]


def _evidence(ctx: DecisionContext, action: DecisionAction) -> _Evidence:
    """The newest measurement to cite, checked by the same rule the tools enforce."""
    latest = _latest_round(ctx)
    newest = newest_measurement(ctx.measurements, latest)
    cite = newest.id if newest is not None else None
    result = check_citation(cite, ctx.measurements, latest, action=action)
    notes = (result.message,) if result.ok and result.message else ()
    return _Evidence(cite, newest, notes)


def _cited(ctx: DecisionContext) -> str:
    best = _best(_metric_values(ctx), ctx.spec.direction)
    if best is None:
        return f"no {ctx.spec.metric.name} recorded yet"
    return f"best {best.name}={best.value:.6g}, measurement #{best.id}"


def _newest(ctx: DecisionContext) -> str:
    name = ctx.spec.metric.name
    own = [m for m in ctx.measurements if m.name == name]
    if not own:
        return f"no {name} recorded"
    last = max(own, key=lambda m: m.id)
    return f"{name}={last.value:.6g}, measurement #{last.id}"


def _ended_rounds(ctx: DecisionContext, ended_by: WakeReason) -> list[RoundSummary]:
    """The rounds for the report, the current one marked with the wake that ends it."""
    latest = _latest_round(ctx)
    rounds = list(ctx.rounds) or [RoundSummary(round=latest)]
    return [
        r.model_copy(update={"wake_reason": ended_by})
        if r.round == latest and r.wake_reason is None
        else r
        for r in rounds
    ]


def _ending(
    ctx: DecisionContext,
    action: DecisionAction,
    reason: str,
    outcome: str,
    *,
    failed: bool = False,
    ended_by: WakeReason | None = None,
) -> Decision:
    """Terminate-then-report or report, with the drafted factual report."""
    ev = _evidence(ctx, action)
    report = draft_report(
        metric=ctx.spec.metric.name,
        direction=ctx.spec.direction,
        baseline=ctx.baseline,
        measurements=ctx.measurements,
        rounds=_ended_rounds(ctx, ended_by or ctx.reason),
        wall_used_seconds=ctx.wall_used_seconds,
        compute_used_minutes=ctx.compute_used_minutes,
        budget=ctx.spec.budget,
        outcome=outcome,
    )
    return Decision(
        action=action,
        cite=ev.cite,
        reason=reason,
        report=report,
        failed=failed,
        notes=ev.notes,
        outcome=outcome,
        ended_by=ended_by or ctx.reason,
    )


def _resubmit(ctx: DecisionContext, reason: str) -> Decision:
    ev = _evidence(ctx, "resubmit")
    return Decision(action="resubmit", cite=ev.cite, reason=reason, notes=ev.notes)


def _can_resubmit(ctx: DecisionContext) -> bool:
    return "resubmit" in ctx.spec.permitted_actions and _exhausted(ctx) is None


def _on_diverged(ctx: DecisionContext) -> Decision:
    n, name = _current(ctx).round, ctx.spec.metric.name
    return _ending(
        ctx,
        "terminate",
        f"Round {n} diverged ({_newest(ctx)}), so I am stopping it and reporting.",
        f"The campaign stopped because {name} diverged in round {n}.",
    )


def _on_budget(ctx: DecisionContext) -> Decision:
    n = _current(ctx).round
    spent = _time_exhausted(ctx) or "the budget is used up"
    return _ending(
        ctx,
        "terminate",
        f"Round {n} is still running but {spent}, so I am stopping it and reporting.",
        f"The campaign stopped in round {n} because {spent}.",
        ended_by="budget",
    )


def _on_crash(ctx: DecisionContext) -> Decision:
    current = _current(ctx)
    how = "died" if ctx.reason == "died" else "vanished"
    code = f" (exit code {current.exit_code})" if current.exit_code is not None else ""
    missing = missing_file(ctx.output_tail) if not _metric_values(ctx, current.round) else None
    if missing is not None:
        return _ending(
            ctx,
            "report",
            f"Round {current.round} {how}{code}: its output says `{missing}` was not found, so "
            "another round would fail the same way; I am reporting the campaign as failed.",
            f"The campaign failed: round {current.round} {how}{code} because `{missing}` was "
            "not found in its working directory.",
            failed=True,
        )
    if _earlier(ctx, _CRASHES) == 0 and _can_resubmit(ctx):
        return _resubmit(ctx, f"Round {current.round} {how}{code}, so I am resubmitting it once.")
    if _earlier(ctx, _CRASHES):
        why = "after an earlier crash"
    else:
        why = f"and {_exhausted(ctx) or 'resubmitting is not permitted'}"
    return _ending(
        ctx,
        "report",
        f"Round {current.round} {how}{code} {why}, so I am reporting the campaign as failed.",
        f"The campaign failed: round {current.round} {how}{code}.",
        failed=True,
    )


def _on_stalled(ctx: DecisionContext) -> Decision:
    n = _current(ctx).round
    silence = format_duration(ctx.spec.stall_seconds)
    if _earlier(ctx, frozenset({"stalled"})) == 0 and _can_resubmit(ctx):
        text = (
            f"Round {n} printed nothing for {silence}, so I am stopping it and resubmitting once."
        )
        return _resubmit(ctx, text)
    again = " again" if _earlier(ctx, frozenset({"stalled"})) else ""
    return _ending(
        ctx,
        "terminate",
        f"Round {n} printed nothing for {silence}{again}, so I am stopping it and reporting.",
        f"The campaign stopped because round {n} stalled.",
    )


def _on_finished(ctx: DecisionContext) -> Decision:
    n = _current(ctx).round
    spent = _exhausted(ctx)
    if spent is not None:
        return _ending(
            ctx,
            "report",
            f"Round {n} finished and {spent}, so I am reporting.",
            f"The campaign finished after round {n}: {spent}.",
        )
    if _nothing_to_beat(ctx):
        return _ending(
            ctx,
            "report",
            f"Round {n} finished; with no baseline and no earlier round there is nothing to "
            f"compare it with ({_cited(ctx)}), so I am reporting.",
            f"The campaign finished after round {n}: one run and no baseline given, so its "
            "first measurement serves as the baseline and no earlier round was there to beat.",
        )
    if not _set_record(ctx):
        return _ending(
            ctx,
            "report",
            f"Round {n} finished without beating the earlier best ({_cited(ctx)}), "
            "so I am reporting.",
            f"The campaign finished after round {n}: {ctx.spec.metric.name} stopped improving.",
        )
    if "resubmit" not in ctx.spec.permitted_actions:
        return _ending(
            ctx,
            "report",
            f"Round {n} finished and resubmitting is not permitted, so I am reporting.",
            f"The campaign finished after round {n}.",
        )
    return _resubmit(
        ctx, f"Round {n} finished with a new best ({_cited(ctx)}), so I am starting round {n + 1}."
    )


def _on_scheduled(ctx: DecisionContext) -> Decision:
    n = _current(ctx).round
    remaining = _remaining_wall(ctx)
    if remaining <= 0 or _time_exhausted(ctx) is not None:
        return _on_budget(ctx)
    granted, note = clamp_to_budget(ctx.spec.wake_every_seconds, remaining)
    improving = _improving_now(ctx)
    state = {
        None: f"no {ctx.spec.metric.name} yet",
        True: f"improving ({_cited(ctx)})",
        False: f"not improving lately ({_cited(ctx)})",
    }[improving]
    ev = _evidence(ctx, "wait")
    return Decision(
        action="wait",
        cite=ev.cite,
        reason=f"Round {n} is running, {state}; waiting {format_duration(granted)}.",
        until_seconds=granted,
        notes=ev.notes + ((note,) if note else ()),
    )


_RULES: Mapping[WakeReason, Callable[[DecisionContext], Decision]] = MappingProxyType(
    {
        "diverged": _on_diverged,
        "budget": _on_budget,
        "died": _on_crash,
        "vanished": _on_crash,
        "stalled": _on_stalled,
        "finished": _on_finished,
        "scheduled": _on_scheduled,
    }
)


def decide(context: DecisionContext) -> Decision:
    """The rule-based answer to one wake-up (see the module rules)."""
    decision = _RULES[context.reason](context)
    if decision.action in context.spec.permitted_actions or decision.action == "report":
        return decision
    # Not permitted: close instead, since a report is the only way a campaign may end.
    wanted = decision.reason.rstrip(".").split(", so ")[0]
    return _ending(
        context,
        "report",
        f"{wanted}, but {decision.action} is not permitted, so I am reporting instead.",
        f"The campaign ended: {decision.action} is not permitted.",
        failed=decision.failed,
    )
