"""What the Discord adapter's parts share: the settings, the discord.py client once
connected, the bot's ingress, the background tasks the adapter owns, and how Discord's
refusals become ChannelErrors."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

import discord

from bot.channel import Inbox, Ingress, PromptAnswers
from bot.discord.config import DiscordConfig
from host.runtime.ports import ChannelError

log = logging.getLogger(__name__)

# Discord refusals that will not change on retry (429 is retried by discord.py itself).
_PERMANENT_STATUSES = frozenset({400, 401, 403, 404})


class DiscordLink:
    """One bot connection's shared state; `client` and `ingress` are set by `serve`."""

    def __init__(self, config: DiscordConfig) -> None:
        self.config = config
        self.connected: discord.Client | None = None
        self.ingress: Ingress | None = None
        self.ready = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def client(self) -> discord.Client:
        """The running discord.py client."""
        if self.connected is None:
            raise ChannelError("Discord is not connected yet")
        return self.connected

    @property
    def inbox(self) -> Inbox:
        """Where messages for the bot go (known once serving)."""
        if self.ingress is None:
            raise ChannelError("Discord is not serving yet")
        return self.ingress.inbox

    @property
    def prompts(self) -> PromptAnswers:
        """Where clicks and typed answers go (known once serving)."""
        if self.ingress is None:
            raise ChannelError("Discord is not serving yet")
        return self.ingress.prompts

    def bot_user(self) -> discord.ClientUser | None:
        """The bot's own user once logged in and serving, else None."""
        if self.connected is None or self.ingress is None:
            return None
        return self.connected.user

    # -- owned background work -----------------------------------------------------------

    def track(self, task: asyncio.Task[None]) -> None:
        """Own `task`: `idle` waits for it and `cancel` stops it."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run `coro` in the background; a failure is logged, not raised."""

        async def guarded() -> None:
            try:
                await coro
            except Exception:
                log.exception("discord: %s failed", name)

        self.track(asyncio.get_running_loop().create_task(guarded(), name=f"discord:{name}"))

    async def idle(self) -> None:
        """Wait until background work (refusals, catch-up) is done (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def cancel(self) -> None:
        """Cancel owned tasks and wait for them to end."""
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- channels --------------------------------------------------------------------------

    async def channel(self, channel_id: int) -> discord.abc.Messageable:
        """A channel or thread from discord.py's cache, else fetched."""
        client = self.client
        channel = client.get_channel(channel_id)
        if channel is None:
            channel = await client.fetch_channel(channel_id)
        if not isinstance(channel, discord.abc.Messageable):
            raise ChannelError(
                f"Discord channel {channel_id} cannot take messages", retryable=False
            )
        return channel


def channel_error(exc: discord.HTTPException) -> ChannelError:
    """Discord's refusal as a ChannelError: 4xx other than 429 will not change on retry."""
    status = exc.status
    if status == 429:
        return ChannelError(f"Discord rate-limited the bot and discord.py gave up: {exc.text}")
    return ChannelError(
        f"Discord refused the call (HTTP {status}, code {exc.code}): {exc.text}",
        retryable=status not in _PERMANENT_STATUSES,
    )
