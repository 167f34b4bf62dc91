"""Feature units: a capability installed by one object is wired into the Host, the
conversation service, the bus and the lifecycle by the assembly root alone."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import BaseModel

from agents.tools import Tool
from bot.app import FEATURES, build_runtime, serve
from bot.settings import load_settings
from core.ids import ConversationRef
from host.agent.host_agent import ContextSource
from host.conversation.service import CommandHandler
from host.features.feature import BaseFeature, HostParts, StatusSource
from host.features.oncall.feature import OncallFeature
from host.runtime.events import EventBus, TurnCompleted
from host.runtime.messages import InboundMessage
from host.runtime.turn import TurnContext
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import eventually, inbound


@dataclass(frozen=True)
class ToySection:
    """Reads one real setting, by its Settings name."""

    history_messages: int


class NoArgs(BaseModel):
    pass


class ToyContext:
    async def context(self, ctx: TurnContext) -> str:
        return "toy context"


class ToyCommands:
    help = "`toy` answers without a turn."

    async def handle(self, msg: InboundMessage) -> str | None:
        return "toy here" if msg.text == "toy" else None


class ToyFeature(BaseFeature):
    """Contributes one of everything and records its lifecycle."""

    Section: ClassVar[type[ToySection]] = ToySection
    events: ClassVar[list[str]] = []

    def __init__(self, parts: HostParts, section: ToySection) -> None:
        self.section = section
        self.tool_names: Sequence[str] = ()
        self.completed: list[str] = []

    def host_tools(self) -> Sequence[Tool[TurnContext]]:
        async def toy(ctx: TurnContext, args: dict[str, object]) -> str:
            return "ok"

        return (Tool("toy_tool", "A toy.", NoArgs, toy),)

    def context_sources(self, host_tools: Sequence[str]) -> Sequence[ContextSource]:
        self.tool_names = host_tools
        return (ToyContext(),)

    def status_sources(self) -> Sequence[StatusSource]:
        async def line(conv: ConversationRef) -> str:
            return "toy status line"

        return (line,)

    def commands(self) -> CommandHandler | None:
        return ToyCommands()

    def subscribe(self, bus: EventBus) -> None:
        async def on_turn(event: TurnCompleted) -> None:
            self.completed.append(event.request)

        bus.subscribe(TurnCompleted, on_turn)

    async def open(self, stack: AsyncExitStack) -> None:
        self.events.append("open")
        stack.push_async_callback(self._stopped)

    async def recover(self) -> None:
        self.events.append("recover")

    async def start(self, stack: AsyncExitStack) -> None:
        self.events.append("start")

    async def _stopped(self) -> None:
        self.events.append("stop")


async def test_a_feature_listed_once_is_wired_everywhere(isolated_env: Path) -> None:
    ToyFeature.events.clear()
    adapter = FakeChatAdapter()
    runtime = await build_runtime(load_settings(), [lambda: adapter], (*FEATURES, ToyFeature))
    toy = runtime.feature(ToyFeature)
    assert toy.section == ToySection(history_messages=runtime.settings.history_messages)
    # It sees every Host tool (its own and the other features'), and its context is asked.
    assert {"toy_tool", "start_campaign", "delegate"} <= set(toy.tool_names)
    assert any(isinstance(s, ToyContext) for s in runtime.host.context_sources)
    serving = asyncio.create_task(serve(runtime))
    await eventually(lambda: bool(runtime.serving))
    assert ToyFeature.events == ["open", "recover", "start"]

    assert await runtime.service.accept(inbound("toy", "e1")) is None
    await runtime.service.accept(inbound("status", "e2"))
    await runtime.service.accept(inbound("help", "e3"))
    await eventually(lambda: len(adapter.texts) == 3)
    assert adapter.texts[0] == "toy here"
    assert "toy status line" in adapter.texts[1]
    assert "`toy` answers without a turn." in adapter.texts[2]
    turn = await runtime.service.accept(inbound("hello", "e4"))
    assert turn is not None
    await turn
    assert toy.completed == ["hello"]

    await adapter.close()
    assert await asyncio.wait_for(serving, 30) == 0
    assert ToyFeature.events == ["open", "recover", "start", "stop"]


async def test_a_runtime_without_a_feature_has_none_of_its_parts(isolated_env: Path) -> None:
    without = tuple(k for k in FEATURES if k is not OncallFeature)
    runtime = await build_runtime(load_settings(), [FakeChatAdapter], (*without, ToyFeature))
    try:
        names = runtime.feature(ToyFeature).tool_names
        assert "start_campaign" not in names and "delegate" in names
        with pytest.raises(LookupError, match="no OncallFeature"):
            _ = runtime.campaigns
    finally:
        await runtime.lifecycle.aclose()


def test_a_section_naming_an_unknown_setting_is_refused(isolated_env: Path) -> None:
    @dataclass(frozen=True)
    class Wrong:
        no_such_setting: int

    with pytest.raises(TypeError, match=r"Wrong names settings that do not exist: \['no_such"):
        load_settings().section(Wrong)
