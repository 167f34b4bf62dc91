"""`eval plans`: one Host turn per task with the standard delegation instruction; the graph
the Host submits (`submit_graph`, or `delegate` as a one-node graph) is captured and the turn
ends there: nothing is dispatched (paper §7.1.3, Protocol).

The Host plans through its own loop, system prompt and roster; only the tools differ, so
that a call records the plan instead of starting a run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agents.models.provider import ModelProvider
from agents.models.types import Message, ModelReply, ToolSpec, Usage
from agents.registry import AgentRegistry
from agents.tools import Tool, ToolOutput, ToolRegistry
from core.ids import ConversationRef
from host.agent.host_agent import HostAgent
from host.agent.tools import (
    DELEGATE_DESCRIPTION,
    GUIDE_DESCRIPTION,
    SUBMIT_GRAPH_DESCRIPTION,
    DelegateInput,
    NoInput,
    SubmitGraphInput,
    load_guide,
    planning_context,
)
from host.evaluation.maob.formats import EvalTask, PlanGraph, PlanNode
from host.graph.admission import AdmissionError
from host.graph.admission.checks.format import parse_submission
from host.runtime.turn import TurnContext

# Given verbatim with every request (the paper's "shared constant"): the same words for any
# system compared with this Host.
DELEGATION_INSTRUCTION = (
    "Plan how your team of specialist agents would carry out the request below and submit "
    "that plan as one dependency graph through your orchestration tool. Do not carry out the "
    "work yourself and do not ask questions: submit the plan you judge best."
)
# The project's agents as MAOB's four domains (`--domain AGENT=DOMAIN` changes or adds).
DEFAULT_DOMAINS: Mapping[str, str] = {
    "research": "research",
    "code": "coding",
    "design": "content",
    "oncall": "oncall",
}
EVAL_USER = "eval"

Outcome = Literal["submitted", "answered", "failed"]


class CountingProvider:
    """Wraps the model provider to count one attempt's calls and tokens."""

    def __init__(self, inner: ModelProvider) -> None:
        self._inner = inner
        self.calls = 0
        self.usage = Usage()

    @property
    def name(self) -> str:
        """The wrapped provider's name."""
        return self._inner.name

    @property
    def offline(self) -> bool:
        """The wrapped provider's."""
        return self._inner.offline

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        max_tokens: int = 4096,
    ) -> ModelReply:
        """One counted call."""
        self.calls += 1
        reply = await self._inner.complete(
            system=system, messages=messages, tools=tools, max_tokens=max_tokens
        )
        self.usage = self.usage + reply.usage
        return reply


@dataclass
class PlanAttempt:
    """One Host turn on one task: the captured graph and what it cost."""

    task_id: str
    attempt: int
    graph: PlanGraph
    outcome: Outcome
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    error: str | None = None
    rejected: int = 0  # submissions refused as malformed before one was taken

    def prediction(self) -> dict[str, Any]:
        """The prediction line `eval score` reads."""
        return {"id": self.task_id, **self.graph.model_dump(mode="json", exclude_none=True)}


@dataclass
class _Capture:
    """What the planning tools saw during one turn."""

    domains: Mapping[str, str]
    graph: PlanGraph | None = None
    rejected: int = 0
    taken: asyncio.Event = field(default_factory=asyncio.Event)

    async def submit_graph(self, ctx: TurnContext, args: SubmitGraphInput) -> str | ToolOutput:
        # Read as the bot reads it (empty optionals absent, strict types), and refused the
        # way the bot refuses it: the model sees the same error result it would in a thread.
        try:
            submission = parse_submission(args.root)
        except AdmissionError as exc:
            self.rejected += 1
            return ToolOutput(str(exc), exc.for_user(), is_error=True)
        return await self._take(
            [(node.id, node.agent, list(node.deps)) for node in submission.nodes],
        )

    async def delegate(self, ctx: TurnContext, args: DelegateInput) -> str:
        return await self._take([(args.id or args.agent, args.agent, [])])

    async def guide(self, ctx: TurnContext, _: NoInput) -> str:
        return load_guide()

    async def _take(self, nodes: list[tuple[str, str, list[str]]]) -> str:
        """Record the plan, then hold the turn until the planner cancels it: returning
        would let the loop make one more model call, which only costs tokens."""
        declared = {node_id for node_id, _, _ in nodes}
        self.graph = PlanGraph(
            nodes=[
                PlanNode(id=node_id, domain=self.domains.get(agent)) for node_id, agent, _ in nodes
            ],
            edges=[(dep, node_id) for node_id, _, deps in nodes for dep in deps if dep in declared],
        )
        self.taken.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable: the turn is cancelled once the plan is taken")

    def tools(self) -> ToolRegistry[TurnContext]:
        return ToolRegistry(
            [
                # The bot's own descriptions: the model plans from the words it reads there.
                Tool("delegate", DELEGATE_DESCRIPTION, DelegateInput, self.delegate),
                Tool("submit_graph", SUBMIT_GRAPH_DESCRIPTION, SubmitGraphInput, self.submit_graph),
                Tool("load_orchestration_guide", GUIDE_DESCRIPTION, NoInput, self.guide),
            ]
        )


@dataclass(frozen=True)
class _Roster:
    """The Host's context for planning: the roster and the guide summary, as the bot's."""

    registry: AgentRegistry

    async def context(self, ctx: TurnContext) -> str:
        return planning_context(self.registry)


class Planner:
    """Plans tasks with the Host, capturing graphs without dispatching them."""

    def __init__(
        self,
        provider: ModelProvider,
        registry: AgentRegistry,
        *,
        domains: Mapping[str, str] = DEFAULT_DOMAINS,
        max_iterations: int = 8,
        timeout: float | None = None,
    ) -> None:
        # No limit on the turn by default: each of its calls is bounded by the provider's
        # (RAVEN_MODEL_TIMEOUT), the turn by `max_iterations`; a fixed 600 s here cut a slow
        # local model's turn off whatever that setting said.
        self._provider = provider
        self._registry = registry
        self._domains = dict(domains)
        self._max_iterations = max_iterations
        self._timeout = timeout

    async def plan(self, task: EvalTask, attempt: int) -> PlanAttempt:
        """One Host turn on `task`; its graph, or the empty graph when it submitted none."""
        counting = CountingProvider(self._provider)
        capture = _Capture(self._domains)
        host = HostAgent(
            counting,
            capture.tools(),
            context_sources=[_Roster(self._registry)],
            max_iterations=self._max_iterations,
        )
        ctx = TurnContext(
            conversation=ConversationRef("eval", "maob", task.id, str(attempt)),
            turn_id=f"{task.id}-{attempt}",
            author_id=EVAL_USER,
            author_name=EVAL_USER,
            text=task.request,
        )
        text = f"{DELEGATION_INSTRUCTION}\n\n{task.request}"
        started = time.perf_counter()
        outcome: Outcome = "answered"
        error: str | None = None
        turn = asyncio.ensure_future(host.run_turn(ctx, text=text))
        taken = asyncio.ensure_future(capture.taken.wait())
        try:
            done, _ = await asyncio.wait(
                {turn, taken}, timeout=self._timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if taken in done:
                outcome = "submitted"
            elif turn in done and (failure := turn.exception()) is not None:
                outcome, error = "failed", _failure(failure)
            elif not done:
                outcome, error = "failed", f"no plan within {self._timeout:g} s"
        finally:
            # The plan is captured: the turn's remaining calls would only cost tokens.
            for waiter in (turn, taken):
                waiter.cancel()
            await asyncio.gather(turn, taken, return_exceptions=True)
        return PlanAttempt(
            task_id=task.id,
            attempt=attempt,
            graph=capture.graph or PlanGraph(),
            outcome=outcome,
            calls=counting.calls,
            input_tokens=counting.usage.input_tokens,
            output_tokens=counting.usage.output_tokens,
            seconds=time.perf_counter() - started,
            error=error,
            rejected=capture.rejected,
        )


def _failure(exc: BaseException) -> str:
    """Why a planning turn failed, never empty (a TimeoutError has no message of its own)."""
    if isinstance(exc, TimeoutError):
        return (
            "TimeoutError: a model call timed out; RAVEN_MODEL_TIMEOUT sets how long one may take"
        )
    return f"{type(exc).__name__}: {str(exc) or 'no message'}"
