"""Outgoing messages and files: recorded before they are sent, sent once, retried, redelivered
after a crash. Files go out after the reply they belong to (see `host.conversation.uploads`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager

from core.ids import ConversationRef
from core.keyed import KeyedLocks
from host.conversation.uploads import FileRecord, Uploads
from host.runtime.conversation_log import ConversationLog
from host.runtime.messages import ChartData, OutboundFile, OutboundMessage
from host.runtime.ports import Channel, ChannelError, ThreadStarts

log = logging.getLogger(__name__)

# Seconds between attempts after a failed post: about four minutes in all, then it waits for
# the next start (recover() sends failed messages again).
RETRY_DELAYS: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)


class DeliveryError(RuntimeError):
    """A message could not be delivered; it stays recorded as failed.

    `retryable` is False when the platform's answer will not change (no retry is scheduled).
    """

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class Outbox:
    """Persist-then-send for every message the bot posts."""

    def __init__(
        self,
        conversation_log: ConversationLog,
        channels: Mapping[str, Channel],
        *,
        retry_delays: Sequence[float] = RETRY_DELAYS,
    ) -> None:
        self._log = conversation_log
        self._channels = channels
        self._retry_delays = tuple(retry_delays)
        # One in-flight send per idempotency key, so concurrent callers cannot double-post.
        self._inflight = KeyedLocks()
        # Background retries of failed posts, one per idempotency key.
        self._retries: dict[str, asyncio.Task[None]] = {}
        # Files, uploaded in tasks of their own after the reply they belong to.
        self._uploads = Uploads(
            conversation_log,
            channels,
            lambda conv, text, key: self.send(conv, text, idempotency_key=key),
            retry_delays=self._retry_delays,
        )

    def channel_level(self, conv: ConversationRef) -> ConversationRef | None:
        """Where a post starts a thread of its own in `conv`'s channel (None: the platform
        or the conversation has no such place)."""
        channel = self._channels.get(conv.platform)
        return channel.channel_level(conv) if isinstance(channel, ThreadStarts) else None

    async def send(
        self,
        conv: ConversationRef,
        text: str,
        *,
        idempotency_key: str,
        turn_id: str | None = None,
        chart: ChartData | None = None,
    ) -> str | None:
        """Record the message (idempotently), then post it unless it was already sent; a
        `chart` is drawn where the platform can (not recorded: a redelivery has the text).

        Returns the platform message id, or None when no channel serves the platform. A failed
        post raises `DeliveryError` and is retried in the background with backoff.
        """
        async with self._key_lock(idempotency_key):
            record = await self._log.record_outbound(
                conv, idempotency_key=idempotency_key, text=text, turn_id=turn_id
            )
            if record.delivery == "sent":
                return record.platform_message_id
            message = OutboundMessage(
                text=record.text, idempotency_key=idempotency_key, chart=chart
            )
            try:
                return await self._deliver(conv, message)
            except DeliveryError as exc:
                if exc.retryable:
                    self._schedule_retry(conv, message)
                raise

    async def attach(
        self,
        conv: ConversationRef,
        files: Sequence[OutboundFile],
        *,
        key: str,
        after: str | None = None,
    ) -> None:
        """Record `files` for the thread (idempotent by `key`), then upload them in the
        background, once the turn that took up the inbound record `after` (its key) has
        replied; returns once they are recorded, so nothing waits for an upload."""
        await self._uploads.queue(conv, files, key=key, after=after)

    async def edit(
        self,
        conv: ConversationRef,
        message_id: str,
        text: str,
        *,
        key: str,
        chart: ChartData | None = None,
    ) -> None:
        """Replace the text of an earlier message (status messages), and its `chart` where
        the platform draws one; failures are logged."""
        channel = self._channels.get(conv.platform)
        if channel is None:
            return
        try:
            await channel.edit(
                conv, message_id, OutboundMessage(text=text, idempotency_key=key, chart=chart)
            )
        except Exception as exc:
            log.warning("editing %s in %s failed: %s", message_id, conv.id, exc)

    async def redeliver_pending(self, platform: str) -> int:
        """Send messages recorded as pending before a crash; return how many went out."""
        sent = 0
        files: dict[tuple[str, str], tuple[ConversationRef, list[tuple[str, FileRecord]]]] = {}
        for record, conv in await self._log.pending_outbound(platform):
            if record.file is not None:
                item = FileRecord.model_validate_json(record.file)
                batch = files.setdefault((conv.id, item.batch), (conv, []))
                batch[1].append((record.idempotency_key, item))
                continue
            message = OutboundMessage(
                text=record.text, idempotency_key=record.idempotency_key, redelivery=True
            )
            try:
                async with self._key_lock(record.idempotency_key):
                    if await self._deliver(conv, message) is not None:
                        sent += 1
            except DeliveryError as exc:
                log.warning("redelivery of %s failed: %s", record.idempotency_key, exc)
                if exc.retryable:
                    self._schedule_retry(conv, message)
        # Files go out in the background, after their replies (which may be among these).
        for conv, items in files.values():
            self._uploads.start(conv, items, redelivery=True)
        return sent

    def retrying(self, conv: ConversationRef) -> int:
        """How many of the conversation's messages are waiting for another attempt."""
        prefix = f"{conv.id}\n"
        return sum(1 for key in self._retries if key.startswith(prefix))

    async def idle(self) -> None:
        """Wait until no retry is scheduled and no file is uploading (tests and shutdown)."""
        while self._retries:
            await asyncio.wait(set(self._retries.values()))
        await self._uploads.idle()

    async def close(self) -> None:
        """Stop retrying; messages still failing stay recorded and go out at the next start."""
        await self._uploads.close()
        tasks = list(self._retries.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    # -- internals -------------------------------------------------------------------------

    def _key_lock(self, idempotency_key: str) -> AbstractAsyncContextManager[None]:
        return self._inflight.hold(idempotency_key)

    def _schedule_retry(self, conv: ConversationRef, message: OutboundMessage) -> None:
        slot = f"{conv.id}\n{message.idempotency_key}"
        if slot in self._retries or not self._retry_delays:
            return
        task = asyncio.get_running_loop().create_task(
            self._retry(conv, message), name=f"outbox-retry:{message.idempotency_key}"
        )
        self._retries[slot] = task
        task.add_done_callback(lambda _: self._retries.pop(slot, None))

    async def _retry(self, conv: ConversationRef, message: OutboundMessage) -> None:
        # The platform may have the message although the post failed (timeout after it was
        # accepted): every retry is a redelivery, which adapters check before posting.
        message = message.model_copy(update={"redelivery": True})
        attempts = len(self._retry_delays)
        for attempt, delay in enumerate(self._retry_delays, start=1):
            await asyncio.sleep(delay)
            async with self._key_lock(message.idempotency_key):
                if await self._log.delivery_of(message.idempotency_key) == "sent":
                    return
                try:
                    await self._deliver(conv, message)
                except DeliveryError as exc:
                    if not exc.retryable:
                        log.error(
                            "giving up on %s in %s: %s", message.idempotency_key, conv.id, exc
                        )
                        return
                    log.warning(
                        "retry %d/%d of %s failed: %s",
                        attempt,
                        attempts,
                        message.idempotency_key,
                        exc,
                    )
                    continue
                log.info("message %s delivered on retry %d", message.idempotency_key, attempt)
                return
        log.error(
            "message %s to %s still failing after %d retries; it stays recorded as failed and "
            "is sent again at the next start",
            message.idempotency_key,
            conv.id,
            attempts,
        )

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
            retryable = not isinstance(exc, ChannelError) or exc.retryable
            raise DeliveryError(
                f"could not post to {conv.platform}: {exc}", retryable=retryable
            ) from exc
        await self._log.mark_delivery(message.idempotency_key, "sent", message_id)
        self._uploads.posted()
        return message_id
