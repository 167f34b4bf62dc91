"""Admission: check a graph submission in five ordered groups before anything is dispatched.

Groups run in the order of the paper's Table 1 (format, structure, capability, status,
environment) and validation stops at the first failure, whose message names the node and
field, states the repair when one is known, and points to the orchestration guide. A repair
that changes the graph's wiring is also given as `Edit`s (`apply_edits` makes them), and is
chosen so that admission accepts the result: never a dependency that would close a cycle.
"""

from __future__ import annotations

import copy
import difflib
import functools
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal, cast

import networkx as nx
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from host.graph.model import (
    INSTANCE_PATTERN,
    NODE_ID_PATTERN,
    AdmissionContext,
    AgentCapabilities,
    FileInput,
    GraphSubmission,
    NodeInput,
    NodeSpec,
    TextInput,
)

AdmissionGroup = Literal["format", "structure", "capability", "status", "environment"]
PlaceholderKind = Literal["output", "output_path", "input", "input_path", "ref", "ref_path"]

GUIDE_POINTER: Final = "See the orchestration guide (call `load_orchestration_guide`)."
GUIDE_PATH: Final = Path(__file__).resolve().parents[1] / "agent" / "guides" / "orchestration.md"
# People read the guide as a file; only the Host can call the tool.
USER_GUIDE_POINTER: Final = f"Plan syntax and graph rules: `{GUIDE_PATH}`."
PATH_KINDS: Final[frozenset[str]] = frozenset({"output_path", "input_path", "ref_path"})
PLACEHOLDER_FORMS: Final = (
    "`{{id.output}}`, `{{id.output_path}}`, `{{inputs.k}}`, `{{inputs.k.path}}`, "
    "`{{ref:path}}`, `{{ref_path:path}}`"
)
# `inputs` would make `{{inputs.output}}` ambiguous (input named `output` vs. node `inputs`).
RESERVED_NODE_IDS: Final[frozenset[str]] = frozenset({"inputs"})

_ID = r"[a-z][a-z0-9_]{0,39}"
_BRACES = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_NODE_FORM = re.compile(rf"({_ID})\.(output|output_path)")
_INPUT_FORM = re.compile(rf"inputs\.({_ID})(\.path)?")
_REF_FORM = re.compile(r"(ref|ref_path)\s*:(.*)", re.DOTALL)
_REF_PATH = re.compile(r"[^\s{}]+")
_ID_RE = re.compile(NODE_ID_PATTERN)
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


# --------------------------------------------------------------------------- errors

EditAction = Literal["add_dep", "remove_dep", "unquote", "drop_input", "rename"]


@dataclass(frozen=True)
class Edit:
    """One change to a submission that a repair asks for, exact enough to apply.

    `add_dep`/`remove_dep`: `value` is the dependency; `unquote`: the placeholder text,
    replaced by its words in backticks (the node no longer receives that output);
    `drop_input`: the input name (the input and its placeholders go); `rename`: the new id,
    also where this graph refers to the node.
    """

    node: str
    action: EditAction
    value: str


def _sentence(text: str) -> str:
    text = text.rstrip()
    return text if text.endswith((".", "?", "!")) else f"{text}."


class AdmissionError(Exception):
    """A rejected submission: which check group failed, where, why, and how to repair it."""

    def __init__(
        self,
        group: AdmissionGroup,
        problem: str,
        *,
        node: str | None = None,
        field: str | None = None,
        repair: str | None = None,
        index: int | None = None,
        edits: Sequence[Edit] = (),
    ) -> None:
        super().__init__(problem)
        self.group: AdmissionGroup = group
        self.node = node
        self.field = field
        self.problem = problem
        self.repair = repair
        # The repair as edits, when it is a change of wiring (empty when it is not).
        self.edits = tuple(edits)
        # Position in `nodes`; set for format errors, where the id may be missing or invalid.
        self.index = index

    def __str__(self) -> str:
        """The rejection as the Host reads it (pointing at the guide tool)."""
        return f"{self._text()} {GUIDE_POINTER}"

    def for_user(self) -> str:
        """The rejection as a person reads it: the guide's path instead of a tool name."""
        return f"{self._text()} {USER_GUIDE_POINTER}"

    def _text(self) -> str:
        where: list[str] = []
        if self.index is not None:
            label = f"nodes[{self.index}]" + (f" ({self.node})" if self.node else "")
            where.append(f"`{label}`")
        elif self.node is not None:
            where.append(f"node `{self.node}`")
        if self.field is not None:
            where.append(f"field `{self.field}`")
        head = f"Graph rejected ({self.group})"
        if where:
            head += " at " + ", ".join(where)
        text = f"{head}: {_sentence(self.problem)}"
        if self.repair:
            text += f" Repair: {_sentence(self.repair)}"
        return text


class ApprovalRequired(AdmissionError):
    """The submission asks for user approval (`confirm`) and none was collected yet."""

    def __init__(self, submission: GraphSubmission) -> None:
        super().__init__(
            "environment",
            "the submission sets `confirm`, so the user must approve the listed nodes "
            "before dispatch",
            repair="ask the user for approval, then re-run admission with the approval collected",
        )
        self.submission = submission


# --------------------------------------------------------------------------- placeholders


@dataclass(frozen=True)
class Placeholder:
    """One `{{...}}` occurrence in a template: its form, target, raw text and span."""

    kind: PlaceholderKind
    target: str
    raw: str
    span: tuple[int, int]

    @property
    def is_path(self) -> bool:
        """Whether it passes a filesystem path (needs a file-capable agent)."""
        return self.kind in PATH_KINDS


class PlaceholderSyntaxError(ValueError):
    """A `{{...}}` that is none of the six placeholder forms (or an unclosed `{{`)."""

    def __init__(self, raw: str, span: tuple[int, int], reason: str, repair: str) -> None:
        super().__init__(reason)
        self.raw = raw
        self.span = span
        self.reason = reason
        self.repair = repair


def _short(text: str, limit: int = 60) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _literal_braces_hint() -> str:
    return (
        f"Placeholders are {PLACEHOLDER_FORMS}. To keep literal `{{{{`…`}}}}` text, put it "
        "in a text input and insert it with `{{inputs.k}}` (input text is not parsed)"
    )


def _placeholder_suggestion(inner: str) -> str | None:
    """A likely intended placeholder for a malformed one, if we can guess it."""
    if _ID_RE.fullmatch(inner) and inner != "inputs":
        return f"`{{{{{inner}.output}}}}` or `{{{{inputs.{inner}}}}}`"
    head, dot, tail = inner.partition(".")
    if not dot:
        return None
    if head == "inputs":
        name, _, rest = tail.partition(".")
        if _ID_RE.fullmatch(name):
            return f"`{{{{inputs.{name}}}}}` or `{{{{inputs.{name}.path}}}}`" if rest else None
        return None
    if not _ID_RE.fullmatch(head):
        lowered = re.sub(r"[^a-z0-9_]", "_", head.lower())
        if _ID_RE.fullmatch(lowered) and tail in ("output", "output_path"):
            return f"`{{{{{lowered}.{tail}}}}}` (node ids are lowercase)"
        return None
    close = difflib.get_close_matches(tail, ["output", "output_path"], n=1, cutoff=0.6)
    return f"`{{{{{head}.{close[0]}}}}}`" if close else None


def _parse_one(raw: str, inner: str, span: tuple[int, int]) -> Placeholder:
    text = inner.strip()
    if match := _NODE_FORM.fullmatch(text):
        kind: PlaceholderKind = "output" if match.group(2) == "output" else "output_path"
        return Placeholder(kind, match.group(1), raw, span)
    if match := _INPUT_FORM.fullmatch(text):
        kind = "input_path" if match.group(2) else "input"
        return Placeholder(kind, match.group(1), raw, span)
    if match := _REF_FORM.fullmatch(text):
        kind = "ref" if match.group(1) == "ref" else "ref_path"
        path = match.group(2).strip()
        if not path:
            raise PlaceholderSyntaxError(
                raw, span, f"`{_short(raw)}` has no path", f"write `{{{{{kind}:relative/path}}}}`"
            )
        if not _REF_PATH.fullmatch(path):
            raise PlaceholderSyntaxError(
                raw,
                span,
                f"the path in `{_short(raw)}` contains spaces or braces, which placeholder "
                "paths cannot contain",
                'declare a file input (`"inputs": {"doc": {"file": "my file.md"}}`) and use '
                "`{{inputs.doc}}` or `{{inputs.doc.path}}`, or rename the file",
            )
        return Placeholder(kind, path, raw, span)
    suggestion = _placeholder_suggestion(text)
    repair = _literal_braces_hint()
    if suggestion:
        repair = f"did you mean {suggestion}? {repair}"
    raise PlaceholderSyntaxError(raw, span, f"unknown placeholder `{_short(raw)}`", repair)


def parse_placeholders(template: str) -> list[Placeholder]:
    """Every placeholder in `template`, in order; raises `PlaceholderSyntaxError` on bad ones."""
    found: list[Placeholder] = []
    end = 0
    for match in _BRACES.finditer(template):
        found.append(_parse_one(match.group(0), match.group(1), match.span()))
        end = match.end()
    # A `{{` with a later `}}` is always matched above, so only the tail can hold an open one.
    tail = template.find("{{", end)
    if tail != -1:
        raw = template[tail:]
        raise PlaceholderSyntaxError(
            raw,
            (tail, len(template)),
            f"unclosed `{{{{` at character {tail}: `{_short(raw, 40)}`",
            f"close it with `}}}}`. {_literal_braces_hint()}",
        )
    return found


# --------------------------------------------------------------------------- paths


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def confine_path(workspace: Path, raw: str) -> Path:
    """Resolve `raw` against `workspace` (symlinks followed); ValueError if it lands outside."""
    if not raw.strip():
        raise ValueError("the path is empty")
    if "\x00" in raw:
        raise ValueError(f"the path `{_short(raw)}` contains a NUL byte")
    root = workspace.resolve()
    candidate = Path(raw)
    resolved = (root / candidate).resolve()  # an absolute `raw` replaces `root` here
    if _inside(resolved, root):
        return resolved
    if candidate.is_absolute():
        # The caller may have spelled the workspace through a symlinked prefix.
        raise ValueError(f"`{raw}` is an absolute path outside the workspace `{root}`")
    lexical = Path(os.path.normpath(root / candidate))
    if not _inside(lexical, root):
        raise ValueError(f"`{raw}` leaves the workspace through `..`")
    raise ValueError(f"`{raw}` resolves through a symlink to `{resolved}`, outside the workspace")


# --------------------------------------------------------------------------- result


@dataclass(frozen=True)
class AdmittedGraph:
    """A submission that passed admission, with its topological order and ancestry."""

    submission: GraphSubmission
    order: tuple[str, ...]
    external_deps: frozenset[str]
    ancestors: Mapping[str, frozenset[str]]

    def node(self, node_id: str) -> NodeSpec:
        """The node spec with this id (KeyError when it is not part of this graph)."""
        return self._by_id[node_id]

    def descendants(self, node_id: str) -> frozenset[str]:
        """Every node of this graph that depends on `node_id`, directly or not."""
        return self._descendants.get(node_id, frozenset())

    @functools.cached_property
    def _by_id(self) -> Mapping[str, NodeSpec]:
        return MappingProxyType({spec.id: spec for spec in self.submission.nodes})

    @functools.cached_property
    def _descendants(self) -> Mapping[str, frozenset[str]]:
        below: dict[str, set[str]] = {}
        for node_id, above in self.ancestors.items():
            for ancestor in above:
                below.setdefault(ancestor, set()).add(node_id)
        return MappingProxyType({k: frozenset(v) for k, v in below.items()})


# --------------------------------------------------------------------------- format


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return f"a {type(value).__name__}"


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
        near = _short(raw[max(0, exc.pos - 25) : exc.pos + 25], 60)
        problem = (
            f"invalid JSON at line {exc.lineno}, column {exc.colno} (character {exc.pos}): "
            f"{exc.msg}, near `{near}`"
        )
        if exc.pos >= len(raw.rstrip()):
            problem += "; the text ends there, so the arguments look truncated"
        raise AdmissionError(
            "format", problem, repair="send the complete arguments as one valid JSON object"
        ) from None


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
class _ErrorAt:
    """One pydantic error, with the parts of it `_describe` words its messages from."""

    kind: str
    value: object
    ctx: Mapping[str, object]
    loc: Sequence[int | str]
    model: type[BaseModel]
    field: str | None
    name: str | None  # the innermost field name in `loc`


_Described = tuple[str, str | None]


def _describe(
    err: ErrorDetails, loc: Sequence[int | str], model: type[BaseModel], field: str | None
) -> _Described:
    """Problem and repair text for one pydantic error at `loc` (relative to `model`)."""
    at = _ErrorAt(
        kind=err["type"],
        value=err.get("input"),
        ctx=err.get("ctx") or {},
        loc=loc,
        model=model,
        field=field,
        name=next((p for p in reversed(loc) if isinstance(p, str) and p != "[key]"), None),
    )
    describe = _DESCRIBERS.get(at.kind)
    described = describe(at) if describe is not None else None
    if described is None:
        described = (f"`{field}`: " if field else "") + err["msg"], None
    return described


def _unknown_field(at: _ErrorAt) -> _Described:
    allowed = list(at.model.model_fields)
    close = difflib.get_close_matches(str(at.name), allowed, n=1, cutoff=0.6)
    fix = f"rename it to `{close[0]}`" if close else "remove it"
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
            f"got {_json_kind(at.value)}",
            None,
        )
    what = f"`{at.field}`" if at.field else "each node"
    return f"{what} must be {_EXPECTED[at.kind]}, got {_json_kind(at.value)}", None


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
    errors: Sequence[ErrorDetails], index: int, name: str, raw: object
) -> tuple[str, str | None, str]:
    """Collapse the per-union-member errors of one input binding into one message."""
    field = f"inputs.{name}"
    forms = '`{"text": "..."}`, `{"file": "path"}` or `{"node": "id"}`'
    if not isinstance(raw, Mapping):
        return f"input `{name}` must be one of {forms}, got {_json_kind(raw)}", None, field
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
        if tuple(err["loc"][:5]) == prefix:
            rest = err["loc"][5:]
            sub_field = _field_path((*("inputs", name), *rest))
            problem, repair = _describe(err, rest, model, sub_field)
            return problem, repair, sub_field or field
    return f"input `{name}` is invalid", f"write it as one of {forms}", field


def _format_error(errors: Sequence[ErrorDetails], data: object) -> AdmissionError:
    first = errors[0]
    loc = first["loc"]
    if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int):
        index = loc[1]
        raw_id = _lookup(data, "nodes", index, "id")
        node_id = raw_id if isinstance(raw_id, str) and _ID_RE.fullmatch(raw_id) else None
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


def _parse_submission(
    raw: str | bytes | Mapping[str, Any] | GraphSubmission,
) -> GraphSubmission:
    if isinstance(raw, GraphSubmission):
        return raw
    data = _load_json(raw) if isinstance(raw, str | bytes) else raw
    if isinstance(data, Mapping) and not isinstance(data, dict):
        data = dict(data)
    try:
        # Strict: the model's JSON must carry real booleans/strings, not "yes" or 1.
        return GraphSubmission.model_validate(data, strict=True)
    except ValidationError as exc:
        raise _format_error(exc.errors(include_url=False), data) from None


def _check_format(submission: GraphSubmission) -> dict[str, list[Placeholder]]:
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


# --------------------------------------------------------------------------- structure


def _fresh_id(base: str, used: set[str]) -> str:
    for n in range(2, 1000):
        candidate = f"{base[:36]}_{n}"
        if candidate not in used:
            return candidate
    return f"{base[:30]}_new"


def _check_ids(submission: GraphSubmission, ctx: AdmissionContext) -> None:
    first_index: dict[str, int] = {}
    for index, spec in enumerate(submission.nodes):
        if spec.id in first_index:
            raise AdmissionError(
                "structure",
                f"id `{spec.id}` is used by nodes[{first_index[spec.id]}] and nodes[{index}]",
                node=spec.id,
                field="id",
                repair="give each node its own id",
            )
        first_index[spec.id] = index
    used = set(first_index) | set(ctx.prior_nodes)
    for spec in submission.nodes:
        prior = ctx.prior_nodes.get(spec.id)
        if prior is not None:
            fresh = _fresh_id(spec.id, used)
            repair = f"choose a new id such as `{fresh}`"
            if any(spec.id in _targets(other) for other in submission.nodes):
                repair += " (and use it where this graph refers to the node)"
            if prior.reusable:
                repair += (
                    f"; to reuse its output, add `{spec.id}` to the deps of the node needing it"
                )
            raise AdmissionError(
                "structure",
                f"id `{spec.id}` was already used in this conversation (agent `{prior.agent}`, "
                f"state {prior.state}); node ids are unique per conversation",
                node=spec.id,
                field="id",
                repair=repair,
                edits=[Edit(spec.id, "rename", fresh)],
            )


def _targets(spec: NodeSpec) -> set[str]:
    """The node ids `spec` names: its deps, output placeholders and node inputs."""
    named = set(spec.deps)
    named |= {b.node for b in spec.inputs.values() if isinstance(b, NodeInput)}
    with_syntax = _BRACES.finditer(spec.template)
    named |= {m.group(1) for b in with_syntax if (m := _NODE_FORM.fullmatch(b.group(1).strip()))}
    return named


@dataclass(frozen=True)
class _Use:
    """One place where a node consumes another's output, and how a person would say it."""

    label: str
    edit: Edit


def _uses(spec: NodeSpec, placeholders: Sequence[Placeholder], target: str) -> list[_Use]:
    """Where `spec` consumes `target`'s output: output placeholders and node inputs."""
    uses = [
        _Use(f"`{ph.raw}` from the template", Edit(spec.id, "unquote", ph.raw))
        for ph in placeholders
        if ph.kind in ("output", "output_path") and ph.target == target
    ]
    uses += [
        _Use(f"input `{name}`", Edit(spec.id, "drop_input", name))
        for name, binding in spec.inputs.items()
        if isinstance(binding, NodeInput) and binding.node == target
    ]
    return uses


def _listed(uses: Sequence[_Use]) -> str:
    labels = list(dict.fromkeys(use.label for use in uses))
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + f" and {labels[-1]}"


def _unresolved(dep: str, ids: set[str], ctx: AdmissionContext) -> tuple[str, str] | None:
    """Problem and repair when `dep` is neither in this graph nor a reusable earlier node."""
    if dep in ids:
        return None
    prior = ctx.prior_nodes.get(dep)
    if prior is None:
        return (
            f"`{dep}` is neither a node of this graph nor a completed earlier node",
            f"add a node `{dep}` or remove it from deps",
        )
    if prior.reusable:
        return None
    if prior.state == "completed":
        why = "completed without a recorded output"
    elif prior.state == "exception":
        why = "is suspended on an exception"
    elif prior.state in ("pending", "queued", "running"):
        why = f"is still {prior.state}"
    else:
        why = f"ended in state `{prior.state}`"
    return (
        f"earlier node `{dep}` {why}; only nodes that completed with a recorded output "
        "can be depended on",
        f"add a new node (with a new id) that redoes `{dep}`'s work, or remove it from deps",
    )


def _check_deps(
    submission: GraphSubmission,
    ids: set[str],
    ctx: AdmissionContext,
    placeholders: Mapping[str, list[Placeholder]],
) -> None:
    for spec in submission.nodes:
        for dep in spec.deps:
            failure = _unresolved(dep, ids, ctx)
            if failure:
                # Removing the dep alone would leave its uses pointing at nothing.
                uses = _uses(spec, placeholders[spec.id], dep)
                repair = failure[1] + (f" and {_listed(uses)}" if uses else "")
                raise AdmissionError(
                    "structure",
                    failure[0],
                    node=spec.id,
                    field="deps",
                    repair=repair,
                    edits=[Edit(spec.id, "remove_dep", dep), *(use.edit for use in uses)],
                )


def _require_dep(
    spec: NodeSpec,
    target: str,
    use: _Use,
    *,
    what: str,
    field: str,
    ids: set[str],
    ctx: AdmissionContext,
    graph: Any,
) -> None:
    if target == spec.id:
        raise AdmissionError(
            "structure",
            f"{what} refers to the node's own output",
            node=spec.id,
            field=field,
            repair=f"a node cannot consume its own output; remove {use.label} "
            "(reference an upstream node instead)",
            edits=[use.edit],
        )
    if target in spec.deps:
        return
    failure = _unresolved(target, ids, ctx)
    if failure:
        problem, _ = failure
        repair = f"add a node `{target}` (and list it in deps), or remove {use.label}"
        raise AdmissionError(
            "structure",
            f"{what}: {problem}",
            node=spec.id,
            field=field,
            repair=repair,
            edits=[use.edit],
        )
    if target in ids and nx.has_path(graph, spec.id, target):
        # `target` already waits for this node: as a dep it would close a cycle.
        chain = " → ".join(f"`{n}`" for n in reversed(nx.shortest_path(graph, spec.id, target)))
        raise AdmissionError(
            "structure",
            f"{what} refers to `{target}`, which is not in deps and runs after this node "
            f"({chain}, each depending on the next)",
            node=spec.id,
            field=field,
            repair=f"remove {use.label} (listing `{target}` in deps would make a cycle), or "
            f"move the work that needs `{target}`'s output into a new node that lists "
            f"`{target}` in its deps",
            edits=[use.edit],
        )
    raise AdmissionError(
        "structure",
        f"{what} refers to `{target}`, which is not in deps",
        node=spec.id,
        field=field,
        repair=f"add `{target}` to deps",
        edits=[Edit(spec.id, "add_dep", target)],
    )


def _check_references(
    submission: GraphSubmission,
    placeholders: Mapping[str, list[Placeholder]],
    ids: set[str],
    ctx: AdmissionContext,
    graph: Any,
) -> None:
    require = functools.partial(_require_dep, ids=ids, ctx=ctx, graph=graph)
    for spec in submission.nodes:
        for ph in placeholders[spec.id]:
            if ph.kind in ("output", "output_path"):
                use = _Use(f"`{ph.raw}` from the template", Edit(spec.id, "unquote", ph.raw))
                require(spec, ph.target, use, what=f"placeholder `{ph.raw}`", field="template")
            elif ph.kind in ("input", "input_path") and ph.target not in spec.inputs:
                declared = ", ".join(f"`{k}`" for k in spec.inputs) or "none"
                raise AdmissionError(
                    "structure",
                    f"placeholder `{ph.raw}` uses input `{ph.target}`, which is not declared "
                    f"(declared inputs: {declared})",
                    node=spec.id,
                    field="template",
                    repair=f"declare `{ph.target}` under inputs or fix the name",
                )
        for name, binding in spec.inputs.items():
            if isinstance(binding, NodeInput):
                what = f'input `{name}` (`{{"node": "{binding.node}"}}`)'
                use = _Use(f"input `{name}`", Edit(spec.id, "drop_input", name))
                require(spec, binding.node, use, what=what, field=f"inputs.{name}")


def _check_file(
    spec: NodeSpec, raw: str, field: str, need_content: bool, ctx: AdmissionContext
) -> None:
    try:
        path = confine_path(ctx.workspace, raw)
    except ValueError as exc:
        raise AdmissionError(
            "structure",
            str(exc),
            node=spec.id,
            field=field,
            repair="use a path inside the conversation workspace (relative paths are resolved "
            "against it); copy the file there first if needed",
        ) from None
    if not path.exists():
        repair = "create the file first or fix the path"
        if path.parent.is_dir():
            close = difflib.get_close_matches(path.name, os.listdir(path.parent), n=1)
            if close:
                rel = (path.parent / close[0]).relative_to(ctx.workspace.resolve())
                repair = f"did you mean `{rel.as_posix()}`? Otherwise {repair}"
        raise AdmissionError(
            "structure",
            f"file `{raw}` does not exist in the workspace",
            node=spec.id,
            field=field,
            repair=repair,
        )
    if need_content and not path.is_file():
        raise AdmissionError(
            "structure",
            f"`{raw}` is not a regular file, so its content cannot be inserted",
            node=spec.id,
            field=field,
            repair="pass a directory by path (`{{ref_path:...}}` or `{{inputs.k.path}}`) to a "
            "file-capable agent, or name a file",
        )


def _check_files(
    submission: GraphSubmission,
    placeholders: Mapping[str, list[Placeholder]],
    ctx: AdmissionContext,
) -> None:
    for spec in submission.nodes:
        phs = placeholders[spec.id]
        for name, binding in spec.inputs.items():
            if isinstance(binding, FileInput):
                uses = {
                    ph.kind
                    for ph in phs
                    if ph.kind in ("input", "input_path") and ph.target == name
                }
                # Only a path is passed when every use is `.path`; otherwise content is read
                # (unreferenced inputs are appended to the prompt as content).
                need_content = uses != {"input_path"}
                _check_file(spec, binding.file, f"inputs.{name}", need_content, ctx)
        for ph in phs:
            if ph.kind in ("ref", "ref_path"):
                _check_file(spec, ph.target, "template", ph.kind == "ref", ctx)


def _dependency_graph(submission: GraphSubmission, ids: set[str]) -> Any:
    graph = nx.DiGraph()
    graph.add_nodes_from(spec.id for spec in submission.nodes)
    for spec in submission.nodes:
        graph.add_edges_from((dep, spec.id) for dep in spec.deps if dep in ids)
    return graph


def _check_acyclic(
    submission: GraphSubmission, graph: Any, placeholders: Mapping[str, list[Placeholder]]
) -> None:
    for spec in submission.nodes:
        if spec.id in spec.deps:
            raise AdmissionError(
                "structure",
                f"node `{spec.id}` depends on itself (a cycle)",
                node=spec.id,
                field="deps",
                repair=f"remove `{spec.id}` from its own deps",
                edits=[Edit(spec.id, "remove_dep", spec.id)],
            )
    try:
        edges = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        return
    # Edges point dep -> dependent; reversed, each node depends on the next one.
    cycle = [str(v) for _, v in edges][::-1]
    position = {spec.id: i for i, spec in enumerate(submission.nodes)}
    start = min(range(len(cycle)), key=lambda i: position[cycle[i]])
    cycle = cycle[start:] + cycle[:start]
    chain = " → ".join(f"`{n}`" for n in [*cycle, cycle[0]])
    dependent, dep, uses = _cut(submission, cycle, placeholders)
    repair = f"remove `{dep}` from the deps of `{dependent}` so the work flows one way"
    if uses:
        repair += f", with {_listed(uses)} of `{dependent}` (it cannot use `{dep}`'s output)"
    raise AdmissionError(
        "structure",
        f"the graph has a cycle: {chain} (each node depends on the next)",
        node=cycle[0],
        field="deps",
        repair=repair,
        edits=[Edit(dependent, "remove_dep", dep), *(use.edit for use in uses)],
    )


def _cut(
    submission: GraphSubmission, cycle: Sequence[str], placeholders: Mapping[str, list[Placeholder]]
) -> tuple[str, str, list[_Use]]:
    """The dependency of `cycle` to remove: the first one no placeholder or input uses (a
    bare ordering), else the first one together with its uses, which would otherwise be
    refused as not in deps."""
    by_id = {spec.id: spec for spec in submission.nodes}
    edges = [(cycle[i], cycle[(i + 1) % len(cycle)]) for i in range(len(cycle))]
    for dependent, dep in edges:
        if not _uses(by_id[dependent], placeholders[dependent], dep):
            return dependent, dep, []
    dependent, dep = edges[0]
    return dependent, dep, _uses(by_id[dependent], placeholders[dependent], dep)


# --------------------------------------------------------------------------- capability


def _check_capability(
    submission: GraphSubmission,
    placeholders: Mapping[str, list[Placeholder]],
    ctx: AdmissionContext,
) -> None:
    """Per node, in order: text-input paths, instance ownership, then file access."""
    owners: dict[str, tuple[str, str]] = {}  # instance -> (agent, where it was claimed)
    for prior in ctx.prior_nodes.values():
        if prior.instance is not None:
            owners.setdefault(prior.instance, (prior.agent, f"earlier node `{prior.id}`"))
    for spec in submission.nodes:
        agent = ctx.agents.get(spec.agent)
        _check_text_input_paths(spec, placeholders[spec.id])
        if spec.instance is not None:
            _check_instance(spec, spec.instance, agent, owners, ctx)
        if agent is not None and not agent.file_capable:
            _check_no_path_placeholders(spec, placeholders[spec.id])


def _check_text_input_paths(spec: NodeSpec, placeholders: Sequence[Placeholder]) -> None:
    """A text input has no path, so `{{inputs.k.path}}` cannot name one."""
    for ph in placeholders:
        binding = spec.inputs.get(ph.target)
        if ph.kind == "input_path" and isinstance(binding, TextInput):
            raise AdmissionError(
                "capability",
                f"`{ph.raw}` asks for the path of text input `{ph.target}`, "
                "but a text input has no path",
                node=spec.id,
                field="template",
                repair=f"use `{{{{inputs.{ph.target}}}}}` to insert the text",
            )


def _check_instance(
    spec: NodeSpec,
    instance: str,
    agent: AgentCapabilities | None,
    owners: dict[str, tuple[str, str]],
    ctx: AdmissionContext,
) -> None:
    """An instance needs a stateful agent and belongs to the first agent that claims it."""
    if agent is not None and not agent.stateful:
        stateful = sorted(n for n, a in ctx.agents.items() if a.stateful and a.enabled)
        raise AdmissionError(
            "capability",
            f"instance `{instance}` needs a stateful agent, but `{spec.agent}` is stateless",
            node=spec.id,
            field="instance",
            repair="remove `instance`, or use a stateful agent ("
            + (", ".join(f"`{n}`" for n in stateful) or "none available")
            + ")",
        )
    owner = owners.setdefault(instance, (spec.agent, f"node `{spec.id}`"))
    if owner[0] != spec.agent:
        raise AdmissionError(
            "capability",
            f"instance `{instance}` belongs to agent `{owner[0]}` ({owner[1]}), "
            f"but this node uses agent `{spec.agent}`",
            node=spec.id,
            field="instance",
            repair=f"use a different instance handle for `{spec.agent}`, or run this "
            f"node on `{owner[0]}`",
        )


def _check_no_path_placeholders(spec: NodeSpec, placeholders: Sequence[Placeholder]) -> None:
    """An agent without local-file access can only be given content, not paths."""
    for ph in placeholders:
        if ph.is_path:
            raise AdmissionError(
                "capability",
                f"agent `{spec.agent}` has no local-file access, so it cannot use the "
                f"path placeholder `{ph.raw}`",
                node=spec.id,
                field="template",
                repair=f"use the content form `{_content_form(ph)}` instead, or choose a "
                "file-capable agent",
            )


def _content_form(ph: Placeholder) -> str:
    if ph.kind == "output_path":
        return f"{{{{{ph.target}.output}}}}"
    if ph.kind == "input_path":
        return f"{{{{inputs.{ph.target}}}}}"
    return f"{{{{ref:{ph.target}}}}}"


# --------------------------------------------------------------------------- status


def _check_status(submission: GraphSubmission, ctx: AdmissionContext) -> None:
    enabled = sorted(name for name, agent in ctx.agents.items() if agent.enabled)
    available = ", ".join(f"`{n}`" for n in enabled) or "none (no agent is enabled)"
    for spec in submission.nodes:
        agent = ctx.agents.get(spec.agent)
        if agent is None:
            close = difflib.get_close_matches(spec.agent, enabled, n=1)
            raise AdmissionError(
                "status",
                f"unknown agent `{spec.agent}`; available agents: {available}",
                node=spec.id,
                field="agent",
                repair=f"did you mean `{close[0]}`?"
                if close
                else "use one of the available agents",
            )
        if not agent.enabled:
            raise AdmissionError(
                "status",
                f"agent `{spec.agent}` is disabled; available agents: {available}",
                node=spec.id,
                field="agent",
                repair="use an enabled agent, or ask the user to enable this one",
            )


# --------------------------------------------------------------------------- environment


def _check_environment(submission: GraphSubmission, ctx: AdmissionContext) -> None:
    if ctx.in_subagent:
        raise AdmissionError(
            "environment",
            "no recursive delegation: a sub-agent run cannot submit graphs",
            repair="do the work in this run, or report back so the Host can plan it",
        )
    if ctx.delegation_paused:
        raise AdmissionError(
            "environment",
            "delegation is paused in this conversation",
            repair="answer directly, or ask the user to resume delegation",
        )
    budget = ctx.dispatch_budget_remaining
    if budget is not None:
        budget = max(budget, 0)
    count = len(submission.nodes)
    if budget is not None and count > budget:
        raise AdmissionError(
            "environment",
            f"the graph has {count} nodes but only {budget} dispatches remain in this "
            "conversation's budget",
            field="nodes",
            repair=f"submit at most {budget} nodes (reuse completed nodes), or wait for the "
            "budget to refill"
            if budget > 0
            else "wait for the budget to refill, or answer directly",
        )
    if submission.confirm and not ctx.approval_collected:
        raise ApprovalRequired(submission)


# --------------------------------------------------------------------------- admit


def admit(
    raw: str | bytes | Mapping[str, Any] | GraphSubmission, ctx: AdmissionContext
) -> AdmittedGraph:
    """Run the five check groups in order; return the admitted graph or raise AdmissionError."""
    submission = _parse_submission(raw)
    placeholders = _check_format(submission)

    ids = {spec.id for spec in submission.nodes}
    _check_ids(submission, ctx)
    _check_deps(submission, ids, ctx, placeholders)
    graph = _dependency_graph(submission, ids)
    _check_references(submission, placeholders, ids, ctx, graph)
    _check_files(submission, placeholders, ctx)
    _check_acyclic(submission, graph, placeholders)

    _check_capability(submission, placeholders, ctx)
    _check_status(submission, ctx)
    _check_environment(submission, ctx)

    position = {spec.id: i for i, spec in enumerate(submission.nodes)}
    # Ties broken by submission order, so the order is deterministic and matches intent.
    order = tuple(str(n) for n in nx.lexicographical_topological_sort(graph, key=position.get))
    external = {
        spec.id: frozenset(d for d in spec.deps if d not in ids) for spec in submission.nodes
    }
    ancestors: dict[str, frozenset[str]] = {}
    for node_id in order:
        inner = {str(n) for n in nx.ancestors(graph, node_id)}
        outer = set(external[node_id]).union(*(external[n] for n in inner))
        ancestors[node_id] = frozenset(inner | outer)
    return AdmittedGraph(
        submission=submission,
        order=order,
        external_deps=frozenset().union(*external.values()),
        ancestors=MappingProxyType(ancestors),
    )


# --------------------------------------------------------------------------- repairs


def apply_edits(raw: Mapping[str, Any], edits: Sequence[Edit]) -> dict[str, Any]:
    """A copy of the submission (its JSON form) with `edits` made, as a repair describes."""
    data: dict[str, Any] = copy.deepcopy(dict(raw))
    nodes: list[dict[str, Any]] = data["nodes"]
    for edit in edits:
        node = next(n for n in nodes if n.get("id") == edit.node)
        if edit.action == "add_dep":
            node["deps"] = [*node.get("deps", []), edit.value]
        elif edit.action == "remove_dep":
            node["deps"] = [d for d in node.get("deps", []) if d != edit.value]
        elif edit.action == "unquote":
            node["template"] = node["template"].replace(edit.value, _in_words(edit.value))
        elif edit.action == "drop_input":
            node.get("inputs", {}).pop(edit.value, None)
            node["template"] = _unquote_input(node["template"], edit.value)
        else:
            _rename(nodes, edit.node, edit.value)
    return data


def _in_words(placeholder: str) -> str:
    """A placeholder as plain words, so the node no longer receives it."""
    return f"`{placeholder.strip('{}').strip()}`"


def _unquote_input(template: str, name: str) -> str:
    """`template` with the placeholders of input `name` turned into words."""
    return _rewrite(
        template,
        lambda ph: (
            _in_words(ph.raw) if ph.kind in ("input", "input_path") and ph.target == name else None
        ),
    )


def _rewrite(template: str, replace: Callable[[Placeholder], str | None]) -> str:
    """`template` with each placeholder `replace` returns text for replaced by that text."""
    out, end = [], 0
    for ph in parse_placeholders(template):
        new = replace(ph)
        if new is not None:
            out += [template[end : ph.span[0]], new]
            end = ph.span[1]
    return "".join(out) + template[end:]


def _rename(nodes: list[dict[str, Any]], old: str, new: str) -> None:
    """Rename node `old` and every reference to it in this graph."""
    for node in nodes:
        if node.get("id") == old:
            node["id"] = new
        node["deps"] = [new if d == old else d for d in node.get("deps", [])]
        for binding in node.get("inputs", {}).values():
            if isinstance(binding, dict) and binding.get("node") == old:
                binding["node"] = new
        node["template"] = _rewrite(
            node["template"],
            lambda ph: (
                f"{{{{{new}.{ph.kind}}}}}"
                if ph.kind in ("output", "output_path") and ph.target == old
                else None
            ),
        )
