"""OpenAIProvider with `stream=True`, through the real openai SDK against the loopback fake
streaming server-sent chunks: the reply put back together, usage, cut streams, failure kinds."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agents.models.model_spec import ProviderOptions, build_model_provider, parse_model_spec
from agents.models.openai_provider import OpenAIProvider
from agents.models.types import FailureKind, Message, ModelError, ToolSpec
from tests.fakes.openai_server import FakeOpenAI, tool_call

API_KEY = "sk-test-openai-0123456789abcdef"
MODEL = "gpt-fake"

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)
TWO_CALLS = {
    "content": "Checking the weather in both cities before I answer you.",
    "tool_calls": [
        tool_call("get_weather", {"city": "Oslo", "detail": "hourly, next 24 hours"}, "call_a"),
        tool_call("get_weather", {"city": "Lisbon"}, "call_b"),
    ],
}
LONG_TEXT = "A slow local model writes this answer a few tokens at a time, " * 2


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key=API_KEY, models=(MODEL,), side_calls=()) as server:
        yield server


MakeProvider = Callable[..., OpenAIProvider]


@pytest.fixture
async def make(fake: FakeOpenAI) -> AsyncIterator[MakeProvider]:
    made: list[OpenAIProvider] = []

    def build(**kwargs: Any) -> OpenAIProvider:
        options: dict[str, Any] = {
            "api_key": API_KEY,
            "model": MODEL,
            "base_url": fake.base_url,
            "max_retries": 0,
            "timeout": 5.0,
            "stream": True,
        }
        options.update(kwargs)
        provider = OpenAIProvider(**options)
        made.append(provider)
        return provider

    yield build
    for provider in made:
        await provider.aclose()


async def ask(provider: OpenAIProvider) -> Any:
    return await provider.complete(
        system="Be brief.", messages=[Message.user_text("Weather?")], tools=[WEATHER]
    )


async def test_a_streamed_reply_is_the_same_reply(fake: FakeOpenAI, make: MakeProvider) -> None:
    fake.queue_completion(TWO_CALLS)
    fake.queue_completion(TWO_CALLS)

    whole = await ask(make(stream=False))
    streamed = await ask(make())

    assert streamed.model_dump() == whole.model_dump()
    assert [c.input for c in streamed.tool_calls] == [
        {"city": "Oslo", "detail": "hourly, next 24 hours"},
        {"city": "Lisbon"},
    ]
    assert streamed.text == TWO_CALLS["content"]
    assert streamed.stop_reason == "tool_use"
    assert streamed.usage.input_tokens > 0 and streamed.usage.output_tokens > 0
    plain, chunked = (r["json"] for r in fake.requests)
    assert "stream" not in plain
    assert chunked["stream"] is True
    assert chunked["stream_options"] == {"include_usage": True}


async def test_a_slow_server_still_writing_does_not_time_out(
    fake: FakeOpenAI, make: MakeProvider
) -> None:
    # 16 chunks 0.1 s apart: 1.5 s of generation against a 0.5 s per-call timeout.
    fake.chunk_pace = 0.1
    fake.queue_text(LONG_TEXT)
    fake.queue_text(LONG_TEXT)

    reply = await ask(make(timeout=0.5))
    assert reply.text == LONG_TEXT.strip()

    with pytest.raises(ModelError) as caught:
        await ask(make(timeout=0.5, stream=False))
    assert caught.value.kind == "timeout"


async def test_a_dropped_connection_mid_stream_is_a_server_failure(
    fake: FakeOpenAI, make: MakeProvider
) -> None:
    fake.queue_cut_stream(TWO_CALLS, after=4)

    with pytest.raises(ModelError) as caught:
        await ask(make())

    assert caught.value.kind == "server"
    assert caught.value.transient
    message = str(caught.value)
    assert "cut off mid-way: 4 chunks arrived, then the connection broke" in message
    assert fake.base_url in message


async def test_a_stream_that_ends_unfinished_is_a_server_failure(
    fake: FakeOpenAI, make: MakeProvider
) -> None:
    fake.queue_cut_stream(TWO_CALLS, after=6, drop=False)

    with pytest.raises(ModelError) as caught:
        await ask(make())

    assert caught.value.kind == "server"
    assert "6 chunks arrived, then the stream ended before the reply was finished" in str(
        caught.value
    )


async def test_a_server_that_goes_quiet_mid_stream_times_out(
    fake: FakeOpenAI, make: MakeProvider
) -> None:
    fake.chunk_pace = 1.0
    fake.queue_text(LONG_TEXT)

    with pytest.raises(ModelError) as caught:
        await ask(make(timeout=0.3))

    assert caught.value.kind == "timeout"
    assert "1 chunk arrived, then nothing for 0.3s" in str(caught.value)
    assert "RAVEN_MODEL_TIMEOUT" in str(caught.value)


@pytest.mark.parametrize(
    ("status", "kind"),
    [(529, "overloaded"), (500, "server"), (503, "server"), (429, "rate_limited")],
)
async def test_failures_before_the_stream_keep_their_kinds(
    fake: FakeOpenAI, make: MakeProvider, status: int, kind: FailureKind
) -> None:
    fake.queue_error(status, "try elsewhere")

    with pytest.raises(ModelError) as caught:
        await ask(make())

    assert caught.value.kind == kind
    assert caught.value.transient
    assert f"HTTP {status}" in str(caught.value)


async def test_a_bad_request_is_not_passed_on(fake: FakeOpenAI, make: MakeProvider) -> None:
    fake.queue_error(400, "messages: bad shape", error_type="invalid_request_error")

    with pytest.raises(ModelError) as caught:
        await ask(make())

    assert caught.value.kind == "request"
    assert not caught.value.transient


async def test_no_answer_before_the_stream_is_a_timeout(
    fake: FakeOpenAI, make: MakeProvider
) -> None:
    fake.queue_delay(3.0)
    fake.queue_text("late")

    with pytest.raises(ModelError) as caught:
        await ask(make(timeout=0.3))

    assert caught.value.kind == "timeout"
    assert "timed out" in str(caught.value)


async def test_provider_options_carry_the_stream_setting(fake: FakeOpenAI) -> None:
    spec = parse_model_spec(f"openai:{MODEL}@{fake.base_url}")
    for stream in (True, False):
        provider = build_model_provider(
            spec, ProviderOptions(openai_api_key=API_KEY, max_retries=0, stream=stream)
        )
        assert isinstance(provider, OpenAIProvider)
        try:
            await provider.complete(system="", messages=[Message.user_text("hi")])
        finally:
            await provider.aclose()
    assert [r["json"].get("stream", False) for r in fake.requests] == [True, False]


async def test_tool_calls_streamed_without_an_index_are_told_apart(
    fake: FakeOpenAI, make: MakeProvider
) -> None:
    # Some local servers send each call whole, with no index: each id starts a new call.
    fake.indexed_tool_calls = False
    fake.queue_completion(TWO_CALLS)

    reply = await ask(make())

    assert [(c.id, c.input) for c in reply.tool_calls] == [
        ("call_a", {"city": "Oslo", "detail": "hourly, next 24 hours"}),
        ("call_b", {"city": "Lisbon"}),
    ]
    assert reply.stop_reason == "tool_use"
