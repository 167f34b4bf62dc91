"""The channel protocol: what every platform adapter (console, Slack, Discord) provides."""

from __future__ import annotations

import asyncio
from typing import Protocol

from core.ids import ConversationRef
from host.conversations import TurnOutcome
from host.messages import Attachment, InboundMessage, OutboundMessage
from host.ports import Channel

__all__ = [
    "Attachment",
    "Channel",
    "ChannelAdapter",
    "InboundMessage",
    "Inbox",
    "OutboundMessage",
]


class Inbox(Protocol):
    """Where adapters hand normalized inbound messages (the conversation service)."""

    async def accept(self, msg: InboundMessage) -> asyncio.Future[TurnOutcome] | None:
        """Persist and dedup the message and start its turn (None: nothing to wait for)."""
        ...

    async def receive(self, msg: InboundMessage) -> bool:
        """Persist and dedup the message and return at once (False: a duplicate); the rest
        runs after, so adapters with an ack deadline acknowledge right away."""
        ...

    async def knows(self, conv: ConversationRef) -> bool:
        """True when the bot already takes part in this conversation."""
        ...

    async def quiesce(self, conv: ConversationRef) -> None:
        """Wait until the conversation has no turn, queued turn or graph run left."""
        ...


class ChannelAdapter(Channel, Protocol):
    """A running platform connection: egress (`Channel`) plus a serve loop for ingress."""

    async def serve(self) -> None:
        """Receive messages until closed (or, for the console, until end of input)."""
        ...

    async def close(self) -> None:
        """Disconnect and release resources (idempotent)."""
        ...
