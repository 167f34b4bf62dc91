"""Tool calls a model wrote as text, recovered: a weak model (or a server that does not parse
its calls) answers with ```` ```json {"name": …, "arguments": …} ```` or
`<tool_call>{…}</tool_call>` instead of a real tool call. Such an object is taken as a call
only when it names an offered tool and its arguments pass that tool's input schema; anything
else stays text, so a model quoting JSON to a person is not run."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import jsonschema  # type: ignore[import-untyped]

from agents.models.types import ModelReply, TextBlock, ToolCall, ToolSpec

# A recovered call's id starts with this, so transcripts and sessions can tell it apart.
RECOVERED_ID_PREFIX: Final = "recovered_"
_ARGUMENT_KEYS: Final = ("arguments", "parameters", "input")
# What may wrap one written call: a code fence (any language tag) or `<tool_call>` tags.
_OPENERS: Final = re.compile(r"(?:```[a-zA-Z]*\s*|<tool_call>\s*)$")
_CLOSERS: Final = re.compile(r"\s*(?:```|</tool_call>)")  # matched at the end: no `^`


def is_recovered(call: ToolCall) -> bool:
    """Whether this call was recovered from the model's text."""
    return call.id.startswith(RECOVERED_ID_PREFIX)


def recover_tool_calls(reply: ModelReply, offered: Sequence[ToolSpec]) -> ModelReply | None:
    """The reply with its text-written tool calls as real ones (the rest of its text kept),
    or None when it has real calls already or no written call is valid."""
    if reply.tool_calls or not offered:
        return None
    text = reply.text
    if '"name"' not in text:  # every written call names its tool: spare the scan
        return None
    schemas = {spec.name: spec.input_schema for spec in offered}
    calls: list[ToolCall] = []
    spans: list[tuple[int, int]] = []
    decoder = json.JSONDecoder()
    position = text.find("{")
    while position != -1:
        try:
            value, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            position = text.find("{", position + 1)
            continue
        call = _as_call(value, schemas)
        if call is not None:
            calls.append(call)
            spans.append(_with_wrapper(text, position, end))
        position = text.find("{", end)
    if not calls:
        return None
    rest = _without(text, spans).strip()
    content: list[TextBlock | ToolCall] = [TextBlock(text=rest)] if rest else []
    content.extend(calls)
    return reply.model_copy(update={"content": content, "stop_reason": "tool_use"})


def _as_call(value: object, schemas: Mapping[str, Mapping[str, Any]]) -> ToolCall | None:
    """`value` as a call of an offered tool with valid arguments, else None."""
    if not isinstance(value, dict):
        return None
    function = value.get("function")
    if isinstance(function, dict) and "name" not in value:
        value = function  # the OpenAI shape: {"type": "function", "function": {...}}
    name = value.get("name")
    if not isinstance(name, str) or name not in schemas:
        return None
    present = [key for key in _ARGUMENT_KEYS if key in value]
    arguments: object = value[present[0]] if present else {}
    if isinstance(arguments, str):  # arguments sent as a JSON string
        try:
            arguments = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    validator = jsonschema.Draft202012Validator(dict(schemas[name]))
    if not (validator.is_valid(arguments) or validator.is_valid(_without_empty(arguments))):
        return None
    return ToolCall(id=f"{RECOVERED_ID_PREFIX}{uuid.uuid4().hex[:16]}", name=name, input=arguments)


def _without_empty(value: Any) -> Any:
    """`value` with every object's empty-string fields left out: a weak model writes `""` for
    an optional field it means to leave out (its tool, as admission does, reads it so)."""
    if isinstance(value, dict):
        return {k: _without_empty(v) for k, v in value.items() if v != ""}
    if isinstance(value, list):
        return [_without_empty(v) for v in value]
    return value


def _with_wrapper(text: str, start: int, end: int) -> tuple[int, int]:
    """The span of one written call with its fence or `<tool_call>` tags, when it has them."""
    opener = _OPENERS.search(text, 0, start)
    closer = _CLOSERS.match(text, end)
    if opener is not None and closer is not None:
        return opener.start(), closer.end()
    return start, end


def _without(text: str, spans: Sequence[tuple[int, int]]) -> str:
    kept: list[str] = []
    cursor = 0
    for start, end in spans:
        kept.append(text[cursor:start])
        cursor = end
    kept.append(text[cursor:])
    return "".join(kept)


# Maps a call to a tool nobody offered onto one that is (None: it knows no such call).
CallRewrite = Callable[[ToolCall], ToolCall | None]


def rewrite_unknown_calls(
    reply: ModelReply, offered: Sequence[ToolSpec], rewrite: CallRewrite
) -> ModelReply | None:
    """The reply with each call to a tool not offered that `rewrite` knows replaced by the
    call it maps to, marked recovered (None: nothing to rewrite). A weak model calls an
    agent by its name as if it were a tool; the Host's rewrite makes that a `delegate`."""
    names = {spec.name for spec in offered}
    changed = False
    content: list[TextBlock | ToolCall] = []
    for block in reply.content:
        mapped = rewrite(block) if isinstance(block, ToolCall) and block.name not in names else None
        if mapped is not None and mapped.name in names:
            content.append(mapped.model_copy(update={"id": f"{RECOVERED_ID_PREFIX}{mapped.id}"}))
            changed = True
        else:
            content.append(block)
    return reply.model_copy(update={"content": content}) if changed else None
