"""Outgoing messages: recorded before they are sent, sent once, redelivered after a crash."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from host.messages import OutboundMessage
from host.ports import Channel
from memory.conversation_log import ConversationLog, ConversationRef

log = logging.getLogger(__name__)


class DeliveryError(RuntimeError):
    """A message could not be delivered; it stays recorded as failed."""


class Outbox:
    """Persist-then-send for every message the bot posts."""

    def __init__(self, conversation_log: ConversationLog, channels: Mapping[str, Channel]) -> None:
        self._log = conversation_log
        self._channels = channels
        # One in-flight send per idempotency key, so concurrent callers cannot double-post.
        self._inflight: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    async def send(
        self,
        conv: ConversationRef,
        text: str,
        *,
        idempotency_key: str,
        turn_id: str | None = None,
    ) -> str | None:
        """Record the message (idempotently), then post it unless it was already sent.

        Returns the platform message id, or None when no channel serves the platform.
        """
        lock, users = self._inflight.setdefault(idempotency_key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                return await self._send_once(conv, text, idempotency_key, turn_id)
        finally:
            users[0] -= 1
            if users[0] == 0:
                self._inflight.pop(idempotency_key, None)

    async def _send_once(
        self, conv: ConversationRef, text: str, idempotency_key: str, turn_id: str | None
    ) -> str | None:
        record = await self._log.record_outbound(
            conv, idempotency_key=idempotency_key, text=text, turn_id=turn_id
        )
        if record.delivery == "sent":
            return record.platform_message_id
        return await self._deliver(
            conv, OutboundMessage(text=record.text, idempotency_key=idempotency_key)
        )

    async def edit(self, conv: ConversationRef, message_id: str, text: str, *, key: str) -> None:
        """Replace the text of an earlier message (status messages); failures are logged."""
        channel = self._channels.get(conv.platform)
        if channel is None:
            return
        try:
            await channel.edit(conv, message_id, OutboundMessage(text=text, idempotency_key=key))
        except Exception as exc:
            log.warning("editing %s in %s failed: %s", message_id, conv.id, exc)

    async def redeliver_pending(self, platform: str) -> int:
        """Send messages recorded as pending before a crash; return how many went out."""
        sent = 0
        for record, conv in await self._log.pending_outbound(platform):
            message = OutboundMessage(
                text=record.text, idempotency_key=record.idempotency_key, redelivery=True
            )
            try:
                if await self._deliver(conv, message) is not None:
                    sent += 1
            except DeliveryError:
                log.exception("redelivery of %s failed", record.idempotency_key)
        return sent

    async def _deliver(self, conv: ConversationRef, message: OutboundMessage) -> str | None:
        channel = self._channels.get(conv.platform)
        if channel is None:
            log.warning(
                "no channel for %s; message %s stays pending",
                conv.platform,
                message.idempotency_key,
            )
            return None
        try:
            message_id = await channel.post(conv, message)
        except Exception as exc:
            await self._log.mark_delivery(message.idempotency_key, "failed")
            log.error("posting %s to %s failed: %s", message.idempotency_key, conv.id, exc)
            raise DeliveryError(f"could not post to {conv.platform}: {exc}") from exc
        await self._log.mark_delivery(message.idempotency_key, "sent", message_id)
        return message_id
