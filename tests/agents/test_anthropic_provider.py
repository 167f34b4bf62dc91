"""AnthropicProvider driven through the real anthropic SDK against a loopback fake API."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
import pytest

from agents.models.anthropic_provider import CACHE_MIN_CHARS, AnthropicProvider
from agents.models.provider import ModelProvider
from agents.models.types import (
    Message,
    ModelError,
    TextBlock,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
)
from tests.fakes.anthropic_server import FakeAnthropic, echo_last_user_text

API_KEY = "sk-ant-test-0123456789abcdef"
MODEL = "claude-test-model"

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    input_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy in the environment would swallow loopback traffic or reach for the internet.
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    # The SDK reads these too; a developer's shell must not redirect or decorate test calls.
    for var in ("ANTHROPIC_BASE_URL", "ANTHROPIC_CUSTOM_HEADERS"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(api_key=API_KEY, model=MODEL) as server:
        yield server


MakeProvider = Callable[..., AnthropicProvider]


@pytest.fixture
async def make_provider(fake: FakeAnthropic) -> AsyncIterator[MakeProvider]:
    made: list[AnthropicProvider] = []

    def make(**overrides: Any) -> AnthropicProvider:
        options: dict[str, Any] = {
            "api_key": API_KEY,
            "model": MODEL,
            "base_url": fake.base_url,
            "timeout": 5.0,
            "max_retries": 2,
        }
        options.update(overrides)
        provider = AnthropicProvider(**options)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def retry_counts(fake: FakeAnthropic) -> list[str]:
    """The retry number the SDK put on each request the fake received (0 for a first try)."""
    return [
        {k.lower(): v for k, v in r["headers"].items()}["x-stainless-retry-count"]
        for r in fake.requests
    ]


def sent_key(request: dict[str, Any]) -> str | None:
    headers: dict[str, str] = {k.lower(): v for k, v in request["headers"].items()}
    if "x-api-key" in headers:
        return headers["x-api-key"]
    auth = headers.get("authorization", "")
    return auth.removeprefix("Bearer ") if auth else None


# -- happy paths -------------------------------------------------------------------------------


async def test_text_reply(fake: FakeAnthropic, make_provider: MakeProvider) -> None:
    fake.queue_text("Hello from the fake.")
    provider = make_provider()
    assert isinstance(provider, ModelProvider)
    assert provider.name == f"anthropic:{MODEL}"
    assert provider.offline is False

    reply = await provider.complete(system="Be brief.", messages=[Message.user_text("hi")])

    assert reply.text == "Hello from the fake."
    assert reply.content == [TextBlock(text="Hello from the fake.")]
    assert reply.stop_reason == "end_turn"
    assert reply.model == MODEL
    assert reply.usage.input_tokens > 0
    assert reply.usage.output_tokens > 0
    [request] = fake.requests
    assert request["path"] == "/v1/messages"
    assert sent_key(request) == API_KEY
    assert "anthropic-version" in {k.lower() for k in request["headers"]}
    body = request["json"]
    assert body["model"] == MODEL
    assert body["max_tokens"] == 4096
    assert body["system"] == "Be brief."
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert "tools" not in body


async def test_default_reply_and_responder(
    fake: FakeAnthropic, make_provider: MakeProvider
) -> None:
    provider = make_provider()
    reply = await provider.complete(system="", messages=[Message.user_text("anything")])
    assert reply.text == "fake reply"
    assert "system" not in fake.requests[0]["json"]  # an empty system prompt is left out

    fake.responder = echo_last_user_text
    reply = await provider.complete(system="s", messages=[Message.user_text("ping")])
    assert reply.text == "echo: ping"


async def test_tool_use_round_trip(fake: FakeAnthropic, make_provider: MakeProvider) -> None:
    tool_id = fake.queue_tool_use(
        "get_weather", {"city": "Oslo"}, id="toolu_01abc", text="Let me check."
    )
    fake.queue_text("It is 3°C in Oslo.")
    provider = make_provider()
    convo = [Message.user_text("Weather in Oslo?")]

    first = await provider.complete(system="You help.", messages=convo, tools=[WEATHER])

    assert first.stop_reason == "tool_use"
    assert first.text == "Let me check."
    assert first.tool_calls == [ToolCall(id=tool_id, name="get_weather", input={"city": "Oslo"})]

    convo += [
        Message(role="assistant", content=list(first.content)),
        Message(
            role="user",
            content=[ToolResult(tool_use_id=tool_id, content="3°C, sleet", is_error=False)],
        ),
    ]
    second = await provider.complete(system="You help.", messages=convo, tools=[WEATHER])

    assert second.text == "It is 3°C in Oslo."
    assert second.stop_reason == "end_turn"
    assert len(fake.requests) == 2
    body = fake.requests[1]["json"]
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "input_schema": WEATHER.input_schema,
        }
    ]
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me check."},
            {
                "type": "tool_use",
                "id": "toolu_01abc",
                "name": "get_weather",
                "input": {"city": "Oslo"},
            },
        ],
    }
    assert body["messages"][2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01abc",
                "content": "3°C, sleet",
                "is_error": False,
            }
        ],
    }


async def test_tool_results_lead_the_user_message(
    fake: FakeAnthropic, make_provider: MakeProvider
) -> None:
    provider = make_provider()
    convo = [
        Message.user_text("go"),
        Message(role="assistant", content=[ToolCall(id="t1", name="get_weather", input={})]),
        Message(
            role="user",
            content=[
                TextBlock(text="also, hurry"),
                ToolResult(tool_use_id="t1", content="no such city", is_error=True),
            ],
        ),
    ]
    await provider.complete(system="s", messages=convo, tools=[WEATHER])
    content = fake.requests[0]["json"]["messages"][2]["content"]
    assert [block["type"] for block in content] == ["tool_result", "text"]
    assert content[0]["is_error"] is True


async def test_tool_result_in_assistant_message_is_refused(
    fake: FakeAnthropic, make_provider: MakeProvider
) -> None:
    bad = Message(role="assistant", content=[ToolResult(tool_use_id="t1", content="x")])
    with pytest.raises(ModelError, match="user message"):
        await make_provider().complete(system="s", messages=[Message.user_text("a"), bad])
    assert fake.requests == []


@pytest.mark.parametrize(
    ("api_stop", "ours"),
    [
        ("end_turn", "end_turn"),
        ("max_tokens", "max_tokens"),
        ("stop_sequence", "stop_sequence"),
        ("refusal", "refusal"),
        ("model_context_window_exceeded", "max_tokens"),
        ("pause_turn", "other"),
    ],
)
async def test_usage_and_stop_reason_mapped(
    fake: FakeAnthropic, make_provider: MakeProvider, api_stop: str, ours: str
) -> None:
    fake.queue_message(
        {
            "content": [{"type": "text", "text": "partial"}],
            "stop_reason": api_stop,
            "usage": {
                "input_tokens": 10,
                "output_tokens": 5,
                "cache_creation_input_tokens": 7,
                "cache_read_input_tokens": 100,
            },
        }
    )
    reply = await make_provider().complete(system="s", messages=[Message.user_text("q")])
    assert reply.stop_reason == ours
    # Cached input is billed input too, so it is counted; and apart, as it is priced apart.
    assert reply.usage == Usage(
        input_tokens=117, output_tokens=5, cache_read_tokens=100, cache_write_tokens=7
    )


async def test_long_system_prompt_is_cached(
    fake: FakeAnthropic, make_provider: MakeProvider
) -> None:
    long_system = "You are Raven. " * (CACHE_MIN_CHARS // 10)
    await make_provider().complete(system=long_system, messages=[Message.user_text("q")])
    assert fake.requests[0]["json"]["system"] == [
        {"type": "text", "text": long_system, "cache_control": {"type": "ephemeral"}}
    ]


# -- retries -----------------------------------------------------------------------------------
# The SDK does the retrying. Its own backoff starts at about 0.5s, so errors the fake sends
# carry `retry-after-ms: 1`, as the real API's retryable errors carry a retry-after header.
SOON = {"retry-after-ms": "1"}


async def test_429_honours_retry_after_then_succeeds(
    fake: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake.queue_error(429, "Number of request tokens has exceeded your rate limit.", retry_after=1)
    fake.queue_text("made it")

    started = time.monotonic()
    reply = await make_provider().complete(system="s", messages=[Message.user_text("q")])
    elapsed = time.monotonic() - started

    assert reply.text == "made it"
    assert retry_counts(fake) == ["0", "1"]
    assert elapsed >= 0.95  # the server's 1s, not the SDK's first backoff (at most 0.5s)


async def test_retry_after_ms_is_preferred(
    fake: FakeAnthropic, make_provider: MakeProvider
) -> None:
    # Were the hour honoured, the call would end in the give-up error below instead.
    fake.queue_error(429, "slow down", retry_after=3600, headers=SOON)
    fake.queue_error(529, "Overloaded", headers=SOON)
    fake.queue_text("ok")

    provider = make_provider(timeout=2.0, max_wait_seconds=1.0)
    reply = await provider.complete(system="s", messages=[Message.user_text("q")])

    assert reply.text == "ok"
    assert retry_counts(fake) == ["0", "1", "2"]


async def test_a_retry_after_beyond_the_wait_budget_gives_up_with_a_clear_error(
    fake: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake.queue_error(429, "slow down", retry_after=3600)
    provider = make_provider(timeout=0.5, max_retries=1, max_wait_seconds=0.1)

    with pytest.raises(ModelError) as caught:
        await provider.complete(system="s", messages=[Message.user_text("q")])

    assert "gave up after 1.1s" in str(caught.value)
    assert "Try again later" in str(caught.value)
    assert retry_counts(fake) == ["0"]


async def test_500_exhausts_retries(fake: FakeAnthropic, make_provider: MakeProvider) -> None:
    for _ in range(3):
        fake.queue_error(500, "Internal server error", headers=SOON)

    with pytest.raises(ModelError) as caught:
        await make_provider(max_retries=2).complete(system="s", messages=[Message.user_text("q")])

    message = str(caught.value)
    assert "HTTP 500" in message
    assert "Internal server error" in message
    assert "after 3 attempts" in message
    assert "try again" in message
    assert retry_counts(fake) == ["0", "1", "2"]
    assert isinstance(caught.value.__cause__, anthropic.InternalServerError)


async def test_attempts_counted_when_a_retry_meets_a_final_error(
    fake: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake.queue_error(529, "Overloaded", headers=SOON)
    fake.queue_error(400, "bad request")
    with pytest.raises(ModelError, match=r"HTTP 400.*after 2 attempts"):
        await make_provider(max_retries=4).complete(system="s", messages=[Message.user_text("q")])
    assert len(fake.requests) == 2


async def test_server_can_forbid_a_retry(fake: FakeAnthropic, make_provider: MakeProvider) -> None:
    fake.queue_error(503, "unavailable", headers={"x-should-retry": "false", **SOON})
    with pytest.raises(ModelError, match="after 1 attempt"):
        await make_provider().complete(system="s", messages=[Message.user_text("q")])
    assert len(fake.requests) == 1


async def test_401_fails_at_once(fake: FakeAnthropic, make_provider: MakeProvider) -> None:
    wrong_key = "sk-ant-wrong-key-9876543210"
    with pytest.raises(ModelError) as caught:
        await make_provider(api_key=wrong_key).complete(
            system="s", messages=[Message.user_text("q")]
        )

    message = str(caught.value)
    assert "HTTP 401" in message
    assert "invalid x-api-key" in message
    assert "ANTHROPIC_API_KEY" in message
    assert "after 1 attempt" in message
    assert wrong_key not in message
    assert len(fake.requests) == 1


@pytest.mark.parametrize("status", [400, 403, 404])
async def test_client_errors_are_not_retried(
    fake: FakeAnthropic, make_provider: MakeProvider, status: int
) -> None:
    fake.queue_error(status, "nope", headers=SOON)
    with pytest.raises(ModelError, match=f"HTTP {status}"):
        await make_provider().complete(system="s", messages=[Message.user_text("q")])
    assert len(fake.requests) == 1


async def test_404_names_the_model(fake: FakeAnthropic, make_provider: MakeProvider) -> None:
    fake.queue_error(404, f"model: {MODEL}")
    with pytest.raises(ModelError, match=MODEL):
        await make_provider().complete(system="s", messages=[Message.user_text("q")])


async def test_per_call_timeout_is_retried_then_fails(
    fake: FakeAnthropic, make_provider: MakeProvider
) -> None:
    for _ in range(2):
        fake.queue_delay(2.0)
        fake.queue_text("too late")
    provider = make_provider(timeout=0.3, max_retries=1)

    started = time.monotonic()
    call = asyncio.create_task(provider.complete(system="s", messages=[Message.user_text("q")]))
    await fake.wait_for_requests(1, timeout=2.0)
    with pytest.raises(ModelError) as caught:
        await call
    elapsed = time.monotonic() - started

    message = str(caught.value)
    assert "timed out" in message
    assert "0.3s" in message
    assert "after 2 attempts" in message
    assert retry_counts(fake) == ["0", "1"]
    # Two 0.3s timeouts and one SDK backoff (at most 0.5s), not a 2s delay.
    assert elapsed < 1.9


async def test_connection_refused_names_the_base_url() -> None:
    base_url = f"http://127.0.0.1:{closed_port()}"
    # One retry: with no server there is no retry-after, so the SDK waits its ~0.5s backoff.
    provider = AnthropicProvider(api_key=API_KEY, model=MODEL, base_url=base_url, max_retries=1)
    try:
        with pytest.raises(ModelError) as caught:
            await provider.complete(system="s", messages=[Message.user_text("q")])
    finally:
        await provider.aclose()

    message = str(caught.value)
    assert base_url in message
    assert "ANTHROPIC_BASE_URL" in message
    assert "after 2 attempts" in message
    assert isinstance(caught.value.__cause__, anthropic.APIConnectionError)


async def test_api_key_never_in_error_messages(
    fake: FakeAnthropic, make_provider: MakeProvider
) -> None:
    provider = make_provider(max_retries=0)
    messages: list[str] = []
    fake.queue_error(400, f"header x-api-key={API_KEY} is malformed")  # an echoing server
    fake.queue_error(429, "rate limited")
    fake.queue_error(500, "boom")
    fake.queue_error(403, "forbidden")
    for _ in range(4):
        with pytest.raises(ModelError) as caught:
            await provider.complete(system="s", messages=[Message.user_text("q")])
        messages.append(str(caught.value))
    messages.append(str(ModelError(provider.name)))
    assert all(API_KEY not in m for m in messages)
    assert "[redacted]" in messages[0]


async def test_credentials_in_base_url_are_not_shown() -> None:
    port = closed_port()
    provider = AnthropicProvider(
        api_key=API_KEY,
        model=MODEL,
        base_url=f"http://user:hunter2-secret@127.0.0.1:{port}",
        max_retries=0,
    )
    try:
        with pytest.raises(ModelError) as caught:
            await provider.complete(system="s", messages=[Message.user_text("q")])
    finally:
        await provider.aclose()
    assert "hunter2-secret" not in str(caught.value)
    assert f"http://127.0.0.1:{port}" in str(caught.value)


def test_empty_api_key_is_refused() -> None:
    with pytest.raises(ValueError, match="ANTHROPIC_API_KEY"):
        AnthropicProvider(api_key="", model=MODEL)


# -- health check ------------------------------------------------------------------------------


async def test_check_reports_key_and_model(
    fake: FakeAnthropic, make_provider: MakeProvider
) -> None:
    detail = await make_provider().check()
    assert MODEL in detail
    assert "key accepted" in detail
    assert fake.requests[0]["path"] == f"/v1/models/{MODEL}"


async def test_check_fails_on_unknown_model_and_bad_key(
    fake: FakeAnthropic, make_provider: MakeProvider
) -> None:
    with pytest.raises(ModelError, match=r"HTTP 404.*RAVEN_MODEL"):
        await make_provider(model="claude-nonesuch").check()
    with pytest.raises(ModelError, match="ANTHROPIC_API_KEY"):
        await make_provider(api_key="sk-ant-not-the-right-one").check()
    assert len(fake.requests) == 2


# -- the fake itself ---------------------------------------------------------------------------


async def test_fake_serves_models_for_health_checks(fake: FakeAnthropic) -> None:
    client = anthropic.AsyncAnthropic(api_key=API_KEY, base_url=fake.base_url, max_retries=0)
    try:
        page = await client.models.list()
    finally:
        await client.close()
    assert [m.id for m in page.data]
    assert fake.requests[0]["path"] == "/v1/models"


@pytest.mark.parametrize(
    ("status", "kind", "transient"),
    [
        (529, "overloaded", True),
        (500, "server", True),
        (429, "rate_limited", True),
        (400, "request", False),
        (401, "auth", False),
    ],
)
async def test_a_failure_says_what_kind_it_was(
    fake: FakeAnthropic, make_provider: MakeProvider, status: int, kind: str, transient: bool
) -> None:
    # A fallback chain moves on only for what another model might answer.
    fake.queue_error(status, "no", retry_after=0)
    with pytest.raises(ModelError) as caught:
        await make_provider(max_retries=0).complete(system="s", messages=[Message.user_text("hi")])
    assert (caught.value.kind, caught.value.transient) == (kind, transient)
