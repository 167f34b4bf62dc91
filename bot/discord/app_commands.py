"""`/raven` on Discord: application commands answered to their caller alone.

Each subcommand is a typed control word or chat command (`host.conversation.slash`), said
where the command is given (the channel, a thread, or a DM): the same answer and rules as
the typed words, recorded and deduplicated by the interaction's id, never a Host turn.

Registered by bulk overwrite at start-up, so a restart replaces the set instead of adding
to it: in each allowed guild (every guild the bot is in without an allow-list), and, while
DMs are on, once globally for DMs only (guild commands do not reach DMs)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import discord
from discord import app_commands

from bot.access import AccessPolicy
from bot.channel import PrivateCommands
from bot.discord.keys import PLATFORM, interaction_conversation
from bot.discord.link import DiscordLink
from bot.discord.markdown import render_for_discord
from host.conversation.slash import SUBCOMMANDS, Subcommand, typed_text
from host.runtime.messages import InboundMessage

log = logging.getLogger(__name__)

NAME = "raven"
DESCRIPTION = "Ask raven without a model: what runs, stop it, tasks, memory"
# Discord wants a first response within 3 s: an answer not ready by then is deferred.
DEFER_AFTER_SECONDS = 2.0

Answer = Callable[[discord.Interaction, str], Awaitable[None]]


class RavenCommands:
    """The `/raven` tree of one client: built in `attach`, synced in `sync`."""

    def __init__(self, link: DiscordLink, policy: AccessPolicy) -> None:
        self._link = link
        self._policy = policy
        self._tree: app_commands.CommandTree[discord.Client] | None = None
        self.defer_after = DEFER_AFTER_SECONDS

    def attach(self, client: discord.Client) -> None:
        """Give the client its command tree (before it connects); the DMs' `/raven` is
        global, limited to DMs."""
        tree: app_commands.CommandTree[discord.Client] = app_commands.CommandTree(client)
        if self._policy.dm_enabled:
            dms = app_commands.AppCommandContext(guild=False, dm_channel=True)
            tree.add_command(raven_group(self.answer, contexts=dms))
        self._tree = tree

    async def sync(self) -> None:
        """Overwrite the registered commands: in each guild, then the global (DM) one."""
        tree = self._tree
        if tree is None:
            return
        for guild_id in self.guilds():
            guild = discord.Object(id=guild_id)
            tree.add_command(raven_group(self.answer), guild=guild, override=True)
            await self._synced(tree, guild)
        await self._synced(tree, None)

    async def _synced(
        self, tree: app_commands.CommandTree[discord.Client], guild: discord.Object | None
    ) -> None:
        where = f"guild {guild.id}" if guild is not None else "DMs"
        try:
            await tree.sync(guild=guild)
        except discord.HTTPException as exc:
            log.warning(
                "discord: registering /raven in %s failed (HTTP %s: %s); invite the bot with "
                "the applications.commands scope",
                where,
                exc.status,
                exc.text,
            )
        else:
            log.info("discord: /raven registered in %s", where)

    def guilds(self) -> list[int]:
        """Where `/raven` is registered: the allowed guilds the bot is in (Discord refuses
        the others), every guild it is in without an allow-list."""
        client = self._link.connected
        present = {g.id for g in client.guilds} if client is not None else set()
        allowed = {int(g) for g in self._policy.allowed_workspaces if g.isdigit()}
        if not allowed:
            return sorted(present)
        if allowed - present:
            log.info(
                "discord: not in allowed guild(s) %s: /raven is registered there at the next "
                "start after the bot is added",
                ", ".join(str(g) for g in sorted(allowed - present)),
            )
        return sorted(allowed & present)

    # -- invocation ----------------------------------------------------------------------

    async def answer(self, interaction: discord.Interaction, typed: str) -> None:
        """Refuse (as the typed word would be), or record and answer, ephemerally."""
        refusal = self._refusal(interaction)
        if refusal is not None:
            await _reply(interaction, refusal)
            return
        inbox = self._link.inbox
        if not isinstance(inbox, PrivateCommands):
            await _reply(interaction, "Slash commands are not available here; type the word.")
            return
        answer = await inbox.answer_privately(_inbound(interaction, typed))
        if answer is None:
            return  # a redelivered interaction: answered when it first came
        done, _ = await asyncio.wait({answer}, timeout=self.defer_after)
        if not done:
            await interaction.response.defer(ephemeral=True, thinking=True)
        await _reply(interaction, await answer)

    def _refusal(self, interaction: discord.Interaction) -> str | None:
        user = interaction.user
        channel = interaction.channel
        parent = str(channel.parent_id) if isinstance(channel, discord.Thread) else None
        return self._policy.refusal(
            str(user.id),
            str(interaction.channel_id),
            is_dm=interaction.guild_id is None,
            workspace=str(interaction.guild_id) if interaction.guild_id else None,
            roles=[str(r.id) for r in getattr(user, "roles", ())],
            parent_channel=parent,
        )


def raven_group(
    answer: Answer, *, contexts: app_commands.AppCommandContext | None = None
) -> app_commands.Group:
    """`/raven` with one subcommand per entry of `SUBCOMMANDS` (two words: a group)."""
    raven = app_commands.Group(name=NAME, description=DESCRIPTION, allowed_contexts=contexts)
    groups: dict[str, app_commands.Group] = {}
    for words, sub in SUBCOMMANDS.items():
        *outer, name = words.split()
        parent = raven
        if outer:
            parent = groups.get(outer[0]) or app_commands.Group(
                name=outer[0], description=f"{outer[0].capitalize()} commands", parent=raven
            )
            groups[outer[0]] = parent
        parent.add_command(_subcommand(name, words, sub, answer))
    return raven


def _subcommand(name: str, words: str, sub: Subcommand, answer: Answer) -> app_commands.Command:  # type: ignore[type-arg]
    """One subcommand: its callback turns the invocation into the typed words."""
    if not sub.argument:

        async def bare(interaction: discord.Interaction) -> None:
            await answer(interaction, typed_text(words))

        return app_commands.Command(name=name, description=sub.description, callback=bare)
    if sub.argument_required:

        @app_commands.rename(argument=sub.option)
        @app_commands.describe(argument=sub.argument)
        async def required(interaction: discord.Interaction, argument: str) -> None:
            await answer(interaction, typed_text(words, argument))

        return app_commands.Command(name=name, description=sub.description, callback=required)

    @app_commands.rename(argument=sub.option)
    @app_commands.describe(argument=sub.argument)
    async def optional(interaction: discord.Interaction, argument: str | None = None) -> None:
        await answer(interaction, typed_text(words, argument or ""))

    return app_commands.Command(name=name, description=sub.description, callback=optional)


def _inbound(interaction: discord.Interaction, typed: str) -> InboundMessage:
    """The command as the message the caller would have typed where they gave it."""
    conv = interaction_conversation(interaction)
    user = interaction.user
    return InboundMessage(
        platform=PLATFORM,
        workspace=conv.workspace,
        channel=conv.channel,
        thread=conv.thread,
        message_id=str(interaction.id),
        author_id=str(user.id),
        author_name=(user.display_name or user.name or str(user.id))[:128],
        text=typed,
        event_id=str(interaction.id),
        is_dm=interaction.guild_id is None,
        roles=tuple(str(r.id) for r in getattr(user, "roles", ())),
    )


async def _reply(interaction: discord.Interaction, text: str) -> None:
    """The answer in ≤2,000-char parts only the caller sees, pinging nobody: the first as
    the response (or, once deferred, the first follow-up), the rest as follow-ups."""
    quiet = discord.AllowedMentions.none()
    for part in render_for_discord(text) or ["(empty)"]:
        if interaction.response.is_done():
            await interaction.followup.send(part, ephemeral=True, allowed_mentions=quiet)
        else:
            await interaction.response.send_message(part, ephemeral=True, allowed_mentions=quiet)
