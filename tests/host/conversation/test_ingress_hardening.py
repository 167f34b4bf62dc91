"""Regression tests for the ingress/egress spine: stop is durable, system turns are never
refused, failed posts are retried, a flooding author hears "busy" once, ingress never waits
on a post."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import MappingProxyType

from agents.tools import ToolRegistry
from bot.app import build_runtime, shutdown
from bot.settings import load_settings
from core.ids import ConversationRef
from core.store import Store
from host.agent.host_agent import HostAgent
from host.conversation.lanes import LaneManager
from host.conversation.outbox import Outbox
from host.conversation.service import ConversationConfig, ConversationParts, ConversationService
from host.runtime.conversation_log import ConversationLog
from host.runtime.events import EventBus
from host.runtime.messages import OutboundMessage
from host.runtime.ports import ChannelError
from host.runtime.turn import TurnContext
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.fakes.recording_channel import RecordingChannel
from tests.helpers import eventually
from tests.host.conversation.test_conversations import GatedProvider, _msg

CONV = ConversationRef("test", "W", "C", "t1")


def _service(
    log: ConversationLog,
    channel: RecordingChannel,
    provider: GatedProvider,
    *,
    queue_cap: int = 50,
    clock: list[float] | None = None,
    retry_delays: tuple[float, ...] = (),
) -> tuple[ConversationService, LaneManager, Outbox]:
    lanes = LaneManager(EventBus(), queue_cap=queue_cap)
    outbox = Outbox(log, MappingProxyType({channel.platform: channel}), retry_delays=retry_delays)
    now = clock if clock is not None else [0.0]
    service = ConversationService(
        ConversationParts(
            log, lanes, HostAgent(provider, ToolRegistry[TurnContext]()), outbox, EventBus()
        ),
        ConversationConfig(dedup_ttl_seconds=60),
        clock=lambda: now[0],
    )
    return service, lanes, outbox


async def test_stopped_queued_messages_do_not_come_back_after_a_restart(
    store: Store, conversation_log: ConversationLog
) -> None:
    provider = GatedProvider()
    provider.gate.clear()
    channel = RecordingChannel()
    service, lanes, _ = _service(conversation_log, channel, provider)
    running = await service.accept(_msg("one", "e1"))
    await provider.entered.wait()
    queued = await service.accept(_msg("two", "e2"))
    assert running is not None and queued is not None
    assert await service.accept(_msg("stop", "e3")) is None
    assert queued.cancelled() and running.cancelled()
    rows = await store.fetchall(
        "SELECT text, handled, stopped FROM messages WHERE direction = 'in' ORDER BY id"
    )
    assert [tuple(r) for r in rows] == [("one", 1, 0), ("two", 1, 1), ("stop", 1, 0)]
    await lanes.drain(1)

    # The next start: nothing that `stop` cancelled runs again.
    provider.gate.set()
    seen_before = len(provider.seen)
    restarted, lanes2, _ = _service(conversation_log, RecordingChannel(), provider)
    assert await conversation_log.unhandled_inbound("test") == []
    await restarted.recover("test")
    await restarted.quiesce(CONV)
    assert len(provider.seen) == seen_before
    await lanes2.drain(1)


async def test_system_turns_are_not_refused_by_the_user_queue_cap(
    conversation_log: ConversationLog,
) -> None:
    provider = GatedProvider()
    provider.gate.clear()
    channel = RecordingChannel()
    service, lanes, _ = _service(conversation_log, channel, provider, queue_cap=1)
    running = await service.accept(_msg("one", "e1"))
    await provider.entered.wait()
    queued = await service.accept(_msg("two", "e2"))
    assert running is not None and queued is not None
    # The lane is full for users; the bot's own report still queues and runs.
    await service.system_turn(CONV, "run report: all done", key="run:r1:report")
    await eventually(lambda: lanes.status(CONV.id).queued == 2)
    provider.gate.set()
    await service.quiesce(CONV)
    assert not any("requests waiting" in t for t in channel.texts)
    assert any(t.endswith("run report: all done") for t in channel.texts)
    await lanes.drain(1)


async def test_lane_cap_counts_only_user_turns() -> None:
    lanes = LaneManager(EventBus(), queue_cap=1)
    gate = asyncio.Event()
    started = asyncio.Event()

    async def running() -> None:
        started.set()
        await gate.wait()

    first = lanes.submit("k", running)
    await started.wait()
    second = lanes.submit("k", gate.wait)
    reports = [lanes.submit("k", gate.wait, kind="system") for _ in range(5)]
    assert lanes.status("k").queued == 6
    gate.set()
    await asyncio.gather(first, second, *reports)
    await lanes.drain(1)


async def test_flooding_author_hears_busy_once_per_window(
    conversation_log: ConversationLog,
) -> None:
    provider = GatedProvider()
    provider.gate.clear()
    channel = RecordingChannel()
    clock = [100.0]
    service, lanes, _ = _service(conversation_log, channel, provider, queue_cap=1, clock=clock)
    running = await service.accept(_msg("one", "e1"))
    await provider.entered.wait()
    await service.accept(_msg("two", "e2"))
    for i in range(30):
        assert await service.accept(_msg(f"flood {i}", f"f{i}")) is None
    busy = [t for t in channel.texts if "requests waiting" in t]
    assert len(busy) == 1 and "60 s" in busy[0]
    # Another author is told separately; the first author again after the window.
    await service.accept(_msg("me too", "o1", author="U2"))
    clock[0] += 61
    await service.accept(_msg("still there?", "f99"))
    busy = [t for t in channel.texts if "requests waiting" in t]
    assert len(busy) == 3
    provider.gate.set()
    assert running is not None
    await running
    await lanes.drain(1)


class GatedChannel(RecordingChannel):
    """Posts block until `release` is set (a slow or rate-limited platform)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.started = asyncio.Event()

    async def post(self, conv: ConversationRef, message: OutboundMessage) -> str:
        self.started.set()
        await self.release.wait()
        return await super().post(conv, message)


async def test_receive_returns_before_control_replies_are_posted(
    conversation_log: ConversationLog,
) -> None:
    channel = GatedChannel()
    service, lanes, _ = _service(conversation_log, channel, GatedProvider())
    # With the post blocked, receive() still returns: it only persists.
    assert await service.receive(_msg("status", "e1")) is True
    assert await service.receive(_msg("help", "e2")) is True
    assert await service.receive(_msg("help", "e2")) is False  # a duplicate
    await channel.started.wait()
    assert channel.posts == []
    channel.release.set()
    await service.quiesce(CONV)
    assert [t.split()[0] for t in channel.texts] == ["**Status**:", "**raven-bot**"]
    await lanes.drain(1)


async def test_receive_keeps_order_within_a_conversation(
    conversation_log: ConversationLog,
) -> None:
    provider = GatedProvider()
    channel = RecordingChannel()
    service, lanes, _ = _service(conversation_log, channel, provider)
    for i in range(5):
        await service.receive(_msg(f"msg {i}", f"e{i}"))
    await service.quiesce(CONV)
    assert channel.texts == [f"echo: msg {i}" for i in range(5)]
    await lanes.drain(1)


class FlakyChannel(RecordingChannel):
    """Fails the first `fail_posts` posts; `permanent` makes failures non-retryable."""

    def __init__(self, fail_posts: int, *, permanent: bool = False) -> None:
        super().__init__(fail_posts=fail_posts)
        self.permanent = permanent
        self.attempts = 0

    async def post(self, conv: ConversationRef, message: OutboundMessage) -> str:
        self.attempts += 1
        if self.permanent and self.fail_posts > 0:
            self.fail_posts -= 1
            raise ChannelError("channel_not_found", retryable=False)
        return await super().post(conv, message)


async def test_failed_reply_is_retried_in_the_running_process(
    conversation_log: ConversationLog,
) -> None:
    channel = FlakyChannel(fail_posts=2)
    service, lanes, outbox = _service(
        conversation_log, channel, GatedProvider(), retry_delays=(0.01, 0.01, 0.01)
    )
    turn = await service.accept(_msg("hello", "e1"))
    assert turn is not None
    await asyncio.wait({turn})  # the first post failed: the turn reports it
    await outbox.idle()
    assert channel.texts == ["echo: hello"]
    assert channel.attempts == 3
    assert all(m.redelivery for _, m in channel.posts)
    assert await conversation_log.undelivered(CONV.id) == []
    await lanes.drain(1)


async def test_permanent_failure_is_not_retried_and_shows_in_status(
    conversation_log: ConversationLog,
) -> None:
    channel = FlakyChannel(fail_posts=1, permanent=True)
    service, lanes, outbox = _service(
        conversation_log, channel, GatedProvider(), retry_delays=(0.01, 0.01)
    )
    turn = await service.accept(_msg("hello", "e1"))
    assert turn is not None
    await asyncio.wait({turn})
    await outbox.idle()
    assert channel.attempts == 1 and channel.posts == []
    await service.accept(_msg("status", "e2"))
    assert "1 message(s) here could not be delivered" in channel.texts[-1]
    assert "echo: hello" in channel.texts[-1]
    await lanes.drain(1)


async def test_retries_give_up_after_the_last_delay_and_stay_failed(
    conversation_log: ConversationLog,
) -> None:
    channel = FlakyChannel(fail_posts=10)
    outbox = Outbox(conversation_log, MappingProxyType({"test": channel}), retry_delays=(0.0,) * 3)
    try:
        await outbox.send(CONV, "hi", idempotency_key="k1")
    except Exception as exc:
        assert "could not post" in str(exc)
    await outbox.idle()
    assert channel.attempts == 4
    assert [m.text for m in await conversation_log.undelivered(CONV.id)] == ["hi"]


async def test_recover_survives_a_platform_that_is_down(
    conversation_log: ConversationLog,
) -> None:
    await conversation_log.start_turn(
        CONV, turn_id="dead", kind="user", author_id="U1", author_name="u"
    )
    await conversation_log.interrupt_running()
    channel = RecordingChannel(fail_posts=100)
    service, lanes, _ = _service(conversation_log, channel, GatedProvider())
    await service.recover("test")  # must not raise: the notice is recorded and retried
    assert await conversation_log.unreported_interruptions() == []
    (notice,) = await conversation_log.undelivered(CONV.id)
    assert notice.text.startswith("⚠️ A restart interrupted my work")
    await service.close()
    await lanes.drain(1)


class StatusFailsChannel(FakeChatAdapter):
    """Posting a run's status message always fails; everything else goes through."""

    def __init__(self) -> None:
        super().__init__("test")
        self.failed_status = False

    async def post(self, conv: ConversationRef, message: OutboundMessage) -> str:
        if message.idempotency_key.endswith(":status"):
            self.failed_status = True
            raise ConnectionError("platform unavailable")
        return await super().post(conv, message)


async def test_a_failed_status_post_does_not_lose_the_run_report(isolated_env: Path) -> None:
    adapter = StatusFailsChannel()
    runtime = await build_runtime(load_settings(), [lambda: adapter])
    try:
        msg = _msg("a1: raven: say hi", "e1")
        turn = await runtime.service.accept(msg)
        assert turn is not None
        await turn
        await runtime.service.quiesce(msg.conversation)
        assert adapter.failed_status
        await eventually(
            lambda: any(t.startswith("**Run `") and " failed** " in t for t in adapter.texts)
        )
    finally:
        await shutdown(runtime)


async def test_stop_at_any_point_of_a_turn_leaves_no_turn_running(
    store: Store, conversation_log: ConversationLog
) -> None:
    # Regression: a cancel landing in the commit that records a turn as running left it
    # `running` for good. Stop each turn after k loop steps, for k until turns complete.
    channel = RecordingChannel()
    service, lanes, _ = _service(conversation_log, channel, GatedProvider())
    for k in range(60):
        turn = await service.receive(_msg(f"msg {k}", f"e{k}"))
        assert turn
        for _ in range(k):
            await asyncio.sleep(0)
        await service.accept(_msg("stop", f"s{k}"))
        await service.quiesce(CONV)
        rows = await store.fetchall("SELECT id FROM turns WHERE status = 'running'")
        assert rows == [], f"stop after {k} steps left a turn running"
    await lanes.drain(1)
