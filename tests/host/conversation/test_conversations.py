"""Conversation service: durable ingress, dedup, control words, failures, recovery."""

from __future__ import annotations

import asyncio
from types import MappingProxyType

import pytest

from agents.models.offline import OfflineProvider
from agents.models.provider import ModelProvider
from agents.models.types import Message, ModelError, ModelReply, TextBlock, ToolSpec
from agents.tools import ToolRegistry
from core.ids import ConversationRef
from core.store import Store
from host.agent.host_agent import HostAgent
from host.conversation.lanes import LaneManager
from host.conversation.outbox import Outbox
from host.conversation.service import (
    ConversationConfig,
    ConversationParts,
    ConversationService,
    control_word,
)
from host.runtime.conversation_log import ConversationLog
from host.runtime.events import EventBus, TurnRequested
from host.runtime.messages import InboundMessage
from host.runtime.turn import TurnContext
from tests.fakes.providers import TestProvider
from tests.fakes.recording_channel import RecordingChannel
from tests.helpers import eventually


class GatedProvider(TestProvider):
    """Answers 'echo: <text>' once its gate opens; can be told to fail."""

    label = "gated"

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.gate.set()
        self.entered = asyncio.Event()
        self.error: Exception | None = None
        self.seen: list[list[Message]] = []

    async def reply(
        self, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> ModelReply:
        self.seen.append(messages)
        self.entered.set()
        await self.gate.wait()
        if self.error is not None:
            raise self.error
        last = messages[-1].content[0]
        assert isinstance(last, TextBlock)
        return ModelReply(
            content=[TextBlock(text="echo: " + last.text.splitlines()[-1])],
            stop_reason="end_turn",
        )


def _service(
    log: ConversationLog, channel: RecordingChannel, provider: ModelProvider, **lane_kw: int
) -> tuple[ConversationService, LaneManager]:
    lanes = LaneManager(EventBus(), **lane_kw)  # type: ignore[arg-type]
    outbox = Outbox(log, MappingProxyType({channel.platform: channel}))
    host = HostAgent(provider, ToolRegistry[TurnContext]())
    service = ConversationService(
        ConversationParts(log, lanes, host, outbox, EventBus()),
        ConversationConfig(dedup_ttl_seconds=60),
    )
    return service, lanes


def _msg(text: str, event: str, *, author: str = "U1", thread: str = "t1") -> InboundMessage:
    return InboundMessage(
        platform="test",
        workspace="W",
        channel="C",
        thread=thread,
        message_id=event,
        author_id=author,
        author_name=f"user-{author}",
        text=text,
        event_id=event,
    )


def test_control_words() -> None:
    assert control_word(" Stop! ") == "stop"
    assert control_word("status") == "status"
    assert control_word("help?") == "help"
    assert control_word("stop the build") is None


async def test_turn_reply_and_records(conversation_log: ConversationLog, store: Store) -> None:
    channel = RecordingChannel()
    service, lanes = _service(conversation_log, channel, GatedProvider())
    turn = await service.accept(_msg("hello", "e1"))
    assert turn is not None
    outcome = await turn
    assert outcome.status == "completed" and outcome.text == "echo: hello"
    assert channel.texts == ["echo: hello"]
    record = await conversation_log.turn(outcome.turn_id)
    assert record is not None and record.status == "completed" and record.model_calls == 1
    rows = await store.fetchall("SELECT direction, delivery, handled FROM messages ORDER BY id")
    assert [tuple(r) for r in rows] == [("in", "none", 1), ("out", "sent", 1)]
    await lanes.drain(1)


async def test_duplicate_event_gives_one_turn(conversation_log: ConversationLog) -> None:
    channel = RecordingChannel()
    service, lanes = _service(conversation_log, channel, GatedProvider())
    first = await service.accept(_msg("hello", "e1"))
    assert first is not None
    assert await service.accept(_msg("hello", "e1")) is None
    await first
    assert len(channel.posts) == 1
    await lanes.drain(1)


async def test_extra_event_id_dedups_across_ids(conversation_log: ConversationLog) -> None:
    channel = RecordingChannel()
    service, lanes = _service(conversation_log, channel, GatedProvider())
    a = _msg("hi", "ev-a").model_copy(update={"extra_event_ids": ("client-1",)})
    b = _msg("hi", "ev-b").model_copy(update={"extra_event_ids": ("client-1",)})
    first = await service.accept(a)
    assert first is not None
    assert await service.accept(b) is None
    await first
    await lanes.drain(1)


async def test_history_labels_authors(conversation_log: ConversationLog) -> None:
    provider = GatedProvider()
    channel = RecordingChannel()
    service, lanes = _service(conversation_log, channel, provider)
    for i, author in enumerate(["U1", "U2"]):
        turn = await service.accept(_msg(f"msg {i}", f"e{i}", author=author))
        assert turn is not None
        await turn
    roles = [m.role for m in provider.seen[-1]]
    assert roles == ["user", "assistant", "user"]
    first = provider.seen[-1][0].content[0]
    last = provider.seen[-1][-1].content[0]
    assert isinstance(first, TextBlock) and first.text.startswith("user-U1 (U1):")
    assert isinstance(last, TextBlock)
    assert last.text.startswith("Message to answer, from user-U2 (U2):")
    await lanes.drain(1)


async def test_model_error_is_reported_as_failure(conversation_log: ConversationLog) -> None:
    provider = GatedProvider()
    provider.error = ModelError("Anthropic API returned 500 after 5 attempts")
    channel = RecordingChannel()
    service, lanes = _service(conversation_log, channel, provider)
    turn = await service.accept(_msg("hello", "e1"))
    assert turn is not None
    with pytest.raises(ModelError):
        await turn
    assert channel.texts == [
        "⚠️ I couldn't complete that request: Anthropic API returned 500 after 5 attempts"
    ]
    failed = await conversation_log.turn(
        (await conversation_log.history("test:W:C:t1", limit=5))[-1].turn_id or ""
    )
    assert failed is not None and failed.status == "failed"
    await lanes.drain(1)


async def test_stop_cancels_running_turn(conversation_log: ConversationLog) -> None:
    provider = GatedProvider()
    provider.gate.clear()
    channel = RecordingChannel()
    service, lanes = _service(conversation_log, channel, provider)
    turn = await service.accept(_msg("long job", "e1"))
    assert turn is not None
    await provider.entered.wait()
    assert await service.accept(_msg("status", "e2")) is None
    assert "running a request by" in channel.texts[-1]
    assert await service.accept(_msg("stop", "e3")) is None
    assert channel.texts[-1].startswith("Stopped: cancelled 1 request(s) in this thread")
    assert turn.cancelled()
    rows = await conversation_log.history("test:W:C:t1", limit=10)
    turn_id = rows[0].turn_id
    assert turn_id is not None
    record = await conversation_log.turn(turn_id)
    assert record is not None and record.status == "cancelled"
    # The lane still works after a stop.
    provider.gate.set()
    again = await service.accept(_msg("again", "e4"))
    assert again is not None
    assert (await again).text == "echo: again"
    await lanes.drain(1)


async def test_busy_when_queue_full(conversation_log: ConversationLog) -> None:
    provider = GatedProvider()
    provider.gate.clear()
    channel = RecordingChannel()
    service, lanes = _service(conversation_log, channel, provider, queue_cap=1)
    running = await service.accept(_msg("one", "e1"))
    await provider.entered.wait()
    queued = await service.accept(_msg("two", "e2"))
    assert running is not None and queued is not None
    assert await service.accept(_msg("three", "e3")) is None
    assert "already has 1 requests waiting" in channel.texts[-1]
    provider.gate.set()
    await running
    await queued
    await lanes.drain(1)


async def test_recover_reports_interruptions_resumes_and_redelivers(
    conversation_log: ConversationLog,
) -> None:
    conv = ConversationRef("test", "W", "C", "t1")
    # A turn that was running when the process died.
    await conversation_log.start_turn(
        conv, turn_id="dead", kind="user", author_id="U1", author_name="u"
    )
    # A message accepted but never taken up, and a reply recorded but never confirmed sent.
    unhandled = _msg("resume me", "e9")
    await conversation_log.claim_inbound(
        conv,
        event_keys=unhandled.dedup_keys,
        ttl_seconds=60,
        author_id="U1",
        author_name="u",
        text="resume me",
        payload=unhandled.model_dump_json(),
    )
    await conversation_log.record_outbound(
        conv, idempotency_key="turn:old:reply", text="late reply"
    )
    assert [t.id for t in await conversation_log.interrupt_running()] == ["dead"]

    channel = RecordingChannel()
    service, lanes = _service(conversation_log, channel, GatedProvider())
    await service.recover("test")
    await eventually(lambda: len(channel.posts) >= 3)
    # No internal turn id is shown (a turn with a stored request is named by its words).
    assert "interrupted" in channel.texts[0] and "dead" not in channel.texts[0]
    assert channel.texts[1] == "late reply"
    assert channel.texts[2] == "echo: resume me"
    # A second recovery (another restart) repeats nothing.
    await service.recover("test")
    await lanes.drain(1)
    assert len(channel.posts) == 3


async def test_outbox_failure_is_recorded_then_redelivered(
    conversation_log: ConversationLog,
) -> None:
    channel = RecordingChannel(fail_posts=1)
    outbox = Outbox(conversation_log, MappingProxyType({"test": channel}))
    conv = ConversationRef("test", "W", "C", "t1")
    with pytest.raises(Exception, match="could not post"):
        await outbox.send(conv, "hi", idempotency_key="k1")
    assert await outbox.send(conv, "hi", idempotency_key="k1") == "m1"
    # Already sent: a repeat is a no-op that returns the same id.
    assert await outbox.send(conv, "hi", idempotency_key="k1") == "m1"
    await outbox.close()
    assert channel.texts == ["hi"]


async def test_offline_provider_through_service(conversation_log: ConversationLog) -> None:
    channel = RecordingChannel()
    service, lanes = _service(conversation_log, channel, OfflineProvider())
    turn = await service.accept(_msg("what's up?", "e1"))
    assert turn is not None
    await turn
    assert "offline mode" in channel.texts[0]
    await lanes.drain(1)


async def test_dedup_keys_expire_after_their_ttl(store: Store) -> None:
    now = [1000.0]
    log = ConversationLog(store, clock=lambda: now[0])
    conv = ConversationRef("test", "W", "C", "t1")

    async def claim(*keys: str) -> int | None:
        return await log.claim_inbound(
            conv,
            event_keys=list(keys),
            ttl_seconds=10,
            author_id="U1",
            author_name="u",
            text="hi",
            payload="{}",
        )

    assert await claim("k1", "k2") is not None
    now[0] += 5
    assert await claim("k1", "k2") is None
    assert await claim("k9", "k2") is None  # a second id of the same message
    now[0] += 10  # past the TTL, before any purge ran: the key is free again ...
    assert await claim("k3", "k2") is not None
    # ... but the message log still remembers the first event itself.
    assert await claim("k1") is None


async def test_recent_conversations_start_from_a_person_s_message_never_a_firing(
    conversation_log: ConversationLog,
) -> None:
    # Issue 38: a firing is logged under its key (`task:t_…`), not a platform id; handed to
    # an adapter's catch-up as "the newest message", it stopped the read-back.
    channel = RecordingChannel()
    service, lanes = _service(conversation_log, channel, GatedProvider())
    turn = await service.accept(_msg("every morning, check the queue", "1700.0001"))
    assert turn is not None
    await turn
    asked = ConversationRef("test", "W", "C", "t1")
    fired = ConversationRef("test", "W", "C", "1700.0002")  # a firing's thread of its own
    for conv, key in ((asked, "task:t_1:0900"), (fired, "task:t_2:0900")):
        await service.requested_turn(
            TurnRequested(conversation=conv, text="check", key=key, author_id="U1", author_name="u")
        )
    await service.system_turn(asked, "run report", key="run:r1:report")
    await lanes.drain(1)
    assert sorted(await service.recent("test", 0), key=str) == sorted(
        [(asked, "1700.0001"), (fired, None)], key=str
    )
