"""Files the bot attaches to a thread: recorded before they are sent, sent once after the
reply they belong to, retried with the outbox's backoff, redelivered after a crash.

Each file is one outgoing record of the conversation log (its `file` column holds a
`FileRecord`); a batch (the files of one run report) uploads in order, in a task the
`Uploads` owns, never on the turn's critical path. A refusal that will not change (no
permission, too large, no longer a plain file) is said once per batch and reason, through the
outbox as a normal message; anything else is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from core.ids import ConversationRef
from core.keyed import KeyedLocks
from host.runtime.conversation_log import ConversationLog
from host.runtime.messages import OutboundFile
from host.runtime.ports import Channel, ChannelError, FileRefusal, FileRefused, FileSink

log = logging.getLogger(__name__)

# Files wait for the reply they belong to at most this long (a reply that cannot be posted
# must not keep them forever), re-checking the log at least this often besides each post.
AFTER_REPLY_MAX_WAIT_SECONDS = 600.0
AFTER_REPLY_RECHECK_SECONDS = 2.0

Notify = Callable[[ConversationRef, str, str], Awaitable[object]]


class FileRecord(BaseModel):
    """What the log keeps of one file to attach."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    file: OutboundFile
    batch: str = Field(min_length=1, description="key of the files queued together")
    after: str | None = Field(
        default=None, description="inbound record whose turn's reply goes out first"
    )


@dataclass
class _Refusals:
    """The files of one batch refused for good, by reason, with the platform's words."""

    names: dict[FileRefusal, list[str]] = field(default_factory=dict)
    why: dict[FileRefusal, str] = field(default_factory=dict)

    def add(self, exc: FileRefused, name: str) -> None:
        self.names.setdefault(exc.reason, []).append(name)
        self.why.setdefault(exc.reason, exc.why)


def file_sink(channel: object) -> FileSink | None:
    """Where `channel` takes files: itself, or the channel it wraps (`inner`: the delivery
    boundary that unfences text wraps each adapter, and files carry no text to unfence)."""
    for _ in range(4):  # wrappers nest shallowly; never loop on a cycle
        if isinstance(channel, FileSink):
            return channel
        channel = getattr(channel, "inner", None)
        if channel is None:
            return None
    return None


def refusal_text(names: Sequence[str], why: str) -> str:
    """The one notice per refusal: which files, and why in plain words."""
    shown = ", ".join(f"`{name}`" for name in names)
    return f"I couldn't attach {shown}: {why}"


class Uploads:
    """Upload batches in the background, one task per batch (see the module doc)."""

    def __init__(
        self,
        conversation_log: ConversationLog,
        channels: Mapping[str, Channel],
        notify: Notify,
        *,
        retry_delays: Sequence[float],
    ) -> None:
        self._log = conversation_log
        self._channels = channels
        self._notify = notify
        self._retry_delays = tuple(retry_delays)
        self._locks = KeyedLocks()
        self._batches: dict[str, asyncio.Task[None]] = {}
        # Set (and replaced) whenever the outbox posts something: files waiting for a reply
        # look again then, not on a timer alone.
        self._posted = asyncio.Event()

    def posted(self) -> None:
        """Something went out: waiting batches re-check whether their reply did."""
        self._posted.set()
        self._posted = asyncio.Event()

    async def queue(
        self,
        conv: ConversationRef,
        files: Sequence[OutboundFile],
        *,
        key: str,
        after: str | None,
    ) -> None:
        """Record `files` (idempotent by `key` and position) and start uploading them in
        the background; returns once they are recorded."""
        items: list[tuple[str, FileRecord]] = []
        for index, file in enumerate(files):
            record = FileRecord(file=file, batch=key, after=after)
            logged = await self._log.record_outbound(
                conv,
                idempotency_key=f"{key}:{index}",
                text=f"📎 {file.name}",
                file=record.model_dump_json(),
            )
            if logged.delivery in ("pending", "failed") and logged.file is not None:
                items.append((logged.idempotency_key, FileRecord.model_validate_json(logged.file)))
        self.start(conv, items, redelivery=False)

    def start(
        self, conv: ConversationRef, items: Sequence[tuple[str, FileRecord]], *, redelivery: bool
    ) -> None:
        """Upload recorded files of one batch in a task of their own (none when that batch
        is already uploading here)."""
        if not items:
            return
        slot = f"{conv.id}\n{items[0][1].batch}"
        if slot in self._batches:
            return
        task = asyncio.get_running_loop().create_task(
            self._run(conv, list(items), redelivery), name=f"uploads:{items[0][1].batch}"
        )
        self._batches[slot] = task
        task.add_done_callback(lambda _: self._batches.pop(slot, None))

    async def idle(self) -> None:
        """Wait until no batch is uploading (tests and shutdown)."""
        while self._batches:
            await asyncio.wait(set(self._batches.values()))

    async def close(self) -> None:
        """Stop uploading; what is left stays recorded and goes out at the next start."""
        tasks = list(self._batches.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    # -- internals -------------------------------------------------------------------------

    async def _run(
        self, conv: ConversationRef, items: list[tuple[str, FileRecord]], redelivery: bool
    ) -> None:
        try:
            after = items[0][1].after
            if after is not None:
                await self._wait_for_reply(after)
            refusals = _Refusals()
            for key, record in items:
                await self._upload(conv, key, record.file, redelivery, refusals)
            for reason, names in refusals.names.items():
                await self._say_refused(conv, items[0][1].batch, reason, names, refusals)
        except Exception:
            log.exception("attaching files to %s failed", conv.id)

    async def _wait_for_reply(self, after: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + AFTER_REPLY_MAX_WAIT_SECONDS
        while not await self._log.turn_answered(after):
            left = deadline - loop.time()
            if left <= 0:
                log.warning("the reply to %s did not go out in time; attaching files now", after)
                return
            posted = self._posted
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(posted.wait(), min(AFTER_REPLY_RECHECK_SECONDS, left))

    async def _upload(
        self,
        conv: ConversationRef,
        key: str,
        file: OutboundFile,
        redelivery: bool,
        refusals: _Refusals,
    ) -> None:
        channel = self._channels.get(conv.platform)
        if channel is None:
            log.warning("no channel for %s; file %s stays pending", conv.platform, key)
            return
        sink = file_sink(channel)
        if sink is None:
            log.info("%s takes no files; %s is not attached", conv.platform, file.name)
            await self._log.mark_delivery(key, "none")
            return
        if "missing_scope" in refusals.names:
            # Refused for the batch's first file: the others would be refused the same way.
            await self._log.mark_delivery(key, "none")
            refusals.names["missing_scope"].append(file.name)
            return
        async with self._locks.hold(key):
            for attempt, delay in enumerate((0.0, *self._retry_delays)):
                if delay:
                    await asyncio.sleep(delay)
                if await self._log.delivery_of(key) not in ("pending", "failed"):
                    return
                again = redelivery or attempt > 0
                # What else of this name and size went out here, so that a retry tells
                # those copies from its own.
                earlier = await self._log.sent_copies(key, file.name, file.size) if again else 0
                try:
                    file_id = await sink.upload(
                        conv, file, idempotency_key=key, redelivery=again, earlier_copies=earlier
                    )
                except FileRefused as exc:
                    log.warning("%s refused %s: %s", conv.platform, file.name, exc)
                    await self._log.mark_delivery(key, "none")
                    refusals.add(exc, file.name)
                    return
                except Exception as exc:
                    await self._log.mark_delivery(key, "failed")
                    log.warning("attaching %s to %s failed: %s", file.name, conv.id, exc)
                    if isinstance(exc, ChannelError) and not exc.retryable:
                        return  # tried again at the next start
                    continue
                await self._log.mark_delivery(key, "sent", file_id)
                self.posted()
                return
            log.error(
                "file %s to %s still failing after %d retries; it stays recorded as failed "
                "and is sent again at the next start",
                key,
                conv.id,
                len(self._retry_delays),
            )

    async def _say_refused(
        self,
        conv: ConversationRef,
        batch: str,
        reason: FileRefusal,
        names: list[str],
        refusals: _Refusals,
    ) -> None:
        # Its own idempotency key: said once however often the batch is tried.
        text = refusal_text(names, refusals.why[reason])
        try:
            await self._notify(conv, text, f"{batch}:refused:{reason}")
        except RuntimeError as exc:  # the outbox's DeliveryError: it retries the notice
            log.warning("could not say that files were refused in %s: %s", conv.id, exc)


__all__ = [
    "AFTER_REPLY_MAX_WAIT_SECONDS",
    "FileRecord",
    "Uploads",
    "refusal_text",
]
