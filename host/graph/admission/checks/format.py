"""Format, the first group: the arguments are one JSON object matching the submission model,
no node uses a reserved id, and every template's placeholders are well formed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, cast

from pydantic import ValidationError

from core.errors import field_errors
from host.graph.admission.errors import AdmissionError, short
from host.graph.admission.grammar import Placeholder, PlaceholderSyntaxError, parse_placeholders
from host.graph.admission.messages import format_error
from host.graph.model import GraphSubmission, NodeSpec

# A node's optional fields (absent means None): a weak model writes `"instance": ""` for "not
# given", so an empty string there is read as absent rather than rejected.
_OPTIONAL_NODE_FIELDS: Final[frozenset[str]] = frozenset(
    name for name, field in NodeSpec.model_fields.items() if field.default is None
)

# `inputs` would make `{{inputs.output}}` ambiguous (input named `output` vs. node `inputs`).
RESERVED_NODE_IDS: Final[frozenset[str]] = frozenset({"inputs"})


def _load_json(raw: str | bytes) -> object:
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise AdmissionError(
                "format", f"the arguments are not valid UTF-8 (bad byte at offset {exc.start})"
            ) from None
    if not raw.strip():
        raise AdmissionError(
            "format",
            "the arguments are empty",
            repair="send one JSON object with `task_summary` and `nodes`",
        )
    try:
        return cast(object, json.loads(raw))
    except json.JSONDecodeError as exc:
        near = short(raw[max(0, exc.pos - 25) : exc.pos + 25], 60)
        problem = (
            f"invalid JSON at line {exc.lineno}, column {exc.colno} (character {exc.pos}): "
            f"{exc.msg}, near `{near}`"
        )
        if exc.pos >= len(raw.rstrip()):
            problem += "; the text ends there, so the arguments look truncated"
        raise AdmissionError(
            "format", problem, repair="send the complete arguments as one valid JSON object"
        ) from None


def parse_submission(
    raw: str | bytes | Mapping[str, Any] | GraphSubmission,
) -> GraphSubmission:
    if isinstance(raw, GraphSubmission):
        return raw
    data = _load_json(raw) if isinstance(raw, str | bytes) else raw
    if isinstance(data, Mapping) and not isinstance(data, dict):
        data = dict(data)
    data = _without_empty_optionals(data)
    try:
        # Strict: the model's JSON must carry real booleans/strings, not "yes" or 1.
        return GraphSubmission.model_validate(data, strict=True)
    except ValidationError as exc:
        raise format_error(field_errors(exc), data) from None


def _without_empty_optionals(data: object) -> object:
    """The submission with each node's empty optional strings left out (absent, not "")."""
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        return data
    nodes = [
        {k: v for k, v in n.items() if not (v == "" and k in _OPTIONAL_NODE_FIELDS)}
        if isinstance(n, dict)
        else n
        for n in data["nodes"]
    ]
    return {**data, "nodes": nodes}


def check_format(submission: GraphSubmission) -> dict[str, list[Placeholder]]:
    placeholders: dict[str, list[Placeholder]] = {}
    for index, spec in enumerate(submission.nodes):
        if spec.id in RESERVED_NODE_IDS:
            raise AdmissionError(
                "format",
                f"id `{spec.id}` is reserved (it names a node's declared inputs in placeholders)",
                node=spec.id,
                field="id",
                index=index,
                repair=f"use another id, e.g. `{spec.id}_node`",
            )
        try:
            placeholders[spec.id] = parse_placeholders(spec.template)
        except PlaceholderSyntaxError as exc:
            raise AdmissionError(
                "format",
                exc.reason,
                node=spec.id,
                field="template",
                repair=exc.repair,
                index=index,
            ) from None
    return placeholders
