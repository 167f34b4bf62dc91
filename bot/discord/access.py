"""Whether a person may have work started for them in a Discord conversation now: the access
policy messages pass at ingress, with their roles fetched from the server (cached briefly),
never the roles they had when the work was proposed."""

from __future__ import annotations

import time
from collections.abc import Callable

import discord

from bot.access import AccessPolicy
from bot.discord.keys import DM_WORKSPACE
from bot.discord.link import DiscordLink
from core.ids import ConversationRef
from host.runtime.admission import Standing

# Roles change rarely; a minute's cache keeps a burst of firings to one lookup per person.
ROLES_TTL_SECONDS = 60.0


class MemberAccess:
    """Judges a person in a conversation by the live policy and their current roles."""

    def __init__(
        self,
        link: DiscordLink,
        policy: AccessPolicy,
        *,
        clock: Callable[[], float] = time.monotonic,
        ttl: float = ROLES_TTL_SECONDS,
    ) -> None:
        self._link = link
        self._policy = policy
        self._clock = clock
        self._ttl = ttl
        # (guild, user) → (roles, or None when not a member; when fetched)
        self._roles: dict[tuple[str, str], tuple[tuple[str, ...] | None, float]] = {}

    async def standing(self, user_id: str, conv: ConversationRef) -> Standing:
        """The person's standing in `conv` now (raises when Discord cannot say)."""
        if conv.workspace == DM_WORKSPACE:
            # A DM's author has no server roles, as at ingress.
            reason = self._policy.reason(user_id, conv.channel, is_dm=True)
            return Standing(reason)
        roles = await self._member_roles(conv.workspace, user_id)
        if roles is None:
            return Standing("no longer a member of this server")
        reason = self._policy.reason(
            user_id,
            conv.channel,
            is_dm=False,
            workspace=conv.workspace,
            roles=roles,
            # A conversation in a thread keys by its parent channel: the channel is judged.
            parent_channel=conv.channel,
        )
        return Standing(reason, roles)

    async def _member_roles(self, guild_id: str, user_id: str) -> tuple[str, ...] | None:
        key = (guild_id, user_id)
        now = self._clock()
        cached = self._roles.get(key)
        if cached is not None and now - cached[1] < self._ttl:
            return cached[0]
        client = self._link.connected
        if client is None or not guild_id.isdigit() or not user_id.isdigit():
            raise RuntimeError("Discord is not connected")
        guild = client.get_guild(int(guild_id)) or await client.fetch_guild(int(guild_id))
        try:
            member = await guild.fetch_member(int(user_id))
        except discord.NotFound:
            roles: tuple[str, ...] | None = None
        else:
            roles = tuple(str(r.id) for r in member.roles)  # as ingress reads them
        self._roles[key] = (roles, now)
        return roles
