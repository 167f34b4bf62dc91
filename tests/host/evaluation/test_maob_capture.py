"""`raven-bot eval plans` reads a submitted graph as the bot does: an empty optional field is
absent, and a refusal reaches the model as an error result (what a weak model needs to fix
its graph rather than ask the user), and its Host plans from the bot's own words: the
planning tools' descriptions and schemas, the roster and the guide summary."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from agents.models.types import Message, ModelReply, TextBlock, ToolSpec
from agents.registry import AgentRegistry, default_registry
from agents.tools import Tool, ToolOutput
from host.agent.tools import HostToolDeps, SubmitGraphInput, build_host_tools, planning_context
from host.evaluation.maob.formats import EvalTask, PlanGraph
from host.evaluation.maob.planner import Planner, _Capture
from host.graph.runs import RunManager
from host.prompts.broker import PromptBroker
from host.runtime.turn import TurnContext
from tests.fakes.providers import TestProvider

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


class Answers(TestProvider):
    """Answers at once, keeping what the Host was shown."""

    def __init__(self) -> None:
        self.shown: list[tuple[str, list[ToolSpec]]] = []

    async def reply(
        self, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> ModelReply:
        self.shown.append((system, tools))
        return ModelReply(content=[TextBlock(text="no plan")], stop_reason="end_turn")


async def test_the_planner_shows_the_bots_planning_tools_and_roster() -> None:
    registry = default_registry(which=lambda name: f"/usr/bin/{name}")
    provider = Answers()
    task = EvalTask(id="t1", request="Survey sorting", reference=PlanGraph())
    await Planner(provider, registry).plan(task, 1)
    [(system, tools)] = provider.shown
    assert planning_context(registry) in system
    bots = {t.name: t.spec for t in _bot_planning_tools(registry)}
    assert {t.name: t for t in tools} == bots


def _bot_planning_tools(registry: AgentRegistry) -> list[Tool[TurnContext]]:
    """The bot's delegate, submit_graph and guide tools (building their specs touches no
    run or prompt, so none is given)."""
    deps = HostToolDeps(
        runs=cast(RunManager, None), broker=cast(PromptBroker, None), registry=registry
    )
    wanted = ("delegate", "submit_graph", "load_orchestration_guide")
    return [t for t in build_host_tools(deps) if t.name in wanted]
