"""Scheduled tasks' own settings: read from `.env` and the environment like every setting,
declared here so the capability's knobs live in its folder.

A light module (pydantic only): the bot reads every feature's `settings` module to list and
check its variables before anything else is imported (`bot.settings`).
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class SchedulesSettings(BaseSettings):
    """Scheduled tasks (`schedule: every 2h | …` in a thread): how many one person may have,
    how often they may fire, and how many firings one channel may get."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", populate_by_name=True
    )

    schedule_max_per_user: int = Field(
        default=20,
        ge=1,
        validation_alias="RAVEN_SCHEDULE_MAX_PER_USER",
        description="How many scheduled tasks one person may have at once (live or paused).",
    )
    schedule_min_interval_seconds: float = Field(
        default=300.0,
        ge=60,
        validation_alias="RAVEN_SCHEDULE_MIN_INTERVAL",
        description="The shortest `every` interval a scheduled task may use, in seconds.",
    )
    schedule_channel_per_hour: int = Field(
        default=30,
        ge=1,
        validation_alias="RAVEN_SCHEDULE_CHANNEL_PER_HOUR",
        description="How many scheduled firings may run in one channel per hour.",
    )
