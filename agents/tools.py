"""Tools an agent loop can call: a spec, an input model (or, for a tool server's tool, the
server's raw JSON schema), and an async handler."""

from __future__ import annotations

import copy
import functools
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from agents.models.types import MAX_RESULT_IMAGES, ToolCall, ToolImage, ToolResult, ToolSpec
from agents.tool_failures import failed_text
from core.errors import describe_validation_error

log = logging.getLogger(__name__)

Ctx = TypeVar("Ctx")
MAX_TOOL_OUTPUT_CHARS = 20_000


@dataclass(frozen=True)
class ToolTrust:
    """How far an admin trusts the server a call goes to (an MCP server's `approval` in
    mcp.json) and what the server says of the tool (its read-only hint, believed only
    under `smart`, because an admin chose to trust that server's annotations)."""

    approval: Literal["ask", "smart", "auto"]
    read_only: bool = False
    # The node's server was named in its scheduled task's plan, which its owner approved:
    # the task's unattended firings may call it without asking (its deny rules still hold).
    approved_with_task: bool = False


@dataclass(frozen=True)
class ToolOutput:
    """A tool's text for the model and, apart, what a person is told of it in plain words
    (said when no model writes the answer: offline); images go to the model beside the
    text; `is_error` marks a failed call for the model."""

    text: str
    summary: str
    images: tuple[ToolImage, ...] = ()
    is_error: bool = False


class RawInput(BaseModel):
    """The input of a tool known only by a raw JSON schema: anything, checked by its owner."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True)
class Tool(Generic[Ctx]):
    """A callable tool: `handler(ctx, validated_input)` returns text for the model (or a
    ToolOutput with a people-facing summary too).

    With `input_schema` (see `raw`), the model sees that schema as given and the handler gets
    the call's arguments as a plain dict, unchecked: their owner (a tool server) checks them.
    """

    name: str
    description: str
    input_model: type[BaseModel]
    handler: Callable[[Ctx, Any], Awaitable[str | ToolOutput]]
    input_schema: Mapping[str, Any] | None = None

    @classmethod
    def raw(
        cls,
        name: str,
        description: str,
        input_schema: Mapping[str, Any],
        handler: Callable[[Ctx, dict[str, Any]], Awaitable[str | ToolOutput]],
    ) -> Tool[Ctx]:
        """A tool whose model-facing schema is `input_schema` (a JSON schema as a dict)."""
        return cls(name, description, RawInput, handler, input_schema)

    @functools.cached_property
    def spec(self) -> ToolSpec:
        """The schema the model sees (built once and lean: every model call sends it)."""
        if self.input_schema is not None:
            raw = copy.deepcopy(dict(self.input_schema))
            return ToolSpec(name=self.name, description=self.description, input_schema=raw)
        schema = lean_schema(self.input_model.model_json_schema())
        return ToolSpec(name=self.name, description=self.description, input_schema=schema)


# Length bounds above this are left out of what the model sees (our validation keeps them):
# llama.cpp cannot turn a larger repetition bound into its tool-call grammar, and then
# drops the grammar for every tool of the call (a weak model's calls go unparsed).
MAX_SCHEMA_BOUND = 2000
_BOUNDS = frozenset({"maxLength", "maxItems", "maxProperties"})


def lean_schema(schema: Any, *, top: bool = True) -> Any:
    """A JSON schema without what every model call pays for and no model needs: pydantic's
    `title`s (the property names again), models' descriptions (their docstrings, for code
    readers: the tool's description says what the model needs), `"default": null`, length
    bounds too large to matter to a model (`MAX_SCHEMA_BOUND`), and
    optional fields' `anyOf: [X, null]` as `"type": [X, "null"]` (null stays valid, so a
    recovered text-written call is checked as before)."""
    if isinstance(schema, list):
        return [lean_schema(item, top=False) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" or (top and key == "description"):
            continue
        if key == "default" and value is None:
            continue
        if key in _BOUNDS and isinstance(value, int) and value > MAX_SCHEMA_BOUND:
            continue  # checked on our side; llama.cpp's grammar refuses such a bound
        if key == "$defs":  # each a model too: its docstring is not for the model
            out[key] = {name: lean_schema(sub) for name, sub in value.items()}
        elif key in ("properties", "patternProperties"):
            out[key] = {name: lean_schema(sub, top=False) for name, sub in value.items()}
        else:
            out[key] = lean_schema(value, top=False)
    return _nullable(out)


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """`anyOf: [{"type": X, …}, {"type": "null"}]` as `{"type": [X, "null"], …}`."""
    branches = schema.get("anyOf")
    if not isinstance(branches, list) or len(branches) != 2 or {"type": "null"} not in branches:
        return schema
    (other,) = [b for b in branches if b != {"type": "null"}]
    if not isinstance(other.get("type"), str) or set(other) & set(schema):
        return schema
    rest = {k: v for k, v in schema.items() if k != "anyOf"}
    return {**rest, **other, "type": [other["type"], "null"]}


class ToolSource(Protocol[Ctx]):
    """Tools that may change while the bot runs (a capability's, opened and closed with the
    runtime) or that only some turns need (a campaign's in its own conversation): asked for
    at each turn, so an agent sees the ones offered now, there."""

    async def tools(self, ctx: Ctx) -> Sequence[Tool[Ctx]]:
        """The tools offered now, to this turn (`ctx`: its conversation, its author)."""
        ...


class ToolRegistry(Generic[Ctx]):
    """An immutable set of tools with validated dispatch."""

    def __init__(
        self,
        tools: Sequence[Tool[Ctx]] = (),
        *,
        unknown_hint: Callable[[str], str | None] | None = None,
    ) -> None:
        names = [t.name for t in tools]
        duplicates = {n for n in names if names.count(n) > 1}
        if duplicates:
            raise ValueError(f"duplicate tool names: {sorted(duplicates)}")
        self._tools = {t.name: t for t in tools}
        # What to say of a call to a tool nobody offers (the Host: "`shell` is an agent…").
        self._unknown_hint = unknown_hint
        self._specs = tuple(t.spec for t in self._tools.values())

    @property
    def specs(self) -> list[ToolSpec]:
        """Specs of every tool, in registration order."""
        return list(self._specs)

    def names(self) -> list[str]:
        """Registered tool names."""
        return list(self._tools)

    def select(self, names: Iterable[str]) -> ToolRegistry[Ctx]:
        """A new registry with only the named tools (unknown names are ignored)."""
        wanted = set(names)
        kept = [t for n, t in self._tools.items() if n in wanted]
        return ToolRegistry(kept, unknown_hint=self._unknown_hint)

    def with_tools(self, tools: Sequence[Tool[Ctx]]) -> ToolRegistry[Ctx]:
        """A new registry with extra tools added."""
        return ToolRegistry([*self._tools.values(), *tools], unknown_hint=self._unknown_hint)

    async def dispatch(self, call: ToolCall, ctx: Ctx) -> ToolResult:
        """Validate the call's input and run the tool; every failure becomes an error result."""
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(self._tools) or "none"
            hint = self._unknown_hint(call.name) if self._unknown_hint is not None else None
            return _error(
                call, f"Unknown tool `{call.name}`. {hint or f'Available tools: {known}.'}"
            )
        args: Any
        if tool.input_schema is not None:
            args = dict(call.input)  # its owner checks it
        else:
            try:
                args = tool.input_model.model_validate(call.input)
            except ValidationError as exc:
                return _error(call, f"Invalid input for `{call.name}`: {describe_validation(exc)}")
        try:
            returned = await tool.handler(ctx, args)
        except Exception as exc:
            log.exception("tool %s failed", call.name)
            return _error(call, failed_text(call.name, f"{type(exc).__name__}: {exc}"))
        if not isinstance(returned, ToolOutput):
            returned = ToolOutput(returned, "")
        output = returned.text
        if len(output) > MAX_TOOL_OUTPUT_CHARS:
            output = output[:MAX_TOOL_OUTPUT_CHARS] + "\n…[output truncated]"
        return ToolResult(
            tool_use_id=call.id,
            content=output,
            is_error=returned.is_error,
            summary=returned.summary,
            images=returned.images[:MAX_RESULT_IMAGES],
        )


def describe_validation(exc: ValidationError) -> str:
    """Render pydantic errors as `field: problem` clauses a model (or person) can act on."""
    return "; ".join(describe_validation_error(exc, label=lambda err: err.path() or "(input)"))


def _error(call: ToolCall, message: str) -> ToolResult:
    return ToolResult(tool_use_id=call.id, content=message, is_error=True)


def dump_input(call: ToolCall) -> str:
    """The call's input as compact JSON (for transcripts)."""
    return json.dumps(call.input, ensure_ascii=False, sort_keys=True)
