"""The rounds table under a campaign's final report: one row per round from the record."""

from __future__ import annotations

from oncall.model import Measurement, RoundSummary
from oncall.round_table import MAX_ROWS, rounds_table


def _m(id_: int, round_: int, value: float, name: str = "loss") -> Measurement:
    return Measurement(
        id=id_, campaign_id="c", round=round_, at=0.0, name=name, value=value, source_line=""
    )


def test_each_round_is_a_row_with_its_end_count_best_and_last() -> None:
    rounds = [
        RoundSummary(round=2, wake_reason="died", exit_code=1),
        RoundSummary(round=1, wake_reason="finished", exit_code=0),
        RoundSummary(round=3, state="running"),
    ]
    values = [
        _m(1, 1, 0.9),
        _m(2, 1, 0.7),
        _m(3, 1, 0.8),
        _m(4, 2, float("nan")),
        _m(5, 1, 5, "acc"),
    ]
    assert rounds_table("loss", "min", rounds, values) == (
        "Rounds:\n\n"
        "| Round | Ended | loss values | Best loss | Last loss |\n"
        "|---|---|---|---|---|\n"
        "| 1 | finished (exit code 0) | 3 | 0.7 | 0.8 |\n"
        "| 2 | died (exit code 1) | 1 | — | nan |\n"
        "| 3 | was still running | 0 | — | — |"
    )
    assert "| 1 | finished (exit code 0) | 3 | 0.9 | 0.8 |" in rounds_table(
        "loss", "max", rounds, values
    )
    assert rounds_table("loss", "min", [], values) == ""


def test_a_long_campaign_shows_its_last_rounds_and_says_so() -> None:
    rounds = [RoundSummary(round=n, wake_reason="finished") for n in range(1, MAX_ROWS + 11)]
    table = rounds_table("loss", "min", rounds, [])
    assert table.startswith(f"The last {MAX_ROWS} of {MAX_ROWS + 10} rounds:\n\n")
    assert table.count("\n| ") == MAX_ROWS + 1  # the header and the kept rows
    assert "\n| 11 | finished |" in table and "\n| 10 |" not in table
