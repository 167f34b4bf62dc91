"""The Discord adapter on discord.py: mentions, DMs and thread messages in; threaded replies,
edited status messages, prompt buttons and modals out.

This is the façade the rest of bot/ uses; the work is done by its parts: `MessageIngress`
(messages in), `Poster` (messages out), `PromptMessages` (prompts, clicks, forms),
`DisplayNames` (who is who) and `Threads` (where a conversation's messages go), sharing one
`DiscordLink`. Conversation keys are explained in `bot.discord.keys`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import discord

from bot.access import AccessPolicy
from bot.channel import ChannelFeatures, Ingress
from bot.discord.access import MemberAccess
from bot.discord.app_commands import RavenCommands
from bot.discord.client import ClientHooks, RavenClient
from bot.discord.config import DiscordConfig, intents, point_at
from bot.discord.ingress import MessageIngress, readable_text
from bot.discord.keys import MAIN_THREAD, PLATFORM
from bot.discord.link import DiscordLink
from bot.discord.names import DisplayNames
from bot.discord.notes import HeldInteractions
from bot.discord.posting import Poster
from bot.discord.prompts import PromptMessages
from bot.discord.threads import Threads
from bot.discord.working import DiscordTyping
from core.ids import ConversationRef
from host.runtime.admission import Standing
from host.runtime.messages import InboundMessage, OutboundFile, OutboundMessage
from host.runtime.prompt_record import Prompt


class DiscordAdapter:
    """One Discord bot connection (a `ChannelAdapter`, a `PromptSurface`, an
    `AccessDirectory` and a `WorkingStatus`)."""

    def __init__(
        self,
        config: DiscordConfig,
        *,
        policy: AccessPolicy,
        workspace: Callable[[ConversationRef], Path],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._link = DiscordLink(config)
        threads = Threads(self._link)
        held = HeldInteractions(clock)
        self._names = DisplayNames(self._link)
        self._ingress = MessageIngress(self._link, threads, policy, workspace)
        self._poster = Poster(self._link, threads, held)
        self._prompts = PromptMessages(self._link, threads, self._names, held)
        self._access = MemberAccess(self._link, policy)
        self.commands = RavenCommands(self._link, policy)
        # Typing while the bot works (tests shorten its interval).
        self.working = DiscordTyping(threads)

    @property
    def config(self) -> DiscordConfig:
        """The settings in force (replaceable before `serve`, e.g. by tests)."""
        return self._link.config

    @config.setter
    def config(self, value: DiscordConfig) -> None:
        self._link.config = value

    @property
    def ready(self) -> asyncio.Event:
        """Set once the first connection is up and the guilds are cached."""
        return self._link.ready

    @property
    def platform(self) -> str:
        """Conversation keys start with `discord`."""
        return PLATFORM

    @property
    def features(self) -> ChannelFeatures:
        """Threads, buttons, modals, private notes (ephemeral or DM) and in-place edits."""
        return ChannelFeatures.full(threads=self.config.thread_replies)

    @property
    def client(self) -> discord.Client:
        """The running discord.py client."""
        return self._link.client

    # -- lifecycle ---------------------------------------------------------------------

    async def serve(self, ingress: Ingress) -> None:
        """Connect and receive until closed (discord.py reconnects and resumes by itself)."""
        self._link.ingress = ingress
        point_at(self.config)
        hooks = ClientHooks(
            setup=self._prompts.restore_forms,
            ready=self._on_ready,
            message=self._ingress.on_message,
            click=self._prompts.clicked,
        )
        client = RavenClient(self.config, hooks)
        self.commands.attach(client)
        self._link.connected = client
        try:
            await client.start(self.config.token)
        except discord.LoginFailure:
            raise RuntimeError(
                "Discord rejected DISCORD_TOKEN: copy the bot token again from the Developer "
                "Portal (Bot → Reset Token)"
            ) from None
        except discord.PrivilegedIntentsRequired:
            raise RuntimeError(
                "Discord refused the Message Content intent: enable it for the application "
                "(Developer Portal → Bot → Privileged Gateway Intents)"
            ) from None

    def _on_ready(self) -> None:
        """The first time, catch up on what arrived while the bot was down and register
        `/raven` (guilds are known now)."""
        if not self._link.ready.is_set():
            self._link.ready.set()
            self._ingress.catch_up()
            self._link.spawn(self.commands.sync(), "register /raven")

    async def close(self) -> None:
        """Disconnect (idempotent); owned tasks are cancelled."""
        await self._ingress.close()
        await self.working.close()
        await self._link.cancel()
        client = self._link.connected
        if client is not None and not client.is_closed():
            await client.close()

    async def idle(self) -> None:
        """Wait until background work (refusals, clicks) is done (tests)."""
        await self._link.idle()

    # -- the channel -------------------------------------------------------------------

    async def standing(self, user_id: str, conv: ConversationRef) -> Standing:
        """Whether work may start for `user_id` in `conv` now (roles fetched, not stored)."""
        return await self._access.standing(user_id, conv)

    async def enrich(self, msg: InboundMessage) -> InboundMessage:
        """Before a turn: the thread re-read on a mention, shared files downloaded."""
        return await self._ingress.enrich(msg)

    async def post(self, conv: ConversationRef, message: OutboundMessage) -> str:
        """Post into the thread in ≤2,000-char parts (see `Poster.post`)."""
        return await self._poster.post(conv, message)

    async def upload(
        self,
        conv: ConversationRef,
        file: OutboundFile,
        *,
        idempotency_key: str,
        redelivery: bool,
        earlier_copies: int = 0,
    ) -> str:
        """Attach a file in the thread (see `Poster.upload`)."""
        return await self._poster.upload(
            conv,
            file,
            idempotency_key=idempotency_key,
            redelivery=redelivery,
            earlier_copies=earlier_copies,
        )

    async def edit(self, conv: ConversationRef, message_id: str, message: OutboundMessage) -> None:
        """Edit a status message in place."""
        await self._poster.edit(conv, message_id, message)

    async def notify_private(self, conv: ConversationRef, user_id: str, text: str) -> None:
        """Only `user_id` sees it: an ephemeral follow-up while they are clicking, else a DM."""
        await self._poster.notify_private(conv, user_id, text)

    async def display_name(self, user_id: str) -> str:
        """A person's display name (the id when Discord cannot say)."""
        return await self._names.display_name(user_id)

    def channel_level(self, conv: ConversationRef) -> ConversationRef | None:
        """A post in the channel starts a thread from itself on first use (its id is the
        thread's); none in a DM or a conversation already inline in its channel."""
        if conv.thread == MAIN_THREAD:
            return None
        return dataclasses.replace(conv, thread=MAIN_THREAD)

    async def show(self, conv: ConversationRef, text: str) -> None:
        """Typing while the bot works in the conversation (`WorkingStatus`)."""
        await self.working.show(conv, text)

    async def clear(self, conv: ConversationRef) -> None:
        """Nothing works in the conversation any more: typing stops."""
        await self.working.clear(conv)

    # -- prompts -----------------------------------------------------------------------

    async def show_prompt(self, prompt: Prompt) -> str:
        """Buttons (Approve/Deny or options) or an `Answer…` button that opens a modal."""
        return await self._prompts.show(prompt)

    async def close_prompt(self, prompt: Prompt) -> None:
        """Show the outcome and who decided; the buttons stay, disabled."""
        await self._prompts.close(prompt)


__all__ = ["DiscordAdapter", "DiscordConfig", "intents", "readable_text"]
