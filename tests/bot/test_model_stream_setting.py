"""RAVEN_MODEL_STREAM reaches the providers through ProviderOptions; off unless set."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.settings import SettingsError, load_settings


def test_streaming_is_off_unless_set(isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().provider_options.stream is False
    monkeypatch.setenv("RAVEN_MODEL_STREAM", "true")
    assert load_settings().provider_options.stream is True


def test_a_bad_value_names_the_setting(isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAVEN_MODEL_STREAM", "sometimes")
    with pytest.raises(SettingsError, match="RAVEN_MODEL_STREAM"):
        load_settings()
