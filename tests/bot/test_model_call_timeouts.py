"""Every model call follows RAVEN_MODEL_TIMEOUT: the completion judge, the clarification
answerer, the campaign decider, eval's planner and an api agent's calls, built as the bot
builds them, on the real Anthropic SDK against the loopback fake.

Scaled down to stay fast: RAVEN_MODEL_TIMEOUT is 0.5 s; a reply the fake holds 0.2 s arrives,
one held beyond the limit fails with a reason that names the setting (never an empty one).
None of them keeps a fixed limit of its own that RAVEN_MODEL_TIMEOUT cannot raise.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from agents.backends import AcpProcesses
from agents.backends.base import AgentTask
from agents.models.model_spec import build_model_provider
from agents.models.provider import ModelProvider
from agents.registry import AgentEntry, default_registry
from agents.sandbox import select_sandbox
from bot.app import backend_factory
from bot.settings import load_settings
from core.secret_names import SecretNames
from core.store import Store
from host.evaluation.evolution.runtime import ActiveHarnesses
from host.evaluation.maob.formats import EvalTask
from host.evaluation.maob.planner import Planner
from host.features.oncall.decider import ModelDecider
from host.graph.judge import CompletionJudge
from host.prompts.clarify import Clarifier
from oncall.model import Budget, CampaignSpec, MetricSpec
from oncall.policy import DecisionContext
from tests.fakes.anthropic_server import FakeAnthropic
from tests.helpers import eventually
from tests.host.prompts.test_clarify import CONV, _setup

API_KEY = "sk-ant-test-0123456789abcdef"
LIMIT = 0.5  # RAVEN_MODEL_TIMEOUT in these tests
WITHIN = 0.2  # a slow reply, still within the limit
BEYOND = 2.0  # a reply the limit cuts off (the fake stops holding it when the test ends)

GRAPH = {
    "task_summary": "survey",
    "nodes": [{"id": "s1", "agent": "research", "template": "Survey the field."}],
}


@pytest.fixture(autouse=True)
def _settings_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("RAVEN_MODEL_TIMEOUT", str(LIMIT))
    # One attempt per call: the SDK's retries would only repeat the same wait.
    monkeypatch.setenv("RAVEN_MODEL_MAX_RETRIES", "0")


@pytest.fixture
async def api(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(api_key=API_KEY) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
        yield fake


@pytest.fixture
async def provider(api: FakeAnthropic) -> AsyncIterator[ModelProvider]:
    """RAVEN_MODEL's provider, from the settings, as the bot builds it."""
    settings = load_settings()
    built = build_model_provider(settings.model_spec, settings.provider_options)
    assert not built.offline
    yield built
    aclose = getattr(built, "aclose", None)
    if aclose is not None:
        await aclose()


def _slow(api: FakeAnthropic, seconds: float, answer: Callable[[], object]) -> None:
    api.queue_delay(seconds)
    answer()


def _timed_out(reason: str) -> None:
    assert "timed out" in reason or "did not answer" in reason or "nothing for" in reason, reason
    assert "RAVEN_MODEL_TIMEOUT" in reason, reason


def test_no_model_call_keeps_a_fixed_limit_of_its_own() -> None:
    for built in (CompletionJudge, Clarifier, ModelDecider, Planner):
        assert inspect.signature(built).parameters["timeout"].default is None, built
    assert load_settings().judge_timeout is None  # RAVEN_JUDGE_TIMEOUT unset


# -- the completion judge --------------------------------------------------------------------


def _judge(provider: ModelProvider) -> CompletionJudge:
    return CompletionJudge(provider, timeout=load_settings().judge_timeout)  # as bot/app.py


async def test_a_slow_judge_within_the_limit_gives_its_verdict(
    api: FakeAnthropic, provider: ModelProvider
) -> None:
    verdict = {"accomplished": False, "category": "other", "evidence": "no file"}
    _slow(api, WITHIN, lambda: api.queue_tool_use("record_verdict", verdict))
    result = await _judge(provider).judge(prompt="Write a file.", output="done", transcript="")
    assert (result.accomplished, result.fallback, result.evidence) == (False, False, "no file")


async def test_a_judge_beyond_the_limit_falls_back_saying_why(
    api: FakeAnthropic, provider: ModelProvider
) -> None:
    _slow(api, BEYOND, lambda: api.queue_text("late"))
    result = await _judge(provider).judge(prompt="Write a file.", output="done", transcript="")
    assert result.fallback
    _timed_out(result.fallback_reason)


# -- the clarification answerer --------------------------------------------------------------


ANSWER = {"answerable": True, "answer": "CSV", "known": "the user said CSV"}


async def test_a_slow_answerer_within_the_limit_answers(
    api: FakeAnthropic, provider: ModelProvider, store: Store
) -> None:
    _slow(api, WITHIN, lambda: api.queue_tool_use("answer_clarification", ANSWER))
    clarifier, _, surface = await _setup(store, provider)
    result = await clarifier.ask(CONV, "U1", "Which output format?", node_id="n1")
    assert (result.answer, result.source) == ("CSV", "conversation")
    assert surface.shown == []


async def test_an_answerer_beyond_the_limit_asks_the_user_and_logs_why(
    api: FakeAnthropic, provider: ModelProvider, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    _slow(api, BEYOND, lambda: api.queue_tool_use("answer_clarification", ANSWER))
    clarifier, broker, surface = await _setup(store, provider)
    with caplog.at_level(logging.WARNING, logger="host.prompts.clarify"):
        asked = asyncio.create_task(clarifier.ask(CONV, "U1", "Which format?", node_id="n1"))
        await eventually(lambda: bool(surface.shown))
    prompt = surface.shown[0]
    await broker.answer(prompt.id, prompt.nonce, "U1", "JSON")
    assert (await asked).answer == "JSON"
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "host.prompts.clarify"]
    assert warning.endswith("; asking the user")
    _timed_out(warning)


# -- the campaign decider --------------------------------------------------------------------


def _context() -> DecisionContext:
    spec = CampaignSpec(
        goal="train",
        command="python train.py",
        metric=MetricSpec(name="loss"),
        budget=Budget(wall_seconds=3600, rounds=3),
        wake_every_seconds=300.0,
        stall_seconds=600.0,
    )
    return DecisionContext(
        spec=spec,
        baseline=None,
        measurements=[],
        rounds=[],
        wall_used_seconds=60.0,
        compute_used_minutes=0.0,
        rounds_used=1,
        reason="scheduled",
    )


async def test_a_slow_decider_within_the_limit_decides(
    api: FakeAnthropic, provider: ModelProvider
) -> None:
    answer = {"action": "wait", "reason": "the job has only just started", "wait_minutes": 5}
    _slow(api, WITHIN, lambda: api.queue_tool_use("decide", answer))
    decision = await ModelDecider(provider).decide(_context())
    assert (decision.action, decision.reason) == ("wait", "the job has only just started")
    assert not any("failed" in note for note in decision.notes)


async def test_a_decider_beyond_the_limit_uses_the_policy_saying_why(
    api: FakeAnthropic, provider: ModelProvider
) -> None:
    _slow(api, BEYOND, lambda: api.queue_text("late"))
    decision = await ModelDecider(provider).decide(_context())
    (note,) = [n for n in decision.notes if n.startswith("the model's decision failed: ")]
    _timed_out(note)


# -- eval's planner --------------------------------------------------------------------------


def _task() -> EvalTask:
    return EvalTask.model_validate(
        {
            "id": "t1",
            "request": "Survey the field.",
            "reference": {"nodes": [{"id": "s1", "domain": "research"}]},
        }
    )


async def test_a_slow_planner_within_the_limit_submits(
    api: FakeAnthropic, provider: ModelProvider
) -> None:
    _slow(api, WITHIN, lambda: api.queue_tool_use("submit_graph", GRAPH))
    attempt = await Planner(provider, default_registry(which=lambda _: None)).plan(_task(), 1)
    assert (attempt.outcome, attempt.error) == ("submitted", None)


async def test_a_planner_beyond_the_limit_fails_saying_why(
    api: FakeAnthropic, provider: ModelProvider
) -> None:
    _slow(api, BEYOND, lambda: api.queue_tool_use("submit_graph", GRAPH))
    attempt = await Planner(provider, default_registry(which=lambda _: None)).plan(_task(), 1)
    assert attempt.outcome == "failed"
    assert attempt.error is not None
    _timed_out(attempt.error)


async def test_a_deciders_own_tighter_limit_still_says_why(
    api: FakeAnthropic, provider: ModelProvider
) -> None:
    # A TimeoutError carries no message: the note once ended "failed: " and nothing more.
    _slow(api, WITHIN, lambda: api.queue_text("late"))
    decision = await ModelDecider(provider, timeout=0.05).decide(_context())
    (note,) = [n for n in decision.notes if n.startswith("the model's decision failed: ")]
    assert "timed out after 0.05 s" in note, note
    assert "RAVEN_MODEL_TIMEOUT" in note


# -- an api agent ----------------------------------------------------------------------------


async def test_an_api_agents_calls_follow_the_model_timeout(
    api: FakeAnthropic, provider: ModelProvider, tmp_path: Path
) -> None:
    # Its calls were capped at a fixed 120 s, whatever RAVEN_MODEL_TIMEOUT said.
    entry = AgentEntry(
        name="remote",
        description="a remote Anthropic-style agent",
        backend="api",
        stateful=False,
        file_capable=False,
        progress=False,
        enabled=True,
        role="research",
        model="claude-remote",
        base_url=api.base_url,
    )
    sandbox = select_sandbox(hidden=(), unsandboxed=True)  # nothing runs in it here
    built = backend_factory(
        provider,
        load_settings(),
        sandbox,
        AcpProcesses(sandbox, secret_names=SecretNames()),
        ActiveHarnesses(),
    )
    _slow(api, WITHIN, lambda: api.queue_text("surveyed"))
    outcome = await built(entry).run(AgentTask("n1", entry, "Survey the field.", tmp_path))
    assert (outcome.error, outcome.output) == (None, "surveyed")
    # The SDK tells the server how long it waits for this call.
    (request,) = api.requests
    headers = {k.lower(): v for k, v in request["headers"].items()}
    assert float(headers["x-stainless-timeout"]) == LIMIT
