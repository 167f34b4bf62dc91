"""Tool schemas are built once per tool, not on every model call."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

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
