"""Pydantic validation errors as prose people and models can act on.

Every place that validates outside input (settings, agents.toml, permissions.toml,
machines.toml, tool calls, graph submissions, campaign specs) words pydantic's errors
through this module, so they read alike: where the problem is, what is wrong, and how to
fix it when that is known. Each caller says how its locations are named (`label`), words
the error types it knows better than pydantic does (`rules`), and adds fixes (`hints`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Final

from pydantic import ValidationError
from pydantic_core import ErrorDetails

# pydantic prefixes the text of a ValueError raised in a validator; the reader needs only the text.
_VALUE_ERROR_PREFIX: Final = "Value error, "


class ConfigError(RuntimeError):
    """A configuration file is wrong: the bot does not start. The message is one line naming
    the file, the key and the fix."""


@dataclass(frozen=True)
class FieldError:
    """One pydantic error in the parts a message is worded from."""

    kind: str  # pydantic's error type, e.g. `missing`, `extra_forbidden`
    loc: tuple[int | str, ...]
    message: str  # pydantic's message, without its "Value error, " prefix
    value: object = None  # the input that failed
    ctx: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def of(cls, err: ErrorDetails) -> FieldError:
        """The parts of one entry of `ValidationError.errors()`."""
        return cls(
            kind=err["type"],
            loc=tuple(err["loc"]),
            message=str(err["msg"]).removeprefix(_VALUE_ERROR_PREFIX),
            value=err.get("input"),
            ctx=err.get("ctx") or {},
        )

    @property
    def name(self) -> str | None:
        """The innermost field name in `loc` (list positions and dict-key markers skipped)."""
        return next((p for p in reversed(self.loc) if isinstance(p, str) and p != "[key]"), None)

    def path(self) -> str:
        """`loc` joined with dots (`budget.rounds`, `allow.0`); empty for the whole input."""
        return ".".join(str(part) for part in self.loc)


Rule = Callable[[FieldError], str | None]


def field_errors(exc: ValidationError) -> list[FieldError]:
    """Every error of `exc`, in pydantic's order."""
    return [FieldError.of(err) for err in exc.errors(include_url=False)]


def describe_validation_error(
    exc: ValidationError,
    *,
    label: Callable[[FieldError], str] = FieldError.path,
    rules: Mapping[str, Rule] | None = None,
    hints: Mapping[str, str] | None = None,
    show_input: bool = False,
) -> list[str]:
    """One line per error: `label: problem`, or just the problem when the label is empty.

    `rules` word an error type in full (a rule returning None leaves pydantic's message);
    `hints` add `(how to fix it)` to the lines whose label they name; `show_input` adds
    `(got 'value')` for scalar inputs.
    """
    rules = rules or {}
    hints = hints or {}
    lines = []
    for err in field_errors(exc):
        rule = rules.get(err.kind)
        line = rule(err) if rule is not None else None
        if line is None:
            where = label(err)
            line = f"{where}: {err.message}" if where else err.message
            if hint := hints.get(where):
                line += f" ({hint})"
            if show_input and not isinstance(err.value, dict) and err.value is not None:
                line += f" (got {str(err.value)[:40]!r})"
        lines.append(line)
    return lines


def closest(name: str, options: Collection[str]) -> str | None:
    """The option `name` most likely misspells, if one is close enough."""
    close = difflib.get_close_matches(name, list(options), n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(name: str, options: Collection[str], *, otherwise: str = "") -> str:
    """` (did you mean 'x'?)` for a misspelt key, else `otherwise`."""
    near = closest(name, options)
    return f" (did you mean '{near}'?)" if near else otherwise


def json_kind(value: object) -> str:
    """What a JSON value is, as a sentence names it (`a string`, `null`)."""
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
