"""Tool results that carry images, and tools known by a raw JSON schema: what the loop's
registry hands back, what a stored session keeps, and the request body the Anthropic
provider sends (through the real SDK to the loopback fake API)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from agents.models.anthropic_provider import AnthropicProvider
from agents.models.types import (
    MAX_IMAGE_BASE64_CHARS,
    MAX_RESULT_IMAGES,
    Message,
    ToolCall,
    ToolImage,
    ToolResult,
)
from agents.tools import Tool, ToolOutput, ToolRegistry
from agents.workspace_tools import ToolContext
from tests.fakes.anthropic_server import FakeAnthropic

API_KEY = "sk-ant-test-0123456789abcdef"
MODEL = "claude-test-model"
PNG = ToolImage(media_type="image/png", data="aGk=")
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["query"],
}


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    for var in ("ANTHROPIC_BASE_URL", "ANTHROPIC_CUSTOM_HEADERS"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(api_key=API_KEY, model=MODEL) as server:
        yield server


@pytest.fixture
async def provider(fake: FakeAnthropic) -> AsyncIterator[AnthropicProvider]:
    made = AnthropicProvider(
        api_key=API_KEY, model=MODEL, base_url=fake.base_url, timeout=5.0, max_retries=0
    )
    yield made
    await made.aclose()


def conversation(*results: ToolResult) -> list[Message]:
    calls = [ToolCall(id=r.tool_use_id, name="look", input={}) for r in results]
    return [
        Message.user_text("look"),
        Message(role="assistant", content=list(calls)),
        Message(role="user", content=list(results)),
    ]


# -- the provider ------------------------------------------------------------------------------


async def test_images_go_to_the_api_as_image_blocks_after_the_text(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    with_images = ToolResult(tool_use_id="t1", content="a chart", images=(PNG, PNG))
    only_image = ToolResult(tool_use_id="t2", content="", images=(PNG,))
    text_only = ToolResult(tool_use_id="t3", content="plain", is_error=True)
    await provider.complete(
        system="s", messages=conversation(with_images, only_image, text_only), tools=[]
    )

    sent = fake.requests[0]["json"]["messages"][2]["content"]
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "aGk="},
    }
    assert sent[0] == {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [{"type": "text", "text": "a chart"}, image, image],
        "is_error": False,
    }
    assert sent[1]["content"] == [image]  # no empty text block: the API rejects those
    assert sent[2] == {
        "type": "tool_result",
        "tool_use_id": "t3",
        "content": "plain",
        "is_error": True,
    }


# -- the registry ------------------------------------------------------------------------------


async def test_a_tool_output_brings_its_images_and_error_flag_into_the_result(
    tmp_path: Path,
) -> None:
    async def look(ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutput:
        return ToolOutput("seen", "Looked", images=(PNG,) * (MAX_RESULT_IMAGES + 2), is_error=True)

    registry = ToolRegistry([Tool.raw("look", "Look.", SCHEMA, look)])
    result = await registry.dispatch(ToolCall(id="t1", name="look"), ToolContext(tmp_path))
    assert result.images == (PNG,) * MAX_RESULT_IMAGES
    assert (result.content, result.summary, result.is_error) == ("seen", "Looked", True)


async def test_a_raw_schema_tool_shows_its_schema_and_gets_its_arguments_unchecked(
    tmp_path: Path,
) -> None:
    seen: list[dict[str, Any]] = []

    async def search(ctx: ToolContext, arguments: dict[str, Any]) -> str:
        seen.append(arguments)
        return "found"

    tool: Tool[ToolContext] = Tool.raw("search", "Search.", SCHEMA, search)
    assert tool.spec.input_schema == SCHEMA
    tool.spec.input_schema["properties"].clear()
    assert SCHEMA["properties"], "the spec is a copy: the caller's schema is not touched"

    registry = ToolRegistry([tool])
    odd = {"limit": "ten", "extra": [1, {"x": None}]}  # the server, not the loop, checks these
    result = await registry.dispatch(
        ToolCall(id="t1", name="search", input=odd), ToolContext(tmp_path)
    )
    assert (result.content, result.is_error, result.images) == ("found", False, ())
    assert seen == [odd]


# -- stored sessions ---------------------------------------------------------------------------


def test_a_text_only_result_is_stored_as_before_and_one_with_images_round_trips() -> None:
    plain = ToolResult(tool_use_id="t1", content="x")
    assert plain.model_dump(mode="json") == {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": "x",
        "is_error": False,
        "summary": "",
    }
    message = Message(
        role="user", content=[ToolResult(tool_use_id="t1", content="", images=(PNG,))]
    )
    assert Message.model_validate(message.model_dump(mode="json")) == message


def test_an_image_outside_the_caps_is_refused() -> None:
    with pytest.raises(ValidationError):
        ToolImage.model_validate({"media_type": "image/svg+xml", "data": "PHN2Zz4="})
    with pytest.raises(ValidationError):
        ToolImage(media_type="image/png", data="A" * (MAX_IMAGE_BASE64_CHARS + 1))
    with pytest.raises(ValidationError):
        ToolResult(tool_use_id="t", content="", images=(PNG,) * (MAX_RESULT_IMAGES + 1))
