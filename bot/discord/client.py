"""The discord.py client: gateway events in, handed to the adapter's parts."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import discord

from bot.discord.config import DiscordConfig, intents
from bot.discord.views import PromptButton, PromptClient
from bot.prompt_ui import Click


@dataclass(frozen=True)
class ClientHooks:
    """What the client calls: once before events arrive, on every ready, per message, per
    prompt click."""

    setup: Callable[[], Awaitable[None]]
    ready: Callable[[], None]
    message: Callable[[discord.Message], None]
    click: Callable[[discord.Interaction, Click], Awaitable[None]]


class RavenClient(PromptClient):
    """discord.Client with the adapter's handlers and an optional re-identify delay."""

    def __init__(self, config: DiscordConfig, hooks: ClientHooks) -> None:
        super().__init__(
            intents=intents(),
            guild_ready_timeout=config.guild_ready_timeout,
            allowed_mentions=discord.AllowedMentions.none(),
        )
        self._reidentify_delay = config.reidentify_delay
        self._events = hooks

    async def setup_hook(self) -> None:
        """Prompt buttons route by custom id from the first event on (a restart included);
        then the adapter's own setup."""
        self.add_dynamic_items(PromptButton)
        await self._events.setup()

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        """discord.py waits 5 s before re-identifying; the setting may shorten it."""
        delay = self._reidentify_delay
        if delay is None:
            await super().before_identify_hook(shard_id, initial=initial)
        elif not initial and delay > 0:
            await asyncio.sleep(delay)

    async def on_ready(self) -> None:
        """Connected and the guilds are cached (again after each new session)."""
        self._events.ready()

    async def on_message(self, message: discord.Message) -> None:
        """Every message the gateway delivers (filtered by the adapter, in order)."""
        self._events.message(message)

    async def prompt_clicked(self, interaction: discord.Interaction, click: Click) -> None:
        """A click on a prompt button (see `PromptButton`)."""
        await self._events.click(interaction, click)
