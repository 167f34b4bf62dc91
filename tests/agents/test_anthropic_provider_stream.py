"""AnthropicProvider with `stream=True`, through the real anthropic SDK (its `messages.stream`
helper) against the loopback fake streaming server-sent events: the reply put together, usage,
cut streams, error events mid-stream, failure kinds."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agents.models.anthropic_provider import AnthropicProvider
from agents.models.fallback import FallbackProvider, FallbackSession, scoped_for_turn
from agents.models.model_spec import ProviderOptions, build_model_provider, parse_model_spec
from agents.models.openai_provider import OpenAIProvider
from agents.models.types import FailureKind, Message, ModelError, ModelReply, ToolSpec
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI

API_KEY = "sk-ant-test-0123456789abcdef"
MODEL = "claude-test-model"

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)
TWO_CALLS = {
    "content": [
        {"type": "text", "text": "Checking the weather in both cities before I answer you."},
        {
            "type": "tool_use",
            "id": "toolu_a",
            "name": "get_weather",
            "input": {"city": "Oslo", "detail": "hourly, next 24 hours"},
        },
        {"type": "tool_use", "id": "toolu_b", "name": "get_weather", "input": {"city": "Lisbon"}},
    ],
    "usage": {"cache_read_input_tokens": 7},
}
LONG_TEXT = "A slow model writes this answer a few tokens at a time, and keeps going. " * 2


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    for var in ("ANTHROPIC_BASE_URL", "ANTHROPIC_CUSTOM_HEADERS"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(api_key=API_KEY, model=MODEL, side_calls=()) as server:
        yield server


MakeProvider = Callable[..., AnthropicProvider]


@pytest.fixture
async def make(fake: FakeAnthropic) -> AsyncIterator[MakeProvider]:
    made: list[AnthropicProvider] = []

    def build(**kwargs: Any) -> AnthropicProvider:
        options: dict[str, Any] = {
            "api_key": API_KEY,
            "model": MODEL,
            "base_url": fake.base_url,
            "timeout": 5.0,
            "max_retries": 0,
            "stream": True,
        }
        options.update(kwargs)
        provider = AnthropicProvider(**options)
        made.append(provider)
        return provider

    yield build
    for provider in made:
        await provider.aclose()


async def ask(provider: AnthropicProvider) -> ModelReply:
    return await provider.complete(
        system="Be brief.", messages=[Message.user_text("Weather?")], tools=[WEATHER]
    )


async def test_a_streamed_reply_is_the_same_reply(fake: FakeAnthropic, make: MakeProvider) -> None:
    fake.queue_message(TWO_CALLS)
    fake.queue_message(TWO_CALLS)

    whole = await ask(make(stream=False))
    streamed = await ask(make())

    assert streamed.model_dump() == whole.model_dump()
    assert [c.input for c in streamed.tool_calls] == [
        {"city": "Oslo", "detail": "hourly, next 24 hours"},
        {"city": "Lisbon"},
    ]
    assert [c.id for c in streamed.tool_calls] == ["toolu_a", "toolu_b"]
    assert streamed.text.startswith("Checking the weather")
    assert streamed.stop_reason == "tool_use"
    # Input counts the cached prefix too; output comes from the closing message_delta.
    assert streamed.usage.input_tokens > 7
    assert streamed.usage.output_tokens > 1
    plain, chunked = (r["json"] for r in fake.requests)
    assert "stream" not in plain
    assert chunked["stream"] is True


async def test_a_slow_model_still_writing_does_not_time_out(
    fake: FakeAnthropic, make: MakeProvider
) -> None:
    # 25 events 0.06 s apart: 1.5 s of generation against a 0.5 s per-call timeout.
    fake.event_pace = 0.06
    fake.queue_text(LONG_TEXT)
    fake.queue_text(LONG_TEXT)

    reply = await ask(make(timeout=0.5))
    assert reply.text == LONG_TEXT.strip()

    with pytest.raises(ModelError) as caught:
        await ask(make(timeout=0.5, stream=False))
    assert caught.value.kind == "timeout"


async def test_a_dropped_connection_mid_stream_is_a_server_failure(
    fake: FakeAnthropic, make: MakeProvider
) -> None:
    fake.queue_cut_stream(TWO_CALLS, after=5)

    with pytest.raises(ModelError) as caught:
        await ask(make())

    assert caught.value.kind == "server"
    assert caught.value.transient
    # Five events were sent, one of them a ping (not counted).
    assert "cut off mid-way: 4 events arrived, then the connection broke" in str(caught.value)


async def test_a_stream_that_ends_unfinished_is_a_server_failure(
    fake: FakeAnthropic, make: MakeProvider
) -> None:
    fake.queue_cut_stream(TWO_CALLS, after=8, drop=False)

    with pytest.raises(ModelError) as caught:
        await ask(make())

    assert caught.value.kind == "server"
    assert "then the stream ended before the reply was finished" in str(caught.value)


@pytest.mark.parametrize(
    ("error_type", "kind"),
    [
        ("overloaded_error", "overloaded"),
        ("api_error", "server"),
        ("rate_limit_error", "rate_limited"),
    ],
)
async def test_an_error_event_mid_stream_keeps_its_kind(
    fake: FakeAnthropic, make: MakeProvider, error_type: str, kind: FailureKind
) -> None:
    fake.queue_stream_error(TWO_CALLS, after=4, error_type=error_type, text="busy, try later")

    with pytest.raises(ModelError) as caught:
        await ask(make())

    assert caught.value.kind == kind
    assert caught.value.transient
    assert f"then the API reported {error_type}: busy, try later" in str(caught.value)


async def test_a_server_that_goes_quiet_mid_stream_times_out(
    fake: FakeAnthropic, make: MakeProvider
) -> None:
    fake.event_pace = 1.0
    fake.queue_text(LONG_TEXT)

    with pytest.raises(ModelError) as caught:
        await ask(make(timeout=0.3))

    assert caught.value.kind == "timeout"
    assert "1 event arrived, then nothing for 0.3s" in str(caught.value)


@pytest.mark.parametrize(
    ("status", "kind"),
    [(529, "overloaded"), (500, "server"), (503, "server"), (429, "rate_limited")],
)
async def test_failures_before_the_stream_keep_their_kinds(
    fake: FakeAnthropic, make: MakeProvider, status: int, kind: FailureKind
) -> None:
    fake.queue_error(status, "try elsewhere")

    with pytest.raises(ModelError) as caught:
        await ask(make())

    assert caught.value.kind == kind
    assert caught.value.transient
    assert f"HTTP {status}" in str(caught.value)


async def test_a_bad_request_is_not_passed_on(fake: FakeAnthropic, make: MakeProvider) -> None:
    fake.queue_error(400, "messages: bad shape")

    with pytest.raises(ModelError) as caught:
        await ask(make())

    assert caught.value.kind == "request"
    assert not caught.value.transient


async def test_no_answer_before_the_stream_is_a_timeout(
    fake: FakeAnthropic, make: MakeProvider
) -> None:
    fake.queue_delay(3.0)
    fake.queue_text("late")

    with pytest.raises(ModelError) as caught:
        await ask(make(timeout=0.3))

    assert caught.value.kind == "timeout"
    assert "timed out" in str(caught.value)


async def test_provider_options_carry_the_stream_setting(fake: FakeAnthropic) -> None:
    for stream in (True, False):
        provider = build_model_provider(
            parse_model_spec(f"anthropic:{MODEL}"),
            ProviderOptions(
                anthropic_api_key=API_KEY,
                anthropic_base_url=fake.base_url,
                max_retries=0,
                stream=stream,
            ),
        )
        assert isinstance(provider, AnthropicProvider)
        try:
            await provider.complete(system="", messages=[Message.user_text("hi")])
        finally:
            await provider.aclose()
    assert [r["json"].get("stream", False) for r in fake.requests] == [True, False]


@pytest.mark.parametrize("failure", ["dropped", "overloaded mid-reply"])
async def test_a_stream_failing_mid_reply_falls_back_to_the_next_model(
    fake: FakeAnthropic, make: MakeProvider, failure: str
) -> None:
    if failure == "dropped":
        fake.queue_cut_stream(TWO_CALLS, after=5)
    else:
        fake.queue_stream_error(TWO_CALLS, after=5, error_type="overloaded_error", text="busy")
    async with FakeOpenAI(models=("qwen",), side_calls=()) as local_api:
        local_api.queue_text("from the local server")
        local = OpenAIProvider(
            api_key="no-key", model="qwen", base_url=local_api.base_url, max_retries=0, stream=True
        )
        chain = FallbackProvider(make(), [local])
        try:
            session = scoped_for_turn(chain)
            assert isinstance(session, FallbackSession)
            reply = await session.complete(system="", messages=[Message.user_text("hi")])
        finally:
            await local.aclose()

    assert (reply.text, reply.model) == ("from the local server", "qwen")
    note = session.last_fallback
    assert note is not None
    assert note.switches[0].kind == ("server" if failure == "dropped" else "overloaded")
