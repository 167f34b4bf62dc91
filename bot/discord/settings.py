"""Discord's own settings: read from `.env` and the environment like every setting, declared
here so the adapter's knobs and secrets live in its folder (`bot.settings.adapter_settings`
finds them).

A light module (pydantic only): the bot reads every adapter's `settings` module to list,
check and redact its variables before anything else is imported.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

CsvList = Annotated[list[str], NoDecode]


class DiscordSettings(BaseSettings):
    """The Discord bot's token, where discord.py connects, and whom it answers. Every
    `SecretStr` here is a secret: redacted from logs and withheld from child processes."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", populate_by_name=True
    )

    discord_token: SecretStr | None = Field(
        default=None, validation_alias="DISCORD_TOKEN", description="Discord bot token."
    )
    discord_api_url: str = Field(
        default="https://discord.com/api/v10",
        validation_alias="RAVEN_DISCORD_API_URL",
        description="Discord REST API base URL (change only for a proxy or a test server).",
    )
    discord_gateway_url: str | None = Field(
        default=None,
        validation_alias="RAVEN_DISCORD_GATEWAY_URL",
        description="Discord gateway WebSocket URL (unset: Discord's; only for a test server).",
    )
    discord_thread_replies: bool = Field(
        default=True,
        validation_alias="RAVEN_DISCORD_THREADS",
        description="A mention in a channel starts a thread (false: reply inline in the channel).",
    )
    discord_allow_bots: bool = Field(
        default=False,
        validation_alias="RAVEN_DISCORD_ALLOW_BOTS",
        description="Also answer messages from other bots (the bot's own are always ignored).",
    )
    discord_allowed_guilds: CsvList = Field(
        default_factory=list,
        validation_alias="RAVEN_DISCORD_ALLOWED_GUILDS",
        description="Comma-separated Discord server (guild) ids the bot answers in (empty: all).",
    )
    discord_allowed_roles: CsvList = Field(
        default_factory=list,
        validation_alias="RAVEN_DISCORD_ALLOWED_ROLES",
        description="Comma-separated Discord role ids whose members may use the bot (empty: any).",
    )

    @field_validator("discord_allowed_guilds", "discord_allowed_roles", mode="before")
    @classmethod
    def _split_csv(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value
