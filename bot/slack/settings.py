"""Slack's own settings: read from `.env` and the environment like every setting, declared
here so the adapter's knobs and secrets live in its folder (`bot.settings.adapter_settings`
finds them).

A light module (pydantic only): the bot reads every adapter's `settings` module to list,
check and redact its variables before anything else is imported.
"""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class SlackSettings(BaseSettings):
    """The Slack app's tokens and where the adapter listens or connects. Every `SecretStr`
    here is a secret: redacted from logs and withheld from child processes."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", populate_by_name=True
    )

    slack_bot_token: SecretStr | None = Field(
        default=None, validation_alias="SLACK_BOT_TOKEN", description="Slack bot token (xoxb-)."
    )
    slack_app_token: SecretStr | None = Field(
        default=None,
        validation_alias="SLACK_APP_TOKEN",
        description="Slack app-level token (xapp-) for Socket Mode.",
    )
    slack_signing_secret: SecretStr | None = Field(
        default=None,
        validation_alias="SLACK_SIGNING_SECRET",
        description="Slack signing secret for the HTTP Events API.",
    )
    slack_api_url: str = Field(
        default="https://slack.com/api/",
        validation_alias="RAVEN_SLACK_API_URL",
        description="Slack Web API base URL (change only for a proxy or a test server).",
    )
    slack_http_host: str = Field(
        default="0.0.0.0",
        validation_alias="RAVEN_SLACK_HTTP_HOST",
        description="Interface the HTTP Events API server listens on.",
    )
    slack_http_port: int = Field(
        default=3000,
        ge=0,
        le=65535,
        validation_alias="RAVEN_SLACK_HTTP_PORT",
        description="Port of the HTTP Events API server (Request URL points here).",
    )
    slack_http_path: str = Field(
        default="/slack/events",
        validation_alias="RAVEN_SLACK_HTTP_PATH",
        description="Path of the HTTP Events API endpoint (events and interactivity).",
    )
    slack_thread_replies: bool = Field(
        default=True,
        validation_alias="RAVEN_SLACK_THREAD_REPLIES",
        description="Answer replies in threads the bot is part of without a new mention.",
    )
    slack_allow_bots: bool = Field(
        default=False,
        validation_alias="RAVEN_SLACK_ALLOW_BOTS",
        description="Also answer messages from other bots (the bot's own are always ignored).",
    )

    @field_validator("slack_http_path")
    @classmethod
    def _absolute_path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must start with / (e.g. /slack/events)")
        return value
