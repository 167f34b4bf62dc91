"""What every Host call pays for stays lean without losing a rule: tool schemas carry no
pydantic titles or docstrings and still accept what the models accept (null optionals
included), the guide's own example satisfies the advertised submission schema, the roster
keeps the tags the Host decides on, and the guide summary gives way to the pinned guide."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest

from agents.tools import lean_schema
from bot.app import Runtime
from core.ids import ConversationRef
from host.agent.tools import (
    GUIDE_FLAG,
    GUIDE_SUMMARY,
    HostToolDeps,
    OrchestrationContext,
    build_host_tools,
    load_guide,
)
from host.runtime.turn import TurnContext
from tests.runtime_kit import chat_runtime

CONV = ConversationRef("test", "W", "C", "T")


@pytest.fixture
async def runtime(isolated_env: Path) -> AsyncIterator[Runtime]:
    async with chat_runtime() as built:
        yield built


def _deps(runtime: Runtime) -> HostToolDeps:
    return HostToolDeps(runs=runtime.runs, broker=runtime.broker, registry=runtime.registry)


def _schemas(runtime: Runtime) -> dict[str, dict[str, Any]]:
    return {t.name: dict(t.spec.input_schema) for t in build_host_tools(_deps(runtime))}


def _keys(node: object) -> Iterator[tuple[str, object]]:
    """Every (keyword, value) of a schema, property names excluded."""
    if isinstance(node, list):
        for item in node:
            yield from _keys(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in ("properties", "patternProperties", "$defs"):
                for sub in value.values():
                    yield from _keys(sub)
            else:
                yield key, value
                yield from _keys(value)


async def test_host_tool_schemas_carry_no_titles_docstrings_or_null_defaults(
    runtime: Runtime,
) -> None:
    for name, schema in _schemas(runtime).items():
        keys = [key for key, _ in _keys(schema)]
        assert "title" not in keys, name
        assert "anyOf" not in keys or name == "submit_graph", name  # its inputs' union stays
        assert ("default", None) not in list(_keys(schema)), name
        assert "description" not in schema, name  # the model's docstring
    assert "A literal text input." not in json.dumps(_schemas(runtime)["submit_graph"])


async def test_lean_schemas_accept_and_refuse_what_the_full_ones_do(runtime: Runtime) -> None:
    delegate = _schemas(runtime)["delegate"]
    jsonschema.validate({"agent": "code", "task": "fix it", "instance": None}, delegate)
    jsonschema.validate({"agent": "code", "task": "fix it", "instance": "s1"}, delegate)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"agent": "code", "task": "fix it", "instance": 3}, delegate)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"agent": "code"}, delegate)
    submit = _schemas(runtime)["submit_graph"]
    node = {"id": "a", "agent": "code", "template": "t", "instance": None}
    jsonschema.validate({"task_summary": "x", "nodes": [node]}, submit)
    with pytest.raises(jsonschema.ValidationError):  # the pattern still applies to a string
        jsonschema.validate({"task_summary": "x", "nodes": [{**node, "instance": "A!"}]}, submit)


def test_a_property_named_title_or_description_is_kept() -> None:
    schema = {
        "title": "Doc",
        "description": "docstring",
        "properties": {"title": {"title": "Title", "type": "string"}},
    }
    assert lean_schema(schema) == {"properties": {"title": {"type": "string"}}}


async def test_the_guides_example_satisfies_the_advertised_schema(runtime: Runtime) -> None:
    (example,) = re.findall(r"```json\n(.*?)```", load_guide(), re.S)
    jsonschema.validate(json.loads(example), _schemas(runtime)["submit_graph"])


async def test_roster_keeps_the_tags_the_host_decides_on_and_the_guide_replaces_its_summary(
    runtime: Runtime,
) -> None:
    source = OrchestrationContext(_deps(runtime))
    ctx = TurnContext(conversation=CONV, turn_id="t1", author_id="U1", author_name="Ana")
    block = await source.context(ctx)
    assert "- `code` — " in block and "[stateful, file-capable]" in block
    assert "progress" not in block
    assert GUIDE_SUMMARY in block and "Orchestration guide (pinned)" not in block
    await runtime.runs.store.set_flag(CONV.id, GUIDE_FLAG, "1")
    pinned = await source.context(ctx)
    assert load_guide() in pinned and GUIDE_SUMMARY not in pinned
