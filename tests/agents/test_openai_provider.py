"""OpenAIProvider driven through the real openai SDK against a loopback fake API."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agents.models.model_spec import ProviderOptions, build_model_provider, parse_model_spec
from agents.models.offline import OfflineProvider
from agents.models.openai_provider import OpenAIProvider
from agents.models.provider import ModelProvider
from agents.models.types import (
    FailureKind,
    Message,
    ModelError,
    ToolCall,
    ToolImage,
    ToolResult,
    ToolSpec,
    Usage,
)
from tests.fakes.openai_server import FakeOpenAI

API_KEY = "sk-test-openai-0123456789abcdef"
MODEL = "gpt-fake"

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
    # A proxy would swallow loopback traffic; the SDK's own variables must not redirect calls.
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
        }
        options.update(kwargs)
        provider = OpenAIProvider(**options)
        made.append(provider)
        return provider

    yield build
    for provider in made:
        await provider.aclose()


async def test_plain_text_reply_with_usage(fake: FakeOpenAI, make: MakeProvider) -> None:
    fake.queue_completion(
        {"content": "hello there", "usage": {"prompt_tokens": 11, "completion_tokens": 3}}
    )
    provider = make()
    assert isinstance(provider, ModelProvider) and provider.name == "openai:gpt-fake"
    reply = await provider.complete(system="be brief", messages=[Message.user_text("hi")])
    assert reply.text == "hello there"
    assert reply.stop_reason == "end_turn"
    assert reply.usage == Usage(input_tokens=11, output_tokens=3)
    body = fake.requests[0]["json"]
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    assert body["max_tokens"] == 4096 and "tools" not in body


async def test_tool_call_round_trip(fake: FakeOpenAI, make: MakeProvider) -> None:
    call_id = fake.queue_tool_call("get_weather", {"city": "Paris"}, text="Looking.")
    fake.queue_text("It is sunny in Paris.")
    provider = make()
    first = await provider.complete(
        system="", messages=[Message.user_text("weather?")], tools=[WEATHER]
    )
    assert first.stop_reason == "tool_use"
    assert first.tool_calls == [ToolCall(id=call_id, name="get_weather", input={"city": "Paris"})]
    assert first.text == "Looking."
    conversation = [
        Message.user_text("weather?"),
        Message(role="assistant", content=list(first.content)),
        Message(
            role="user",
            content=[ToolResult(tool_use_id=call_id, content="sunny, 21C")],
        ),
    ]
    final = await provider.complete(system="", messages=conversation, tools=[WEATHER])
    assert final.text == "It is sunny in Paris." and final.stop_reason == "end_turn"
    sent = fake.requests[0]["json"]
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": WEATHER.description,
                "parameters": WEATHER.input_schema,
            },
        }
    ]
    messages = fake.requests[1]["json"]["messages"]
    assert messages[1]["role"] == "assistant"
    assert messages[1]["tool_calls"][0]["id"] == call_id
    assert messages[1]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert messages[2] == {"role": "tool", "tool_call_id": call_id, "content": "sunny, 21C"}


async def test_error_results_and_images_reach_the_model(
    fake: FakeOpenAI, make: MakeProvider
) -> None:
    image = ToolImage(media_type="image/png", data="aGVsbG8=")
    result = ToolResult(tool_use_id="c1", content="boom", is_error=True, images=(image,))
    conversation = [
        Message(role="assistant", content=[ToolCall(id="c1", name="get_weather", input={})]),
        Message(role="user", content=[result]),
    ]
    await make().complete(system="", messages=conversation)
    await make(images=False).complete(system="", messages=conversation)
    with_images = fake.requests[0]["json"]["messages"]
    assert with_images[1] == {"role": "tool", "tool_call_id": "c1", "content": "Error: boom"}
    assert with_images[2]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,aGVsbG8="},
    }
    text_only = fake.requests[1]["json"]["messages"]
    assert len(text_only) == 2 and "1 image left out" in text_only[1]["content"]


@pytest.mark.parametrize(
    ("finish", "expected"),
    [("length", "max_tokens"), ("content_filter", "refusal"), ("stop", "end_turn")],
)
async def test_stop_reasons(
    fake: FakeOpenAI, make: MakeProvider, finish: str, expected: str
) -> None:
    fake.queue_text("partial", finish_reason=finish)
    reply = await make().complete(system="", messages=[Message.user_text("go")])
    assert reply.stop_reason == expected


async def test_bad_arguments_reach_the_tool_check_whole(
    fake: FakeOpenAI, make: MakeProvider
) -> None:
    bad = {"id": "c9", "type": "function", "function": {"name": "get_weather", "arguments": "{"}}
    fake.queue_completion({"tool_calls": [bad]})
    reply = await make().complete(system="", messages=[Message.user_text("go")])
    assert reply.tool_calls == [ToolCall(id="c9", name="get_weather", input={"arguments": "{"})]


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (429, "rate_limited"),
        (500, "server"),
        (503, "server"),
        (529, "overloaded"),
        (401, "auth"),
        (403, "auth"),
        (400, "request"),
        (404, "request"),
    ],
)
async def test_status_failures_have_kinds(
    fake: FakeOpenAI, make: MakeProvider, status: int, kind: FailureKind
) -> None:
    fake.queue_error(status, f"scripted failure {status}")
    with pytest.raises(ModelError) as caught:
        await make().complete(system="", messages=[Message.user_text("go")])
    assert caught.value.kind == kind
    assert f"HTTP {status}" in str(caught.value)
    assert f"scripted failure {status}" in str(caught.value)


async def test_timeout_is_a_timeout(fake: FakeOpenAI, make: MakeProvider) -> None:
    fake.queue_delay(5)
    with pytest.raises(ModelError) as caught:
        await make(timeout=0.3).complete(system="", messages=[Message.user_text("go")])
    assert caught.value.kind == "timeout"
    assert "RAVEN_MODEL_TIMEOUT" in str(caught.value)


async def test_unreachable_server_is_a_server_failure(make: MakeProvider) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    provider = make(base_url=f"http://user:hunter2secret@127.0.0.1:{port}/v1")
    with pytest.raises(ModelError) as caught:
        await provider.complete(system="", messages=[Message.user_text("go")])
    assert caught.value.kind == "server"
    assert f"127.0.0.1:{port}" in str(caught.value)
    assert "hunter2secret" not in str(caught.value)


async def test_key_never_appears_in_errors(fake: FakeOpenAI, make: MakeProvider) -> None:
    fake.queue_error(400, f"bad key echo {API_KEY}")
    with pytest.raises(ModelError) as caught:
        await make().complete(system="", messages=[Message.user_text("go")])
    assert API_KEY not in str(caught.value) and "[redacted]" in str(caught.value)


async def test_wrong_key_is_an_auth_failure(fake: FakeOpenAI, make: MakeProvider) -> None:
    with pytest.raises(ModelError) as caught:
        await make(api_key="sk-wrong-key-000000").complete(
            system="", messages=[Message.user_text("go")]
        )
    assert caught.value.kind == "auth" and "OPENAI_API_KEY" in str(caught.value)


async def test_check_lists_the_model(fake: FakeOpenAI, make: MakeProvider) -> None:
    detail = await make().check()
    assert "openai:gpt-fake" in detail and "model available" in detail
    assert fake.requests[-1]["path"] == "/v1/models"


async def test_check_of_an_unlisted_model_makes_one_call(
    fake: FakeOpenAI, make: MakeProvider
) -> None:
    detail = await make(model="any-name").check()
    assert "answered" in detail
    assert fake.requests[-1]["json"]["max_tokens"] == 1


async def test_spec_with_url_reaches_a_keyless_server() -> None:
    async with FakeOpenAI(side_calls=()) as server:
        spec = parse_model_spec(f"openai:qwen2.5-coder@{server.base_url}")
        provider = build_model_provider(spec, ProviderOptions(max_retries=0))
        assert isinstance(provider, OpenAIProvider) and not provider.offline
        try:
            server.queue_text("local answer")
            reply = await provider.complete(system="", messages=[Message.user_text("hi")])
        finally:
            await provider.aclose()
    assert reply.text == "local answer"
    assert server.requests[0]["json"]["model"] == "qwen2.5-coder"


def test_openai_without_key_or_url_is_offline() -> None:
    provider = build_model_provider(parse_model_spec("openai:gpt-5"), ProviderOptions())
    assert isinstance(provider, OfflineProvider)


async def test_check_without_a_model_list_makes_one_call(
    fake: FakeOpenAI, make: MakeProvider
) -> None:
    async with FakeOpenAI(side_calls=(), serve_models=False) as bare:
        provider = make(base_url=bare.base_url, api_key="sk-any-key-0000")
        assert "answered" in await provider.check()
        assert bare.requests[-1]["json"]["max_tokens"] == 1
        bare.queue_error(503, "down")
        with pytest.raises(ModelError) as caught:
            await provider.check()
    assert caught.value.kind == "server"
