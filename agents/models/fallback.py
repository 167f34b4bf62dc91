"""A chain of models: when one fails in a way another might not (overload, 5xx, timeout,
rate limit), the next answers; a bad request, a key problem or a refusal stays the answer.

One turn (or one agent run) stays on the model it fell back to, so the fallback's prompt
cache stays warm: `FallbackProvider.session()` gives that turn a view that remembers where
it settled. `scoped_for_turn` is how the agent loop asks for one without knowing the type.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agents.models.provider import ClosableProvider, ModelProvider
from agents.models.types import FailureKind, Message, ModelError, ModelReply, ToolSpec

log = logging.getLogger(__name__)

# How a failure reads in "answered by the fallback model X: Y was <this>".
_FAILURE_WORDS: dict[FailureKind, str] = {
    "overloaded": "overloaded",
    "server": "failing (server error)",
    "timeout": "not answering in time",
    "rate_limited": "rate limited",
    "request": "refusing the request",
    "refused": "refusing",
    "auth": "refusing the key",
    "other": "failing",
}


@dataclass(frozen=True)
class FallbackSwitch:
    """One move down the chain: `failed` could not answer (`kind`), so `to` was tried."""

    failed: str
    kind: FailureKind
    to: str


@dataclass(frozen=True)
class FallbackNote:
    """What a run report says when a fallback answered: which model, and why."""

    answered_by: str
    switches: tuple[FallbackSwitch, ...]

    def __str__(self) -> str:
        reasons = "; ".join(f"{s.failed} was {_FAILURE_WORDS[s.kind]}" for s in self.switches)
        return f"answered by the fallback model {self.answered_by}: {reasons}"


class FallbackProvider:
    """A `ModelProvider` over `primary` then `fallbacks`, in order. Each `complete` on the
    provider itself starts from the primary; a `session()` stays where it settled."""

    def __init__(self, primary: ModelProvider, fallbacks: Sequence[ModelProvider]) -> None:
        if not fallbacks:
            raise ValueError("A fallback chain needs at least one fallback model.")
        self.chain: tuple[ModelProvider, ...] = (primary, *fallbacks)

    @property
    def primary(self) -> ModelProvider:
        """The model every turn starts on."""
        return self.chain[0]

    @property
    def name(self) -> str:
        """The primary's name, then its fallbacks (`anthropic:a (fallbacks: anthropic:b)`)."""
        rest = ", ".join(p.name for p in self.chain[1:])
        return f"{self.primary.name} (fallbacks: {rest})"

    @property
    def offline(self) -> bool:
        """The primary's answer: a chain of real models is real."""
        return self.primary.offline

    def session(self) -> FallbackSession:
        """A view for one turn or agent run: it stays on the model it fell back to."""
        return FallbackSession(self.chain)

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        max_tokens: int = 4096,
    ) -> ModelReply:
        """One call from the primary down the chain (no turn to stay on)."""
        return await self.session().complete(
            system=system, messages=messages, tools=tools, max_tokens=max_tokens
        )

    async def aclose(self) -> None:
        """Close every model's client that holds connections."""
        for provider in self.chain:
            if isinstance(provider, ClosableProvider):
                await provider.aclose()


class FallbackSession:
    """One turn's view of a chain: starts on the primary, moves on only on a transient
    `ModelError`, and stays on the model that answered for the rest of the turn."""

    def __init__(self, chain: Sequence[ModelProvider]) -> None:
        self._chain = tuple(chain)
        self._at = 0
        self._switches: list[FallbackSwitch] = []

    @property
    def name(self) -> str:
        """The name of the model this turn is on now."""
        return self._chain[self._at].name

    @property
    def offline(self) -> bool:
        """The primary's answer, as for the chain."""
        return self._chain[0].offline

    @property
    def last_fallback(self) -> FallbackNote | None:
        """Set once this turn has moved off the primary: which model answers, and why."""
        if not self._switches:
            return None
        return FallbackNote(self._chain[self._at].name, tuple(self._switches))

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        max_tokens: int = 4096,
    ) -> ModelReply:
        """Call the current model; on a transient failure, the next one (logged once per
        model per turn). A non-transient failure is raised as it is; when every model left
        failed, the last failure is raised, its message naming each model tried."""
        tried: list[tuple[str, ModelError]] = []
        while True:
            provider = self._chain[self._at]
            try:
                return await provider.complete(
                    system=system, messages=messages, tools=tools, max_tokens=max_tokens
                )
            except ModelError as exc:
                if not exc.transient:
                    raise
                tried.append((provider.name, exc))
                if self._at + 1 >= len(self._chain):
                    raise _all_failed(tried) from exc
                self._move_on(provider.name, exc.kind)

    def _move_on(self, failed: str, kind: FailureKind) -> None:
        self._at += 1
        switch = FallbackSwitch(failed=failed, kind=kind, to=self._chain[self._at].name)
        self._switches.append(switch)
        # Each model is moved onto at most once per turn, so this logs once per (turn, model).
        log.warning(
            "model %s was %s; this turn falls back to %s",
            failed,
            _FAILURE_WORDS[kind],
            switch.to,
        )


def _all_failed(tried: Sequence[tuple[str, ModelError]]) -> ModelError:
    """The last failure, its message naming every model tried and why each failed."""
    last = tried[-1][1]
    names = ", ".join(name for name, _ in tried)
    details = " | ".join(f"{name}: {exc}" for name, exc in tried)
    return ModelError(
        f"Every model in the fallback chain failed ({names}). {details}", kind=last.kind
    )


@runtime_checkable
class TurnScoped(Protocol):
    """A provider that gives each turn or agent run a view of its own (a fallback chain's
    session, or a wrapper around one)."""

    def session(self) -> ModelProvider:
        """The view one turn or agent run uses."""
        ...


@runtime_checkable
class FallbackAware(Protocol):
    """A turn's provider that can say whether, and why, it fell back."""

    @property
    def last_fallback(self) -> FallbackNote | None:
        """Set once the turn moved off its primary model."""
        ...


def scoped_for_turn(provider: ModelProvider) -> ModelProvider:
    """The provider one turn or agent run should use: a fallback chain's per-turn session
    (it stays on the model it fell back to), any other provider as it is."""
    if isinstance(provider, TurnScoped):
        return provider.session()
    return provider


def fallback_note(provider: ModelProvider) -> FallbackNote | None:
    """What a turn's provider says about falling back (None when it did not, or cannot)."""
    if isinstance(provider, FallbackAware):
        return provider.last_fallback
    return None
