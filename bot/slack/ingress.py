"""Slack events in: mentions, DMs and thread replies become inbound messages for the inbox.

Listeners only persist (bolt acks after them, `process_before_response`): no Web API call
waits in front of the ack; refusals are posted after it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.access import AccessPolicy
from bot.channel import Inbox
from bot.slack.background import Background
from bot.slack.config import SlackConfig
from bot.slack.identity import SlackIdentity
from bot.slack.normalize import (
    IGNORED_SUBTYPES,
    SlackEvent,
    mentions,
    parse_event,
    strip_bot_mention,
    to_inbound,
)
from bot.slack.outgoing import SlackOutgoing
from core.ids import ConversationRef


@dataclass(frozen=True)
class IngressDeps:
    """What the event listeners use besides the inbox (built once per adapter)."""

    config: SlackConfig
    policy: AccessPolicy
    identity: SlackIdentity
    outgoing: SlackOutgoing
    background: Background


class SlackIngress:
    """bolt's event listeners, handing messages meant for the bot to `inbox`."""

    def __init__(self, inbox: Inbox, deps: IngressDeps) -> None:
        self._inbox = inbox
        self._deps = deps

    async def on_mention(self, body: dict[str, Any], event: dict[str, Any], context: Any) -> None:
        """`app_mention`: always a turn."""
        self._deps.identity.seen(context.get("bot_user_id"))
        await self.ingest(body, event, mentioned=True)

    async def on_message(self, body: dict[str, Any], event: dict[str, Any], context: Any) -> None:
        """`message`: a DM, or a reply in a thread the bot takes part in."""
        identity = self._deps.identity
        identity.seen(context.get("bot_user_id"))
        ev = parse_event(body, event)
        if ev.is_dm:
            await self.ingest(body, event, mentioned=True)
            return
        if mentions(ev.text, identity.bot_user_id):
            return  # the app_mention event for this message starts the turn
        if ev.thread_ts and self._deps.config.thread_replies:
            await self.ingest(body, event, mentioned=False)

    async def ingest(self, body: dict[str, Any], event: dict[str, Any], *, mentioned: bool) -> None:
        """One message event (live or read back) into the inbox, unless it is not for us.
        `mentioned`: it addresses the bot (a mention or a DM)."""
        deps = self._deps
        ev = parse_event(body, event)
        if ev.subtype in IGNORED_SUBTYPES or not ev.user or not ev.ts:
            return
        if (ev.bot_id or ev.subtype == "bot_message") and not deps.config.allow_bots:
            return
        conv = ConversationRef("slack", ev.team, ev.channel, ev.thread_root)
        if not mentioned and not await self._inbox.knows(conv):
            return  # a thread the bot is not part of
        refusal = deps.policy.refusal(ev.user, ev.channel, is_dm=ev.is_dm)
        if refusal is not None:
            # Someone who never addressed the bot (chatting in its thread) is told nothing.
            if mentioned:
                deps.background.spawn(self._refuse(ev, refusal), f"refuse:{ev.ts}")
            return
        text = strip_bot_mention(ev.text, deps.identity.bot_user_id)
        if not text and not ev.files:
            text = "help"
        # No users.info here: the ack must not wait on Slack. `enrich` resolves the name.
        msg = to_inbound(ev, text=text, author_name=deps.identity.cached(ev.user))
        # The core decides whether a reply that does not mention the bot is answered.
        msg = msg.model_copy(
            update={"addressed": mentioned, "reread_thread": mentioned and bool(ev.thread_ts)}
        )
        await self._inbox.receive(msg)

    async def _refuse(self, ev: SlackEvent, reason: str) -> None:
        await self._deps.outgoing.ephemeral(ev.channel, ev.user, reason, ev.thread_ts)
