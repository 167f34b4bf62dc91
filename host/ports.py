"""Protocols through which the core talks to the edge (channel adapters)."""

from __future__ import annotations

from typing import Protocol

from host.messages import OutboundMessage
from memory.conversation_log import ConversationRef


class Channel(Protocol):
    """One chat platform's egress, as the core sees it."""

    @property
    def platform(self) -> str:
        """The platform name used in conversation keys (`slack`, `discord`, `console`)."""
        ...

    async def post(self, conv: ConversationRef, message: OutboundMessage) -> str:
        """Post into the conversation's thread; return the platform message id.

        Implementations use `message.idempotency_key` to avoid a second post when a
        redelivery after a crash races one that already went out, where the platform allows.
        """
        ...

    async def edit(self, conv: ConversationRef, message_id: str, message: OutboundMessage) -> None:
        """Replace the text of a message the bot posted earlier (status messages)."""
        ...
