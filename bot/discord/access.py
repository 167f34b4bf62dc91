"""Whether a person may have work started for them in a Discord conversation now: the access
policy messages pass at ingress, with their roles fetched from the server at that moment
(concurrent lookups for one person share a request), never the roles they had when the work
was proposed."""

from __future__ import annotations

import asyncio

import discord

from bot.access import AccessPolicy, said_about
from bot.discord.keys import DM_WORKSPACE
from bot.discord.link import DiscordLink
from core.ids import ConversationRef
from host.runtime.admission import Standing


class MemberAccess:
    """Judges a person in a conversation by the live policy and their current roles."""

    def __init__(self, link: DiscordLink, policy: AccessPolicy) -> None:
        self._link = link
        self._policy = policy
        # In-flight lookups by (guild, user): a burst of firings for one owner shares one
        # request, and nothing older than that request is ever used (roles can change at
        # any moment; a cached role would outlive its removal).
        self._lookups: dict[tuple[str, str], asyncio.Future[tuple[str, ...] | None]] = {}

    async def standing(self, user_id: str, conv: ConversationRef) -> Standing:
        """The person's standing in `conv` now (raises when Discord cannot say)."""
        if conv.workspace == DM_WORKSPACE:
            # A DM's author has no server roles, as at ingress.
            return Standing(said_about(self._policy.broken_rule(user_id, conv.channel, is_dm=True)))
        roles = await self._member_roles(conv.workspace, user_id)
        if roles is None:
            return Standing("no longer a member of this server")
        rule = self._policy.broken_rule(
            user_id,
            conv.channel,
            is_dm=False,
            workspace=conv.workspace,
            roles=roles,
            # A conversation in a thread keys by its parent channel: the channel is judged.
            parent_channel=conv.channel,
        )
        return Standing(said_about(rule), roles)

    async def _member_roles(self, guild_id: str, user_id: str) -> tuple[str, ...] | None:
        key = (guild_id, user_id)
        pending = self._lookups.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._fetch_roles(guild_id, user_id))
            self._lookups[key] = pending
            pending.add_done_callback(lambda _: self._lookups.pop(key, None))
        # Shielded: one waiter cancelled must not cancel the lookup the others share.
        return await asyncio.shield(pending)

    async def _fetch_roles(self, guild_id: str, user_id: str) -> tuple[str, ...] | None:
        client = self._link.connected
        if client is None or not guild_id.isdigit() or not user_id.isdigit():
            raise RuntimeError("Discord is not connected")
        guild = client.get_guild(int(guild_id)) or await client.fetch_guild(int(guild_id))
        try:
            member = await guild.fetch_member(int(user_id))
        except discord.NotFound:
            return None
        return tuple(str(r.id) for r in member.roles)  # as ingress reads them
