"""The runtime's exit stack names a slow stop."""

from __future__ import annotations

import logging

import pytest

from core.lifecycle import TimedExitStack


class Part:
    def __init__(self) -> None:
        self.stopped: list[str] = []

    async def close(self, why: str) -> None:
        self.stopped.append(why)


async def test_a_slow_stop_is_named_and_stops_run_in_reverse(
    caplog: pytest.LogCaptureFixture,
) -> None:
    part, other = Part(), Part()
    stack = TimedExitStack(slow_seconds=0.0)  # every stop counts as slow here
    stack.push_async_callback(part.close, "first")
    stack.push_async_callback(other.close, why="second")
    with caplog.at_level(logging.WARNING, logger="core.lifecycle"):
        await stack.aclose()
    assert (part.stopped, other.stopped) == (["first"], ["second"])
    assert [r.getMessage().split(" took")[0] for r in caplog.records] == [
        "stopping Part.close",
        "stopping Part.close",
    ]
