"""People's display names on Discord: from discord.py's cache, else fetched once."""

from __future__ import annotations

import asyncio
import logging

import discord

from bot.discord.link import DiscordLink
from host.runtime.people import shown_name

log = logging.getLogger(__name__)

# How long a display name lookup may take before the id is shown instead.
NAME_LOOKUP_SECONDS = 2.0


class DisplayNames:
    """Display names by user id, remembering those fetched from the API."""

    def __init__(self, link: DiscordLink) -> None:
        self._link = link
        self._fetched: dict[str, str] = {}  # those not in discord.py's cache

    async def display_name(self, user_id: str) -> str:
        """A person's display name: their member name from discord.py's cache (a server
        nickname), else their user name from the cache or `fetch_user` (remembered); the id
        when Discord cannot say."""
        client = self._link.connected
        if not user_id.isdigit() or client is None:
            return user_id
        uid = int(user_id)
        for guild in client.guilds:
            member = guild.get_member(uid)
            if member is not None:
                return member.display_name
        user = client.get_user(uid)
        if user is not None:
            return user.display_name
        if user_id in self._fetched:
            return self._fetched[user_id]
        try:
            async with asyncio.timeout(NAME_LOOKUP_SECONDS):
                fetched = await client.fetch_user(uid)
        except (discord.HTTPException, TimeoutError) as exc:
            log.warning("discord: no display name for %s: %s", user_id, exc)
            return user_id
        self._fetched[user_id] = fetched.display_name
        return fetched.display_name

    async def shown(self, user_id: str | None) -> str:
        """`user_id` as people in a prompt message are shown it (cleaned display name)."""
        if not user_id:
            return "nobody"
        return shown_name(await self.display_name(user_id)) or user_id
