"""The optional skill hub client against a loopback HTTP server: results validated, a bad
entry dropped, errors raised for the router to isolate, and a slow hub cut off."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from skills.hub import HubError, HubSource
from tests.fakes.skill_hub import FakeHub, serving_hub


@pytest.fixture
async def hub() -> AsyncIterator[tuple[FakeHub, str]]:
    async with serving_hub() as state:
        yield state, state.url


async def test_hits_are_validated_and_ranked_as_sent(hub: tuple[FakeHub, str]) -> None:
    state, url = hub
    state.answer = {
        "skills": [
            {"id": "h1", "name": "svg-chart", "description": "Charts.", "body": "b", "score": 9},
            {"id": "", "name": "broken"},  # dropped
            {"id": "h2", "name": "csv-clean", "description": "Clean CSV.", "score": 3},
        ]
    }
    hits = await HubSource(url, token="tok").search("chart from csv", 5)
    assert [(h.qid, h.score) for h in hits] == [("hub/h1", 9.0), ("hub/h2", 3.0)]
    assert hits[0].skill.origin == "hub"
    assert state.queries[0]["q"] == "chart from csv" and state.queries[0]["k"] == "5"
    assert state.queries[0]["auth"] == "Bearer tok"


@pytest.mark.parametrize(("status", "answer"), [(500, {}), (200, {"nope": 1}), (200, [1, 2])])
async def test_unusable_answers_raise(hub: tuple[FakeHub, str], status: int, answer: Any) -> None:
    state, url = hub
    state.status, state.answer = status, answer
    with pytest.raises(HubError):
        await HubSource(url).search("q", 3)


async def test_a_slow_hub_times_out(hub: tuple[FakeHub, str]) -> None:
    state, url = hub
    state.delay = True
    with pytest.raises(TimeoutError):
        await HubSource(url, timeout=0.2).search("q", 3)
