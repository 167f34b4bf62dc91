"""Secret names are a value handed to each scrubber, not state a process sets: a name one
value declares secret says nothing about another value, nor about the module."""

from __future__ import annotations

import dataclasses

import pytest

from core.secret_names import SecretNames


def test_a_declared_name_is_secret_whatever_its_case() -> None:
    names = SecretNames.of(["matrix_passphrase"])
    assert names.declared == frozenset({"MATRIX_PASSPHRASE"})
    assert names.looks_secret("MATRIX_PASSPHRASE") and names.looks_secret("Matrix_Passphrase")
    assert not names.looks_secret("MATRIX_ROOM")


def test_the_pattern_holds_without_declarations() -> None:
    plain = SecretNames()
    for name in ("GITHUB_TOKEN", "MY_PASSWORD", "SLACK_APP_LEVEL", "anthropic_base_url"):
        assert plain.looks_secret(name), name
    assert not plain.looks_secret("MATRIX_PASSPHRASE")  # an unusual name: the pattern misses it


def test_declaring_names_in_one_value_leaves_every_other_alone() -> None:
    declared = SecretNames.of(["MATRIX_PASSPHRASE"])
    assert declared.looks_secret("MATRIX_PASSPHRASE")
    assert not SecretNames().looks_secret("MATRIX_PASSPHRASE")
    assert not SecretNames.of(["OTHER"]).looks_secret("MATRIX_PASSPHRASE")
    with pytest.raises(dataclasses.FrozenInstanceError):
        declared.declared = frozenset()  # type: ignore[misc]
