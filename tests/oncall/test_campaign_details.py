"""What a campaign says must be true and readable (issue 18, finding 4): a one-round campaign
without a baseline is not "stopped improving"; a terminated or cancelled round's compute is
counted where the report and `campaigns show` read it; a decision without a measurement cites
nothing; a `campaigns stop` from another process is told in the thread and ends the round's
status message; an unknown field is named; numbers read as people write them; the rounds line
is a sentence."""

from __future__ import annotations

import time
from pathlib import Path

from agents.campaign_syntax import parse_campaign
from bot.cli.campaigns import stop_campaign
from host.features.oncall.tools import StartCampaignInput, campaign_spec
from oncall.model import Budget, Measurement, RoundSummary
from oncall.report_gate import check_report, draft_report, format_duration
from tests.helpers import eventually
from tests.oncall_kit import CONV, oncall_kit, spec


async def test_a_single_improving_round_without_a_baseline_is_not_said_to_stop_improving(
    tmp_path: Path,
) -> None:
    steady = 'for v in 2.0 1.7 1.458; do echo "loss $v"; done'
    async with oncall_kit(tmp_path) as kit:
        record = await kit.engine.start("U1", CONV, spec(steady))
        final = await kit.until_final(record.id)
    assert final.state == "closed" and final.report is not None
    assert "stopped improving" not in final.report
    assert "no earlier round was there to beat" in final.report


async def test_a_terminated_rounds_compute_is_in_its_report(tmp_path: Path) -> None:
    # The engine's clock jumps 100 s once the round runs: the stall ends it, the policy
    # terminates it (no round left) and reports. The report was drafted before the round
    # was stopped, so it said 0s compute while the record (`campaigns show`) had the time.
    shift = [0.0]
    async with oncall_kit(tmp_path, clock=lambda: time.time() + shift[0]) as kit:
        silent = spec(
            "echo loss=0.5; sleep 60", stall_seconds=50, budget=Budget(wall_seconds=600, rounds=1)
        )
        record = await kit.engine.start("U1", CONV, silent)
        await kit.until(lambda: _has_measurement(kit, record.id))
        shift[0] = 100.0
        final = await kit.until_final(record.id)
    assert final.compute_seconds >= 100
    assert final.report is not None
    assert f"{format_duration(final.compute_seconds)} compute" in final.report
    assert ", 0s compute" not in final.report


async def _has_measurement(kit: object, campaign_id: str) -> bool:
    return bool(await kit.campaigns.measurements(campaign_id))  # type: ignore[attr-defined]


async def test_a_round_cancelled_from_another_process_counts_its_compute(tmp_path: Path) -> None:
    async with oncall_kit(tmp_path) as kit:
        record = await kit.engine.start("U1", CONV, spec("echo loss=0.5; sleep 60"))
        await kit.until(lambda: _has_measurement(kit, record.id))
        code, said = await stop_campaign(
            kit.campaigns, {"local": kit.machine}, record.id, by="cli", grace_seconds=1
        )
        assert code == 0, said
        final = await kit.campaigns.get(record.id)
        (round_,) = await kit.campaigns.rounds(record.id)
    assert final is not None and round_.handle is not None and round_.ended_at is not None
    assert final.compute_seconds == round_.ended_at - round_.handle.started_at


async def test_a_crash_before_any_measurement_cites_nothing(tmp_path: Path) -> None:
    async with oncall_kit(tmp_path) as kit:
        record = await kit.engine.start("U1", CONV, spec("echo starting; exit 3"))
        final = await kit.until_final(record.id)
        texts = kit.notifier.news
        described = await kit.engine.describe(record.id)
    assert final.state == "failed"
    assert any("Resubmitting" in t for t in texts), texts
    assert not any("#None" in t for t in texts), texts
    assert "#None" not in described


async def test_a_stop_from_another_process_is_told_in_the_thread_and_ends_the_status(
    tmp_path: Path,
) -> None:
    async with oncall_kit(tmp_path) as kit:
        record = await kit.engine.start("U1", CONV, spec("echo loss=0.5; sleep 60"))
        await kit.until(lambda: _has_measurement(kit, record.id))
        await eventually(lambda: any("running on" in e for e in kit.notifier.edits))
        code, said = await stop_campaign(
            kit.campaigns,
            {"local": kit.machine},
            record.id,
            by="`raven-bot campaigns stop`",
            grace_seconds=1,
        )
        assert code == 0, said
        await eventually(
            lambda: any(f"`{record.id}` cancelled" in t for t in kit.notifier.texts()), within=30
        )
        await eventually(lambda: "cancelled" in kit.notifier.edits[-1], within=30)
    notice = next(t for t in kit.notifier.texts() if f"`{record.id}` cancelled" in t)
    assert "`raven-bot campaigns stop`" in notice
    assert kit.notifier.edits[-1].startswith("🏁") and "running" not in kit.notifier.edits[-1]


def test_an_unknown_field_is_named_with_the_valid_ones() -> None:
    fields = parse_campaign(
        "campaign: tune the toy model | machine: local | run: python train.py | "
        "metric: loss min | budget: 2h | colour: red"
    )
    assert fields is not None
    try:
        campaign_spec(StartCampaignInput(**fields))
    except ValueError as exc:
        message = str(exc)
    else:
        raise AssertionError("an unknown field was accepted")
    assert "unknown field `colour`" in message
    assert "`budget`" in message and "`machine`" in message and "`run`" in message
    assert "is not a duration" not in message


def test_a_pipe_in_the_command_is_still_part_of_the_command() -> None:
    fields = parse_campaign(
        "campaign: g | run: python train.py | tee log.txt | metric: loss min | budget: 2h"
    )
    assert fields is not None and fields["run"] == "python train.py | tee log.txt"


def _m(mid: int, value: float, round_: int = 1) -> Measurement:
    return Measurement(
        id=mid, campaign_id="c", round=round_, at=0.0, name="loss", value=value, source_line=""
    )


def test_numbers_are_written_as_people_write_them_and_still_pass_the_gate() -> None:
    best = 0.1 + 1.358  # 1.4580000000000002
    measurements = [_m(1, 2.0), _m(2, best)]
    text = draft_report(
        metric="loss",
        direction="min",
        baseline=None,
        measurements=measurements,
        rounds=[RoundSummary(round=1, wake_reason="finished", exit_code=0)],
        wall_used_seconds=60,
        compute_used_minutes=1,
    )
    assert "Best loss: 1.458 " in text and "1.4580000000000002" not in text
    assert check_report(text, metric="loss", baseline=None, measurements=measurements).accepted


def test_the_rounds_line_is_a_sentence() -> None:
    text = draft_report(
        metric="loss",
        direction="min",
        baseline=None,
        measurements=[_m(1, 1.0)],
        rounds=[
            RoundSummary(round=1, wake_reason="died", exit_code=1),
            RoundSummary(round=2, wake_reason="budget"),
        ],
        wall_used_seconds=60,
    )
    assert "Rounds: round 1 died (exit code 1); round 2 was stopped when the budget ran out." in (
        text
    )
    assert "round 2 budget" not in text
