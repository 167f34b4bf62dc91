"""oncall.policy: the offline rule-based decisions, one test per rule, and budget clamping."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import pytest

from oncall.citations import NO_EVIDENCE_NOTE, check_citation
from oncall.model import (
    Budget,
    CampaignSpec,
    DecisionAction,
    Measurement,
    MetricSpec,
    RoundSummary,
    WakeReason,
)
from oncall.policy import (
    IMPROVEMENT_EPSILON,
    Decision,
    DecisionContext,
    clamp_to_budget,
    decide,
    improved,
)
from oncall.report_gate import check_report


def _spec(**overrides: object) -> CampaignSpec:
    fields: dict[str, object] = {
        "goal": "train",
        "command": "python train.py",
        "metric": MetricSpec(name="loss"),
        "budget": Budget(wall_seconds=3600, rounds=3),
        "wake_every_seconds": 300.0,
        "stall_seconds": 600.0,
    }
    fields.update(overrides)
    return CampaignSpec.model_validate(fields)


def _ms(*rounds: Sequence[float], name: str = "loss", start_at: float = 0.0) -> list[Measurement]:
    """Measurements, ids in order, one list of values per round (round 1 first), 10 s apart."""
    out: list[Measurement] = []
    for rnd, values in enumerate(rounds, start=1):
        for value in values:
            n = len(out) + 1
            out.append(
                Measurement(
                    id=n,
                    campaign_id="c1",
                    round=rnd,
                    at=start_at + 10.0 * n,
                    name=name,
                    value=value,
                    source_line=f"{name} {value}",
                )
            )
    return out


def _rounds(*ended: WakeReason | None, codes: Sequence[int | None] = ()) -> list[RoundSummary]:
    codes = list(codes) + [None] * (len(ended) - len(codes))
    return [
        RoundSummary(round=i, wake_reason=reason, exit_code=code)
        for i, (reason, code) in enumerate(zip(ended, codes, strict=True), start=1)
    ]


def _ctx(
    reason: WakeReason,
    measurements: list[Measurement],
    rounds: list[RoundSummary],
    *,
    spec: CampaignSpec | None = None,
    baseline: float | None = None,
    wall: float = 600.0,
    compute: float = 0.0,
    now: float | None = None,
) -> DecisionContext:
    return DecisionContext(
        spec=spec or _spec(),
        baseline=baseline,
        measurements=measurements,
        rounds=rounds,
        wall_used_seconds=wall,
        compute_used_minutes=compute,
        rounds_used=len(rounds),
        reason=reason,
        now=now,
    )


def _check(ctx: DecisionContext, decision: Decision) -> None:
    """Invariants of every decision: a valid newest cite, and a report that passes the gate."""
    latest = max(r.round for r in ctx.rounds)
    citation = check_citation(decision.cite, ctx.measurements, latest, action=decision.action)
    assert citation.ok, citation.message
    if ctx.measurements:
        assert decision.cite == max(m.id for m in ctx.measurements)
    assert decision.reason and "\n" not in decision.reason
    if decision.action in ("report", "terminate"):
        assert decision.report is not None
        gate = check_report(
            decision.report,
            metric=ctx.spec.metric.name,
            baseline=ctx.baseline,
            measurements=ctx.measurements,
            tolerance=1e-3,
        )
        assert gate.accepted, (decision.report, gate.mismatches)
    else:
        assert decision.report is None
    if decision.action == "wait":
        assert decision.until_seconds is not None and decision.until_seconds > 0
    if decision.action == "resubmit":
        assert decision.changes == {}


def _decide(ctx: DecisionContext) -> Decision:
    decision = decide(ctx)
    _check(ctx, decision)
    return decision


# --- divergence and budget ------------------------------------------------------------------


def test_divergence_terminates_and_reports() -> None:
    ms = _ms([1.0, 0.8, math.nan])
    d = _decide(_ctx("diverged", ms, _rounds(None)))
    assert d.action == "terminate" and d.cite == 3 and not d.failed
    assert (
        d.reason
        == "Round 1 diverged (loss=nan, measurement #3), so I am stopping it and reporting."
    )
    assert d.report is not None
    assert d.report.splitlines()[0] == "The campaign stopped because loss diverged in round 1."
    assert "round 1 diverged" in d.report


def test_budget_wake_terminates_and_reports() -> None:
    d = _decide(_ctx("budget", _ms([1.0, 0.9]), _rounds(None), wall=3600.0))
    assert d.action == "terminate"
    assert "the wall-clock budget of 1h is used up" in d.reason
    assert d.report is not None and "round 1 was stopped when the budget ran out" in d.report


# --- crashes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["died", "vanished"])
def test_first_crash_is_resubmitted_once(how: WakeReason) -> None:
    d = _decide(_ctx(how, _ms([1.0, 0.9]), _rounds(how, codes=[1 if how == "died" else None])))
    assert d.action == "resubmit" and d.cite == 2 and d.changes == {}
    code = " (exit code 1)" if how == "died" else ""
    assert d.reason == f"Round 1 {how}{code}, so I am resubmitting it once."


def test_second_crash_reports_the_campaign_as_failed() -> None:
    ms = _ms([1.0, 0.9], [0.95])
    d = _decide(_ctx("vanished", ms, _rounds("died", None), wall=900.0))
    assert d.action == "report" and d.failed
    assert d.reason == (
        "Round 2 vanished after an earlier crash, so I am reporting the campaign as failed."
    )
    assert d.report is not None and d.report.startswith("The campaign failed: round 2 vanished.")


def test_crash_with_the_round_budget_used_up_reports_failed() -> None:
    d = _decide(_ctx("died", _ms([1.0], [0.9], [0.8]), _rounds("finished", "finished", "died")))
    assert d.action == "report" and d.failed
    assert "the round budget is used up (3 of 3 rounds)" in d.reason


def test_crash_when_resubmit_is_not_permitted_reports_failed() -> None:
    spec = _spec(permitted_actions=("wait", "terminate", "report"))
    d = _decide(_ctx("died", _ms([1.0]), _rounds("died"), spec=spec))
    assert d.action == "report" and d.failed and "resubmitting is not permitted" in d.reason


def test_crash_before_any_measurement_resubmits_without_a_cite() -> None:
    d = _decide(_ctx("died", [], _rounds("died", codes=[2])))
    assert d.action == "resubmit" and d.cite is None and d.notes == (NO_EVIDENCE_NOTE,)


# --- stalls -----------------------------------------------------------------------------------


def test_first_stall_resubmits_then_the_second_reports() -> None:
    first = _decide(_ctx("stalled", _ms([1.0]), _rounds(None)))
    assert first.action == "resubmit"
    assert first.reason == (
        "Round 1 printed nothing for 10m, so I am stopping it and resubmitting once."
    )
    second = _decide(_ctx("stalled", _ms([1.0], [0.9]), _rounds("stalled", None)))
    assert second.action == "terminate" and second.report is not None and not second.failed
    assert second.reason == (
        "Round 2 printed nothing for 10m again, so I am stopping it and reporting."
    )


def test_stall_after_a_crash_resubmit_still_gets_its_own_resubmit() -> None:
    d = _decide(_ctx("stalled", _ms([1.0], [0.9]), _rounds("died", None)))
    assert d.action == "resubmit"


# --- finished rounds --------------------------------------------------------------------------


def test_finished_one_shot_job_without_baseline_is_reported() -> None:
    d = _decide(_ctx("finished", _ms([1.0, 0.7, 0.5]), _rounds("finished", codes=[0])))
    assert d.action == "report" and not d.failed
    assert d.reason == (
        "Round 1 finished; with no baseline and no earlier round there is nothing to compare "
        "it with (best loss=0.5, measurement #3), so I am reporting."
    )
    assert d.report is not None and "stopped improving" not in d.report


def test_finished_round_that_beats_the_given_baseline_continues() -> None:
    d = _decide(_ctx("finished", _ms([1.0, 0.5]), _rounds("finished"), baseline=1.2))
    assert d.action == "resubmit"
    assert d.reason == (
        "Round 1 finished with a new best (best loss=0.5, measurement #2), "
        "so I am starting round 2."
    )


def test_finished_round_that_does_not_beat_the_baseline_reports() -> None:
    d = _decide(_ctx("finished", _ms([1.0, 0.6]), _rounds("finished"), baseline=0.5))
    assert d.action == "report"


def test_improving_over_the_previous_round_continues_and_a_plateau_reports() -> None:
    better = _decide(_ctx("finished", _ms([1.0, 0.5], [0.6, 0.4]), _rounds("finished", "finished")))
    assert better.action == "resubmit"
    flat = 0.5 * (1 - IMPROVEMENT_EPSILON / 2)  # better, but within the epsilon
    plateau = _decide(_ctx("finished", _ms([1.0, 0.5], [flat]), _rounds("finished", "finished")))
    assert plateau.action == "report"
    assert "loss stopped improving" in (plateau.report or "")


def test_improvement_respects_the_direction() -> None:
    spec = _spec(metric=MetricSpec(name="acc"), direction="max")
    up = _ctx("finished", _ms([0.5], [0.7], name="acc"), _rounds("finished", "finished"), spec=spec)
    assert _decide(up).action == "resubmit"
    down = _ctx(
        "finished", _ms([0.7], [0.5], name="acc"), _rounds("finished", "finished"), spec=spec
    )
    assert _decide(down).action == "report"


def test_finished_round_without_measurements_reports() -> None:
    d = _decide(_ctx("finished", _ms([1.0], []), _rounds("finished", "finished"), baseline=2.0))
    assert d.action == "report"


@pytest.mark.parametrize(
    ("overrides", "wall", "compute", "phrase"),
    [
        (
            {"budget": Budget(wall_seconds=3600, rounds=1)},
            600.0,
            0.0,
            "the round budget is used up (1 of 1 rounds)",
        ),
        ({}, 3600.0, 0.0, "the wall-clock budget of 1h is used up"),
        (
            {"budget": Budget(wall_seconds=3600, compute_minutes=30)},
            600.0,
            30.0,
            "the compute budget of 30m is used up",
        ),
    ],
)
def test_finished_with_a_budget_used_up_reports(
    overrides: dict[str, object], wall: float, compute: float, phrase: str
) -> None:
    ctx = _ctx(
        "finished",
        _ms([1.0, 0.5]),
        _rounds("finished"),
        spec=_spec(**overrides),
        baseline=2.0,
        wall=wall,
        compute=compute,
    )
    d = _decide(ctx)
    assert d.action == "report" and d.reason == f"Round 1 finished and {phrase}, so I am reporting."


def test_finished_and_improving_but_resubmit_not_permitted_reports() -> None:
    spec = _spec(permitted_actions=("wait", "terminate", "report"))
    d = _decide(_ctx("finished", _ms([1.0, 0.5]), _rounds("finished"), spec=spec, baseline=2.0))
    assert d.action == "report"


# --- scheduled wake-ups -----------------------------------------------------------------------


def test_scheduled_wake_while_improving_waits_until_the_next_wake_up() -> None:
    ms = _ms([1.0, 0.8, 0.6])
    d = _decide(_ctx("scheduled", ms, _rounds(None), now=40.0))
    assert d.action == "wait" and d.until_seconds == 300.0 and d.cite == 3 and d.notes == ()
    assert d.reason == (
        "Round 1 is running, improving (best loss=0.6, measurement #3); waiting 5m."
    )


def test_scheduled_wake_on_a_plateau_still_waits() -> None:
    ms = _ms([1.0, 0.5, 0.7])  # the best (#2, at 20 s) is older than one wake interval
    d = _decide(_ctx("scheduled", ms, _rounds(None), now=1000.0))
    assert d.action == "wait" and "not improving lately" in d.reason


def test_scheduled_wake_without_measurements_waits_without_a_cite() -> None:
    d = _decide(_ctx("scheduled", [], _rounds(None)))
    assert d.action == "wait" and d.cite is None and d.notes == (NO_EVIDENCE_NOTE,)
    assert "no loss yet" in d.reason


def test_scheduled_wait_is_clamped_to_the_remaining_wall_clock() -> None:
    d = _decide(_ctx("scheduled", _ms([1.0]), _rounds(None), wall=3480.0))
    assert d.action == "wait" and d.until_seconds == 120.0
    assert d.notes == ("requested 5m, granted 2m: the campaign's remaining budget",)


def test_scheduled_wake_past_the_wall_clock_terminates_and_reports() -> None:
    d = _decide(_ctx("scheduled", _ms([1.0]), _rounds(None), wall=3700.0))
    assert d.action == "terminate" and d.report is not None
    # the round is recorded as ended by the budget
    assert "round 1 was stopped when the budget ran out" in d.report


def test_scheduled_wake_in_the_last_round_keeps_waiting() -> None:
    ctx = _ctx("scheduled", _ms([1.0], [0.9], [0.8]), _rounds("finished", "finished", None))
    assert _decide(ctx).action == "wait"


def test_scheduled_wake_uses_the_newest_measurement_time_without_a_clock() -> None:
    assert "improving (" in _decide(_ctx("scheduled", _ms([1.0, 0.5]), _rounds(None))).reason


# --- permissions ------------------------------------------------------------------------------


def test_an_action_that_is_not_permitted_becomes_a_report() -> None:
    spec = _spec(permitted_actions=("wait", "resubmit", "report"))
    d = _decide(_ctx("diverged", _ms([1.0, math.inf]), _rounds(None), spec=spec))
    assert d.action == "report"
    assert d.reason == (
        "Round 1 diverged (loss=inf, measurement #2), but terminate is not permitted, "
        "so I am reporting instead."
    )


def test_every_rule_yields_valid_decisions() -> None:
    reasons: tuple[WakeReason, ...] = (
        "scheduled",
        "finished",
        "died",
        "stalled",
        "diverged",
        "vanished",
        "budget",
    )
    histories = [[], _ms([1.0]), _ms([1.0, 0.5], [0.4]), _ms([math.nan])]
    for reason in reasons:
        for ms in histories:
            rounds = _rounds(*([None] * max(1, max((m.round for m in ms), default=1))))
            for baseline in (None, 0.3, 2.0):
                _decide(_ctx(reason, ms, rounds, baseline=baseline))


# --- helpers ----------------------------------------------------------------------------------


def test_clamp_to_budget() -> None:
    assert clamp_to_budget(600, 3600) == (600, None)
    assert clamp_to_budget(3600, 3600) == (3600, None)
    assert clamp_to_budget(3 * 3600, 4320) == (
        4320,
        "requested 3h, granted 1h12m: the campaign's remaining budget",
    )
    assert clamp_to_budget(60, -5) == (
        0.0,
        "requested 1m, granted 0s: the campaign's remaining budget",
    )
    assert clamp_to_budget(math.inf, 90)[1] == (
        "requested unlimited, granted 1m30s: the campaign's remaining budget"
    )
    assert clamp_to_budget(-1, 100) == (0.0, None)


def test_improved_uses_a_relative_epsilon() -> None:
    assert improved(0.99, 1.0, "min") and not improved(0.9995, 1.0, "min")
    assert improved(1.01, 1.0, "max") and not improved(1.0005, 1.0, "max")
    assert not improved(1.0, 0.5, "min") and not improved(0.5, 1.0, "max")
    assert improved(-1e-9, 0.0, "min")  # near zero the epsilon is absolute


def test_decision_is_frozen_and_serialisable() -> None:
    d = decide(_ctx("scheduled", _ms([1.0]), _rounds(None)))
    assert Decision.model_validate_json(d.model_dump_json()) == d
    with pytest.raises(ValueError):
        d.action = "report"  # type: ignore[misc]


def test_actions_cover_the_model_literal() -> None:
    actions: set[DecisionAction] = {"wait", "resubmit", "terminate", "report"}
    assert set(_spec().permitted_actions) == actions


# --- a missing file -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tail", "name"),
    [
        ("python3: can't open file '/w/train.py': [Errno 2] No such file or directory", "train.py"),
        ("bash: run.sh: No such file or directory", "run.sh"),
        ("sh: 1: ./x: not found", "x"),
        ("/bin/sh: line 3: ./go.sh: No such file or directory", "go.sh"),
    ],
)
def test_a_round_that_died_for_a_missing_file_is_reported_not_resubmitted(
    tail: str, name: str
) -> None:
    ctx = _ctx("died", [], _rounds("died", codes=[2]))
    d = _decide(dataclasses.replace(ctx, output_tail=f"starting\n{tail}"))
    assert d.action == "report" and d.failed
    assert d.reason == (
        f"Round 1 died (exit code 2): its output says `{name}` was not found, so another round "
        "would fail the same way; I am reporting the campaign as failed."
    )
    assert d.report is not None and d.report.startswith(
        f"The campaign failed: round 1 died (exit code 2) because `{name}` was not found in its "
        "working directory."
    )


def test_a_round_that_measured_something_before_a_missing_file_is_resubmitted_once() -> None:
    # The job ran (a value came) and only then tripped on a file: not a command that can
    # never start, so the usual one resubmit.
    ctx = _ctx("died", _ms([1.0]), _rounds("died", codes=[1]))
    tail = "cat: data.csv: No such file or directory"
    d = _decide(dataclasses.replace(ctx, output_tail=tail))
    assert d.action == "resubmit"
