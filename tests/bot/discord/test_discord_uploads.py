"""Files into Discord threads through the outbox and the real discord.py (multipart
attachments) against the loopback fake: once, not doubled by a redelivery, a file over the
upload limit said once and not retried."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from host.conversation.outbox import Outbox
from host.runtime.messages import OutboundFile
from tests.discord_harness import DiscordBot, add_people, discord_bot
from tests.fakes.discord import FakeDiscord

POSTS = ("POST", "/channels/{channel_id}/messages")


def _file(tmp_path: Path, name: str = "fix.patch", data: bytes = b"--- a\n+++ b\n") -> OutboundFile:
    path = tmp_path / name
    path.write_bytes(data)
    return OutboundFile(name=name, path=path, size=len(data), content_type="text/x-diff")


def _outbox(bot: DiscordBot, *, channel: bool = True) -> Outbox:
    channels = {"discord": bot.adapter} if channel else {}
    return Outbox(bot.runtime.conversation_log, channels, retry_delays=(0.0, 0.0, 0.0))


async def _thread(bot: DiscordBot) -> str:
    root = await bot.mention("hello")
    await bot.settle(root["id"])
    return str(root["id"])


def _attachments(bot: DiscordBot, thread: str) -> list[dict[str, Any]]:
    return [a for m in bot.fake.bot_messages(thread) for a in m.get("attachments") or []]


async def test_an_attachment_lands_in_the_thread_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    async with discord_bot(monkeypatch) as bot:
        thread = await _thread(bot)
        conv = bot.conversation(thread)
        outbox = _outbox(bot)
        await outbox.attach(conv, [_file(tmp_path)], key="run:r1:files")
        await outbox.idle()
        (attachment,) = _attachments(bot, thread)
        assert (attachment["filename"], attachment["size"]) == ("fix.patch", 12)
        await outbox.attach(conv, [_file(tmp_path)], key="run:r1:files")
        await outbox.idle()
        assert len(_attachments(bot, thread)) == 1


async def test_a_redelivery_after_discord_has_the_file_does_not_double(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    async with discord_bot(monkeypatch) as bot:
        thread = await _thread(bot)
        conv, file = bot.conversation(thread), _file(tmp_path)
        # Recorded, then attached, then the process died before recording that it was sent.
        await _outbox(bot, channel=False).attach(conv, [file], key="k")
        await bot.adapter.upload(conv, file, idempotency_key="k:0", redelivery=False)
        for _ in range(2):
            restarted = _outbox(bot)
            await restarted.redeliver_pending("discord")
            await restarted.idle()
        assert len(_attachments(bot, thread)) == 1
        assert await bot.runtime.conversation_log.delivery_of("k:0") == "sent"


async def test_a_file_over_the_upload_limit_is_said_once_and_not_retried(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    async with FakeDiscord(max_upload_bytes=4) as fake:
        add_people(fake)
        async with discord_bot(monkeypatch, fake=fake) as bot:
            thread = await _thread(bot)
            before = len(bot.texts(thread))
            tries = len(fake.requests_to(*POSTS))
            outbox = _outbox(bot)
            await outbox.attach(bot.conversation(thread), [_file(tmp_path)], key="k")
            await outbox.idle()
            restarted = _outbox(bot)
            await restarted.redeliver_pending("discord")
            await restarted.idle()
            (notice,) = bot.texts(thread)[before:]
            assert notice.startswith("I couldn't attach `fix.patch`: it is bigger than this server")
            assert _attachments(bot, thread) == []
            # One refused upload and the notice: nothing retried.
            assert len(fake.requests_to(*POSTS)) - tries == 2


async def test_a_redelivery_is_not_taken_for_an_earlier_batchs_copy_of_the_same_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Regression: an earlier run's file of the same name and size made a later one's
    # redelivery count as delivered, so the thread never got it.
    async with discord_bot(monkeypatch) as bot:
        thread = await _thread(bot)
        conv, file = bot.conversation(thread), _file(tmp_path)
        outbox = _outbox(bot)
        await outbox.attach(conv, [file], key="run:r1:files")
        await outbox.idle()
        # The second run's copy was recorded, then the process died before sending it.
        await _outbox(bot, channel=False).attach(conv, [file], key="run:r2:files")
        restarted = _outbox(bot)
        await restarted.redeliver_pending("discord")
        await restarted.idle()
        assert [a["filename"] for a in _attachments(bot, thread)] == ["fix.patch"] * 2
        assert await bot.runtime.conversation_log.delivery_of("run:r2:files:0") == "sent"
