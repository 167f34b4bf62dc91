"""The assembled bot with its real Discord adapter (discord.py) against the loopback fake."""

from __future__ import annotations

import asyncio
import logging
from asyncio.subprocess import Process
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from bot.app import Runtime, build_runtime, serve
from bot.discord.adapter import DiscordAdapter
from bot.discord.factory import discord_adapter
from bot.settings import load_settings
from core.ids import ConversationRef
from tests.bot_process import bot_process
from tests.fakes.discord import FakeDiscord

TOKEN = "discord-test-token.abcdefghijklmnop"
GENERAL = "700000000000000001"
ALICE = "100000000000000001"
BOB = "100000000000000002"


class _ErrorRecorder(logging.Handler):
    """discord.py only logs exceptions in handlers and views: collect them to fail on."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class DiscordBot:
    """The running bot, its fake Discord and helpers to talk to it."""

    fake: FakeDiscord
    runtime: Runtime
    adapter: DiscordAdapter
    task: asyncio.Task[int]

    @property
    def guild(self) -> str:
        return self.fake.guild_id

    def conversation(self, thread: str, channel: str = GENERAL) -> ConversationRef:
        """The conversation of a thread rooted in `channel`."""
        return ConversationRef("discord", self.guild, channel, thread)

    async def mention(
        self, text: str, *, user: str = ALICE, channel: str = GENERAL, **kwargs: Any
    ) -> dict[str, Any]:
        """A message mentioning the bot; returns the MESSAGE_CREATE payload."""
        return await self.fake.send_message(
            channel, user, f"<@{self.fake.bot_id}> {text}", mention_bot=True, **kwargs
        )

    async def say(
        self, channel: str, text: str, *, user: str = ALICE, **kwargs: Any
    ) -> dict[str, Any]:
        """A message without a mention (e.g. inside a thread)."""
        return await self.fake.send_message(channel, user, text, **kwargs)

    async def settle(self, thread: str, channel: str = GENERAL) -> None:
        """Wait until what was delivered has run its course (adapter work, turns, runs)."""
        await self.adapter.idle()
        await self.runtime.service.quiesce(self.conversation(thread, channel))
        await self.adapter.idle()

    def texts(self, channel: str | None = None) -> list[str]:
        """What the bot shows, per message, in creation order."""
        return [m.get("content", "") for m in self.fake.bot_messages(channel)]

    async def wait_texts(self, channel: str, n: int = 1) -> list[str]:
        """Wait until the bot has at least `n` messages in `channel`."""
        await self.fake.wait_for(lambda: len(self.fake.bot_messages(channel)) >= n)
        return self.texts(channel)


def add_people(fake: FakeDiscord) -> None:
    """Alice and Bob, the users the tests talk as."""
    fake.add_user(ALICE, "alice", global_name="Alice")
    fake.add_user(BOB, "bob", global_name="Bob")


@asynccontextmanager
async def shared_fake() -> AsyncIterator[FakeDiscord]:
    """A fake Discord with Alice and Bob that outlives several bot processes (restarts)."""
    async with FakeDiscord() as fake:
        add_people(fake)
        yield fake


@asynccontextmanager
async def discord_bot(
    monkeypatch: pytest.MonkeyPatch,
    *,
    env: dict[str, str] | None = None,
    fake: FakeDiscord | None = None,
    allow_errors: bool = False,
) -> AsyncIterator[DiscordBot]:
    """Start FakeDiscord (unless given) and the bot; stop both afterwards."""
    own_fake = fake is None
    fake = fake or FakeDiscord()
    if own_fake:
        await fake.start()
    if own_fake:
        add_people(fake)
    fake.patch(monkeypatch)  # restored at teardown; the adapter points at the same URLs
    monkeypatch.setenv("DISCORD_TOKEN", TOKEN)
    monkeypatch.setenv("RAVEN_DISCORD_API_URL", fake.base_url)
    monkeypatch.setenv("RAVEN_DISCORD_GATEWAY_URL", fake.gateway_url)
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    errors = _ErrorRecorder()
    logging.getLogger("discord").addHandler(errors)
    settings = load_settings()

    def build() -> DiscordAdapter:
        adapter = discord_adapter(settings)
        assert isinstance(adapter, DiscordAdapter)
        # Fast for tests: no 2 s wait for guilds, no 5 s wait before re-identifying.
        adapter.config = replace(adapter.config, guild_ready_timeout=0.05, reidentify_delay=0)
        return adapter

    runtime = await build_runtime(settings, [build])
    adapter = runtime.adapters[0]
    assert isinstance(adapter, DiscordAdapter)
    task = asyncio.create_task(serve(runtime))
    try:
        ready = asyncio.ensure_future(adapter.ready.wait())
        # A hang guard: with the product's defaults, start-up loads the MiniLM embedder first.
        done, _ = await asyncio.wait({ready, task}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
        if ready not in done:
            ready.cancel()
            raise AssertionError(
                f"the bot never became ready: {task.exception() if task.done() else 'timeout'}"
            )
        yield DiscordBot(fake, runtime, adapter, task)
        if not allow_errors:
            assert not errors.records, [r.getMessage() for r in errors.records]
        assert not fake.unknown, fake.unknown
    finally:
        logging.getLogger("discord").removeHandler(errors)
        await adapter.close()
        await asyncio.wait_for(task, 30)
        if own_fake:
            await fake.stop()


ECHO_AGENT = """
[agents.echo]
backend = "cli"
description = "Echoes its prompt (test agent)."
command = ["cat"]
"""


def buttons(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The buttons of a message the fake holds."""
    return [c for row in message.get("components") or [] for c in row.get("components", [])]


def discord_bot_process(fake: FakeDiscord, home: Path) -> AbstractAsyncContextManager[Process]:
    """The real `raven-bot run` process, served by the fake Discord."""
    return bot_process(
        home,
        DISCORD_TOKEN=TOKEN,
        RAVEN_DISCORD_API_URL=fake.base_url,
        RAVEN_DISCORD_GATEWAY_URL=fake.gateway_url,
    )


__all__ = [
    "ALICE",
    "BOB",
    "ECHO_AGENT",
    "GENERAL",
    "TOKEN",
    "DiscordBot",
    "add_people",
    "buttons",
    "discord_bot",
    "discord_bot_process",
    "shared_fake",
]
