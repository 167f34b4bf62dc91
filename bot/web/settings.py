"""The web viewer's settings, read from `.env` and the environment like every setting.

A light module (pydantic only): the bot reads every unit's `settings` module to list and
check its variables before anything else is imported (`bot.settings`).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class WebSettings(BaseSettings):
    """Where the viewer listens and what its links look like. Unset port: no viewer, no links."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", populate_by_name=True
    )

    web_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        validation_alias="RAVEN_WEB_PORT",
        description="Serve the read-only web viewer of runs, campaigns and schedules on this "
        "port, and post its links in threads. Unset: no viewer.",
    )
    web_host: str = Field(
        default="127.0.0.1",
        min_length=1,
        validation_alias="RAVEN_WEB_HOST",
        description="The address the viewer listens on (127.0.0.1: this machine only; put a "
        "reverse proxy with TLS in front to share it).",
    )
    web_public_url: str = Field(
        default="",
        validation_alias="RAVEN_WEB_PUBLIC_URL",
        description="The base of the links the bot posts (https://raven.example.com behind a "
        "reverse proxy). Empty: http://RAVEN_WEB_HOST:RAVEN_WEB_PORT.",
    )
    web_link_hours: float = Field(
        default=24.0,
        gt=0,
        le=24 * 366,
        validation_alias="RAVEN_WEB_LINK_HOURS",
        description="How long a posted viewer link opens its conversation's records, in hours.",
    )

    @field_validator("web_public_url")
    @classmethod
    def _a_base_url(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if not value:
            return ""
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(
                f"{value!r} is not a base URL: write http(s)://host[:port][/path], "
                "such as https://raven.example.com"
            )
        if parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError(
                f"{value!r}: a base URL has no query, fragment or credentials; "
                "write only scheme, host, port and path"
            )
        return value
