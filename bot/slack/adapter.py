"""Slack adapter on slack-bolt `AsyncApp`: Socket Mode or the HTTP Events API in, threaded
mrkdwn replies, one edited status message, Block Kit prompts and modals out.

A façade over one object per job: `SlackConnection` (auth.test, bolt, transports),
`SlackIngress` and `SlackCatchUp` (events in), `SlackInteractions` (clicks, modals),
`SlackOutgoing` (posts, edits, notes), `SlackPromptMessages` (prompts as messages),
`SlackIdentity` (names), `SlackEnricher` (context before a turn) and `Background` (work
after an ack). The parts that need the ingress are built in `serve`, which receives it:
the ingress (the conversation service) is itself built from the adapters' egress side.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

from slack_sdk.web.async_client import AsyncWebClient

from bot.access import AccessPolicy, said_about
from bot.channel import ChannelFeatures, Ingress
from bot.slack.background import Background
from bot.slack.catch_up import SlackCatchUp
from bot.slack.config import SlackConfig, retry_handlers
from bot.slack.connection import Listeners, SlackConnection
from bot.slack.enrich import SlackEnricher
from bot.slack.history import SlackHistory
from bot.slack.identity import SlackIdentity
from bot.slack.ingress import IngressDeps, SlackIngress
from bot.slack.interactions import SlackInteractions
from bot.slack.normalize import DM_THREAD
from bot.slack.outgoing import SlackOutgoing
from bot.slack.prompts import SlackPromptMessages
from bot.slack.sdk_log import SdkLog
from bot.slack.slash import register_slash_command
from bot.slack.uploads import SlackFiles
from bot.slack.working import SlackWorking
from core.ids import ConversationRef
from host.runtime.admission import Standing
from host.runtime.messages import InboundMessage, OutboundFile, OutboundMessage
from host.runtime.prompt_record import Prompt

__all__ = ["SlackAdapter", "SlackConfig"]

log = logging.getLogger(__name__)

# How long after-ack work gets to finish when the adapter stops.
_DRAIN_SECONDS = 5.0


class SlackAdapter:
    """One Slack workspace connection (a `ChannelAdapter`, a `PromptSurface`, a
    `PeopleDirectory`, an `AccessDirectory`, a `WorkingStatus` and `SupportsEnrichment`).
    `config` is read again when serving starts (tests shorten the connect backoff on a
    built adapter)."""

    def __init__(
        self,
        config: SlackConfig,
        *,
        policy: AccessPolicy,
        workspace: Callable[[ConversationRef], Path],
        event_log: Path,
    ) -> None:
        self.config = config
        # Where the HTTP endpoint queues acknowledged events (see `bot.slack.edge`).
        self._event_log = event_log
        self._policy = policy
        self._sdk_log = SdkLog(log, config.socket_ping_interval)
        self._client = AsyncWebClient(
            token=config.bot_token,
            base_url=config.api_url,
            retry_handlers=retry_handlers(config.rate_limit_retries),
            logger=self._sdk_log,
        )
        self._background = Background()
        self._identity = SlackIdentity(self._client)
        self._history = SlackHistory(self._client)
        self._outgoing = SlackOutgoing(self._client, self._identity, self._history)
        self._files = SlackFiles(self._client, self._identity, self._history)
        self._prompt_messages = SlackPromptMessages(self._outgoing, self._identity)
        self._enricher = SlackEnricher(config, policy, workspace, self._identity, self._history)
        # The thread status while the bot works (tests shorten its refresh interval).
        self.working = SlackWorking(self._client)
        self._closed = asyncio.Event()
        self.ready = asyncio.Event()
        self.http_port: int | None = None

    @property
    def platform(self) -> str:
        """Conversation keys start with `slack`."""
        return "slack"

    @property
    def client(self) -> AsyncWebClient:
        """The Web API client (tests point it at a loopback fake)."""
        return self._client

    @property
    def features(self) -> ChannelFeatures:
        """Threads, buttons, modals, ephemeral notes and in-place edits."""
        return ChannelFeatures.full(threads=self.config.thread_replies)

    async def standing(self, user_id: str, conv: ConversationRef) -> Standing:
        """Whether work may start for `user_id` in `conv` now: the policy messages pass at
        ingress (Slack has no roles to look up)."""
        is_dm = conv.channel.startswith("D")
        return Standing(said_about(self._policy.broken_rule(user_id, conv.channel, is_dm=is_dm)))

    # -- lifecycle ---------------------------------------------------------------------

    async def serve(self, ingress: Ingress) -> None:
        """Connect the configured transport and serve `ingress` until closed."""
        config = self.config
        connection = SlackConnection(
            config, self._client, self._sdk_log, self._identity, self._closed, self._event_log
        )
        deps = IngressDeps(config, self._policy, self._identity, self._outgoing, self._background)
        listener = SlackIngress(ingress.inbox, deps)
        interactions = SlackInteractions(ingress.prompts, self._prompt_messages, self._background)
        app = connection.build_app(Listeners(listener, interactions))
        register_slash_command(app, ingress, deps)
        connection.open_session()
        try:
            if not await connection.authenticate():
                return  # closed while Slack was unreachable
            await connection.start(app)
            self.http_port = connection.http_port
            self.ready.set()
            log.info("slack: serving over %s", config.transport)
            catch_up = SlackCatchUp(ingress.inbox, listener, self._history, self._identity)
            self._background.spawn(catch_up.run(), "catch-up")
            await self._closed.wait()
        finally:
            await connection.stop_receiving()
            await self._background.drain(_DRAIN_SECONDS)
            await self.working.close()
            await connection.close_session()

    async def close(self) -> None:
        """Stop serving (idempotent)."""
        self._closed.set()

    async def idle(self) -> None:
        """Wait until the work started by acknowledged events and clicks has finished."""
        await self._background.idle()

    # -- egress ------------------------------------------------------------------------

    async def post(self, conv: ConversationRef, message: OutboundMessage) -> str:
        """Post into the thread in ≤3,500-char mrkdwn parts (see `SlackOutgoing.post`)."""
        posted = await self._outgoing.post(conv, message)
        self.working.posted(conv)  # Slack hid the thread's status: show it again
        return posted

    async def edit(self, conv: ConversationRef, message_id: str, message: OutboundMessage) -> None:
        """Edit a status message in place (`chat.update`)."""
        await self._outgoing.edit(conv, message_id, message)

    async def show(self, conv: ConversationRef, text: str) -> None:
        """The thread's status while the bot works there (`WorkingStatus`)."""
        await self.working.show(conv, text)

    async def clear(self, conv: ConversationRef) -> None:
        """Nothing works in the thread any more: its status is cleared."""
        await self.working.clear(conv)

    async def upload(
        self,
        conv: ConversationRef,
        file: OutboundFile,
        *,
        idempotency_key: str,
        redelivery: bool,
        earlier_copies: int = 0,
    ) -> str:
        """Share a file in the thread (`files_upload_v2`; see `SlackFiles.upload`)."""
        return await self._files.upload(
            conv,
            file,
            idempotency_key=idempotency_key,
            redelivery=redelivery,
            earlier_copies=earlier_copies,
        )

    async def show_prompt(self, prompt: Prompt) -> str:
        """Buttons (Approve/Deny or options) or an `Answer…` button that opens a modal."""
        return await self._prompt_messages.show(prompt)

    async def close_prompt(self, prompt: Prompt) -> None:
        """Remove the buttons and show the outcome and who decided."""
        await self._prompt_messages.close(prompt)

    async def notify_private(self, conv: ConversationRef, user_id: str, text: str) -> None:
        """An ephemeral message only `user_id` sees."""
        await self._prompt_messages.notify_private(conv, user_id, text)

    # -- people and context ------------------------------------------------------------

    async def display_name(self, user_id: str) -> str:
        """A person's display name from `users.info` (cached; the id when the call fails).
        Shown as plain text, never as a `<@U…>` mention: a mention in a bot message pings."""
        return await self._identity.name(user_id)

    def channel_level(self, conv: ConversationRef) -> ConversationRef | None:
        """A post with no thread starts one (its ts is the thread's); none in a DM."""
        if conv.thread == DM_THREAD:
            return None
        return dataclasses.replace(conv, thread=DM_THREAD)

    async def time_zone(self, user_id: str) -> str | None:
        """A person's time zone from their Slack profile (`users.info`'s `tz`)."""
        return await self._identity.time_zone(user_id)

    async def enrich(self, msg: InboundMessage) -> InboundMessage:
        """Before a turn: names for mentions, the thread re-read, shared files downloaded."""
        return await self._enricher.enrich(msg)
