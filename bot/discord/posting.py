"""What the bot says on Discord: replies in ≤2,000-char parts (a redelivery skips parts
already shown), files as attachments, status messages edited in place, and notes only one
person sees."""

from __future__ import annotations

import hashlib
import io
import logging

import discord

from bot.discord.link import DiscordLink, channel_error
from bot.discord.markdown import render_for_discord
from bot.discord.notes import HeldInteractions, followup
from bot.discord.table_embeds import with_table_embeds
from bot.discord.threads import Threads, partial_message
from core.ids import ConversationRef
from host.runtime.attachment_bytes import attachment_bytes
from host.runtime.messages import OutboundFile, OutboundMessage
from host.runtime.ports import ChannelError, FileRefused

log = logging.getLogger(__name__)

# How far back a redelivery looks for parts Discord already shows.
_ALREADY_POSTED_MESSAGES = 50
# Discord's codes for a file it will never take: too large for the server's upload limit, and
# no permission to attach files in the channel.
_TOO_LARGE_CODE = 40005
_MISSING_PERMISSIONS_CODE = 50013
TOO_LARGE = (
    "it is bigger than this server lets bots upload; it stays in the run's records on the "
    "bot's host."
)
NO_PERMISSION = (
    "I lack the Attach Files permission in this channel. Ask a server admin to grant it."
)


class Poster:
    """Posts, edits and private notes for one bot connection."""

    def __init__(self, link: DiscordLink, threads: Threads, held: HeldInteractions) -> None:
        self._link = link
        self._threads = threads
        self._held = held

    async def post(self, conv: ConversationRef, message: OutboundMessage) -> str:
        """Post into the thread in ≤2,000-char parts; a redelivery skips parts Discord
        already shows (the bot's recent messages with the same text)."""
        chunks = render_for_discord(message.text) or ["(empty)"]
        if message.ephemeral_to:
            await self.notify_private(conv, message.ephemeral_to, chunks[0])
            return ""
        table = with_table_embeds(message.text, chunks)
        chunks = table.chunks
        try:
            channel = await self._threads.target(conv)
            already = await self._already_posted(channel) if message.redelivery else {}
            first: str | None = None
            for index, chunk in enumerate(chunks):
                sent_id = already.pop(chunk, None)
                if sent_id is None:
                    sent = await channel.send(
                        chunk,
                        embeds=table.embeds if index == 0 else [],
                        allowed_mentions=discord.AllowedMentions.none(),
                        nonce=_nonce(message.idempotency_key, index),
                    )
                    sent_id = str(sent.id)
                first = first or sent_id
        except discord.HTTPException as exc:
            raise channel_error(exc) from exc
        return first or ""

    async def upload(
        self,
        conv: ConversationRef,
        file: OutboundFile,
        *,
        idempotency_key: str,
        redelivery: bool,
        earlier_copies: int = 0,
    ) -> str:
        """Attach `file` in the thread as a message of its own (nonce from the key, so a
        repeat within Discord's window is dropped); a redelivery first looks for the bot's
        recent attachment of the same name and size. Returns the message id."""
        try:
            channel = await self._threads.target(conv)
            if redelivery:
                shown = await self._already_attached(channel, file, earlier_copies)
                if shown is not None:
                    return shown
            data = await attachment_bytes(file)
            sent = await channel.send(
                file=discord.File(io.BytesIO(data), filename=file.name),
                allowed_mentions=discord.AllowedMentions.none(),
                nonce=_nonce(idempotency_key, 0),
            )
        except discord.HTTPException as exc:
            raise _file_refusal(exc, file) from exc
        return str(sent.id)

    async def _already_attached(
        self, channel: discord.abc.Messageable, file: OutboundFile, earlier_copies: int
    ) -> str | None:
        client = self._link.client
        assert client.user is not None
        copies: list[str] = []  # newest first
        try:
            async for m in channel.history(limit=_ALREADY_POSTED_MESSAGES):
                if m.author.id == client.user.id and any(
                    a.filename == file.name and a.size == file.size for a in m.attachments
                ):
                    copies.append(str(m.id))
        except discord.HTTPException as exc:
            log.warning("discord: could not check for an earlier attachment: %s", exc)
            return None
        # Only more copies than other deliveries made can hold this one (the newest).
        return copies[0] if len(copies) > earlier_copies else None

    async def _already_posted(self, channel: discord.abc.Messageable) -> dict[str, str]:
        """Text → id of the bot's recent messages in the channel (redelivery after a crash)."""
        client = self._link.client
        assert client.user is not None
        try:
            return {
                m.content: str(m.id)
                async for m in channel.history(limit=_ALREADY_POSTED_MESSAGES)
                if m.author.id == client.user.id
            }
        except discord.HTTPException as exc:
            log.warning("discord: could not check for an earlier delivery: %s", exc)
            return {}

    async def edit(self, conv: ConversationRef, message_id: str, message: OutboundMessage) -> None:
        """Edit a status message in place."""
        table = with_table_embeds(message.text, render_for_discord(message.text) or ["(empty)"])
        try:
            channel = await self._threads.target(conv)
            await partial_message(channel, message_id).edit(
                content=table.chunks[0],
                embeds=table.embeds,
                allowed_mentions=discord.AllowedMentions.none(),
            )
        except discord.HTTPException as exc:
            raise channel_error(exc) from exc

    async def notify_private(self, conv: ConversationRef, user_id: str, text: str) -> None:
        """Only `user_id` sees it: an ephemeral follow-up while they are clicking, else a DM
        (a mention in the thread when their DMs are closed)."""
        chunk = (render_for_discord(text) or ["(empty)"])[0]
        interaction = self._held.current(conv.id, user_id)
        if interaction is not None:
            await followup(interaction, chunk)
            return
        client = self._link.client
        try:
            user = client.get_user(int(user_id)) or await client.fetch_user(int(user_id))
            await user.send(chunk, allowed_mentions=discord.AllowedMentions.none())
        except (discord.HTTPException, ValueError):
            channel = await self._threads.target(conv)
            await channel.send(
                f"<@{user_id}> {chunk}"[:2000],
                allowed_mentions=discord.AllowedMentions(
                    everyone=False, roles=False, users=[discord.Object(id=int(user_id))]
                ),
            )


def _file_refusal(exc: discord.HTTPException, file: OutboundFile) -> ChannelError:
    if exc.status == 413 or exc.code == _TOO_LARGE_CODE:
        return FileRefused(
            f"Discord refused {file.name}: {exc.text}", reason="too_large", why=TOO_LARGE
        )
    if exc.code == _MISSING_PERMISSIONS_CODE:
        return FileRefused(
            f"Discord refused {file.name}: {exc.text}", reason="missing_scope", why=NO_PERMISSION
        )
    return channel_error(exc)


def _nonce(key: str, index: int) -> str:
    """A stable nonce per message part (Discord drops a repeat within a few minutes)."""
    return hashlib.sha256(f"{key}:{index}".encode()).hexdigest()[:25]
