"""Messages in from Discord: mentions, DMs and thread messages become inbox messages (in
order per channel, refused privately when the access policy says no), what arrived while
the bot was down is read back, and a turn gets its thread context and files."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from pathlib import Path

import discord

from bot.access import AccessPolicy
from bot.attachments import attachment_path, download, files_note
from bot.channel import CATCH_UP_SECONDS
from bot.discord.keys import DM_WORKSPACE, MAIN_THREAD, PLATFORM, message_conversation
from bot.discord.link import DiscordLink
from bot.discord.threads import Threads
from core.ids import ConversationRef
from core.keyed import KeyedSerial
from host.runtime.author_labels import context_line, display_name, left_out_note
from host.runtime.messages import Attachment, InboundMessage
from host.runtime.ports import ChannelError

log = logging.getLogger(__name__)

CATCH_UP_MESSAGES = 100
# A Discord snowflake: the core's own turns (firings, checks) are logged under keys instead.
_SNOWFLAKE = re.compile(r"[0-9]+")


def snowflake(value: str | None) -> int | None:
    """`value` as a Discord id when it is one, else None."""
    return int(value) if value is not None and _SNOWFLAKE.fullmatch(value) else None


class MessageIngress:
    """Takes Discord messages into the inbox (persisted and deduplicated there)."""

    def __init__(
        self,
        link: DiscordLink,
        threads: Threads,
        policy: AccessPolicy,
        workspace: Callable[[ConversationRef], Path],
    ) -> None:
        self._link = link
        self._threads = threads
        self._policy = policy
        self._workspace = workspace
        self._serial = KeyedSerial("discord-ingress")

    async def close(self) -> None:
        """Stop taking messages in."""
        await self._serial.close()

    # -- arrival ---------------------------------------------------------------------------

    def on_message(self, message: discord.Message) -> None:
        """Queue a message for ingestion behind earlier ones of its channel: discord.py runs
        each event as its own task, and a thread's messages must be judged in order."""
        self._link.track(
            self._serial.spawn(str(message.channel.id), lambda: self._ingest_logged(message))
        )

    async def _ingest_logged(self, message: discord.Message) -> None:
        try:
            await self._ingest(message)
        except Exception:
            # Not acknowledged to anyone yet: logged, and a redelivery may still bring it.
            log.exception("discord: taking in message %s failed", message.id)

    async def _ingest(self, message: discord.Message) -> None:
        """Take a message addressed to the bot into the inbox (persisted, deduplicated)."""
        me = self._link.bot_user()
        if me is None or message.author.id == me.id:
            return
        if message.author.bot and not self._link.config.allow_bots:
            return
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            return
        mentioned = message.guild is None or any(u.id == me.id for u in message.mentions)
        conv = message_conversation(message, thread_replies=self._link.config.thread_replies)
        if not mentioned and not await self._in_thread(message, conv, me.id):
            return
        refusal = self._refusal(message)
        if refusal is not None:
            # Someone who never addressed the bot (chatting in its thread) is told nothing.
            if mentioned:
                self._link.spawn(_refuse(message, refusal), f"refuse:{message.id}")
            return
        msg = _inbound(message, conv, me.id, mentioned=mentioned)
        if conv.thread == str(message.id):
            self._threads.name_after(conv.thread, msg.text)
        await self._link.inbox.receive(msg)

    async def _in_thread(self, message: discord.Message, conv: ConversationRef, me: int) -> bool:
        """An unmentioned message counts only in a thread the bot started or takes part in."""
        channel = message.channel
        if not isinstance(channel, discord.Thread):
            return False
        return channel.owner_id == me or await self._link.inbox.knows(conv)

    def _refusal(self, message: discord.Message) -> str | None:
        author = message.author
        roles = [str(r.id) for r in getattr(author, "roles", ())]
        channel = message.channel
        parent = str(channel.parent_id) if isinstance(channel, discord.Thread) else None
        return self._policy.refusal(
            str(author.id),
            str(channel.id),
            is_dm=message.guild is None,
            workspace=str(message.guild.id) if message.guild else None,
            roles=roles,
            parent_channel=parent,
        )

    # -- downtime --------------------------------------------------------------------------

    def catch_up(self) -> None:
        """Read back recent conversations' channels after downtime (in the background)."""
        self._link.spawn(self._catch_up(), "catch-up")

    async def _catch_up(self) -> None:
        since = time.time() - CATCH_UP_SECONDS
        starts: dict[int, int] = {}  # channel id → oldest "after" id to read from
        threads: set[int] = set()
        for conv, last_id in await self._link.inbox.recent(PLATFORM, since):
            thread = None if conv.thread == MAIN_THREAD else snowflake(conv.thread)
            # Where nobody but the core spoke yet (a firing's own thread), from its start.
            start = snowflake(last_id) or thread
            if start is None:
                continue
            channel = snowflake(conv.channel)
            targets = [thread or channel] if conv.workspace == DM_WORKSPACE else [thread, channel]
            for target in targets:
                if target is not None:
                    starts[target] = min(starts.get(target, start), start)
            if thread is not None:
                threads.add(thread)
        found = 0
        for channel_id, after in starts.items():
            found += await self._read_back(channel_id, after, thread=channel_id in threads)
        if found:
            log.info("discord: %d message(s) sent while the bot was down were read back", found)

    async def _read_back(self, channel_id: int, after: int, *, thread: bool) -> int:
        """Feed a channel's messages since `after` through normal ingestion (duplicates are
        dropped there); returns how many were fed. A channel that cannot be read is logged
        once and skipped: the others are still read back. A conversation's thread that
        does not exist yet (made by the first reply, which has not gone out: a mention that
        came in just now) has nothing to read."""
        try:
            channel = await self._link.channel(channel_id)
            history = getattr(channel, "history", None)
            if history is None:
                return 0
            messages = [
                m
                async for m in history(
                    limit=CATCH_UP_MESSAGES, after=discord.Object(id=after), oldest_first=True
                )
            ]
        except discord.NotFound as exc:
            if thread:
                log.info("discord: thread %s does not exist yet; nothing to read back", channel_id)
            else:
                log.warning("discord: reading back channel %s failed, skipped: %s", channel_id, exc)
            return 0
        except (discord.HTTPException, ChannelError) as exc:
            log.warning("discord: reading back channel %s failed, skipped: %s", channel_id, exc)
            return 0
        except Exception:  # one bad channel must not cost the others their read-back
            log.exception("discord: reading back channel %s failed, skipped", channel_id)
            return 0
        for message in messages:
            self.on_message(message)
        return len(messages)

    # -- before a turn ---------------------------------------------------------------------

    async def enrich(self, msg: InboundMessage) -> InboundMessage:
        """Before a turn: the thread re-read on a mention, shared files downloaded."""
        context = await self._thread_context(msg) if msg.reread_thread else ""
        folder = self._workspace(msg.conversation)
        attachments = [
            await download(
                a,
                attachment_path(folder, msg.message_id, a.name),
                cap=self._link.config.attachment_max_bytes,
                platform=PLATFORM,
            )
            for a in msg.attachments
        ]
        text = f"{msg.text}\n\n{files_note(attachments)}" if attachments else msg.text
        return msg.model_copy(
            update={"text": text, "context": context, "attachments": tuple(attachments)}
        )

    async def _thread_context(self, msg: InboundMessage) -> str:
        """Recent messages by other people in the thread, oldest first, each under its
        author's label; messages by people the access policy refuses are left out."""
        limit = self._link.config.thread_context_messages
        client = self._link.connected
        if limit <= 0 or client is None or client.user is None:
            return ""
        try:
            channel = await self._link.channel(int(msg.thread))
            before = discord.Object(id=int(msg.message_id))
            history = [m async for m in channel.history(limit=limit, before=before)]
        except (discord.HTTPException, ValueError, AttributeError) as exc:
            log.warning("discord: re-reading thread %s failed: %s", msg.thread, exc)
            return ""
        lines = []
        refused = 0
        for item in reversed(history):
            if item.author.id == client.user.id or item.author.bot:
                continue
            if self._refusal(item) is not None:
                refused += 1  # someone refused here must not speak to the bot through others
                continue
            if any(u.id == client.user.id for u in item.mentions):
                continue  # messages that addressed the bot were turns: already in history
            body = readable_text(item, client.user.id)
            lines.append(context_line(item.author.display_name, str(item.author.id), body))
        if refused:
            lines.append(left_out_note(refused))
        return "\n".join(lines)


def _inbound(
    message: discord.Message, conv: ConversationRef, bot_id: int, *, mentioned: bool
) -> InboundMessage:
    text = readable_text(message, bot_id)
    attachments = tuple(
        Attachment(
            name=a.filename or "file",
            size=max(a.size, 0),
            url=a.url,
            mime_type=a.content_type,
        )
        for a in message.attachments
    )
    if not text and not attachments:
        text = "help"
    author = message.author
    return InboundMessage(
        platform=PLATFORM,
        workspace=conv.workspace,
        channel=conv.channel,
        thread=conv.thread,
        message_id=str(message.id),
        author_id=str(author.id),
        author_name=(author.display_name or author.name or str(author.id))[:128],
        text=text,
        attachments=attachments,
        event_id=str(message.id),
        timestamp=message.created_at.timestamp(),
        is_dm=message.guild is None,
        reread_thread=mentioned and isinstance(message.channel, discord.Thread),
        # The core decides whether a thread message that does not mention the bot is answered.
        addressed=mentioned,
        roles=tuple(str(r.id) for r in getattr(author, "roles", ())),
    )


async def _refuse(message: discord.Message, reason: str) -> None:
    """Refusals go to the person alone (a DM); a reply only if DMs are closed."""
    try:
        await message.author.send(reason)
    except discord.HTTPException:
        await message.reply(
            reason,
            mention_author=True,
            allowed_mentions=discord.AllowedMentions(
                everyone=False, roles=False, users=[message.author]
            ),
        )


def readable_text(message: discord.Message, bot_id: int) -> str:
    """The message text with the bot's mention removed and other mentions shown by name."""
    text = message.content.replace(f"<@{bot_id}>", "").replace(f"<@!{bot_id}>", "")
    for user in message.mentions:
        name = f"@{display_name(user.display_name)}"
        text = text.replace(f"<@{user.id}>", name).replace(f"<@!{user.id}>", name)
    for role in message.role_mentions:
        text = text.replace(f"<@&{role.id}>", f"@{role.name}")
    for channel in message.channel_mentions:
        text = text.replace(f"<#{channel.id}>", f"#{getattr(channel, 'name', channel.id)}")
    return " ".join(text.split(" ")).strip()
