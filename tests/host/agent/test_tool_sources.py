"""A capability's tools may change while the bot runs: the Host asks each tool source at
every turn, given the turn, so a turn sees the tools offered now, there; a source that fails
costs its own tools for that turn, never the turn."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from agents.models.types import Message, ModelReply, TextBlock, ToolSpec
from agents.tools import Tool, ToolRegistry
from core.ids import ConversationRef
from host.agent.host_agent import HostAgent
from host.runtime.turn import TurnContext
from tests.fakes.providers import TestProvider


class _NoInput(BaseModel):
    pass


def _tool(name: str) -> Tool[TurnContext]:
    async def handler(ctx: TurnContext, args: _NoInput) -> str:
        return name

    return Tool(name, f"The {name} tool.", _NoInput, handler)


class Offered(TestProvider):
    """Answers at once and records the tool names each turn was offered."""

    def __init__(self) -> None:
        self.offered: list[list[str]] = []

    async def reply(
        self, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> ModelReply:
        self.offered.append([t.name for t in tools])
        return ModelReply(content=[TextBlock(text="ok")], stop_reason="end_turn")


class Changing:
    """A tool source whose tools change between turns (a server's list changed)."""

    def __init__(self) -> None:
        self.now: list[Tool[TurnContext]] = [_tool("lookup")]
        self.asked: list[str] = []

    async def tools(self, ctx: TurnContext) -> Sequence[Tool[TurnContext]]:
        self.asked.append(ctx.turn_id)
        return list(self.now)


class Broken:
    async def tools(self, ctx: TurnContext) -> Sequence[Tool[TurnContext]]:
        raise RuntimeError("server gone")


def _ctx(turn: str = "t1") -> TurnContext:
    return TurnContext(ConversationRef("console", "local", "c", "c"), turn, "U1", "Ann")


async def test_each_turn_sees_the_tools_offered_now() -> None:
    provider, source = Offered(), Changing()
    host = HostAgent(provider, ToolRegistry([_tool("fixed")]), tool_sources=(source, Broken()))
    await host.run_turn(_ctx(), text="one")
    source.now = [_tool("lookup"), _tool("create")]
    await host.run_turn(_ctx("t2"), text="two")
    source.now = []
    reply = await host.run_turn(_ctx("t3"), text="three")
    assert provider.offered == [
        ["fixed", "lookup"],
        ["fixed", "lookup", "create"],
        ["fixed"],
    ]
    assert reply.text == "ok"
    assert source.asked == ["t1", "t2", "t3"]  # each turn's own context
