"""Files through the outbox: recorded first, sent once after the reply they belong to, never
holding the reply back, retried when the platform may change its mind, said once when it
will not, and sent exactly once across a crash between record and send."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from core.ids import ConversationRef
from host.conversation.outbox import Outbox
from host.conversation.run_files import report_turn_key
from host.runtime.conversation_log import ConversationLog
from host.runtime.messages import OutboundFile, OutboundMessage
from host.runtime.ports import ChannelError, FileRefused
from tests.fakes.recording_channel import RecordingChannel

CONV = ConversationRef("test", "W", "C", "t1")
NO_SCOPE = "this workspace hasn't given me permission to upload files (files:write)."


class FileChannel(RecordingChannel):
    """A channel that takes files too: records every upload attempt and what it shows, in
    one timeline with the posts. `refuse` and `fail_uploads` make the platform say no."""

    def __init__(
        self, *, refuse: FileRefused | None = None, fail_uploads: int = 0, lose_first: bool = False
    ) -> None:
        super().__init__("test")
        self.timeline: list[str] = []
        self.attempts: list[tuple[str, bool]] = []  # (file name, redelivery)
        self.shown: dict[str, str] = {}  # idempotency key -> file id, as the platform has it
        self.refuse = refuse
        self.fail_uploads = fail_uploads
        # The platform keeps the first upload but the answer is lost (a timeout).
        self.lose_first = lose_first
        self.gate: asyncio.Event | None = None
        self.uploading = asyncio.Event()
        self._file_ids = itertools.count(1)

    async def post(self, conv: ConversationRef, message: OutboundMessage) -> str:
        posted = await super().post(conv, message)
        self.timeline.append(f"post:{message.text}")
        return posted

    async def upload(
        self,
        conv: ConversationRef,
        file: OutboundFile,
        *,
        idempotency_key: str,
        redelivery: bool,
        earlier_copies: int = 0,
    ) -> str:
        self.attempts.append((file.name, redelivery))
        self.uploading.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.refuse is not None:
            raise self.refuse
        if self.fail_uploads > 0:
            self.fail_uploads -= 1
            raise ChannelError("ratelimited", retryable=True)
        if redelivery and idempotency_key in self.shown:
            return self.shown[idempotency_key]
        file_id = f"F{next(self._file_ids)}"
        self.shown[idempotency_key] = file_id
        self.timeline.append(f"file:{file.name}:{file.path.read_bytes().decode()}")
        if self.lose_first:
            self.lose_first = False
            raise ConnectionError("the answer never came")
        return file_id

    @property
    def files(self) -> list[str]:
        return [entry for entry in self.timeline if entry.startswith("file:")]


def _file(tmp_path: Path, name: str, text: str = "data") -> OutboundFile:
    path = tmp_path / name
    path.write_text(text)
    return OutboundFile(name=name, path=path, size=path.stat().st_size)


def _outbox(log: ConversationLog, channel: FileChannel | None) -> Outbox:
    channels = {"test": channel} if channel is not None else {}
    return Outbox(log, channels, retry_delays=(0.0, 0.0, 0.0))


async def _report_turn(log: ConversationLog, key: str) -> str:
    """Record a report turn's inbound message as the service does; return its record key."""
    event = f"system:{key}"
    await log.claim_inbound(
        CONV,
        event_keys=[f"test:event:{event}"],
        ttl_seconds=60,
        author_id="raven-system",
        author_name="raven",
        text="report",
        payload="{}",
    )
    return report_turn_key(CONV, key)


async def test_files_follow_the_reply_they_belong_to(
    conversation_log: ConversationLog, tmp_path: Path
) -> None:
    channel = FileChannel()
    outbox = _outbox(conversation_log, channel)
    after = await _report_turn(conversation_log, "run:r1:report")
    await outbox.attach(CONV, [_file(tmp_path, "design.svg", "<svg/>")], key="k", after=after)
    # The turn runs and replies only now: the file waited for it.
    await conversation_log.start_turn(
        CONV, turn_id="T1", kind="system", author_id="raven-system", author_name="raven"
    )
    row = await conversation_log.outbound(after)
    assert row is not None
    await conversation_log.mark_handled(row.id, "T1")
    await conversation_log.finish_turn("T1", status="completed")
    await outbox.send(CONV, "here is the design", idempotency_key="turn:T1:reply")
    await outbox.idle()
    assert channel.timeline == ["post:here is the design", "file:design.svg:<svg/>"]


async def test_a_slow_upload_never_holds_back_the_reply(
    conversation_log: ConversationLog, tmp_path: Path
) -> None:
    channel = FileChannel()
    channel.gate = asyncio.Event()  # the platform takes its time with files
    outbox = _outbox(conversation_log, channel)
    await outbox.attach(CONV, [_file(tmp_path, "big.png")], key="k")
    async with asyncio.timeout(5):
        await channel.uploading.wait()
        await outbox.send(CONV, "the reply", idempotency_key="turn:T2:reply")
    assert channel.texts == ["the reply"] and channel.files == []  # the upload is still out
    channel.gate.set()
    await outbox.idle()
    assert channel.files == ["file:big.png:data"]


async def test_a_crash_between_record_and_send_sends_it_exactly_once(
    conversation_log: ConversationLog, tmp_path: Path
) -> None:
    # Recorded by a process whose platform never answered (it died before sending).
    await _outbox(conversation_log, None).attach(CONV, [_file(tmp_path, "a.patch")], key="k")
    await _outbox(conversation_log, None).idle()
    channel = FileChannel()
    restarted = _outbox(conversation_log, channel)
    await restarted.redeliver_pending("test")
    await restarted.idle()
    assert channel.files == ["file:a.patch:data"]
    record = await conversation_log.outbound("k:0")
    assert record is not None and record.delivery == "sent" and record.text == "📎 a.patch"
    again = _outbox(conversation_log, channel)  # another restart: nothing is pending
    await again.redeliver_pending("test")
    await again.idle()
    assert channel.files == ["file:a.patch:data"]


async def test_a_redelivery_the_platform_already_has_is_not_doubled(
    conversation_log: ConversationLog, tmp_path: Path
) -> None:
    # The platform kept the upload but its answer was lost: the retry is a redelivery, and
    # the platform's copy counts.
    channel = FileChannel(lose_first=True)
    outbox = _outbox(conversation_log, channel)
    await outbox.attach(CONV, [_file(tmp_path, "out.md")], key="k")
    await outbox.idle()
    assert channel.files == ["file:out.md:data"]
    assert channel.attempts == [("out.md", False), ("out.md", True)]
    assert await conversation_log.delivery_of("k:0") == "sent"


async def test_a_rate_limit_is_retried_and_delivered(
    conversation_log: ConversationLog, tmp_path: Path
) -> None:
    channel = FileChannel(fail_uploads=2)
    outbox = _outbox(conversation_log, channel)
    await outbox.attach(CONV, [_file(tmp_path, "chart.png")], key="k")
    await outbox.idle()
    assert len(channel.attempts) == 3
    assert channel.files == ["file:chart.png:data"]
    assert channel.texts == []  # nothing to tell: it went out


@pytest.mark.parametrize("restarts", [0, 1])
async def test_a_refusal_is_said_once_and_not_retried(
    conversation_log: ConversationLog, tmp_path: Path, restarts: int
) -> None:
    refused = FileRefused("missing_scope", reason="missing_scope", why=NO_SCOPE)
    channel = FileChannel(refuse=refused)
    outbox = _outbox(conversation_log, channel)
    files = [_file(tmp_path, "design.svg"), _file(tmp_path, "report.md")]
    await outbox.send(CONV, "the reply", idempotency_key="turn:T3:reply")
    await outbox.attach(CONV, files, key="k")
    await outbox.idle()
    for _ in range(restarts):
        again = _outbox(conversation_log, channel)
        await again.redeliver_pending("test")
        await again.idle()
    # One attempt: the second file would be refused the same way.
    assert channel.attempts == [("design.svg", False)]
    assert channel.texts == [
        "the reply",
        f"I couldn't attach `design.svg`, `report.md`: {NO_SCOPE}",
    ]
