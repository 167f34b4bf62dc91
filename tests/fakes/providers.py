"""A base for in-process test model providers: subclasses only write `reply`."""

from __future__ import annotations

from collections.abc import Sequence

from agents.models.types import Message, ModelReply, ToolSpec


class TestProvider:
    """Implements the `ModelProvider` protocol around one `reply` method (an online model)."""

    __test__ = False  # not a pytest test class
    label = "test"

    @property
    def name(self) -> str:
        return self.label

    @property
    def offline(self) -> bool:
        return False

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        max_tokens: int = 4096,
    ) -> ModelReply:
        return await self.reply(system, list(messages), list(tools))

    async def reply(
        self, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> ModelReply:
        raise NotImplementedError
