"""The "is working…" line: shown while a turn or a run's node works, cleared when nothing
does (also after a failure or a stop), one owner per conversation, no secret and no prompt."""

from __future__ import annotations

import asyncio
from types import MappingProxyType

import pytest

from agents.tools import ToolRegistry
from core.ids import ConversationRef
from host.agent.host_agent import HostAgent
from host.conversation.lanes import LaneManager
from host.conversation.outbox import Outbox
from host.conversation.service import (
    ConversationConfig,
    ConversationExtras,
    ConversationParts,
    ConversationService,
)
from host.conversation.working import THINKING, WorkingStatuses, node_text
from host.runtime.conversation_log import ConversationLog
from host.runtime.events import EventBus, RunFinished, RunProgress
from host.runtime.messages import InboundMessage
from host.runtime.ports import WorkingStatus
from host.runtime.run_snapshot import NodeSnapshot, RunSnapshot
from host.runtime.turn import TurnContext
from tests.fakes.recording_channel import RecordingChannel
from tests.host.conversation.test_conversations import GatedProvider

SECRET = "sk-live-0123456789abcdef"
CONV = ConversationRef("test", "W", "C", "t1")


class RecordingStatus:
    """A platform's working line that records what it was told (and can fail)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []  # (conversation id, text; "" for a clear)
        self.failing = False

    async def show(self, conv: ConversationRef, text: str) -> None:
        self.calls.append((conv.id, text))
        if self.failing:
            raise ConnectionError("platform down")

    async def clear(self, conv: ConversationRef) -> None:
        self.calls.append((conv.id, ""))
        if self.failing:
            raise ConnectionError("platform down")

    @property
    def texts(self) -> list[str]:
        return [text for _, text in self.calls]


def _redact(text: str) -> str:
    return text.replace(SECRET, "[redacted]")


def _tracker(surface: RecordingStatus) -> WorkingStatuses:
    assert isinstance(surface, WorkingStatus)
    return WorkingStatuses({"test": surface}, redact=_redact)


def _service(
    log: ConversationLog, provider: GatedProvider, working: WorkingStatuses
) -> tuple[ConversationService, LaneManager]:
    channel = RecordingChannel()
    lanes = LaneManager(EventBus())
    outbox = Outbox(log, MappingProxyType({channel.platform: channel}))
    host = HostAgent(provider, ToolRegistry[TurnContext]())
    service = ConversationService(
        ConversationParts(log, lanes, host, outbox, EventBus()),
        ConversationConfig(dedup_ttl_seconds=60),
        ConversationExtras(working=working),
    )
    return service, lanes


def _msg(text: str, event: str) -> InboundMessage:
    return InboundMessage(
        platform="test",
        workspace="W",
        channel="C",
        thread="t1",
        message_id=event,
        author_id="U1",
        author_name="alice",
        text=text,
        event_id=event,
    )


def _node(node_id: str, state: str, *, summary: str = "", template: str = "") -> NodeSnapshot:
    return NodeSnapshot(
        node_id=node_id,
        agent="shell",
        state=state,
        attempts=1,
        summary=summary,
        template=template,
    )


def _run(*nodes: NodeSnapshot, run_id: str = "r1") -> RunSnapshot:
    return RunSnapshot(
        id=run_id,
        conversation=CONV,
        task_summary="tests",
        background=True,
        state="running",
        submitted_by="U1",
        nodes=nodes,
    )


async def test_a_turn_shows_thinking_while_it_works_and_clears_after(
    conversation_log: ConversationLog,
) -> None:
    surface = RecordingStatus()
    working = _tracker(surface)
    provider = GatedProvider()
    provider.gate.clear()
    service, lanes = _service(conversation_log, provider, working)
    turn = await service.accept(_msg("please summarise the secret plan", "e1"))
    assert turn is not None
    await provider.entered.wait()
    await working.settled()
    assert surface.calls == [(CONV.id, THINKING)]
    provider.gate.set()
    await turn
    await working.settled()
    assert surface.texts == [THINKING, ""]
    # The person's words are never the status.
    assert not any("secret plan" in text for text in surface.texts)
    await lanes.drain(1)


async def test_a_failed_turn_clears_its_status(conversation_log: ConversationLog) -> None:
    surface = RecordingStatus()
    working = _tracker(surface)
    provider = GatedProvider()
    provider.error = RuntimeError("model exploded")
    service, lanes = _service(conversation_log, provider, working)
    turn = await service.accept(_msg("hello", "e1"))
    assert turn is not None
    with pytest.raises(RuntimeError):
        await turn
    await working.settled()
    assert surface.texts[-1] == "" and THINKING in surface.texts
    assert working.wanted(CONV.id) == ""
    await lanes.drain(1)


async def test_a_stopped_turn_clears_its_status(conversation_log: ConversationLog) -> None:
    surface = RecordingStatus()
    working = _tracker(surface)
    provider = GatedProvider()
    provider.gate.clear()
    service, lanes = _service(conversation_log, provider, working)
    turn = await service.accept(_msg("long job", "e1"))
    assert turn is not None
    await provider.entered.wait()
    assert await service.accept(_msg("stop", "e2")) is None
    assert turn.cancelled()
    await working.settled()
    assert surface.texts == [THINKING, ""]
    await lanes.drain(1)


async def test_a_failing_platform_never_fails_the_turn(conversation_log: ConversationLog) -> None:
    surface = RecordingStatus()
    surface.failing = True
    working = _tracker(surface)
    service, lanes = _service(conversation_log, GatedProvider(), working)
    turn = await service.accept(_msg("hello", "e1"))
    assert turn is not None
    assert (await turn).status == "completed"
    await working.settled()
    assert surface.texts == [THINKING, ""]  # tried, failed, and tried the clear anyway
    await lanes.drain(1)


async def test_a_running_node_is_named_with_what_it_runs() -> None:
    surface = RecordingStatus()
    working = _tracker(surface)
    bus = EventBus()
    working.subscribe(bus)
    await bus.publish(
        RunProgress(_run(_node("s1", "completed"), _node("s2", "running", summary="pytest -q")))
    )
    await working.settled()
    assert surface.texts == ["is running `s2` (shell): pytest -q"]
    await bus.publish(RunFinished(_run(_node("s2", "completed"))))
    await working.settled()
    assert surface.texts[-1] == ""


async def test_a_secret_in_a_command_never_reaches_the_status() -> None:
    surface = RecordingStatus()
    working = _tracker(surface)
    bus = EventBus()
    working.subscribe(bus)
    command = f"curl -H 'Authorization: Bearer {SECRET}' https://api.example/v1\nsecond line"
    await bus.publish(RunProgress(_run(_node("fetch", "running", template=command))))
    await working.settled()
    (shown,) = surface.texts
    assert SECRET not in shown and SECRET[:12] not in shown
    assert "[redacted]" in shown and "second line" not in shown


def test_status_text_is_one_capped_line_without_control_characters() -> None:
    node = _node("s2", "running", template="echo \x1b[31mred\x07\u202e" + "x" * 200)
    text = node_text([node, _node("s3", "running")], _redact)
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    description = text.split(": ", 1)[1].removesuffix(" (+1 more)")
    assert len(description) <= 80 and description.endswith("…")
    assert text.endswith("(+1 more)")


async def test_turn_and_run_share_the_line_newest_first_cleared_when_both_end() -> None:
    surface = RecordingStatus()
    working = _tracker(surface)
    bus = EventBus()
    working.subscribe(bus)
    running = _run(_node("s1", "running", summary="make build"))
    await bus.publish(RunProgress(running))
    await working.settled()
    working.begin(CONV, "turn:t", THINKING)  # a turn starts in the same thread: newest wins
    await working.settled()
    # The same run progressing without a change of text does not take the line back.
    await bus.publish(RunProgress(running))
    await working.settled()
    assert surface.texts == ["is running `s1` (shell): make build", THINKING]
    working.end(CONV, "turn:t")  # the run still works: its line comes back, not a clear
    await working.settled()
    assert surface.texts[-1] == "is running `s1` (shell): make build"
    await bus.publish(RunProgress(_run(_node("s1", "completed"))))  # nothing runs any more
    await working.settled()
    assert surface.texts[-1] == ""
    assert working.wanted(CONV.id) == ""


async def test_close_lets_the_last_clear_out_then_cancels_a_hung_push() -> None:
    class Hanging(RecordingStatus):
        async def show(self, conv: ConversationRef, text: str) -> None:
            await super().show(conv, text)
            await asyncio.Event().wait()

    surface = Hanging()
    working = WorkingStatuses({"test": surface}, redact=_redact)
    working.begin(CONV, "turn:t", THINKING)
    await working.close(grace=0.01)  # the push starts, hangs in `show`, and is cancelled
    assert surface.texts == [THINKING]
    assert working.wanted(CONV.id) == THINKING  # nothing pretends the line was cleared
