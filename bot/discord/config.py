"""The Discord adapter's settings, the gateway intents it asks for, and where discord.py
connects to."""

from __future__ import annotations

from dataclasses import dataclass

import discord
import yarl

DEFAULT_API_URL = "https://discord.com/api/v10"


@dataclass(frozen=True)
class DiscordConfig:
    """Everything the adapter needs from Settings."""

    token: str
    thread_replies: bool = True
    allow_bots: bool = False
    attachment_max_bytes: int = 20_000_000
    thread_context_messages: int = 20
    api_url: str = DEFAULT_API_URL
    gateway_url: str | None = None  # None: discord.py's default gateway
    # discord.py waits this long after the last GUILD_CREATE before `on_ready`.
    guild_ready_timeout: float = 2.0
    # Seconds discord.py waits before a non-initial IDENTIFY (None: its own 5 s).
    reidentify_delay: float | None = None


def intents() -> discord.Intents:
    """Guild and DM messages with their content (a privileged intent: enable "Message
    Content Intent" for the application in the Developer Portal)."""
    wanted = discord.Intents.none()
    wanted.guilds = True
    wanted.guild_messages = True
    wanted.dm_messages = True
    wanted.message_content = True
    return wanted


def point_at(config: DiscordConfig) -> None:
    """Aim discord.py at another API and gateway (a proxy or a test server).

    discord.py has no per-client setting for these: they are class attributes, so this is
    process-wide, and only done when the settings ask for it."""
    if config.api_url.rstrip("/") != DEFAULT_API_URL:
        discord.http.Route.BASE = config.api_url.rstrip("/")
    if config.gateway_url:
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(config.gateway_url)
