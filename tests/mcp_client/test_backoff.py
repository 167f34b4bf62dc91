"""The reconnect delays: exponential from the first, never above the cap, sane bounds."""

from __future__ import annotations

import pytest

from mcp_client import Backoff


def test_delays_double_up_to_the_cap() -> None:
    backoff = Backoff(first=0.5, cap=5.0)
    assert [backoff.delay(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_a_long_outage_stays_at_the_cap() -> None:
    assert Backoff(first=1.0, cap=60.0).delay(10_000) == 60.0


@pytest.mark.parametrize(
    ("first", "cap", "factor"), [(0.0, 1.0, 2.0), (2.0, 1.0, 2.0), (1.0, 5.0, 0.5)]
)
def test_nonsense_bounds_are_refused(first: float, cap: float, factor: float) -> None:
    with pytest.raises(ValueError, match="backoff needs 0 < first <= cap and factor >= 1"):
        Backoff(first=first, cap=cap, factor=factor)
