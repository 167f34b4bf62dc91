"""Tool schemas are built once per tool, not on every model call, and sent lean."""

from __future__ import annotations

from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
from pydantic import BaseModel, Field

from agents.tools import Tool, ToolRegistry


class EchoInput(BaseModel):
    """Input of `echo`."""

    text: str


async def _echo(ctx: None, args: EchoInput) -> str:
    return args.text


def test_schemas_are_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    built = 0
    original = EchoInput.model_json_schema

    def counting(*args: Any, **kwargs: Any) -> dict[str, Any]:
        nonlocal built
        built += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(EchoInput, "model_json_schema", counting)
    registry = ToolRegistry[None]([Tool("echo", "Echo the text.", EchoInput, _echo)])
    first = registry.specs
    for _ in range(50):
        assert registry.specs == first
    assert built == 1
    assert first[0].input_schema["properties"]["text"]["type"] == "string"
    assert "title" not in first[0].input_schema


class Tagged(BaseModel):
    """A docstring for code readers, not for the model."""

    text: str
    tag: str | None = Field(default=None, pattern="^[a-z]+$", description="a lowercase tag")


def test_every_tool_schema_is_lean_and_checks_what_the_model_checks() -> None:
    """Any tool (not only the Host's): no titles, no docstring, no `default: null`, an
    optional field as a type list; null and a valid tag pass, a bad tag does not."""

    async def tagged(ctx: None, args: Tagged) -> str:
        return args.text

    [spec] = ToolRegistry[None]([Tool("tagged", "Tagged.", Tagged, tagged)]).specs
    assert spec.input_schema == {
        "properties": {
            "text": {"type": "string"},
            "tag": {
                "type": ["string", "null"],
                "pattern": "^[a-z]+$",
                "description": "a lowercase tag",
            },
        },
        "required": ["text"],
        "type": "object",
    }
    check = jsonschema.Draft202012Validator(dict(spec.input_schema))
    assert check.is_valid({"text": "a", "tag": None}) and check.is_valid({"text": "a", "tag": "x"})
    assert not check.is_valid({"text": "a", "tag": "X!"}) and not check.is_valid({"tag": "x"})


class Bounded(BaseModel):
    """Input of `bounded`."""

    name: str = Field(max_length=40)
    template: str = Field(max_length=100_000)
    items: list[str] = Field(default_factory=list, max_length=5_000)


async def test_bounds_too_large_for_a_grammar_are_left_to_our_validation() -> None:
    """llama.cpp refuses a repetition bound above 2000 in its tool-call grammar and then
    parses no call of that request: such bounds are not sent; small ones are, and ours
    still refuse what is too long."""

    async def bounded(ctx: None, args: Bounded) -> str:
        return args.name

    registry = ToolRegistry[None]([Tool("bounded", "Bounded.", Bounded, bounded)])
    [spec] = registry.specs
    properties = spec.input_schema["properties"]
    assert properties["name"]["maxLength"] == 40
    assert "maxLength" not in properties["template"]
    assert "maxItems" not in properties["items"]
    from agents.models.types import ToolCall

    too_long = ToolCall(id="t", name="bounded", input={"name": "n", "template": "x" * 100_001})
    result = await registry.dispatch(too_long, None)
    assert result.is_error and "template" in result.content
