"""The model provider as Skill Forge's `Completer`: one system + user message in, the
answer's text out (rewriter, gate and skill extraction each make one such call)."""

from __future__ import annotations

import asyncio

from agents.models.provider import ModelProvider
from agents.models.types import Message, ModelError


class ProviderCompleter:
    """Skill Forge's `Completer` over the Host's model provider.

    The provider's own limit (RAVEN_MODEL_TIMEOUT per call, with its retries) bounds each call;
    `timeout` adds a tighter one only when given. A fixed limit here once cut a slow local
    model off at 60 s whatever RAVEN_MODEL_TIMEOUT said, with an empty reason.
    """

    def __init__(
        self,
        provider: ModelProvider,
        *,
        max_tokens: int = 1500,
        timeout: float | None = None,
        purpose: str = "the skills model call",
    ) -> None:
        self._provider = provider
        self._max_tokens = max_tokens
        self._timeout = timeout
        self._purpose = purpose

    async def complete(self, system: str, user: str) -> str:
        """The model's text for one call (raises on failure, saying why: callers fall back)."""
        try:
            async with asyncio.timeout(self._timeout):
                reply = await self._provider.complete(
                    system=system, messages=[Message.user_text(user)], max_tokens=self._max_tokens
                )
        except TimeoutError:
            after = "" if self._timeout is None else f" after {self._timeout:g}s"
            raise ModelError(
                f"{self._purpose} to {self._provider.name} timed out{after}; "
                "RAVEN_MODEL_TIMEOUT sets how long a model call may take",
                kind="timeout",
            ) from None
        return reply.text
