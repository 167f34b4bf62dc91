"""FallbackProvider over two real Anthropic SDK clients, each against its own loopback fake."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from pydantic import BaseModel

from agents.loop import AgentLoop
from agents.models.anthropic_provider import AnthropicProvider
from agents.models.fallback import (
    FallbackProvider,
    FallbackSession,
    fallback_note,
    scoped_for_turn,
)
from agents.models.openai_provider import OpenAIProvider
from agents.models.provider import ModelProvider
from agents.models.types import Message, ModelError
from agents.tools import Tool, ToolRegistry
from bot.app import build_provider, close_provider
from bot.settings import SettingsError, load_settings
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI

API_KEY = "sk-ant-test-0123456789abcdef"
PRIMARY = "claude-primary"
SECOND = "claude-second"
THIRD = "claude-third"
HELLO = [Message.user_text("hello")]


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy in the environment would swallow loopback traffic or reach for the internet.
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    for var in ("ANTHROPIC_BASE_URL", "ANTHROPIC_CUSTOM_HEADERS"):
        monkeypatch.delenv(var, raising=False)


@dataclass
class Chain:
    """Three fakes, one model each, and the chain over them (primary, second, third)."""

    primary: FakeAnthropic
    second: FakeAnthropic
    third: FakeAnthropic
    provider: FallbackProvider


def _model(fake: FakeAnthropic, model: str, timeout: float = 5.0) -> AnthropicProvider:
    # max_retries=0: the SDK's own retries are not under test, and would slow every case.
    return AnthropicProvider(
        api_key=API_KEY, model=model, base_url=fake.base_url, timeout=timeout, max_retries=0
    )


@pytest.fixture
async def chain() -> AsyncIterator[Chain]:
    async with (
        FakeAnthropic(api_key=API_KEY, model=PRIMARY) as primary,
        FakeAnthropic(api_key=API_KEY, model=SECOND) as second,
        FakeAnthropic(api_key=API_KEY, model=THIRD) as third,
    ):
        # Every model gets a generous limit: it also bounds connecting, and a loopback
        # connect can take a while on a loaded machine. The timeout case builds its own.
        provider = FallbackProvider(
            _model(primary, PRIMARY), [_model(second, SECOND), _model(third, THIRD)]
        )
        try:
            yield Chain(primary, second, third, provider)
        finally:
            await provider.aclose()


def _session(provider: FallbackProvider) -> FallbackSession:
    session = scoped_for_turn(provider)
    assert isinstance(session, FallbackSession)
    return session


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (529, "overloaded"),
        (500, "failing (server error)"),
        (503, "failing (server error)"),
        (429, "rate limited"),
    ],
)
async def test_each_transient_failure_falls_back_to_the_next_model(
    chain: Chain, status: int, reason: str
) -> None:
    chain.primary.queue_error(status, "not now")
    chain.second.queue_text("from the second")
    session = _session(chain.provider)

    reply = await session.complete(system="", messages=HELLO)

    assert reply.text == "from the second"
    assert reply.model == SECOND
    assert len(chain.primary.requests) == 1
    assert str(session.last_fallback) == (
        f"answered by the fallback model anthropic:{SECOND}: anthropic:{PRIMARY} was {reason}"
    )
    assert fallback_note(session) == session.last_fallback
    assert chain.third.requests == []


async def test_a_timeout_falls_back(chain: Chain) -> None:
    chain.primary.queue_delay(10.0)  # stop() cuts it short at the end
    chain.second.queue_text("in time")
    # A short limit on the primary only: its answer is held far longer than that.
    impatient = FallbackProvider(
        _model(chain.primary, PRIMARY, timeout=0.5), [_model(chain.second, SECOND)]
    )
    try:
        session = _session(impatient)
        reply = await session.complete(system="", messages=HELLO)
    finally:
        await impatient.aclose()

    assert (reply.text, reply.model) == ("in time", SECOND)
    note = session.last_fallback
    assert note is not None and note.switches[0].kind == "timeout"
    assert "was not answering in time" in str(note)


@pytest.mark.parametrize(
    ("status", "kind"), [(400, "request"), (401, "auth"), (403, "auth"), (404, "request")]
)
async def test_a_failure_about_the_request_or_key_does_not_fall_back(
    chain: Chain, status: int, kind: str
) -> None:
    chain.primary.queue_error(status, "no")
    chain.second.queue_text("must not be asked")
    session = _session(chain.provider)

    with pytest.raises(ModelError) as failed:
        await session.complete(system="", messages=HELLO)

    assert failed.value.kind == kind
    assert f"HTTP {status}" in str(failed.value)
    assert chain.second.requests == []
    assert session.last_fallback is None


async def test_a_refusal_is_an_answer_not_a_failure(chain: Chain) -> None:
    chain.primary.queue_text("I will not help with that.", stop_reason="refusal")
    session = _session(chain.provider)

    reply = await session.complete(system="", messages=HELLO)

    assert (reply.stop_reason, reply.model) == ("refusal", PRIMARY)
    assert chain.second.requests == []
    assert session.last_fallback is None


async def test_the_turn_stays_on_the_fallback_and_logs_the_switch_once(
    chain: Chain, caplog: pytest.LogCaptureFixture
) -> None:
    chain.primary.queue_error(529, "busy")
    chain.second.queue_text("first")
    chain.second.queue_text("second")
    session = _session(chain.provider)

    with caplog.at_level(logging.WARNING, logger="agents.models.fallback"):
        first = await session.complete(system="", messages=HELLO)
        again = await session.complete(system="", messages=HELLO)

    assert (first.text, again.text) == ("first", "second")
    assert again.model == SECOND
    # The primary (free again by now: nothing more is queued) is not asked a second time.
    assert len(chain.primary.requests) == 1
    assert len(chain.second.requests) == 2
    switches = [r.getMessage() for r in caplog.records if "falls back" in r.getMessage()]
    assert switches == [
        f"model anthropic:{PRIMARY} was overloaded; this turn falls back to anthropic:{SECOND}"
    ]
    assert session.name == f"anthropic:{SECOND}"


async def test_a_new_turn_starts_on_the_primary_again(chain: Chain) -> None:
    chain.primary.queue_error(529, "busy")
    chain.second.queue_text("fallback")
    chain.primary.queue_text("primary again")
    await _session(chain.provider).complete(system="", messages=HELLO)

    next_turn = _session(chain.provider)
    reply = await next_turn.complete(system="", messages=HELLO)

    assert (reply.text, reply.model) == ("primary again", PRIMARY)
    assert next_turn.last_fallback is None


async def test_the_chain_itself_starts_each_call_on_the_primary(chain: Chain) -> None:
    chain.primary.queue_error(500, "oops")
    chain.second.queue_text("fallback")
    chain.primary.queue_text("primary")

    first = await chain.provider.complete(system="", messages=HELLO)
    second = await chain.provider.complete(system="", messages=HELLO)

    assert (first.model, second.model) == (SECOND, PRIMARY)


async def test_every_model_failing_raises_the_last_error_naming_each_model(
    chain: Chain,
) -> None:
    chain.primary.queue_error(529, "busy one")
    chain.second.queue_error(500, "broken two")
    chain.third.queue_error(429, "slow down three")
    session = _session(chain.provider)

    with pytest.raises(ModelError) as failed:
        await session.complete(system="", messages=HELLO)

    message = str(failed.value)
    assert failed.value.kind == "rate_limited"
    assert message.startswith(
        "Every model in the fallback chain failed "
        f"(anthropic:{PRIMARY}, anthropic:{SECOND}, anthropic:{THIRD})."
    )
    for detail in ("busy one", "broken two", "slow down three"):
        assert detail in message
    assert isinstance(failed.value.__cause__, ModelError)


async def test_a_later_non_transient_failure_is_raised_as_it_is(chain: Chain) -> None:
    chain.primary.queue_error(529, "busy")
    chain.second.queue_error(400, "bad tools")
    session = _session(chain.provider)

    with pytest.raises(ModelError) as failed:
        await session.complete(system="", messages=HELLO)

    assert failed.value.kind == "request"
    assert "bad tools" in str(failed.value)
    assert chain.third.requests == []


def test_a_plain_provider_is_its_own_turn_view() -> None:
    from agents.models.offline import OfflineProvider

    offline: ModelProvider = OfflineProvider()
    assert scoped_for_turn(offline) is offline
    assert fallback_note(offline) is None


def test_a_chain_is_named_by_its_models(chain: Chain) -> None:
    assert chain.provider.name == (
        f"anthropic:{PRIMARY} (fallbacks: anthropic:{SECOND}, anthropic:{THIRD})"
    )
    assert chain.provider.offline is False
    with pytest.raises(ValueError, match="at least one fallback"):
        FallbackProvider(chain.provider.primary, [])


@pytest.mark.parametrize("openai_first", [False, True])
async def test_a_chain_falls_back_across_apis(openai_first: bool) -> None:
    async with (
        FakeAnthropic(api_key=API_KEY, model=PRIMARY) as anthropic_api,
        FakeOpenAI(models=("qwen",)) as openai_api,
    ):
        claude = _model(anthropic_api, PRIMARY)
        local = OpenAIProvider(
            api_key="no-key", model="qwen", base_url=openai_api.base_url, max_retries=0
        )
        if openai_first:
            provider = FallbackProvider(local, [claude])
            openai_api.queue_error(503, "warming up")
            anthropic_api.queue_text("from anthropic")
            expected = ("from anthropic", PRIMARY, "server")
        else:
            provider = FallbackProvider(claude, [local])
            anthropic_api.queue_error(529, "busy")
            openai_api.queue_text("from the local server")
            expected = ("from the local server", "qwen", "overloaded")
        try:
            session = _session(provider)
            reply = await session.complete(system="", messages=HELLO)
        finally:
            await provider.aclose()

    note = session.last_fallback
    assert note is not None
    assert (reply.text, reply.model, note.switches[0].kind) == expected
    assert note.answered_by == provider.chain[1].name


# -- one agent loop run is one turn ---------------------------------------------------------


class Echo(BaseModel):
    text: str


def _echo_tools() -> ToolRegistry[str]:
    async def echo(ctx: str, args: Echo) -> str:
        return args.text

    return ToolRegistry([Tool("echo", "Echo text back.", Echo, echo)])


async def test_a_loop_run_stays_on_its_fallback_and_reports_it(chain: Chain) -> None:
    chain.primary.queue_error(529, "busy")
    chain.second.queue_tool_use("echo", {"text": "hi"})
    chain.second.queue_text("done on the second")
    chain.primary.queue_text("primary for the next run")
    loop: AgentLoop[str] = AgentLoop(chain.provider)

    result = await loop.run(system="s", messages=HELLO, tools=_echo_tools(), ctx="c")

    assert result.text == "done on the second"
    assert result.model_calls == 2
    assert len(chain.primary.requests) == 1  # the tool round went to the fallback too
    assert len(chain.second.requests) == 2
    assert result.fallback == (
        f"answered by the fallback model anthropic:{SECOND}: anthropic:{PRIMARY} was overloaded"
    )

    assert {"type": "fallback", "text": result.fallback} in result.transcript

    # The next run (the next turn) starts on the primary again and has nothing to report.
    again = await loop.run(system="s", messages=HELLO, tools=_echo_tools(), ctx="c")
    assert (again.text, again.fallback) == ("primary for the next run", "")
    assert all(entry["type"] != "fallback" for entry in again.transcript)


# -- the setting ---------------------------------------------------------------------------


async def test_the_setting_builds_a_chain_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("RAVEN_MODEL", PRIMARY)
    monkeypatch.setenv("RAVEN_MODEL_FALLBACKS", f" {SECOND} ,{THIRD},")

    settings = load_settings()
    provider = build_provider(settings)
    try:
        assert settings.model_fallbacks == [SECOND, THIRD]
        assert isinstance(provider, FallbackProvider)
        assert [p.name for p in provider.chain] == [
            f"anthropic:{PRIMARY}",
            f"anthropic:{SECOND}",
            f"anthropic:{THIRD}",
        ]
    finally:
        await close_provider(provider)


async def test_a_chain_mixes_apis_and_leaves_out_a_fallback_without_a_key(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv(
        "RAVEN_MODEL_FALLBACKS", "openai:gpt-5,openai:qwen@http://127.0.0.1:9/v1,claude-x"
    )

    with caplog.at_level(logging.WARNING, logger="bot.app"):
        provider = build_provider(load_settings())
    try:
        assert isinstance(provider, FallbackProvider)
        assert [p.name for p in provider.chain[1:]] == ["openai:qwen", "anthropic:claude-x"]
        assert "fallback model openai:gpt-5 has no key for its API" in caplog.text
    finally:
        await close_provider(provider)


async def test_no_chain_without_the_setting_or_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAVEN_MODEL_FALLBACKS", SECOND)
    assert build_provider(load_settings()).offline  # no key: offline, no chain around it


async def test_no_setting_no_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    provider = build_provider(load_settings())
    try:
        assert isinstance(provider, AnthropicProvider)
    finally:
        await close_provider(provider)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("claude haiku", "'claude haiku': must be one model with no spaces; accepted forms"),
        ("mistral:large", "'mistral:large': unknown provider 'mistral'"),
        (f"{SECOND},anthropic:{SECOND}", "a model is named twice"),
        ("anthropic:claude-sonnet-5", "'claude-sonnet-5' is RAVEN_MODEL, which is always tried"),
    ],
)
def test_a_malformed_setting_is_refused_at_start_in_one_line(
    monkeypatch: pytest.MonkeyPatch, value: str, problem: str
) -> None:
    monkeypatch.setenv("RAVEN_MODEL_FALLBACKS", value)

    with pytest.raises(SettingsError) as err:
        load_settings()

    lines = str(err.value).splitlines()
    assert len(lines) == 2  # the heading, then one line for the setting
    assert lines[1].strip().startswith("RAVEN_MODEL_FALLBACKS: ")
    assert problem in lines[1]
