"""oncall.citations and oncall.report_gate: the evidence rules decisions and reports obey."""

from __future__ import annotations

import math
import random

import pytest

from oncall.citations import NO_EVIDENCE_NOTE, check_citation, describe, newest_measurement
from oncall.model import Budget, DecisionAction, Direction, Measurement, RoundSummary
from oncall.report_gate import (
    check_report,
    draft_report,
    extract_claims,
    first_value,
    format_duration,
    states_baseline,
)


def _m(mid: int, rnd: int, value: float, name: str = "loss", campaign: str = "c1") -> Measurement:
    return Measurement(
        id=mid,
        campaign_id=campaign,
        round=rnd,
        at=float(mid),
        name=name,
        value=value,
        source_line=f"{name} {value}",
    )


HISTORY = [_m(40, 2, 0.5), _m(41, 3, 0.35), _m(42, 3, 0.31)]


# --- citations -----------------------------------------------------------------------------


def test_cite_newest_is_accepted() -> None:
    result = check_citation(42, HISTORY, 3)
    assert result.ok and result.message == "" and result.cited == HISTORY[2]
    assert result.newest == HISTORY[2]


def test_missing_cite_is_refused_with_the_id_to_cite() -> None:
    result = check_citation(None, HISTORY, 3)
    assert not result.ok
    assert result.message == (
        "a wait must cite a measurement: cite measurement #42 (loss=0.31, round 3), the newest"
    )


def test_older_cite_is_refused() -> None:
    result = check_citation(41, HISTORY, 3, action="terminate")
    assert not result.ok and result.cited == HISTORY[1]
    assert result.message == (
        "measurement #41 (loss=0.35, round 3) is older than the newest evidence: "
        "cite measurement #42 (loss=0.31, round 3), the newest"
    )
    assert not check_citation(40, HISTORY, 3).ok


def test_unknown_cite_is_refused() -> None:
    result = check_citation(99, HISTORY, 3, action="resubmit")
    assert not result.ok
    assert result.message == (
        "measurement #99 is not recorded: cite measurement #42 (loss=0.31, round 3), the newest"
    )


def test_cite_from_another_campaign_is_refused() -> None:
    mixed = [*HISTORY, _m(43, 1, 0.1, campaign="other")]
    result = check_citation(43, mixed, 3, campaign_id="c1")
    assert not result.ok
    assert result.message == (
        "measurement #43 belongs to another campaign: "
        "cite measurement #42 (loss=0.31, round 3), the newest"
    )
    # Another campaign's newer measurement is not "the newest" of this one.
    assert newest_measurement(mixed, 3, campaign_id="c1") == HISTORY[2]


def test_latest_round_without_measurements_uses_the_last_round_that_has_them() -> None:
    # Round 4 just started and has printed nothing: round 3's newest is still the evidence.
    assert check_citation(42, HISTORY, 4).ok
    assert not check_citation(41, HISTORY, 4).ok


def test_newest_is_by_id_within_the_latest_round() -> None:
    shuffled = [HISTORY[2], HISTORY[0], HISTORY[1]]
    assert newest_measurement(shuffled, 3) == HISTORY[2]
    assert newest_measurement(shuffled, 2) == HISTORY[0]
    assert newest_measurement([], 3) is None


def test_no_measurement_yet_allows_deciding_without_a_cite() -> None:
    actions: tuple[DecisionAction, ...] = ("wait", "terminate", "resubmit")
    for action in actions:
        result = check_citation(None, [], 1, action=action)
        assert result.ok and result.message == NO_EVIDENCE_NOTE
    made_up = check_citation(7, [], 1)
    assert not made_up.ok
    assert made_up.message == (
        "measurement #7 is not recorded: no measurement is recorded yet, so cite none"
    )


def test_report_needs_no_cite() -> None:
    assert check_citation(None, HISTORY, 3, action="report").ok


def test_describe() -> None:
    assert describe(_m(5, 2, float("nan"))) == "#5 (loss=nan, round 2)"


# --- claim extraction ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("loss 0.42", [0.42]),
        ("final loss reached 0.419", [0.419]),
        ("loss: 4.2e-1", [0.42]),
        ("improved loss from 0.9 to 0.42", [0.9, 0.42]),
        ("Loss=0.42 and LOSS 0.41", [0.42, 0.41]),
        ("loss fell 12% to 0.42 over 3 rounds", [0.42]),
        ("loss 0.42 at step 100 and 0.40 at step 200", [0.42, 0.40]),
        ("The loss of round 3 was 0.42 (measurement #12).", [0.42]),
        ("loss dropped sharply to 0.42", [0.42]),
        ("loss −0.5 and -0.25", [-0.5, -0.25]),
        ("loss 1,234.5 after 3 of 5 rounds", [1234.5]),
        ("| loss | 0.42 |", [0.42]),
    ],
)
def test_claims_about_the_metric(text: str, expected: list[float]) -> None:
    assert [value for value, *_ in extract_claims(text, "loss")] == expected


@pytest.mark.parametrize(
    "text",
    [
        "We ran 3 rounds in 2h on 8 GPUs.",  # no mention of the metric
        "0.42 was reached before loss was measured",  # numbers before the mention
        "loss 12% lower",  # percentages
        "loss at round 3, step 100, epoch 2, exit code 1, seed 7",  # counts
        "loss took 3 rounds, 12 minutes, 8 GPUs and 5 GPU-hours",  # units
        "loss with gpt-4 and v1.2 on 2024-05-01 at 12:30 for $3, see #12",  # ids, dates
        "loss in 3h with 50M params, 2x faster, 1.2.3",  # glued units and versions
        "val_loss 0.3, loss_scale 128",  # other metrics that contain the name
        "loss became nan, then inf",  # nan and inf are words
        "loss, and accuracy 93.1",  # another quantity's name closes the window
        "loss 3/5 of the time",  # fractions
        "loss is reported; the learning rate was 3e-4",  # the sentence ended
    ],
)
def test_numbers_that_are_not_claims(text: str) -> None:
    assert extract_claims(text, "loss") == []


def test_window_closes_at_another_quantity_and_after_twelve_words() -> None:
    claims = extract_claims("loss 0.42 and accuracy 93.1, lr 3e-4", "loss")
    assert [c[0] for c in claims] == [0.42]
    far = "loss " + "word " * 13 + "0.5"
    assert extract_claims(far, "loss") == []
    near = "loss " + "then " * 10 + "0.5"
    assert [c[0] for c in extract_claims(near, "loss")] == [0.5]


def test_claim_kinds() -> None:
    kinds = {
        "loss improved by 0.48": "difference",
        "loss improved (a reduction of 0.48)": "difference",
        "loss 0.05 lower than before": "difference",
        "loss is below 0.5": "below",
        "loss ended less than 0.5": "below",
        "loss < 0.5": "below",
        "loss stayed above 0.1": "above",
        "loss more than 0.1": "above",
        "loss is 0.5": "value",
    }
    for text, kind in kinds.items():
        claims = extract_claims(text, "loss")
        assert [c[2] for c in claims] == [kind], text


def test_metric_names_with_punctuation_are_mentioned_whole() -> None:
    assert [c[0] for c in extract_claims("val/bpb 1.038, val 2", "val/bpb")] == [1.038]
    assert extract_claims("val/bpb 1.038", "bpb") == []
    assert [c[0] for c in extract_claims("val_bpb reached 1.04.", "val_bpb")] == [1.04]


# --- check_report ----------------------------------------------------------------------------


RUN = [_m(1, 1, 0.9), _m(2, 1, 0.6), _m(3, 2, 0.42), _m(4, 2, 0.419), _m(5, 2, 7.0, name="acc")]


def _gate(text: str, baseline: float | None = 1.0, tolerance: float = 1e-3) -> list[str]:
    result = check_report(
        text, metric="loss", baseline=baseline, measurements=RUN, tolerance=tolerance
    )
    assert result.accepted == (not result.mismatches)
    return result.mismatches


def test_a_correct_report_is_accepted() -> None:
    text = "Baseline loss: 1.0. Loss fell from 0.9 to 0.419 over 2 rounds (12% better each)."
    result = check_report(text, metric="loss", baseline=1.0, measurements=RUN, tolerance=1e-3)
    assert result.accepted and result.baseline == 1.0
    assert [(c.value, c.ok, c.matched_id, c.matched_baseline) for c in result.claims] == [
        (1.0, True, None, True),
        (0.9, True, 1, False),
        (0.419, True, 4, False),
    ]


def test_no_baseline_stated_is_rejected() -> None:
    mismatches = _gate("Loss reached 0.419.")
    assert mismatches == [
        "the report does not state the baseline (loss 1): say it in a sentence with the word "
        "baseline, e.g. “Baseline loss: 1.”"
    ]


def test_baseline_number_outside_a_baseline_sentence_does_not_count() -> None:
    assert _gate("Loss went from 1.0 to 0.419.")  # no "baseline" / "started at"
    assert _gate("The baseline was good. Loss went from 1.0 to 0.419.")  # number elsewhere


@pytest.mark.parametrize(
    "sentence",
    [
        "Baseline: 1.0.",
        "The baseline loss was 1.0.",
        "We started at 1.0.",
        "Loss started from 1.0 and fell to 0.42.",
        "Starting value of 1.00 (round 1).",
    ],
)
def test_baseline_statements(sentence: str) -> None:
    assert _gate(sentence) == []


def test_without_a_recorded_baseline_the_first_measurement_is_the_baseline() -> None:
    mismatches = _gate("Loss reached 0.419.", baseline=None)
    assert mismatches and "(loss 0.9, the first measurement #1)" in mismatches[0]
    assert _gate("Baseline 0.9; loss reached 0.419.", baseline=None) == []
    assert first_value(RUN, "acc") == RUN[4]


def test_no_baseline_and_no_measurement_waives_the_baseline_rule() -> None:
    result = check_report(
        "The job failed before printing anything.",
        metric="loss",
        baseline=None,
        measurements=[],
        tolerance=1e-3,
    )
    assert result.accepted and result.baseline is None
    bad = check_report("loss 0.5", metric="loss", baseline=None, measurements=[], tolerance=1e-3)
    assert bad.mismatches == [
        "the report claims loss 0.5 (“loss 0.5”), which no recorded loss supports within the "
        "relative tolerance 0.001: no loss is recorded"
    ]


def test_a_wrong_number_is_rejected_naming_the_closest_measurement() -> None:
    mismatches = _gate("Baseline loss 1.0. Final loss 0.35.")
    assert mismatches == [
        "the report claims loss 0.35 (“Final loss 0.35.”), which no recorded loss supports "
        "within the relative tolerance 0.001: the closest recorded is 0.419 (measurement #4)"
    ]


def test_closest_may_be_the_baseline() -> None:
    mismatches = _gate("Baseline loss 1.0. Loss peaked at 1.2.")
    assert mismatches[0].endswith("the closest recorded is the baseline 1")


def test_numbers_within_tolerance_are_accepted_and_outside_rejected() -> None:
    assert _gate("Baseline 1.0. Loss 0.4192.") == []  # 0.419 within 0.1 %
    assert _gate("Baseline 1.0. Loss 4.19e-1.") == []
    assert _gate("Baseline 1.0. Loss 0.4205.")  # 0.12 % off 0.42
    assert _gate("Baseline 1.0. Loss 0.4205.", tolerance=1e-2) == []
    assert _gate("Baseline 1.001. Loss 0.42.") == []  # the baseline too


def test_another_metrics_values_do_not_support_a_claim() -> None:
    assert _gate("Baseline 1.0. Loss 7.0.")  # 7.0 is recorded, but as acc


def test_unrelated_numbers_are_ignored() -> None:
    text = (
        "Baseline loss 1.0. We ran 2 rounds on 8 GPUs in 1h12m (budget 3h), 93% of the plan.\n"
        "Round 2 (job 4711) finished with exit code 0 on 2024-05-01; loss reached 0.419, "
        "and accuracy 7.0 at step 5000."
    )
    assert _gate(text) == []


def test_difference_and_bound_claims() -> None:
    assert _gate("Baseline loss 1.0. Loss improved by 0.581 to 0.419.") == []
    wrong = _gate("Baseline loss 1.0. Loss improved by 0.7.")
    assert wrong and "a change of 0.7 in loss" in wrong[0]
    assert "the closest change from the baseline is 0.581 (measurement #4)" in wrong[0]
    assert _gate("Baseline loss 1.0. Loss fell below 0.45.") == []
    low = _gate("Baseline loss 1.0. Loss fell below 0.4.")
    assert low and low[0].endswith("the lowest recorded is 0.419 (measurement #4)")
    assert _gate("Baseline loss 1.0. Loss stayed above 0.5 in round 1.") == []
    # A negated bound is a claim about every value: it is left unchecked.
    assert _gate("Baseline loss 1.0. Loss never went above 0.05; it didn't fall below 5.") == []
    high = _gate("Baseline loss 1.0. Loss went above 2.")
    assert high and high[0].endswith("the highest recorded is 0.9 (measurement #1)")


def test_zero_matches_zero_with_the_absolute_epsilon() -> None:
    zeros = [_m(1, 1, 0.0, name="errors")]
    ok = check_report(
        "Baseline errors 0.0; errors 0.",
        metric="errors",
        baseline=None,
        measurements=zeros,
        tolerance=1e-3,
    )
    assert ok.accepted
    bad = check_report(
        "Baseline errors 0.0; errors 0.001.",
        metric="errors",
        baseline=None,
        measurements=zeros,
        tolerance=1e-3,
    )
    assert not bad.accepted


def test_nan_measurements_support_nothing() -> None:
    runs = [_m(1, 1, float("nan"))]
    result = check_report("loss was nan", metric="loss", baseline=None, measurements=runs)
    assert result.accepted  # nan is not a numeric claim, and a NaN baseline cannot be stated
    assert not check_report("loss 0.5", metric="loss", baseline=None, measurements=runs).accepted


def test_states_baseline() -> None:
    assert states_baseline("Our baseline: 1.108 BPB.", 1.108)
    assert states_baseline("From the starting value of 1.108, it fell.", 1.108)
    assert not states_baseline("Baseline was 1.2.", 1.108)
    assert not states_baseline("Baseline: round 1.", 1.0)  # a count is not the baseline


# --- draft_report -------------------------------------------------------------------------------


def test_format_duration() -> None:
    assert [format_duration(s) for s in (0, 30, 90, 2700, 3600, 4320, 10800, 93784)] == [
        "0s",
        "30s",
        "1m30s",
        "45m",
        "1h",
        "1h12m",
        "3h",
        "1d2h3m",
    ]


def test_draft_report_states_the_facts() -> None:
    rounds = [
        RoundSummary(round=1, wake_reason="finished", exit_code=0),
        RoundSummary(round=2, wake_reason="died", exit_code=1),
    ]
    text = draft_report(
        metric="loss",
        direction="min",
        baseline=None,
        measurements=RUN,
        rounds=rounds,
        wall_used_seconds=4320,
        compute_used_minutes=30,
        budget=Budget(wall_seconds=10800),
        outcome="The campaign failed: round 2 died (exit code 1).",
    )
    assert text.splitlines() == [
        "The campaign failed: round 2 died (exit code 1).",
        "Baseline loss: 0.9 (none was given: the first measurement, #1 in round 1).",
        "Best loss: 0.419 (measurement #4, round 2); lower is better.",
        "Last loss: 0.419 (measurement #4, round 2).",
        "Rounds: round 1 finished (exit code 0); round 2 died (exit code 1).",
        "Budget used: 1h12m of 3h wall clock, 2 of 5 rounds, 30m compute.",
    ]
    assert check_report(text, metric="loss", baseline=None, measurements=RUN).accepted


def test_draft_report_without_measurements_passes() -> None:
    for baseline in (None, 2.5):
        text = draft_report(
            metric="loss",
            direction="max",
            baseline=baseline,
            measurements=[],
            rounds=[],
            wall_used_seconds=5,
        )
        assert "No loss was measured." in text
        assert check_report(text, metric="loss", baseline=baseline, measurements=[]).accepted


@pytest.mark.parametrize("tolerance", [0.0, 1e-3])
@pytest.mark.parametrize("metric", ["loss", "val/bpb", "round", "code", "exit", "best", "s", "h"])
def test_draft_report_passes_the_gate_by_construction(metric: str, tolerance: float) -> None:
    rng = random.Random(metric)
    for trial in range(60):
        values = [
            rng.choice(
                [
                    rng.uniform(-5, 5),
                    rng.uniform(0, 1e-6),
                    rng.uniform(1e5, 1e9),
                    float("nan"),
                    float("inf"),
                    0.0,
                    float(rng.randrange(100)),
                ]
            )
            for _ in range(rng.randrange(0, 8))
        ]
        ms = [_m(i + 1, 1 + i // 3, v, name=metric) for i, v in enumerate(values)]
        baseline = rng.choice([None, 0.0, rng.uniform(-3, 3)])
        rounds = [
            RoundSummary(
                round=r,
                wake_reason=rng.choice(["finished", "died", None]),
                exit_code=rng.choice([0, 1, -9, None]),
            )
            for r in range(1, 4)
        ]
        direction: Direction = rng.choice(["min", "max"])
        text = draft_report(
            metric=metric,
            direction=direction,
            baseline=baseline,
            measurements=ms,
            rounds=rounds,
            wall_used_seconds=rng.uniform(0, 1e5),
            compute_used_minutes=rng.uniform(0, 1e3),
            budget=rng.choice([None, Budget(wall_seconds=7200, rounds=4)]),
            outcome=f"The campaign stopped because {metric} diverged in round 2.",
            tolerance=tolerance,
        )
        result = check_report(
            text, metric=metric, baseline=baseline, measurements=ms, tolerance=tolerance
        )
        assert result.accepted, (trial, text, result.mismatches)
        # A metric named like a count word ("round 3") has its claims skipped, leniently.
        if any(math.isfinite(v) for v in values) and metric not in ("round", "code"):
            assert any(c.kind == "value" and c.matched_id is not None for c in result.claims)


def test_a_metric_named_like_a_count_word_can_state_its_baseline() -> None:
    epochs = [_m(1, 1, 3.0, name="epoch")]
    text = "Baseline epoch: 3."
    assert check_report(text, metric="epoch", baseline=None, measurements=epochs).accepted
    assert not states_baseline("Baseline after epoch 3.", 3.0)  # a count, not the metric
