"""The model provider as Skill Forge's `Completer`: one system + user message in, the
answer's text out (rewriter, gate and skill extraction each make one such call)."""

from __future__ import annotations

import asyncio

from agents.models.provider import ModelProvider
from agents.models.types import Message


class ProviderCompleter:
    """Skill Forge's `Completer` over the Host's model provider, with a timeout."""

    def __init__(
        self, provider: ModelProvider, *, max_tokens: int = 1500, timeout: float = 60.0
    ) -> None:
        self._provider = provider
        self._max_tokens = max_tokens
        self._timeout = timeout

    async def complete(self, system: str, user: str) -> str:
        """The model's text for one call (raises on failure: callers fall back)."""
        async with asyncio.timeout(self._timeout):
            reply = await self._provider.complete(
                system=system, messages=[Message.user_text(user)], max_tokens=self._max_tokens
            )
        return reply.text
