"""Builders for Discord API v10 objects, modelled on what real Discord sends.

The shapes follow the API documentation and payloads captured from Discord; they are
deliberately *complete* rather than minimal (see `/work/shared/notes/testing-discord-offline.md`,
which lists the floor below which discord.py's parsers raise). Snowflakes are strings.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "ATTACHMENT_SIZE_LIMIT",
    "DEFAULT_PERMISSIONS",
    "DISCORD_EPOCH_MS",
    "Snowflakes",
    "application",
    "attachment",
    "dm_channel",
    "guild",
    "guild_channel",
    "guild_create",
    "interaction",
    "interaction_member",
    "member",
    "message",
    "partial_member",
    "ready",
    "role",
    "snowflake_time",
    "thread",
    "timestamp",
    "user",
]

DISCORD_EPOCH_MS = 1_420_070_400_000
# A guild without boosts: 10 MiB uploads (interaction payloads must carry this since 2.6).
ATTACHMENT_SIZE_LIMIT = 10 * 1024 * 1024
# View channels, send messages (also in threads), create threads, embed links, attach files,
# read history, mention everyone, use external emojis, add reactions: a typical bot grant.
DEFAULT_PERMISSIONS = "1071698660929"

JSON = dict[str, Any]


class Snowflakes:
    """Issues increasing snowflake ids (as strings) that encode the current time."""

    def __init__(self, worker: int = 1, process: int = 0) -> None:
        self._worker = worker & 0x1F
        self._process = process & 0x1F
        self._increment = 0
        self._last = 0

    def next(self) -> str:
        """A new snowflake, greater than every one issued before (and `observe`d)."""
        now_ms = int(time.time() * 1000) - DISCORD_EPOCH_MS
        self._increment = (self._increment + 1) & 0xFFF
        value = (now_ms << 22) | (self._worker << 17) | (self._process << 12) | self._increment
        # Several ids per millisecond, or ids seeded by a test from the future: stay monotonic.
        value = max(value, self._last + 1)
        self._last = value
        return str(value)

    def observe(self, snowflake: str) -> None:
        """Keep later ids above an id chosen by a test (e.g. an explicit message id)."""
        self._last = max(self._last, int(snowflake))


def snowflake_time(snowflake: str) -> dt.datetime:
    """The creation time encoded in a snowflake."""
    ms = (int(snowflake) >> 22) + DISCORD_EPOCH_MS
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def timestamp(when: dt.datetime | None = None) -> str:
    """An ISO 8601 timestamp as Discord writes it (`2024-05-01T12:00:00.123000+00:00`)."""
    return (when or dt.datetime.now(dt.UTC)).isoformat(timespec="microseconds")


def user(
    user_id: str,
    username: str,
    *,
    global_name: str | None = None,
    bot: bool = False,
    avatar: str | None = None,
) -> JSON:
    """A user object (the post-2023 unique-username shape: discriminator `"0"`)."""
    obj: JSON = {
        "id": user_id,
        "username": username,
        "discriminator": "0",
        "global_name": global_name,
        "avatar": avatar,
        "avatar_decoration_data": None,
        "banner": None,
        "accent_color": None,
        "public_flags": 0,
        "flags": 0,
        "collectibles": None,
        "primary_guild": None,
        "clan": None,
    }
    if bot:
        obj["bot"] = True
    return obj


def partial_member(*, nick: str | None, roles: Sequence[str], joined_at: str) -> JSON:
    """A guild member without `user`, as embedded in MESSAGE_CREATE (`member` and
    `mentions[].member`)."""
    return {
        "nick": nick,
        "avatar": None,
        "banner": None,
        "roles": list(roles),
        "joined_at": joined_at,
        "premium_since": None,
        "deaf": False,
        "mute": False,
        "pending": False,
        "flags": 0,
        "communication_disabled_until": None,
        "unusual_dm_activity_until": None,
    }


def member(
    user_obj: JSON, *, nick: str | None = None, roles: Sequence[str] = (), joined_at: str
) -> JSON:
    """A full guild member (REST `GET /guilds/{id}/members/{id}`, GUILD_CREATE `members`)."""
    return {"user": user_obj, **partial_member(nick=nick, roles=roles, joined_at=joined_at)}


def interaction_member(
    user_obj: JSON,
    *,
    nick: str | None,
    roles: Sequence[str],
    joined_at: str,
    permissions: str = DEFAULT_PERMISSIONS,
) -> JSON:
    """A member as sent in interactions: a full member plus its computed `permissions`."""
    return {
        **member(user_obj, nick=nick, roles=roles, joined_at=joined_at),
        "permissions": permissions,
    }


def role(
    role_id: str, name: str, *, position: int = 0, permissions: str = DEFAULT_PERMISSIONS
) -> JSON:
    """A guild role."""
    return {
        "id": role_id,
        "name": name,
        "description": None,
        "color": 0,
        "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
        "hoist": False,
        "icon": None,
        "unicode_emoji": None,
        "position": position,
        "permissions": permissions,
        "managed": False,
        "mentionable": False,
        "flags": 0,
    }


def guild_channel(
    channel_id: str,
    name: str,
    *,
    guild_id: str,
    type: int = 0,
    position: int = 0,
    parent_id: str | None = None,
    topic: str | None = None,
) -> JSON:
    """A guild channel (text 0, voice 2, category 4, announcement 5, forum 15, ...)."""
    return {
        "id": channel_id,
        "type": type,
        "guild_id": guild_id,
        "name": name,
        "position": position,
        "permission_overwrites": [],
        "parent_id": parent_id,
        "topic": topic,
        "nsfw": False,
        "last_message_id": None,
        "rate_limit_per_user": 0,
        "default_auto_archive_duration": 1440,
        "default_thread_rate_limit_per_user": 0,
        "flags": 0,
    }


def thread(
    thread_id: str,
    name: str,
    *,
    guild_id: str,
    parent_id: str,
    owner_id: str,
    type: int = 11,
    auto_archive_duration: int = 1440,
    rate_limit_per_user: int = 0,
    invitable: bool = True,
    created_at: str | None = None,
) -> JSON:
    """A thread channel (public 11, private 12, announcement 10) as returned on creation."""
    created = created_at or timestamp()
    metadata: JSON = {
        "archived": False,
        "archive_timestamp": created,
        "auto_archive_duration": auto_archive_duration,
        "locked": False,
        "create_timestamp": created,
    }
    if type == 12:
        metadata["invitable"] = invitable
    return {
        "id": thread_id,
        "type": type,
        "guild_id": guild_id,
        "parent_id": parent_id,
        "owner_id": owner_id,
        "name": name,
        "last_message_id": None,
        "rate_limit_per_user": rate_limit_per_user,
        "flags": 0,
        "message_count": 0,
        "member_count": 1,
        "total_message_sent": 0,
        "thread_metadata": metadata,
        "member": {
            "id": thread_id,
            "user_id": owner_id,
            "join_timestamp": created,
            "flags": 1,
        },
    }


def dm_channel(channel_id: str, recipient: JSON) -> JSON:
    """A DM channel (type 1) with one recipient."""
    return {
        "id": channel_id,
        "type": 1,
        "last_message_id": None,
        "flags": 0,
        "recipients": [recipient],
    }


def attachment(
    attachment_id: str,
    filename: str,
    *,
    size: int,
    url: str,
    content_type: str | None = "application/octet-stream",
    description: str | None = None,
) -> JSON:
    """An attachment object; `url` and `proxy_url` point at wherever the bytes are served."""
    obj: JSON = {
        "id": attachment_id,
        "filename": filename,
        "size": size,
        "url": url,
        "proxy_url": url,
        "content_type": content_type,
        "flags": 0,
    }
    if description is not None:
        obj["description"] = description
    return obj


def button(custom_id: str, *, label: str = "Choose", style: int = 2) -> JSON:
    """An interactive button (component type 2) as a message shows it."""
    return {"type": 2, "custom_id": custom_id, "style": style, "label": label}


def action_row(components: Sequence[JSON]) -> JSON:
    """An action row (component type 1) holding up to five buttons."""
    return {"type": 1, "components": list(components)}


def message(
    message_id: str,
    channel_id: str,
    author: JSON,
    content: str,
    *,
    guild_id: str | None = None,
    type: int = 0,
    mentions: Sequence[JSON] = (),
    mention_roles: Sequence[str] = (),
    mention_everyone: bool = False,
    attachments: Sequence[JSON] = (),
    embeds: Sequence[JSON] = (),
    components: Sequence[JSON] = (),
    flags: int = 0,
    nonce: str | int | None = None,
    tts: bool = False,
    created_at: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> JSON:
    """A message object as REST returns it (gateway events add `member` for guild messages).

    `extra` adds optional keys: `message_reference`, `referenced_message`, `webhook_id`,
    `application_id`, `interaction_metadata`, `position`, `thread`, `allowed_mentions`.
    """
    obj: JSON = {
        "id": message_id,
        "type": type,
        "channel_id": channel_id,
        "author": author,
        "content": content,
        "timestamp": created_at or timestamp(snowflake_time(message_id)),
        "edited_timestamp": None,
        "tts": tts,
        "mention_everyone": mention_everyone,
        "mentions": list(mentions),
        "mention_roles": list(mention_roles),
        "attachments": list(attachments),
        "embeds": list(embeds),
        "components": list(components),
        "pinned": False,
        "flags": flags,
    }
    if guild_id is not None:
        obj["guild_id"] = guild_id
    if nonce is not None:
        obj["nonce"] = nonce
    if extra:
        obj.update(extra)
    return obj


def application(app_id: str, bot_user: JSON, owner: JSON, *, name: str) -> JSON:
    """`GET /oauth2/applications/@me` for a bot application (no interactions endpoint URL,
    so that interactions arrive over the gateway)."""
    return {
        "id": app_id,
        "name": name,
        "icon": None,
        "description": "",
        "summary": "",
        "type": None,
        "is_monetized": False,
        "is_verified": False,
        "is_discoverable": False,
        "hook": True,
        "bot_public": True,
        "bot_require_code_grant": False,
        "verify_key": "f" * 64,
        "owner": owner,
        "team": None,
        "flags": 1 << 19 | 1 << 23,  # GATEWAY_MESSAGE_CONTENT_LIMITED, APPLICATION_COMMAND_BADGE
        "bot": bot_user,
        "redirect_uris": [],
        "interactions_endpoint_url": None,
        "role_connections_verification_url": None,
        "event_webhooks_url": None,
        "event_webhooks_status": 1,
        "tags": [],
        "install_params": {"scopes": ["bot", "applications.commands"], "permissions": "0"},
        "integration_types_config": {"0": {}},
        "approximate_guild_count": 1,
        "approximate_user_install_count": 0,
        "rpc_origins": [],
    }


def guild(
    guild_id: str,
    name: str,
    *,
    owner_id: str,
    roles: Sequence[JSON],
    system_channel_id: str | None = None,
) -> JSON:
    """A guild object as `GET /guilds/{id}` returns it."""
    return {
        "id": guild_id,
        "name": name,
        "icon": None,
        "icon_hash": None,
        "splash": None,
        "discovery_splash": None,
        "owner_id": owner_id,
        "afk_channel_id": None,
        "afk_timeout": 300,
        "widget_enabled": False,
        "widget_channel_id": None,
        "verification_level": 0,
        "default_message_notifications": 1,
        "explicit_content_filter": 0,
        "roles": list(roles),
        "emojis": [],
        "stickers": [],
        "features": [],
        "mfa_level": 0,
        "application_id": None,
        "system_channel_id": system_channel_id,
        "system_channel_flags": 0,
        "rules_channel_id": None,
        "public_updates_channel_id": None,
        "safety_alerts_channel_id": None,
        "max_presences": None,
        "max_members": 500000,
        "max_video_channel_users": 25,
        "max_stage_video_channel_users": 50,
        "vanity_url_code": None,
        "description": None,
        "banner": None,
        "premium_tier": 0,
        "premium_subscription_count": 0,
        "premium_progress_bar_enabled": False,
        "preferred_locale": "en-US",
        "nsfw_level": 0,
        "nsfw": False,
        "region": "deprecated",
        "hub_type": None,
        "incidents_data": None,
    }


def guild_create(
    guild_obj: JSON,
    *,
    channels: Sequence[JSON],
    members: Sequence[JSON],
    joined_at: str,
) -> JSON:
    """The GUILD_CREATE event data: a guild plus the gateway-only fields."""
    return {
        **guild_obj,
        "joined_at": joined_at,
        "large": False,
        "unavailable": False,
        "lazy": True,
        "member_count": len(members),
        "members": list(members),
        "channels": list(channels),
        "threads": [],
        "presences": [],
        "voice_states": [],
        "stage_instances": [],
        "guild_scheduled_events": [],
        "soundboard_sounds": [],
        "embedded_activities": [],
        "activity_instances": [],
        "application_command_counts": {},
        "version": 1,
    }


def ready(
    bot_user: JSON,
    *,
    guild_ids: Sequence[str],
    session_id: str,
    resume_gateway_url: str,
    app_id: str,
    shard: Sequence[int] | None = None,
) -> JSON:
    """The READY event data (guilds arrive as unavailable stubs, then GUILD_CREATE each)."""
    data: JSON = {
        "v": 10,
        "user_settings": {},
        "user": {**bot_user, "verified": True, "mfa_enabled": False, "email": None},
        "guilds": [{"id": gid, "unavailable": True} for gid in guild_ids],
        "session_id": session_id,
        "session_type": "normal",
        "resume_gateway_url": resume_gateway_url,
        "application": {"id": app_id, "flags": 1 << 19 | 1 << 23},
        "private_channels": [],
        "relationships": [],
        "presences": [],
        "guild_join_requests": [],
        "geo_ordered_rtc_regions": ["rotterdam", "london"],
        "auth": {},
        "_trace": ['["gateway-prd-fake",{"micros":1000}]'],
    }
    if shard is not None:
        data["shard"] = list(shard)
    return data


def interaction(
    interaction_id: str,
    token: str,
    *,
    type: int,
    app_id: str,
    data: JSON,
    channel: JSON,
    invoker: JSON,
    guild_id: str | None,
    message_obj: JSON | None = None,
    locale: str = "en-US",
) -> JSON:
    """An INTERACTION_CREATE payload (application command 2, component 3, modal submit 5).

    `invoker` is an interaction member (with `user`) for a guild, or a user for a DM.
    """
    payload: JSON = {
        "id": interaction_id,
        "application_id": app_id,
        "type": type,
        "data": data,
        "channel": channel,
        "channel_id": channel["id"],
        "token": token,
        "version": 1,
        "app_permissions": DEFAULT_PERMISSIONS,
        "locale": locale,
        "entitlements": [],
        "entitlement_sku_ids": [],
        "attachment_size_limit": ATTACHMENT_SIZE_LIMIT,
    }
    if guild_id is not None:
        payload["guild_id"] = guild_id
        payload["guild"] = {"id": guild_id, "locale": "en-US", "features": []}
        payload["guild_locale"] = "en-US"
        payload["member"] = invoker
        # GUILD_INSTALL ("0") -> the guild the app is installed in; BOT_DM context 1 below.
        payload["authorizing_integration_owners"] = {"0": guild_id}
        payload["context"] = 0
    else:
        payload["user"] = invoker
        payload["authorizing_integration_owners"] = {"0": "0"}
        payload["context"] = 1
    if message_obj is not None:
        payload["message"] = message_obj
    return payload


def subcommand(name: str, options: Sequence[JSON] = ()) -> JSON:
    """A SUB_COMMAND option of an application-command interaction (`/raven status`)."""
    option: JSON = {"type": 1, "name": name}
    if options:
        option["options"] = list(options)
    return option


def string_option(name: str, value: str) -> JSON:
    """A STRING option value of an application-command interaction."""
    return {"type": 3, "name": name, "value": value}


def subcommand_group(name: str, subcommands: Sequence[JSON]) -> JSON:
    """A SUB_COMMAND_GROUP option (`/raven schedule list`: group `schedule`, subcommand
    `list`)."""
    return {"type": 2, "name": name, "options": list(subcommands)}
