"""core.errors: pydantic errors as `label: problem` lines, with caller rules and hints."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from core.errors import (
    FieldError,
    closest,
    describe_validation_error,
    did_you_mean,
    field_errors,
    json_kind,
)


class _Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["a", "b"] = "a"


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid")

    port: int = 1
    name: str = "x"
    inner: _Inner = _Inner()

    @field_validator("name")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value.islower():
            raise ValueError("must be lowercase")
        return value


def _error(**raw: object) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        _Config.model_validate(raw)
    return info.value


def test_lines_name_the_field_and_drop_pydantics_value_error_prefix() -> None:
    lines = describe_validation_error(_error(name="Big", port="many"))
    assert lines == [
        "port: Input should be a valid integer, unable to parse string as an integer",
        "name: must be lowercase",
    ]


def test_label_rules_hints_and_input_shape_each_line() -> None:
    exc = _error(prot=1, port="many", inner={"mode": "c"})

    def unknown(err: FieldError) -> str:
        return f"unknown key '{err.name}'{did_you_mean(str(err.name), _Config.model_fields)}"

    lines = describe_validation_error(
        exc,
        label=lambda err: f"`{err.path()}`",
        rules={"extra_forbidden": unknown},
        hints={"`port`": "a whole number"},
        show_input=True,
    )
    assert lines[0].startswith("`port`: Input should be a valid integer")
    assert lines[0].endswith(" (a whole number) (got 'many')")
    assert lines[1].startswith("`inner.mode`: Input should be 'a' or 'b' (got 'c')")
    assert lines[2] == "unknown key 'prot' (did you mean 'port'?)"


def test_an_empty_label_leaves_the_problem_alone() -> None:
    lines = describe_validation_error(_error(name="Big"), label=lambda err: "")
    assert lines == ["must be lowercase"]


def test_field_errors_keep_location_value_and_innermost_name() -> None:
    (err,) = field_errors(_error(inner={"mode": "c"}))
    assert err.kind == "literal_error"
    assert err.loc == ("inner", "mode")
    assert err.value == "c"
    assert err.name == "mode"


def test_small_helpers() -> None:
    assert closest("prot", ["port", "name"]) == "port"
    assert closest("zzz", ["port"]) is None
    assert did_you_mean("zzz", ["port"], otherwise=" (known: port)") == " (known: port)"
    values: tuple[object, ...] = (None, True, 1, "s", [], {})
    assert [json_kind(v) for v in values] == [
        "null",
        "a boolean",
        "a number",
        "a string",
        "a list",
        "an object",
    ]
