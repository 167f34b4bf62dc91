"""The Discord entry of the channel registry: build the adapter and check it for `doctor`."""

from __future__ import annotations

import aiohttp

from bot.access import AccessPolicy
from bot.channel import ChannelAdapter
from bot.discord.adapter import DiscordAdapter
from bot.discord.config import DiscordConfig
from bot.discord.settings import DiscordSettings
from bot.home import workspace_for
from bot.settings import Settings

DOCTOR_TIMEOUT_SECONDS = 10.0


def discord_config(settings: Settings) -> DiscordConfig:
    """The adapter's configuration from its own section (`DiscordSettings`) and what every
    platform shares (the token must be set)."""
    assert DiscordSettings().discord_token is not None
    return settings.section(DiscordConfig, prefix="discord_", reveal=True)


def discord_adapter(settings: Settings) -> ChannelAdapter:
    """The Discord adapter from settings."""
    own = DiscordSettings()
    policy = AccessPolicy.from_lists(
        allowed_users=settings.allowed_users,
        allowed_channels=settings.allowed_channels,
        admins=settings.admins,
        dm_enabled=settings.dm_enabled,
        allowed_workspaces=own.discord_allowed_guilds,
        allowed_roles=own.discord_allowed_roles,
    )
    return DiscordAdapter(
        discord_config(settings), policy=policy, workspace=workspace_for(settings.home)
    )


async def discord_doctor(settings: Settings) -> tuple[bool, str]:
    """(ok, detail) for `raven-bot doctor`: the token is valid and names a bot user."""
    own = DiscordSettings()
    if own.discord_token is None:
        return True, "not configured (set DISCORD_TOKEN to serve Discord)"
    api = own.discord_api_url.rstrip("/")
    headers = {"Authorization": f"Bot {own.discord_token.get_secret_value()}"}
    try:
        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=DOCTOR_TIMEOUT_SECONDS), headers=headers
        ) as s:
            async with s.get(f"{api}/users/@me") as resp:
                if resp.status == 401:
                    return False, "DISCORD_TOKEN was rejected (401): copy the bot token again"
                if resp.status != 200:
                    return False, f"Discord answered HTTP {resp.status} to /users/@me"
                me = await resp.json(content_type=None)
            if not isinstance(me, dict) or not me.get("bot"):
                return False, "DISCORD_TOKEN is not a bot token (use the Bot tab's token)"
            commands = await _slash_commands_problem(s, api, own.discord_allowed_guilds)
    except (aiohttp.ClientError, TimeoutError) as exc:
        return False, f"Discord is unreachable: {type(exc).__name__}: {exc}"
    name = me.get("global_name") or me.get("username") or "?"
    detail = (
        f"bot {name} ({me.get('id')}); needs the Message Content intent enabled in the "
        "Developer Portal"
    )
    return True, f"{detail}; {commands}" if commands else detail


async def _slash_commands_problem(
    session: aiohttp.ClientSession, api: str, guilds: list[str]
) -> str | None:
    """Why `/raven` cannot be registered in an allowed guild (the invite lacked the
    `applications.commands` scope), or None. Typed words keep working without it, so it is
    said, not failed."""
    async with session.get(f"{api}/oauth2/applications/@me") as resp:
        if resp.status != 200:
            return None  # the application is not readable: nothing to say about commands
        app = await resp.json(content_type=None)
    app_id = app.get("id") if isinstance(app, dict) else None
    refused = []
    for guild in [g for g in guilds if g.isdigit()]:
        async with session.get(f"{api}/applications/{app_id}/guilds/{guild}/commands") as resp:
            if resp.status == 403:
                refused.append(guild)
    if not refused:
        return None
    return (
        f"/raven cannot be registered in guild(s) {', '.join(refused)}: invite the bot again "
        "with the applications.commands scope (the typed words work meanwhile)"
    )
