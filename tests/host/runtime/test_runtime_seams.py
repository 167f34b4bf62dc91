"""The runtime's seams: declared channel features, typed turn origin, the Host's harness and
context sources, TurnCompleted on the bus, and shutdown in reverse start order."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pytest

from agents.harness import Harness
from agents.models.types import Message, ModelReply, TextBlock, ToolSpec
from agents.tools import ToolRegistry
from bot.app import build_runtime, serve, shutdown, start_serving
from bot.channel import ChannelFeatures, Ingress
from bot.schema import all_migrations
from bot.settings import load_settings
from core.ids import ConversationRef
from core.store import Store
from host.agent.host_agent import HostAgent
from host.conversation.lanes import LaneManager
from host.conversation.outbox import Outbox
from host.conversation.service import (
    HELP_TEXT,
    ConversationConfig,
    ConversationParts,
    ConversationService,
)
from host.runtime.conversation_log import ConversationLog
from host.runtime.events import EventBus, TurnCompleted
from host.runtime.messages import OutboundMessage, stored_inbound
from host.runtime.turn import TurnContext
from memory.embeddings import Vectors, normalize_rows
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.fakes.providers import TestProvider
from tests.fakes.recording_channel import RecordingChannel
from tests.helpers import eventually, inbound


class EchoProvider(TestProvider):
    """Answers `echo: <last line>`."""

    label = "echo"

    async def reply(
        self, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> ModelReply:
        last = messages[-1].content[0]
        assert isinstance(last, TextBlock)
        return ModelReply(
            content=[TextBlock(text="echo: " + last.text.splitlines()[-1])],
            stop_reason="end_turn",
        )


class ButtonsWithoutPrompts(RecordingChannel):
    """Declares buttons but implements no PromptSurface."""

    @property
    def features(self) -> ChannelFeatures:
        return ChannelFeatures(buttons=True)

    async def serve(self, ingress: Ingress) -> None:
        raise AssertionError("never served")

    async def close(self) -> None:
        return None


async def test_an_adapter_declaring_buttons_without_a_prompt_surface_is_refused(
    isolated_env: Path,
) -> None:
    with pytest.raises(RuntimeError, match="does not implement PromptSurface"):
        await build_runtime(load_settings(), [ButtonsWithoutPrompts])


class Recorder:
    """A context source and a turn harness that remember the turns they were asked about."""

    def __init__(self) -> None:
        self.contexts: list[TurnContext] = []
        self.harnessed: list[TurnContext] = []
        self.completed: list[TurnCompleted] = []

    async def context(self, ctx: TurnContext) -> str:
        self.contexts.append(ctx)
        return f"## Remembered for {ctx.author_id}"

    def for_turn(self, ctx: TurnContext) -> Harness:
        self.harnessed.append(ctx)
        return Harness(name=f"for-{ctx.author_id}")

    async def on_completed(self, event: TurnCompleted) -> None:
        self.completed.append(event)


@pytest.fixture
async def seam_service(tmp_path: Path) -> tuple[ConversationService, RecordingChannel, Recorder]:
    store = Store(tmp_path / "raven.db", all_migrations())
    await store.open()
    log = ConversationLog(store)
    channel = RecordingChannel()
    recorder = Recorder()
    bus = EventBus()
    bus.subscribe(TurnCompleted, recorder.on_completed)
    bus.freeze()
    host = HostAgent(
        EchoProvider(),
        ToolRegistry[TurnContext](),
        harness=recorder,
        context_sources=(recorder,),
    )
    service = ConversationService(
        ConversationParts(
            log,
            LaneManager(EventBus()),
            host,
            Outbox(log, MappingProxyType({channel.platform: channel})),
            bus,
        ),
        ConversationConfig(dedup_ttl_seconds=60),
    )
    yield service, channel, recorder
    await service.close()
    await store.close()


async def test_context_sources_harness_and_subscribers_see_the_turns_author_and_origin(
    seam_service: tuple[ConversationService, RecordingChannel, Recorder],
) -> None:
    service, _, recorder = seam_service
    turn = await service.accept(inbound("hello there", "e1", author="U7"))
    assert turn is not None
    await turn
    assert [c.author_id for c in recorder.contexts] == ["U7"]
    assert [c.origin for c in recorder.harnessed] == ["user"]
    (done,) = recorder.completed
    assert (done.author_id, done.origin, done.request, done.reply) == (
        "U7",
        "user",
        "hello there",
        "echo: hello there",
    )
    await service.system_turn(inbound("x", "x").conversation, "run report", key="r1")
    await eventually(lambda: len(recorder.completed) == 2)
    assert recorder.completed[1].origin == "system"
    assert recorder.harnessed[1].origin == "system"


async def test_a_platform_user_whose_id_looks_like_the_system_still_gets_a_user_turn(
    seam_service: tuple[ConversationService, RecordingChannel, Recorder],
) -> None:
    # Before origins were typed, this author id alone made the message a system turn:
    # control words and typed prompt answers were skipped for it.
    service, channel, _ = seam_service
    await service.accept(inbound("help", "e1", author="raven-system"))
    assert channel.texts == [HELP_TEXT]


def test_a_system_message_recorded_before_origins_existed_is_read_as_a_system_turn() -> None:
    typed = inbound("report", "e1", author="raven-system")
    assert typed.origin == "user"  # a platform never makes a system turn
    legacy = typed.model_dump(mode="json", exclude={"origin"})
    assert stored_inbound(json.dumps(legacy)).origin == "system"
    assert stored_inbound(typed.model_dump_json()).origin == "user"


class OrderRecordingAdapter(FakeChatAdapter):
    """Serves until told to end; at close, records what was still running."""

    def __init__(self) -> None:
        super().__init__()
        self.ended = asyncio.Event()
        self.at_close: dict[str, bool] = {}
        self.runtime: object = None

    async def serve(self, ingress: Ingress) -> None:
        await self.ended.wait()

    async def close(self) -> None:
        runtime = self.runtime
        assert runtime is not None
        self.at_close = {
            "scheduler running": runtime.scheduler.running,  # type: ignore[attr-defined]
            "lanes accepting": not runtime.lanes.closed,  # type: ignore[attr-defined]
        }
        # The store is still open: the outbox can record what it says while closing.
        await runtime.store.fetchone("SELECT 1")  # type: ignore[attr-defined]
        await super().close()

    async def post(self, conv: ConversationRef, message: OutboundMessage) -> str:
        return await super().post(conv, message)


async def test_shutdown_runs_in_reverse_start_order(isolated_env: Path) -> None:
    adapter = OrderRecordingAdapter()
    runtime = await build_runtime(load_settings(), [lambda: adapter])
    adapter.runtime = runtime
    serving = asyncio.create_task(serve(runtime))
    await eventually(lambda: runtime.scheduler.running and bool(runtime.serving))
    adapter.ended.set()  # every adapter ended: serve shuts down
    assert await asyncio.wait_for(serving, 30) == 0
    # Started last, stopped first; lanes drained before egress closed; the store last.
    assert adapter.at_close == {"scheduler running": False, "lanes accepting": False}
    with pytest.raises(RuntimeError, match="not open"):
        await runtime.store.fetchone("SELECT 1")


class CountingEmbedder:
    """Counts encode calls; every text gets the same unit vector."""

    name = "counting/4"
    dimension = 4

    def __init__(self) -> None:
        self.calls = 0

    async def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls += 1
        return normalize_rows(np.ones((len(texts), 4), dtype=np.float32))


async def test_the_embedder_is_loaded_before_serving_not_by_the_first_turn(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    # Loaded lazily, MiniLM stalled the first turn that wrote memory for about a second,
    # and its objects, created after gc.freeze, made every full collection slower.
    embedder = CountingEmbedder()
    monkeypatch.setattr("bot.app.build_embedder", lambda settings: embedder)
    adapter = FakeChatAdapter()
    runtime = await build_runtime(load_settings(), [lambda: adapter])
    try:
        assert embedder.calls == 0
        await start_serving(runtime)
        assert embedder.calls == 1
    finally:
        await shutdown(runtime)
