"""The Discord adapter on discord.py: mentions, DMs and thread messages in; threaded replies,
edited status messages, persistent button views and modals out.

Conversation keys: a mention in a channel starts a thread from that message, and Discord
gives the thread the message's id, so the key (discord, guild, channel, message id) is known
at ingress and the thread is created lazily by the first reply. A message inside a thread
keys by (guild, parent channel, thread id); a DM by (dm, DM channel, main).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import discord
import yarl

from bot.access import AccessPolicy
from bot.attachments import attachment_path, download, files_note
from bot.channel import CATCH_UP_SECONDS, ChannelFeatures, Inbox, Ingress, PromptAnswers
from bot.discord.markdown import render_for_discord
from bot.discord.views import AnswerModal, PromptView, closed_content, prompt_content
from bot.prompt_ui import (
    TEXT_CHOICE,
    Click,
    handle_click,
    handle_submission,
    parse_action_id,
)
from core.ids import ConversationRef
from core.keyed import KeyedSerial
from host.runtime.author_labels import context_line, display_name, left_out_note
from host.runtime.messages import Attachment, InboundMessage, OutboundMessage
from host.runtime.people import shown_name
from host.runtime.ports import ChannelError
from host.runtime.prompt_record import Prompt

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://discord.com/api/v10"
DM_WORKSPACE = "dm"
MAIN_THREAD = "main"  # DMs and inline (thread-less) channel conversations
THREAD_NAME_CHARS = 80
# How long a display name lookup may take before the id is shown instead.
NAME_LOOKUP_SECONDS = 2.0
# How long a click's interaction answers private notes for its user (ephemeral follow-ups).
INTERACTION_NOTE_SECONDS = 10.0
# A click no registered view took (its prompt was decided while the bot was down, so no view
# came back) is answered after this long: within Discord's 3 s, after any view's callback.
UNROUTED_CLICK_SECONDS = 2.0
CATCH_UP_MESSAGES = 100
# Discord's own codes: a thread already exists for the message; the message is gone.
_THREAD_EXISTS = 160004
_PERMANENT_STATUSES = frozenset({400, 401, 403, 404})


@dataclass(frozen=True)
class DiscordConfig:
    """Everything the adapter needs from Settings."""

    token: str
    thread_replies: bool = True
    allow_bots: bool = False
    attachment_max_bytes: int = 20_000_000
    thread_context_messages: int = 20
    api_url: str = DEFAULT_API_URL
    gateway_url: str | None = None  # None: discord.py's default gateway
    # discord.py waits this long after the last GUILD_CREATE before `on_ready`.
    guild_ready_timeout: float = 2.0
    # Seconds discord.py waits before a non-initial IDENTIFY (None: its own 5 s).
    reidentify_delay: float | None = None


def intents() -> discord.Intents:
    """Guild and DM messages with their content (a privileged intent: enable "Message
    Content Intent" for the application in the Developer Portal)."""
    wanted = discord.Intents.none()
    wanted.guilds = True
    wanted.guild_messages = True
    wanted.dm_messages = True
    wanted.message_content = True
    return wanted


def point_at(config: DiscordConfig) -> None:
    """Aim discord.py at another API and gateway (a proxy or a test server).

    discord.py has no per-client setting for these: they are class attributes, so this is
    process-wide, and only done when the settings ask for it."""
    if config.api_url.rstrip("/") != DEFAULT_API_URL:
        discord.http.Route.BASE = config.api_url.rstrip("/")
    if config.gateway_url:
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(config.gateway_url)


class _Client(discord.Client):
    """discord.Client with the adapter's handlers and an optional re-identify delay."""

    def __init__(self, adapter: DiscordAdapter) -> None:
        super().__init__(
            intents=intents(),
            guild_ready_timeout=adapter.config.guild_ready_timeout,
            allowed_mentions=discord.AllowedMentions.none(),
        )
        self._adapter = adapter

    async def setup_hook(self) -> None:
        """Re-register the views of pending prompts before events arrive."""
        await self._adapter.restore_views()

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        """discord.py waits 5 s before re-identifying; the setting may shorten it."""
        delay = self._adapter.config.reidentify_delay
        if delay is None:
            await super().before_identify_hook(shard_id, initial=initial)
        elif not initial and delay > 0:
            await asyncio.sleep(delay)

    async def on_ready(self) -> None:
        """Connected and the guilds are cached; the first time, catch up on what arrived
        while the bot was down."""
        if not self._adapter.ready.is_set():
            self._adapter.ready.set()
            self._adapter.catch_up()

    async def on_message(self, message: discord.Message) -> None:
        """Every message the gateway delivers (filtered by the adapter, in order)."""
        self._adapter.on_message(message)

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """Every interaction; the adapter answers prompt clicks no view took."""
        self._adapter.on_interaction(interaction)


class DiscordAdapter:
    """One Discord bot connection (a `ChannelAdapter` and a `PromptSurface`)."""

    def __init__(
        self,
        config: DiscordConfig,
        *,
        policy: AccessPolicy,
        workspace: Callable[[ConversationRef], Path],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._policy = policy
        self._workspace = workspace
        self._clock = clock
        self._client: _Client | None = None
        self._inbox: Inbox | None = None
        self._prompts: PromptAnswers | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._ingress = KeyedSerial("discord-ingress")
        self._thread_names: dict[str, str] = {}
        self._known_threads: set[str] = set()
        self._inline: set[str] = set()  # conversations whose thread could not be created
        self._taken: set[int] = set()  # interactions a view callback is handling
        self._watchers: set[asyncio.Task[None]] = set()
        # (conversation id, user id) → (interaction, when): private notes answer a click.
        self._interactions: dict[tuple[str, str], tuple[discord.Interaction, float]] = {}
        self._closed = asyncio.Event()
        self.ready = asyncio.Event()
        # Display names fetched from the API (those not in discord.py's cache).
        self._fetched_names: dict[str, str] = {}

    @property
    def platform(self) -> str:
        """Conversation keys start with `discord`."""
        return "discord"

    @property
    def features(self) -> ChannelFeatures:
        """Threads, buttons, modals, private notes (ephemeral or DM) and in-place edits."""
        return ChannelFeatures.full(threads=self.config.thread_replies)

    @property
    def client(self) -> discord.Client:
        """The running discord.py client."""
        if self._client is None:
            raise ChannelError("Discord is not connected yet")
        return self._client

    # -- lifecycle ---------------------------------------------------------------------

    async def serve(self, ingress: Ingress) -> None:
        """Connect and receive until closed (discord.py reconnects and resumes by itself)."""
        self._inbox, self._prompts = ingress.inbox, ingress.prompts
        point_at(self.config)
        self._client = _Client(self)
        try:
            await self._client.start(self.config.token)
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
        finally:
            self._closed.set()

    async def close(self) -> None:
        """Disconnect (idempotent); owned tasks are cancelled."""
        await self._ingress.close()
        for task in [*self._tasks, *self._watchers]:
            task.cancel()
        if self._tasks or self._watchers:
            await asyncio.gather(*self._tasks, *self._watchers, return_exceptions=True)
        if self._client is not None and not self._client.is_closed():
            await self._client.close()

    async def idle(self) -> None:
        """Wait until background work (refusals, clicks) is done (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        async def guarded() -> None:
            try:
                await coro
            except Exception:
                log.exception("discord: %s failed", name)

        task = asyncio.get_running_loop().create_task(guarded(), name=f"discord:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def restore_views(self) -> None:
        """Buttons and forms of pending prompts work again after a restart."""
        if self._prompts is None or self._client is None:
            return
        restored = 0
        for prompt in await self._prompts.pending():
            if prompt.conversation.platform != self.platform or not prompt.message_id:
                continue
            self._client.add_view(
                PromptView(prompt, self._on_click), message_id=int(prompt.message_id)
            )
            if prompt.kind == "free_text":
                self._client.add_view(AnswerModal(prompt, self._on_submit))
            restored += 1
        if restored:
            log.info("discord: %d pending prompt(s) answerable again", restored)

    # -- ingress -----------------------------------------------------------------------

    def catch_up(self) -> None:
        """Read back recent conversations' channels after downtime (in the background)."""
        self._spawn(self._catch_up(), "catch-up")

    async def _catch_up(self) -> None:
        assert self._inbox is not None
        since = time.time() - CATCH_UP_SECONDS
        starts: dict[str, int] = {}  # channel id → oldest "after" id to read from
        for conv, last_id in await self._inbox.recent(self.platform, since):
            if not last_id.isdigit():
                continue
            where = conv.channel if conv.thread == MAIN_THREAD else conv.thread
            targets = [where] if conv.workspace == DM_WORKSPACE else [where, conv.channel]
            for target in targets:
                starts[target] = min(starts.get(target, int(last_id)), int(last_id))
        found = 0
        for channel_id, after in starts.items():
            found += await self._read_back(int(channel_id), after)
        if found:
            log.info("discord: %d message(s) sent while the bot was down were read back", found)

    async def _read_back(self, channel_id: int, after: int) -> int:
        """Feed a channel's messages since `after` through normal ingestion (duplicates are
        dropped there); returns how many were fed."""
        try:
            channel = await self._channel(channel_id)
            history = getattr(channel, "history", None)
            if history is None:
                return 0
            messages = [
                m
                async for m in history(
                    limit=CATCH_UP_MESSAGES, after=discord.Object(id=after), oldest_first=True
                )
            ]
        except (discord.HTTPException, ChannelError) as exc:
            log.warning("discord: reading back channel %s failed: %s", channel_id, exc)
            return 0
        for message in messages:
            self.on_message(message)
        return len(messages)

    def on_message(self, message: discord.Message) -> None:
        """Queue a message for ingestion behind earlier ones of its channel: discord.py runs
        each event as its own task, and a thread's messages must be judged in order."""
        task = self._ingress.spawn(str(message.channel.id), lambda: self._ingest_logged(message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _ingest_logged(self, message: discord.Message) -> None:
        try:
            await self._ingest(message)
        except Exception:
            # Not acknowledged to anyone yet: logged, and a redelivery may still bring it.
            log.exception("discord: taking in message %s failed", message.id)

    async def _ingest(self, message: discord.Message) -> None:
        """Take a message addressed to the bot into the inbox (persisted, deduplicated)."""
        client = self._client
        if client is None or client.user is None or self._inbox is None:
            return
        if message.author.id == client.user.id:
            return
        if message.author.bot and not self.config.allow_bots:
            return
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            return
        mentioned = message.guild is None or any(u.id == client.user.id for u in message.mentions)
        conv = self._conversation(message)
        if conv is None or (not mentioned and not await self._in_thread(message, conv)):
            return
        refusal = self._refusal(message)
        if refusal is not None:
            self._spawn(self._refuse(message, refusal), f"refuse:{message.id}")
            return
        msg = self._inbound(message, conv, client.user.id, mentioned=mentioned)
        if conv.thread == str(message.id):
            self._thread_names[conv.thread] = msg.text[:THREAD_NAME_CHARS] or "raven"
        await self._inbox.receive(msg)

    def _conversation(self, message: discord.Message) -> ConversationRef | None:
        channel = message.channel
        if message.guild is None:
            return ConversationRef(self.platform, DM_WORKSPACE, str(channel.id), MAIN_THREAD)
        guild = str(message.guild.id)
        if isinstance(channel, discord.Thread):
            return ConversationRef(self.platform, guild, str(channel.parent_id), str(channel.id))
        thread = str(message.id) if self.config.thread_replies else MAIN_THREAD
        return ConversationRef(self.platform, guild, str(channel.id), thread)

    async def _in_thread(self, message: discord.Message, conv: ConversationRef) -> bool:
        """An unmentioned message counts only in a thread the bot started or takes part in."""
        channel = message.channel
        if not isinstance(channel, discord.Thread):
            return False
        assert self._inbox is not None and self._client is not None and self._client.user
        return channel.owner_id == self._client.user.id or await self._inbox.knows(conv)

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

    def _inbound(
        self, message: discord.Message, conv: ConversationRef, bot_id: int, *, mentioned: bool
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
            platform=self.platform,
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
            roles=tuple(str(r.id) for r in getattr(author, "roles", ())),
        )

    async def _refuse(self, message: discord.Message, reason: str) -> None:
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

    async def enrich(self, msg: InboundMessage) -> InboundMessage:
        """Before a turn: the thread re-read on a mention, shared files downloaded."""
        context = await self._thread_context(msg) if msg.reread_thread else ""
        folder = self._workspace(msg.conversation)
        attachments = [
            await download(
                a,
                attachment_path(folder, msg.message_id, a.name),
                cap=self.config.attachment_max_bytes,
                platform=self.platform,
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
        limit = self.config.thread_context_messages
        client = self._client
        if limit <= 0 or client is None or client.user is None:
            return ""
        try:
            channel = await self._channel(int(msg.thread))
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

    # -- interactivity -----------------------------------------------------------------

    def on_interaction(self, interaction: discord.Interaction) -> None:
        """Watch prompt clicks: one that no view takes is answered all the same."""
        data: dict[str, Any] = dict(interaction.data or {})
        custom_id = str(data.get("custom_id", ""))
        if interaction.type is discord.InteractionType.component and parse_action_id(custom_id):
            # Owned, but not part of `idle`: it only waits, almost always to do nothing.
            task = asyncio.get_running_loop().create_task(
                self._unrouted(interaction, custom_id), name=f"discord:click:{interaction.id}"
            )
            self._watchers.add(task)
            task.add_done_callback(self._watchers.discard)

    async def _unrouted(self, interaction: discord.Interaction, custom_id: str) -> None:
        try:
            await asyncio.sleep(UNROUTED_CLICK_SECONDS)
            if interaction.id not in self._taken and not interaction.response.is_done():
                log.info("discord: a click on a prompt without a live view; answering it")
                await self._on_click(interaction, custom_id)
        except discord.HTTPException as exc:
            log.warning("discord: answering an unrouted click failed: %s", exc)
        finally:
            self._taken.discard(interaction.id)

    async def _on_click(self, interaction: discord.Interaction, custom_id: str) -> None:
        self._taken.add(interaction.id)
        parsed = parse_action_id(custom_id)
        if parsed is None or self._prompts is None or not await self._first(interaction):
            return
        prompt_id, nonce, choice = parsed
        if choice != TEXT_CHOICE:
            # Acknowledge within Discord's 3 s first; a modal must be the first response.
            await interaction.response.defer()
        user = str(interaction.user.id)
        message = interaction.message
        click = Click(prompt_id, nonce, choice, user, str(message.id) if message else None)
        with self._answering(interaction):
            await handle_click(self._prompts, click, _DiscordClick(self, interaction))

    async def _on_submit(
        self, interaction: discord.Interaction, prompt_id: str, nonce: str, value: str
    ) -> None:
        assert self._prompts is not None
        if not await self._first(interaction):
            return
        # From a prompt's message: a silent deferred update. Without one (a form opened
        # before a restart), a private "thinking" reply that the outcome then fills in.
        thinking = interaction.message is None
        await interaction.response.defer(ephemeral=True, thinking=thinking)
        with self._answering(interaction):
            outcome = await handle_submission(
                self._prompts,
                prompt_id,
                nonce,
                str(interaction.user.id),
                value,
                lambda text: _followup(interaction, text),
            )
        if thinking and outcome.status == "accepted":
            await _followup(interaction, "Thanks, your answer was recorded.")

    async def _first(self, interaction: discord.Interaction) -> bool:
        """False for an interaction delivered again (a gateway replay): answered once."""
        assert self._inbox is not None
        return await self._inbox.claim(self.platform, f"interaction:{interaction.id}")

    @contextlib.contextmanager
    def _answering(self, interaction: discord.Interaction) -> Any:
        """While a click is handled, private notes to its user go to the interaction."""
        key = (self._interaction_conversation(interaction), str(interaction.user.id))
        self._interactions[key] = (interaction, self._clock())
        try:
            yield
        finally:
            self._interactions.pop(key, None)

    def _interaction_conversation(self, interaction: discord.Interaction) -> str:
        channel = interaction.channel
        if interaction.guild_id is None:
            return ConversationRef(
                self.platform, DM_WORKSPACE, str(interaction.channel_id), MAIN_THREAD
            ).id
        if isinstance(channel, discord.Thread):
            return ConversationRef(
                self.platform, str(interaction.guild_id), str(channel.parent_id), str(channel.id)
            ).id
        return ConversationRef(
            self.platform, str(interaction.guild_id), str(interaction.channel_id), MAIN_THREAD
        ).id

    # -- egress ------------------------------------------------------------------------

    async def _channel(self, channel_id: int) -> discord.abc.Messageable:
        client = self.client
        channel = client.get_channel(channel_id)
        if channel is None:
            channel = await client.fetch_channel(channel_id)
        if not isinstance(channel, discord.abc.Messageable):
            raise ChannelError(
                f"Discord channel {channel_id} cannot take messages", retryable=False
            )
        return channel

    async def _target(self, conv: ConversationRef) -> discord.abc.Messageable:
        """Where the conversation's messages go: its thread (created on first use), else
        the channel itself."""
        if conv.thread == MAIN_THREAD:
            return await self._channel(int(conv.channel))
        try:
            return await self._channel(int(conv.thread))
        except discord.NotFound:
            if conv.thread in self._known_threads:
                raise
        return await self._start_thread(conv)

    async def _start_thread(self, conv: ConversationRef) -> discord.abc.Messageable:
        parent = await self._channel(int(conv.channel))
        if conv.thread in self._inline or not isinstance(parent, discord.TextChannel):
            return parent  # no threads here: the conversation goes on in the channel
        name = self._thread_names.get(conv.thread, "raven")
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
            return await self._channel(int(conv.thread))
        self._known_threads.add(conv.thread)
        return thread

    async def post(self, conv: ConversationRef, message: OutboundMessage) -> str:
        """Post into the thread in ≤2,000-char parts; a redelivery skips parts Discord
        already shows (the bot's recent messages with the same text)."""
        chunks = render_for_discord(message.text) or ["(empty)"]
        if message.ephemeral_to:
            await self.notify_private(conv, message.ephemeral_to, chunks[0])
            return ""
        try:
            channel = await self._target(conv)
            already = await self._already_posted(channel) if message.redelivery else {}
            first: str | None = None
            for index, chunk in enumerate(chunks):
                sent_id = already.pop(chunk, None)
                if sent_id is None:
                    sent = await channel.send(
                        chunk,
                        allowed_mentions=discord.AllowedMentions.none(),
                        nonce=_nonce(message.idempotency_key, index),
                    )
                    sent_id = str(sent.id)
                first = first or sent_id
        except discord.HTTPException as exc:
            raise _channel_error(exc) from exc
        return first or ""

    async def _already_posted(self, channel: discord.abc.Messageable) -> dict[str, str]:
        """Text → id of the bot's recent messages in the channel (redelivery after a crash)."""
        client = self.client
        assert client.user is not None
        try:
            return {
                m.content: str(m.id)
                async for m in channel.history(limit=50)
                if m.author.id == client.user.id
            }
        except discord.HTTPException as exc:
            log.warning("discord: could not check for an earlier delivery: %s", exc)
            return {}

    async def edit(self, conv: ConversationRef, message_id: str, message: OutboundMessage) -> None:
        """Edit a status message in place."""
        chunks = render_for_discord(message.text) or ["(empty)"]
        try:
            channel = await self._target(conv)
            await _partial(channel, message_id).edit(
                content=chunks[0], allowed_mentions=discord.AllowedMentions.none()
            )
        except discord.HTTPException as exc:
            raise _channel_error(exc) from exc

    async def show_prompt(self, prompt: Prompt) -> str:
        """Buttons (Approve/Deny or options) or an `Answer…` button that opens a modal."""
        try:
            channel = await self._target(prompt.conversation)
            sent = await channel.send(
                prompt_content(prompt, await self._shown(prompt.requester)),
                view=PromptView(prompt, self._on_click),
                # The requester is named, not mentioned: nothing in a prompt pings.
                allowed_mentions=discord.AllowedMentions.none(),
            )
        except discord.HTTPException as exc:
            raise _channel_error(exc) from exc
        if prompt.kind == "free_text":
            self.client.add_view(AnswerModal(prompt, self._on_submit))
        return str(sent.id)

    async def close_prompt(self, prompt: Prompt) -> None:
        """Show the outcome and who decided; the buttons stay, disabled."""
        if prompt.message_id:
            await self._close_message(prompt, prompt.message_id)

    async def _close_message(self, prompt: Prompt, message_id: str) -> None:
        closed = replace(prompt, message_id=message_id)
        decider = await self._shown(prompt.answered_by)
        try:
            channel = await self._target(prompt.conversation)
            await _partial(channel, message_id).edit(
                content=closed_content(closed, decider),
                view=PromptView(closed, self._on_click, disabled=True),
                allowed_mentions=discord.AllowedMentions.none(),
            )
        except discord.HTTPException as exc:
            raise _channel_error(exc) from exc

    async def display_name(self, user_id: str) -> str:
        """A person's display name: their member name from discord.py's cache (a server
        nickname), else their user name from the cache or `fetch_user` (remembered); the id
        when Discord cannot say."""
        if not user_id.isdigit() or self._client is None:
            return user_id
        uid = int(user_id)
        for guild in self._client.guilds:
            member = guild.get_member(uid)
            if member is not None:
                return member.display_name
        user = self._client.get_user(uid)
        if user is not None:
            return user.display_name
        if user_id in self._fetched_names:
            return self._fetched_names[user_id]
        try:
            async with asyncio.timeout(NAME_LOOKUP_SECONDS):
                fetched = await self._client.fetch_user(uid)
        except (discord.HTTPException, TimeoutError) as exc:
            log.warning("discord: no display name for %s: %s", user_id, exc)
            return user_id
        self._fetched_names[user_id] = fetched.display_name
        return fetched.display_name

    async def _shown(self, user_id: str | None) -> str:
        """`user_id` as people in a prompt message are shown it (cleaned display name)."""
        if not user_id:
            return "nobody"
        return shown_name(await self.display_name(user_id)) or user_id

    async def notify_private(self, conv: ConversationRef, user_id: str, text: str) -> None:
        """Only `user_id` sees it: an ephemeral follow-up while they are clicking, else a DM
        (a mention in the thread when their DMs are closed)."""
        chunk = (render_for_discord(text) or ["(empty)"])[0]
        held = self._interactions.get((conv.id, user_id))
        if held is not None and self._clock() - held[1] < INTERACTION_NOTE_SECONDS:
            await _followup(held[0], chunk)
            return
        try:
            user = self.client.get_user(int(user_id)) or await self.client.fetch_user(int(user_id))
            await user.send(chunk, allowed_mentions=discord.AllowedMentions.none())
        except (discord.HTTPException, ValueError):
            channel = await self._target(conv)
            await channel.send(
                f"<@{user_id}> {chunk}"[:2000],
                allowed_mentions=discord.AllowedMentions(
                    everyone=False, roles=False, users=[discord.Object(id=int(user_id))]
                ),
            )


@dataclass(frozen=True)
class _DiscordClick:
    """Answers one button click: ephemeral follow-ups, the modal, closing the message."""

    adapter: DiscordAdapter
    interaction: discord.Interaction

    async def refuse(self, text: str) -> None:
        """An ephemeral note to the clicker."""
        await _followup(self.interaction, text)

    async def open_answer_form(self, prompt: Prompt) -> None:
        """The free-text modal (the click's first response)."""
        await self.interaction.response.send_modal(AnswerModal(prompt, self.adapter._on_submit))

    async def close_clicked(self, prompt: Prompt) -> None:
        """Close the clicked message."""
        if self.interaction.message is not None:
            await self.adapter._close_message(prompt, str(self.interaction.message.id))


async def _followup(interaction: discord.Interaction, text: str) -> None:
    """An ephemeral message to whoever interacted (responding first if nothing was sent)."""
    if interaction.response.is_done():
        await interaction.followup.send(text[:2000], ephemeral=True)
    else:
        await interaction.response.send_message(text[:2000], ephemeral=True)


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


def _partial(channel: discord.abc.Messageable, message_id: str) -> discord.PartialMessage:
    get = getattr(channel, "get_partial_message", None)
    if get is None:
        raise ChannelError("this Discord channel cannot edit messages", retryable=False)
    partial: discord.PartialMessage = get(int(message_id))
    return partial


def _nonce(key: str, index: int) -> str:
    """A stable nonce per message part (Discord drops a repeat within a few minutes)."""
    return hashlib.sha256(f"{key}:{index}".encode()).hexdigest()[:25]


def _channel_error(exc: discord.HTTPException) -> ChannelError:
    """Discord's refusal as a ChannelError: 4xx other than 429 will not change on retry."""
    status = exc.status
    if status == 429:
        return ChannelError(f"Discord rate-limited the bot and discord.py gave up: {exc.text}")
    return ChannelError(
        f"Discord refused the call (HTTP {status}, code {exc.code}): {exc.text}",
        retryable=status not in _PERMANENT_STATUSES,
    )


__all__ = ["DiscordAdapter", "DiscordConfig", "intents", "readable_text"]
