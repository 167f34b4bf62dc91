"""A feature's own settings model (scheduled tasks' RAVEN_SCHEDULE_*): declared in its folder,
read from the same .env and environment under the names users already set, checked with the
rest at start, and listed by `doctor` and `.env.example`."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.settings import (
    SettingsError,
    feature_settings,
    known_variables,
    load_settings,
    unknown_variables,
)
from host.features.schedules.feature import SchedulesSection
from host.features.schedules.settings import SchedulesSettings

SCHEDULE_VARIABLES = {
    "RAVEN_SCHEDULE_MAX_PER_USER",
    "RAVEN_SCHEDULE_MIN_INTERVAL",
    "RAVEN_SCHEDULE_CHANNEL_PER_HOUR",
}


def test_the_schedules_folder_declares_its_settings_and_they_are_found() -> None:
    assert SchedulesSettings in feature_settings()
    assert set(known_variables()) >= SCHEDULE_VARIABLES


def test_the_section_reads_the_environment_under_the_old_names(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAVEN_SCHEDULE_MIN_INTERVAL", "120")
    monkeypatch.setenv("RAVEN_TIMEZONE", "Europe/Paris")
    section = load_settings().section(SchedulesSection)
    assert section.timezone == "Europe/Paris"
    assert section.own.schedule_min_interval_seconds == 120.0
    assert section.own.schedule_max_per_user == 20  # the default


def test_the_section_reads_the_same_env_file(isolated_env: Path) -> None:
    Path(".env").write_text("RAVEN_SCHEDULE_MAX_PER_USER=3\nRAVEN_SCHEDULE_CHANNEL_PER_HOUR=7\n")
    settings = load_settings()
    own = settings.section(SchedulesSection).own
    assert (own.schedule_max_per_user, own.schedule_channel_per_hour) == (3, 7)
    # Listed with the Host's settings: what `doctor` prints as the effective configuration.
    shown = settings.masked()
    assert shown["RAVEN_SCHEDULE_MAX_PER_USER"] == "3"
    assert shown["RAVEN_SCHEDULE_MIN_INTERVAL"] == "300.0"
    assert settings.is_set("RAVEN_SCHEDULE_CHANNEL_PER_HOUR")
    # Known, so not reported as a misspelt or unknown variable.
    assert unknown_variables({"RAVEN_SCHEDULE_MAX_PER_USER": "3"}, Path(".env")) == []


def test_an_invalid_feature_setting_stops_the_start_naming_its_variable(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAVEN_SCHEDULE_MIN_INTERVAL", "10")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith("Invalid configuration (fix these in .env or the environment):")
    assert "RAVEN_SCHEDULE_MIN_INTERVAL" in message and "'10'" in message
