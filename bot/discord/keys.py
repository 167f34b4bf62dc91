"""Conversation keys on Discord.

A mention in a channel starts a thread from that message, and Discord gives the thread the
message's id, so the key (discord, guild, channel, message id) is known at ingress and the
thread is created lazily by the first reply. A message inside a thread keys by (guild,
parent channel, thread id); a DM by (dm, DM channel, main).
"""

from __future__ import annotations

import discord

from core.ids import ConversationRef

PLATFORM = "discord"
DM_WORKSPACE = "dm"
MAIN_THREAD = "main"  # DMs and inline (thread-less) channel conversations


def message_conversation(message: discord.Message, *, thread_replies: bool) -> ConversationRef:
    """The conversation a message belongs to (or, for a mention in a channel, starts)."""
    channel = message.channel
    if message.guild is None:
        return ConversationRef(PLATFORM, DM_WORKSPACE, str(channel.id), MAIN_THREAD)
    guild = str(message.guild.id)
    if isinstance(channel, discord.Thread):
        return ConversationRef(PLATFORM, guild, str(channel.parent_id), str(channel.id))
    thread = str(message.id) if thread_replies else MAIN_THREAD
    return ConversationRef(PLATFORM, guild, str(channel.id), thread)


def interaction_conversation(interaction: discord.Interaction) -> ConversationRef:
    """The conversation a click or form submission happened in."""
    channel = interaction.channel
    if interaction.guild_id is None:
        return ConversationRef(PLATFORM, DM_WORKSPACE, str(interaction.channel_id), MAIN_THREAD)
    guild = str(interaction.guild_id)
    if isinstance(channel, discord.Thread):
        return ConversationRef(PLATFORM, guild, str(channel.parent_id), str(channel.id))
    return ConversationRef(PLATFORM, guild, str(interaction.channel_id), MAIN_THREAD)
