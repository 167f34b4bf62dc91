"""Deciding prompts: one winner per prompt, then its follow-up runs exactly once.

Every decision (answer, expiry, cancel) is a conditional UPDATE on `state = 'pending'`;
only the winner wakes waiters, drops the expiry job, closes the message and runs the
decision handler (under a per-prompt lock, marked handled once it succeeded). Under
`RAVEN_PROMPT_ON_EXPIRY=hold` a deadline decides nothing: the prompt is held (see waiting.py)
and its message says so.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from core.ids import ConversationRef
from core.keyed import KeyedLocks
from host.prompts.expiry import ExpiryJobs
from host.prompts.posting import PromptPoster
from host.prompts.prompt_store import PromptStore
from host.prompts.responders import Responders
from host.prompts.waiting import OnExpiry, is_held
from host.prompts.wording import expired_text, normalise, quote
from host.runtime.events import EventBus, PromptDecided
from host.runtime.people import People
from host.runtime.prompt_record import Prompt

AnswerStatus = Literal[
    "accepted", "not_allowed", "already_decided", "expired", "unknown", "invalid", "ambiguous"
]
DecisionHandler = Callable[[Prompt], Awaitable[None]]


@dataclass(frozen=True)
class AnswerOutcome:
    """What happened to one answer attempt, with the text to show the responder."""

    status: AnswerStatus
    message: str
    prompt: Prompt | None = None
    # True when the broker already told the responder privately (refusals), so the caller
    # should not show `message` a second time.
    notified: bool = False


@dataclass(frozen=True)
class DecisionParts:
    """What deciding needs: the records, the messages, the rules, the jobs and the bus."""

    records: PromptStore
    poster: PromptPoster
    responders: Responders
    expiry: ExpiryJobs
    bus: EventBus
    people: People
    clock: Callable[[], float]
    # What a deadline does: expire the prompt (approvals denied), or hold it.
    on_expiry: OnExpiry = "deny"


class Decider:
    """Answers, expires and cancels prompts; wakes waiters and runs handlers once."""

    def __init__(self, parts: DecisionParts) -> None:
        self._parts = parts
        self._records = parts.records
        self._clock = parts.clock
        # In-process wake-ups for wait(); the database stays the source of truth.
        self._decided: dict[str, asyncio.Event] = {}
        # Per-prompt locks so a handler never runs twice in this process (answer vs recover).
        self._locks = KeyedLocks()

    async def answer(
        self, prompt: Prompt, responder_id: str, raw: str, *, message_id: str | None = None
    ) -> AnswerOutcome:
        """Answer `prompt` as read (re-read when someone else decided first)."""
        if not self._parts.responders.may_answer(prompt, responder_id):
            return await self._refuse(prompt, responder_id)
        if prompt.state != "pending":
            return await self._duplicate(prompt, responder_id, raw)
        now = self._clock()
        if now >= prompt.expires_at:
            # Fail closed even when the expiry sweep has not run yet.
            await self.expire([prompt.id], now)
            current = await self._records.get(prompt.id) or prompt
            if is_held(current):
                # Held at its deadline (now or before): still answerable.
                return await self.answer(current, responder_id, raw, message_id=message_id)
            if current.state != "expired":
                return await self._duplicate(current, responder_id, raw)
            return AnswerOutcome("expired", expired_text(current), current)
        value, problem = normalise(prompt, raw)
        if value is None:
            return AnswerOutcome("invalid", problem, prompt)
        won, shown_as = await self._records.record_answer(
            prompt.id, value, by=responder_id, at=now, message_id=message_id
        )
        if not won:
            # Someone else decided first (or it expired meanwhile): report what happened.
            latest = await self._records.get(prompt.id)
            if latest is None:
                return AnswerOutcome("unknown", "This request is no longer known.")
            return await self.answer(latest, responder_id, raw, message_id=message_id)
        # `prompt` was read before the decision: the message id is taken as stored then, so
        # a post that returned meanwhile is the one that gets closed.
        decided = replace(
            prompt,
            state="answered",
            answer=value,
            answered_by=responder_id,
            decided_at=now,
            message_id=shown_as,
        )
        await self._finish(decided)
        name = await self._parts.people.name(prompt.conversation, responder_id)
        return AnswerOutcome("accepted", f"Recorded {name}'s answer: {quote(value)}.", decided)

    async def expire(self, prompt_ids: Sequence[str], now: float) -> list[Prompt]:
        """Expire those of `prompt_ids` that are due (approvals count as denied), or under
        `hold` hold them; return the ones expired."""
        if not prompt_ids:
            return []
        if self._parts.on_expiry == "hold":
            await self._hold(prompt_ids, now)
            return []
        return await self._finish_all(await self._records.expire(prompt_ids, now))

    async def _hold(self, prompt_ids: Sequence[str], now: float) -> None:
        """Hold the due ones: nothing is decided, so waiters keep waiting and nothing is
        handled; only the message changes (its buttons stay answerable)."""
        for prompt_id in await self._records.hold(prompt_ids, now):
            held = await self._records.get(prompt_id)
            if held is None or held.state != "pending":
                continue  # answered or stopped meanwhile: its decider closed it
            await self._parts.poster.close(held)
            latest = await self._records.get(prompt_id)
            if latest is not None and latest.state != "pending":
                # Decided while the held message was being written: show the outcome again,
                # or live buttons would stay on a decided prompt (closing is idempotent).
                await self._parts.poster.close(latest)

    async def cancel(
        self, conversation: ConversationRef, *, actor: str, requester: str | None
    ) -> list[Prompt]:
        """Cancel the conversation's pending prompts (only `requester`'s when given)."""
        won = await self._records.cancel_pending(
            conversation, actor=actor, requester=requester, at=self._clock()
        )
        return await self._finish_all(won)

    async def wait(self, prompt_id: str, *, poll_interval: float) -> Prompt:
        """Return the prompt once it is answered, expired or cancelled.

        Wakes at once on decisions made here; polls the database for others.
        """
        while True:
            event = self._decided.setdefault(prompt_id, asyncio.Event())
            # Read after registering the event, so a decision in between cannot be missed.
            prompt = await self._records.get(prompt_id)
            if prompt is None:
                self._decided.pop(prompt_id, None)
                raise LookupError(f"unknown prompt {prompt_id!r}")
            if prompt.state != "pending":
                if self._decided.get(prompt_id) is event:
                    self._decided.pop(prompt_id, None)
                return prompt
            if self._clock() >= prompt.expires_at:
                await self.expire([prompt_id], self._clock())
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), poll_interval)

    async def run_handler(self, prompt_id: str) -> None:
        """Publish the decision to its purpose's handler unless that already succeeded."""
        bus = self._parts.bus
        async with self._locks.hold(prompt_id):
            # Re-read under the lock: whoever came first may have handled it already.
            prompt = await self._records.unhandled(prompt_id)
            if prompt is None:
                return
            detail = "ok"
            if not bus.has_subscriber(PromptDecided, prompt.purpose):
                # Nothing to do beyond waking `wait()`ers (clarifications read it themselves).
                detail = f"no handler for purpose {prompt.purpose!r}"
            elif not await bus.publish(PromptDecided(prompt)):
                # Left unhandled on purpose: recovery retries it after a restart.
                return
            await self._records.mark_handled(prompt_id, at=self._clock(), detail=detail)

    async def _refuse(self, prompt: Prompt, responder_id: str) -> AnswerOutcome:
        text = await self._parts.responders.refusal(prompt)
        await self._records.note(
            prompt.id,
            "refused",
            by=responder_id,
            at=self._clock(),
            detail="not an allowed responder",
        )
        notified = await self._parts.poster.notify_private(prompt.conversation, responder_id, text)
        return AnswerOutcome("not_allowed", text, prompt, notified=notified)

    async def _duplicate(self, prompt: Prompt, responder_id: str, raw: str) -> AnswerOutcome:
        await self._records.note(
            prompt.id,
            "duplicate",
            by=responder_id,
            at=self._clock(),
            detail=f"{prompt.state}; tried {quote(raw)}",
        )
        if prompt.state == "expired":
            return AnswerOutcome("expired", expired_text(prompt), prompt)
        if prompt.state == "cancelled":
            return AnswerOutcome("already_decided", "This request was cancelled.", prompt)
        by = await self._parts.people.name(prompt.conversation, prompt.answered_by or "")
        text = f"Already answered by {by}: {quote(prompt.answer or '')}."
        return AnswerOutcome("already_decided", text, prompt)

    async def _finish_all(self, prompt_ids: Iterable[str]) -> list[Prompt]:
        done: list[Prompt] = []
        for prompt_id in prompt_ids:
            prompt = await self._records.get(prompt_id)
            if prompt is not None:
                await self._finish(prompt)
                done.append(prompt)
        return done

    async def _finish(self, prompt: Prompt) -> None:
        # Called only by whoever won the conditional UPDATE, never twice.
        event = self._decided.pop(prompt.id, None)
        if event is not None:
            event.set()
        await self._parts.expiry.cancel(prompt.id)
        await self._parts.poster.close(prompt)
        await self.run_handler(prompt.id)
