"""Discord's typing indicator while the bot works in a conversation.

Discord shows "raven is typing…" for about ten seconds per trigger (or until the bot posts),
so one task per conversation triggers it every `interval` seconds until it is cleared. The
text of the status is not shown: Discord has no place for it.
"""

from __future__ import annotations

import asyncio
import logging

import discord

from bot.discord.threads import Threads
from core.ids import ConversationRef

log = logging.getLogger(__name__)

# Within the ten seconds one trigger lasts.
TYPING_INTERVAL_SECONDS = 8.0


class DiscordTyping:
    """The `WorkingStatus` of one Discord connection: typing while anything works."""

    def __init__(self, threads: Threads, *, interval: float = TYPING_INTERVAL_SECONDS) -> None:
        self._threads = threads
        self.interval = interval
        self._typers: dict[str, asyncio.Task[None]] = {}

    async def show(self, conv: ConversationRef, text: str) -> None:
        """Start typing in the conversation (a change of text changes nothing)."""
        task = self._typers.get(conv.id)
        if task is not None and not task.done():
            return
        self._typers[conv.id] = asyncio.get_running_loop().create_task(
            self._type(conv), name=f"discord-typing:{conv.id}"
        )

    async def clear(self, conv: ConversationRef) -> None:
        """Stop typing (the indicator fades within seconds, or at the bot's next post)."""
        task = self._typers.pop(conv.id, None)
        if task is not None:
            task.cancel()
            await asyncio.wait({task})

    def typing(self, conv: ConversationRef) -> bool:
        """Whether the bot is typing in the conversation now."""
        task = self._typers.get(conv.id)
        return task is not None and not task.done()

    async def close(self) -> None:
        """Stop every typing task."""
        tasks = list(self._typers.values())
        self._typers.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    async def _type(self, conv: ConversationRef) -> None:
        try:
            channel = await self._threads.target(conv)
            while True:
                await channel.typing()  # one trigger (`async with` would keep its own task)
                await asyncio.sleep(self.interval)
        except (discord.DiscordException, ValueError, OSError) as exc:
            log.debug("discord: typing in %s stopped: %r", conv.id, exc)
