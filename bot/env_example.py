""".env.example, rendered from the settings models: the core `Settings`, then each feature's
and each chat adapter's own model (`bot.settings.feature_settings` / `adapter_settings`), so a
unit's new setting is listed with its description and default without a hand edit.

`python -m bot.env_example` prints it; `make env-example` writes it, and a test fails while
the committed file differs from what this renders.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Sequence
from pathlib import PurePath

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from bot.settings import (
    Settings,
    adapter_settings,
    feature_settings,
    field_variables,
    is_secret_field,
)

WIDTH = 100
HEADER = (
    "# raven-bot configuration. Copy to .env and uncomment what you need.\n"
    "# Every setting has a default; `raven-bot doctor` prints the effective values.\n"
    "# Generated from the settings models (bot/env_example.py) by `make env-example`: edit the\n"
    "# models' descriptions, not this file."
)
SECRET_NOTE = "(A secret: masked, redacted from logs, never passed to agents or commands.)"


def default_models() -> tuple[type[BaseSettings], ...]:
    """Core first, then features, then adapters, each group by module name (a stable order
    whatever the folders' listing order)."""

    def key(model: type[BaseSettings]) -> tuple[str, str]:
        return (model.__module__, model.__qualname__)

    return (
        Settings,
        *sorted(feature_settings(), key=key),
        *sorted(adapter_settings(), key=key),
    )


def render(models: Sequence[type[BaseSettings]] | None = None) -> str:
    """The whole file: a header, then one section per model in the given order."""
    chosen = default_models() if models is None else models
    parts = [HEADER, *(_section(model) for model in chosen)]
    return "\n\n".join(parts) + "\n"


def _section(model: type[BaseSettings]) -> str:
    """Where the model is declared and its docstring's summary, then its fields."""
    source = PurePath(*model.__module__.split(".")).with_suffix(".py").as_posix()
    blocks = [f"# === {source}\n{_comment(_summary(model))}"]
    blocks += [_field(name, field) for name, field in model.model_fields.items()]
    return "\n\n".join(blocks)


def _summary(model: type[BaseSettings]) -> str:
    """The docstring's first paragraph on one line (summaries wrap across source lines)."""
    doc = textwrap.dedent(model.__doc__ or "").strip()
    first = doc.split("\n\n", 1)[0]
    return " ".join(first.split()) or model.__name__


def _field(name: str, field: FieldInfo) -> str:
    """`# description` lines (with other names it is read as, and a secret's note), then
    `# NAME=default`."""
    variable, *others = _variables(name, field)
    text = field.description or ""
    if others:
        text += f" Also read as {', '.join(others)}."
    if is_secret_field(field):
        text += f" {SECRET_NOTE}"
    lines = [_comment(text.strip())] if text.strip() else []
    lines.append(f"# {variable}={_default(field)}")
    return "\n".join(lines)


def _variables(name: str, field: FieldInfo) -> list[str]:
    """The environment variables a field reads, the one to set first (its own name when the
    model gives it no alias)."""
    return field_variables(field) or [name.upper()]


def _default(field: FieldInfo) -> str:
    """The default as a value pydantic reads back: secrets and None empty, lists
    comma-joined, bools lowercase, floats as repr, paths as written."""
    if is_secret_field(field):
        return ""  # a secret's default never goes into a file meant to be copied around
    value = field.get_default(call_default_factory=True)
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return ",".join(str(item) for item in value)
    return str(value)


def _comment(text: str) -> str:
    """Text as `# ` lines wrapped at WIDTH columns."""
    return "\n".join(
        textwrap.wrap(
            text,
            width=WIDTH,
            initial_indent="# ",
            subsequent_indent="# ",
            break_long_words=False,
            break_on_hyphens=False,
        )
    )


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
