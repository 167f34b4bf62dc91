"""Every model call's usage recorded with its role, model and whom it served.

`MeteredProvider` wraps one role's provider (the Host's, the judge's, an agent's): after
each answered call it hands a `ModelCall` to the recorder before the answer goes on, so
what a call cost is stored before anything it led to is said. Whom the call served comes
from the work's `CallScope` (core/call_scope.py). A failed call records nothing (no
usage is reported for it); the offline stand-in makes no calls to record.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from agents.models.fallback import FallbackNote, fallback_note, scoped_for_turn
from agents.models.provider import ClosableProvider, ModelProvider
from agents.models.types import Message, ModelReply, ToolSpec, Usage
from core.call_scope import CallScope, current_scope

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelCall:
    """One answered model call: who asked (role), which model answered, for whom, and what
    it used."""

    role: str
    model: str
    scope: CallScope
    usage: Usage
    at: float


class UsageRecorder(Protocol):
    """Where model calls are recorded (the usage ledger)."""

    async def record(self, call: ModelCall) -> None:
        """Store one call durably."""
        ...


class MeteredProvider:
    """`inner` with each answered call recorded under `role`."""

    def __init__(
        self,
        inner: ModelProvider,
        *,
        role: str,
        recorder: UsageRecorder,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._inner = inner
        self._role = role
        self._recorder = recorder
        self._clock = clock

    @property
    def inner(self) -> ModelProvider:
        """The provider this one meters."""
        return self._inner

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def offline(self) -> bool:
        return self._inner.offline

    @property
    def last_fallback(self) -> FallbackNote | None:
        """The wrapped session's fallback note (see `fallback_note`)."""
        return fallback_note(self._inner)

    def session(self) -> MeteredProvider:
        """One turn's view: the wrapped provider's session, metered the same way."""
        view = scoped_for_turn(self._inner)
        return MeteredProvider(view, role=self._role, recorder=self._recorder, clock=self._clock)

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        max_tokens: int = 4096,
    ) -> ModelReply:
        """The wrapped call, then its usage recorded (the model that answered: after a
        fallback, the fallback's name)."""
        target = scoped_for_turn(self._inner)
        reply = await target.complete(
            system=system, messages=messages, tools=tools, max_tokens=max_tokens
        )
        if not target.offline:
            call = ModelCall(self._role, target.name, current_scope(), reply.usage, self._clock())
            # Shielded: a call that was paid for is recorded even if its caller is cancelled.
            try:
                await asyncio.shield(self._recorder.record(call))
            except Exception:
                log.exception("recording a %s call's usage failed", self._role)
        return reply

    async def aclose(self) -> None:
        """Close the wrapped provider's connections (roles sharing it close it once: the
        providers close idempotently)."""
        if isinstance(self._inner, ClosableProvider):
            await self._inner.aclose()
