"""Where a conversation's messages go: its thread, created from the mention on first use,
or the channel itself when threads are off or not permitted."""

from __future__ import annotations

import logging

import discord

from bot.discord.keys import MAIN_THREAD
from bot.discord.link import DiscordLink
from core.ids import ConversationRef
from host.runtime.ports import ChannelError

log = logging.getLogger(__name__)

THREAD_NAME_CHARS = 80
# Discord's own code: a thread already exists for the message.
_THREAD_EXISTS = 160004


class Threads:
    """Resolves conversations to Discord channels; remembers which threads it started,
    what to name new ones and where threads could not be created."""

    def __init__(self, link: DiscordLink) -> None:
        self._link = link
        self._names: dict[str, str] = {}
        self._known: set[str] = set()
        self._inline: set[str] = set()  # conversations whose thread could not be created

    def name_after(self, thread: str, text: str) -> None:
        """Name the thread a mention will start after the mention's text."""
        self._names[thread] = text[:THREAD_NAME_CHARS] or "raven"

    async def target(self, conv: ConversationRef) -> discord.abc.Messageable:
        """Where the conversation's messages go: its thread (created on first use), else
        the channel itself."""
        if conv.thread == MAIN_THREAD:
            return await self._link.channel(int(conv.channel))
        try:
            return await self._link.channel(int(conv.thread))
        except discord.NotFound:
            if conv.thread in self._known:
                raise
        return await self._start(conv)

    async def _start(self, conv: ConversationRef) -> discord.abc.Messageable:
        parent = await self._link.channel(int(conv.channel))
        if conv.thread in self._inline or not isinstance(parent, discord.TextChannel):
            return parent  # no threads here: the conversation goes on in the channel
        name = self._names.get(conv.thread, "raven")
        try:
            thread = await parent.get_partial_message(int(conv.thread)).create_thread(
                name=name, auto_archive_duration=1440
            )
        except discord.Forbidden:
            # A reply in the channel beats no reply: say once why there is no thread.
            log.warning(
                "discord: no permission to create threads in channel %s; replying inline "
                "(grant Create Public Threads to the bot)",
                conv.channel,
            )
            self._inline.add(conv.thread)
            return parent
        except discord.HTTPException as exc:
            if exc.code != _THREAD_EXISTS:
                raise
            return await self._link.channel(int(conv.thread))
        self._known.add(conv.thread)
        return thread


def partial_message(channel: discord.abc.Messageable, message_id: str) -> discord.PartialMessage:
    """A message by id in `channel`, to edit without fetching it."""
    get = getattr(channel, "get_partial_message", None)
    if get is None:
        raise ChannelError("this Discord channel cannot edit messages", retryable=False)
    partial: discord.PartialMessage = get(int(message_id))
    return partial
