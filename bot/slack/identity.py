"""Who is who on Slack: the bot's own user id and people's display names (cached)."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.normalize import mentioned_users, replace_mentions
from host.runtime.people import shown_name

log = logging.getLogger(__name__)


class SlackIdentity:
    """The bot's user id (from auth.test, refreshed from bolt's context) and a cache of
    display names from `users.info`."""

    def __init__(self, client: AsyncWebClient) -> None:
        self._client = client
        self._names: dict[str, str] = {}
        self._zones: dict[str, str | None] = {}
        self.bot_user_id: str | None = None

    def seen(self, bot_user_id: str | None) -> None:
        """Keep the bot's user id a request (or auth.test) carried, if any."""
        self.bot_user_id = bot_user_id or self.bot_user_id

    def cached(self, user_id: str) -> str:
        """The name already known, else the id: for code that must not wait on Slack."""
        return self._names.get(user_id, user_id)

    async def name(self, user_id: str) -> str:
        """A person's display name from `users.info` (cached; the id when the call fails)."""
        if user_id not in self._names:
            await self._look_up(user_id)
        return self._names.get(user_id, user_id)

    async def time_zone(self, user_id: str) -> str | None:
        """A person's IANA time zone from their Slack profile (cached; None when unknown)."""
        if user_id not in self._zones:
            await self._look_up(user_id)
        return self._zones.get(user_id)

    async def _look_up(self, user_id: str) -> None:
        try:
            async with asyncio.timeout(2):
                resp = await self._client.users_info(user=user_id)
        except (SlackApiError, TimeoutError, aiohttp.ClientError) as exc:
            log.warning("slack: users.info %s failed: %s", user_id, exc)
            return
        user = resp.get("user") or {}
        profile = user.get("profile") or {}
        self._names[user_id] = str(
            profile.get("display_name") or user.get("real_name") or user.get("name") or user_id
        )
        self._zones[user_id] = str(user["tz"]) if user.get("tz") else None

    async def shown(self, user_id: str | None) -> str:
        """`user_id` as people in a prompt message are shown it (cleaned display name)."""
        if not user_id:
            return "nobody"
        return shown_name(await self.name(user_id)) or user_id

    async def named_mentions(self, text: str) -> str:
        """`<@U…>` in outgoing text (model output may hold one) → `@display name`: shown by
        name, and never a mention, which would ping (the egress neutraliser is the backstop)."""
        ids = set(mentioned_users(text))
        names = {uid: await self.shown(uid) for uid in ids}
        return replace_mentions(text, names)
