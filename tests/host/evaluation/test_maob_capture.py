"""`raven-bot eval plans` reads a submitted graph as the bot does: an empty optional field is
absent, and a refusal reaches the model as an error result (what a weak model needs to fix
its graph rather than ask the user)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from agents.tools import ToolOutput
from host.agent.tools import SubmitGraphInput
from host.evaluation.maob.planner import _Capture
from host.runtime.turn import TurnContext

NO_TURN = cast(TurnContext, None)  # the capture never reads the turn


def _graph(**node: Any) -> SubmitGraphInput:
    base = {"id": "r1", "agent": "research", "template": "Survey sorting", "deps": []}
    return SubmitGraphInput.model_validate({"task_summary": "survey", "nodes": [base | node]})


async def test_an_empty_optional_field_is_read_as_absent() -> None:
    capture = _Capture(domains={"research": "research"})
    taking = asyncio.create_task(capture.submit_graph(NO_TURN, _graph(instance="")))
    await asyncio.wait_for(capture.taken.wait(), 5)
    taking.cancel()
    assert capture.rejected == 0 and capture.graph is not None
    assert [n.id for n in capture.graph.nodes] == ["r1"]


async def test_a_refused_graph_is_an_error_result_naming_the_field() -> None:
    capture = _Capture(domains={})
    answer = await capture.submit_graph(NO_TURN, _graph(colour="blue"))
    assert isinstance(answer, ToolOutput) and answer.is_error
    assert "colour" in answer.text
    assert capture.rejected == 1 and capture.graph is None
