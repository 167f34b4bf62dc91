"""How a submission that fails model validation is told: its first pydantic error as a
problem and a repair, in the words of the graph (nodes, inputs, templates) rather than
pydantic's. The location is `nodes[i]` plus the field, since the id itself may be bad."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from pydantic import BaseModel

from core.errors import FieldError, closest, json_kind
from host.graph.admission.errors import AdmissionError
from host.graph.admission.grammar import NODE_ID_RE
from host.graph.model import (
    INSTANCE_PATTERN,
    NODE_ID_PATTERN,
    FileInput,
    GraphSubmission,
    NodeInput,
    NodeSpec,
    TextInput,
)

_PATTERN_HINTS: Final[Mapping[str, str]] = MappingProxyType(
    {
        NODE_ID_PATTERN: "lowercase letter, then letters, digits, _",
        INSTANCE_PATTERN: "lowercase letter, then letters, digits, _ or -",
    }
)
_EXPECTED: Final[Mapping[str, str]] = MappingProxyType(
    {
        "string_type": "a string",
        "bool_type": "true or false",
        "list_type": "a list",
        "dict_type": "an object",
        "model_type": "an object",
        "model_attributes_type": "an object",
        "int_type": "an integer",
    }
)
_BINDING_MODELS: Final[Mapping[str, type[BaseModel]]] = MappingProxyType(
    {"text": TextInput, "file": FileInput, "node": NodeInput}
)


def _field_path(loc: Sequence[int | str]) -> str | None:
    text = ""
    for part in loc:
        if part == "[key]":
            continue
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text or None


def _suggest_id(value: str) -> str:
    cleaned = re.sub(r"[^a-z0-9_]+", "_", value.lower()).strip("_")
    cleaned = re.sub(r"^[^a-z]+", "", cleaned)[:40]
    return cleaned or "node1"


def _subject(loc: Sequence[int | str], field: str | None) -> str:
    last = loc[-1] if loc else None
    if last == "[key]" and "inputs" in loc:
        return "input name"
    if last == "id":
        return "id"
    if loc and loc[0] == "deps":
        return "dependency"
    if last == "instance":
        return "instance"
    if last == "node":
        return "node id"
    return f"`{field}`" if field else "value"


@dataclass(frozen=True)
class _ErrorAt(FieldError):
    """One pydantic error with `loc` relative to `model`, and the field path the reader sees."""

    model: type[BaseModel] = GraphSubmission
    field: str | None = None


_Described = tuple[str, str | None]


def _describe(
    err: FieldError, loc: Sequence[int | str], model: type[BaseModel], field: str | None
) -> _Described:
    """Problem and repair text for one pydantic error at `loc` (relative to `model`)."""
    at = _ErrorAt(err.kind, tuple(loc), err.message, err.value, err.ctx, model, field)
    describe = _DESCRIBERS.get(at.kind)
    described = describe(at) if describe is not None else None
    if described is None:
        described = (f"`{field}`: " if field else "") + err.message, None
    return described


def _unknown_field(at: _ErrorAt) -> _Described:
    allowed = list(at.model.model_fields)
    close = closest(str(at.name), allowed)
    fix = f"rename it to `{close}`" if close else "remove it"
    return f"unknown field `{at.name}`", f"{fix}; allowed fields here: {', '.join(allowed)}"


def _missing_field(at: _ErrorAt) -> _Described:
    return f"missing required field `{at.name}`", f"add `{at.name}`"


def _pattern_mismatch(at: _ErrorAt) -> _Described:
    pattern = str(at.ctx.get("pattern", ""))
    explain = _PATTERN_HINTS.get(pattern)
    problem = f"{_subject(at.loc, at.field)} `{at.value}` must match {pattern}"
    if explain:
        problem += f" ({explain})"
    repair = None
    if pattern == NODE_ID_PATTERN and isinstance(at.value, str):
        repair = f"use something like `{_suggest_id(at.value)}`"
    return problem, repair


def _empty_string(at: _ErrorAt) -> _Described | None:
    if at.ctx.get("min_length") != 1:
        return None
    return f"`{at.field}` must not be empty", None


def _long_string(at: _ErrorAt) -> _Described:
    size = len(at.value) if isinstance(at.value, str) else "?"
    repair = None
    if at.name in ("template", "text"):
        repair = (
            "write long material to a file in the workspace and pass it with "
            "`{{ref:path}}` or `{{ref_path:path}}`"
        )
    return (
        f"`{at.field}` is too long ({size} characters; at most {at.ctx.get('max_length')})",
        repair,
    )


def _empty_nodes(at: _ErrorAt) -> _Described | None:
    if tuple(at.loc) != ("nodes",):
        return None
    return "`nodes` is empty: a graph needs at least one node", "add the nodes to run"


def _long_list(at: _ErrorAt) -> _Described:
    return (
        f"`{at.field}` has {at.ctx.get('actual_length')} items; at most {at.ctx.get('max_length')}",
        "split the work into several smaller graphs" if at.name == "nodes" else None,
    )


def _wrong_type(at: _ErrorAt) -> _Described:
    if not at.loc and at.model is GraphSubmission:
        return (
            f"the arguments must be a JSON object with `task_summary` and `nodes`, "
            f"got {json_kind(at.value)}",
            None,
        )
    what = f"`{at.field}`" if at.field else "each node"
    return f"{what} must be {_EXPECTED[at.kind]}, got {json_kind(at.value)}", None


# By pydantic error type; a describer returning None (or no describer) gets pydantic's message.
_DESCRIBERS: Final[Mapping[str, Callable[[_ErrorAt], _Described | None]]] = MappingProxyType(
    {
        **dict.fromkeys(_EXPECTED, _wrong_type),
        "extra_forbidden": _unknown_field,
        "missing": _missing_field,
        "string_pattern_mismatch": _pattern_mismatch,
        "string_too_short": _empty_string,
        "string_too_long": _long_string,
        "too_short": _empty_nodes,
        "too_long": _long_list,
    }
)


def _lookup(data: object, *path: int | str) -> object:
    for part in path:
        if isinstance(part, int) and isinstance(data, list | tuple) and 0 <= part < len(data):
            data = data[part]
        elif isinstance(part, str) and isinstance(data, Mapping):
            data = data.get(part)
        else:
            return None
    return data


def _binding_error(
    errors: Sequence[FieldError], index: int, name: str, raw: object
) -> tuple[str, str | None, str]:
    """Collapse the per-union-member errors of one input binding into one message."""
    field = f"inputs.{name}"
    forms = '`{"text": "..."}`, `{"file": "path"}` or `{"node": "id"}`'
    if not isinstance(raw, Mapping):
        return f"input `{name}` must be one of {forms}, got {json_kind(raw)}", None, field
    chosen = [key for key in raw if key in _BINDING_MODELS]
    if len(chosen) != 1:
        keys = ", ".join(f"`{key}`" for key in raw) or "no keys"
        return (
            f"input `{name}` must have exactly one of the keys `text`, `file`, `node` (got {keys})",
            f"write it as one of {forms}",
            field,
        )
    model = _BINDING_MODELS[chosen[0]]
    prefix = ("nodes", index, "inputs", name, model.__name__)
    for err in errors:
        if err.loc[:5] == prefix:
            rest = err.loc[5:]
            sub_field = _field_path((*("inputs", name), *rest))
            problem, repair = _describe(err, rest, model, sub_field)
            return problem, repair, sub_field or field
    return f"input `{name}` is invalid", f"write it as one of {forms}", field


def format_error(errors: Sequence[FieldError], data: object) -> AdmissionError:
    first = errors[0]
    loc = first.loc
    if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int):
        index = loc[1]
        raw_id = _lookup(data, "nodes", index, "id")
        node_id = raw_id if isinstance(raw_id, str) and NODE_ID_RE.fullmatch(raw_id) else None
        rest = loc[2:]
        field: str | None
        if len(rest) >= 2 and rest[0] == "inputs" and rest[-1] != "[key]":
            name = str(rest[1])
            raw_binding = _lookup(data, "nodes", index, "inputs", name)
            problem, repair, field = _binding_error(errors, index, name, raw_binding)
        else:
            field = _field_path(rest)
            problem, repair = _describe(first, rest, NodeSpec, field)
        return AdmissionError(
            "format", problem, node=node_id, field=field, repair=repair, index=index
        )
    field = _field_path(loc)
    problem, repair = _describe(first, loc, GraphSubmission, field)
    return AdmissionError("format", problem, field=field, repair=repair)
