"""The protocol every model provider implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from agents.models.types import Message, ModelReply, ToolSpec


@runtime_checkable
class ModelProvider(Protocol):
    """A chat model: system prompt + messages + tools in, content blocks + usage out."""

    @property
    def name(self) -> str:
        """A short label for logs and `doctor` (e.g. `anthropic:claude-sonnet-5`)."""
        ...

    @property
    def offline(self) -> bool:
        """True when this provider is the honest offline stand-in, not a real model."""
        ...

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        max_tokens: int = 4096,
    ) -> ModelReply:
        """Run one model call; raise `ModelError` when it cannot be completed."""
        ...


@runtime_checkable
class ClosableProvider(Protocol):
    """A provider holding connections that must be released at shutdown."""

    async def aclose(self) -> None:
        """Close the client's connections (idempotent)."""
        ...
