"""The prompt broker: one durable path for approvals, choices and free-text clarifications.

Prompts are persisted before they are shown, every decision is a conditional UPDATE on
`state = 'pending'` (so exactly one answer wins), and each decision handler runs at most once
per broker and is retried by `recover()` when it failed or a crash interrupted it.

This module is the façade: the jobs live next to it (`prompt_store` keeps the rows,
`posting` shows and closes messages, `responders` says who may answer, `decisions` decides
and runs handlers, `typed` reads typed answers, `expiry` and `upkeep` keep deadlines and
finish what a restart interrupted, `reminders` reminds the person asked, `waiting` says what a
deadline does).
"""

from __future__ import annotations

import hmac
import secrets
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from core.ids import ConversationRef
from core.store import Store
from host.nudges.policy import NudgePolicy
from host.prompts.decisions import (
    AnswerOutcome,
    AnswerStatus,
    Decider,
    DecisionHandler,
    DecisionParts,
)
from host.prompts.expiry import (
    PROMPT_EXPIRY_JOB,
    PROMPT_REMINDER_JOB,
    ExpiryJobs,
    expiry_job_id,
    reminder_job_id,
)
from host.prompts.posting import PromptPoster
from host.prompts.prompt_store import KINDS, PromptStore
from host.prompts.reminders import Notices, PromptReminders
from host.prompts.responders import PromptPolicy, Responders
from host.prompts.typed import TypedAnswers
from host.prompts.upkeep import PromptUpkeep
from host.prompts.waiting import ON_EXPIRY_CHOICES, OnExpiry, is_held, shown_time
from host.prompts.wording import MAX_ANSWER_CHARS, TYPED_ANSWER_HELP, gist, short_ids
from host.runtime.admission import Admission
from host.runtime.events import ConversationStopped, EventBus, StoppedItem
from host.runtime.people import People
from host.runtime.ports import PromptSurface
from host.runtime.prompt_record import APPROVE, DENY, Prompt, PromptKind
from host.runtime.scheduling import FiredJob, Scheduler

# The prompts room's vocabulary, importable from its façade.
__all__ = [
    "MAX_ANSWER_CHARS",
    "ON_EXPIRY_CHOICES",
    "PROMPT_EXPIRY_JOB",
    "PROMPT_REMINDER_JOB",
    "TYPED_ANSWER_HELP",
    "AnswerOutcome",
    "AnswerStatus",
    "DecisionHandler",
    "OnExpiry",
    "PromptBroker",
    "PromptPolicy",
    "expiry_job_id",
    "gist",
    "reminder_job_id",
    "short_ids",
]


class PromptBroker:
    """Creates, shows, answers, expires and cancels prompts; runs decision handlers once."""

    def __init__(
        self,
        store: Store,
        *,
        surfaces: Mapping[str, PromptSurface],
        bus: EventBus,
        policy: PromptPolicy | None = None,
        scheduler: Scheduler | None = None,
        people: People | None = None,
        admission: Admission | None = None,
        clock: Callable[[], float] = time.time,
        new_id: Callable[[], str] | None = None,
        on_expiry: OnExpiry = "deny",
    ) -> None:
        self._records = PromptStore(store)
        # A click passes the access rules a message passes (a removed requester's included).
        self._admission = admission
        self._policy = policy = policy or PromptPolicy()
        self._clock = clock
        self._new_id = new_id or (lambda: uuid.uuid4().hex)
        # Who is named in what people read (refusals, outcomes): display names, not ids.
        people = people or People()
        self._responders = Responders(policy, people)
        self._poster = PromptPoster(self._records, surfaces, clock)
        # Expires each prompt at its deadline; without a scheduler, only sweeps and waiters do.
        self._expiry = ExpiryJobs(scheduler)
        self._decider = Decider(
            DecisionParts(
                self._records,
                self._poster,
                self._responders,
                self._expiry,
                bus,
                people,
                clock,
                on_expiry,
            )
        )
        self._people = people
        self._typed = TypedAnswers(self._records, self._responders, self._decider, clock)
        self._upkeep = PromptUpkeep(self._records, self._decider, self._poster, self._expiry, clock)
        # Off until `remind_through` gives them a way to post.
        self._reminders = PromptReminders(self._records, self._expiry, people, clock, on_expiry)

    # ----------------------------------------------------------------------------- create

    async def create(
        self,
        *,
        conversation: ConversationRef,
        kind: PromptKind,
        question: str,
        requester: str,
        options: Sequence[str] = (),
        purpose: str = "ask_user",
        payload: Mapping[str, Any] | None = None,
        expires_in: float | None = None,
        extra_responders: Sequence[str] = (),
        responders: Sequence[str] | None = None,
    ) -> Prompt:
        """Persist a pending prompt, then show it; a failed show leaves it answerable by text.

        `responders` replaces who may answer (admins always may): a second approval that the
        requester must not be able to give themselves."""
        if kind not in KINDS:
            raise ValueError(f"unknown prompt kind {kind!r}")
        if not question.strip():
            raise ValueError("a prompt needs a question")
        opts = _options(kind, options)
        ttl = self._policy.default_expiry_seconds if expires_in is None else float(expires_in)
        if ttl <= 0:
            raise ValueError("expires_in must be positive")
        allowed = self._responders.allowed(kind, requester, extra_responders, responders)
        if not allowed:
            raise ValueError("a prompt needs at least one person who may answer it")
        now = self._clock()
        prompt = Prompt(
            id=self._new_id(),
            nonce=secrets.token_hex(8),
            kind=kind,
            question=question,
            options=opts,
            requester=requester,
            allowed_responders=allowed,
            conversation=conversation,
            created_at=now,
            expires_at=now + ttl,
            purpose=purpose,
            payload=dict(payload or {}),
        )
        await self._records.insert(prompt)
        # Before showing: an answer during the show cancels the job, so it must exist by then.
        await self._expiry.schedule(prompt)
        await self._reminders.schedule(prompt)
        return await self._poster.show(prompt)

    # ----------------------------------------------------------------------------- answer

    async def answer(
        self,
        prompt_id: str,
        nonce: str,
        responder_id: str,
        answer: str,
        *,
        message_id: str | None = None,
    ) -> AnswerOutcome:
        """Answer a prompt (a button click or a modal); see AnswerOutcome for the result.

        `message_id` is the platform message the answer came from (a clicked button's), so
        the prompt can be closed there even before `show` recorded its id.
        """
        prompt = await self._records.get(prompt_id)
        if prompt is None or not hmac.compare_digest(prompt.nonce, nonce):
            return AnswerOutcome("unknown", "This request is no longer known.")
        if self._admission is not None:
            verdict = await self._admission.admit(
                "click", responder_id, prompt.conversation, subject=prompt.id
            )
            if not verdict.admitted:
                return AnswerOutcome(
                    "not_allowed",
                    "You can't answer this: this bot's access rules do not admit you here "
                    f"({verdict.standing.refusal}).",
                    prompt,
                )
        return await self._decider.answer(prompt, responder_id, answer, message_id=message_id)

    async def answer_typed(
        self,
        conversation: ConversationRef,
        responder_id: str,
        text: str,
        *,
        waiting_only: bool = False,
    ) -> AnswerOutcome | None:
        """Treat a typed reply as an answer to a prompt of the conversation, if it fits one
        (see `TypedAnswers.answer`); None means the text answers nothing."""
        return await self._typed.answer(conversation, responder_id, text, waiting_only=waiting_only)

    async def notify_private(self, conv: ConversationRef, user_id: str, text: str) -> bool:
        """Tell one person something only they see; False when it could not be said."""
        return await self._poster.notify_private(conv, user_id, text)

    # ------------------------------------------------------------------ expiry and cancel

    async def expire_due(self) -> list[Prompt]:
        """Expire every pending prompt past its deadline (approvals count as denied), or
        hold them under `RAVEN_PROMPT_ON_EXPIRY=hold`; return the ones expired."""
        return await self._upkeep.expire_due()

    async def on_expiry_job(self, job: FiredJob) -> None:
        """Scheduler handler for `prompt_expiry` jobs: expire that prompt if it is due."""
        await self._upkeep.on_expiry_job(job)

    async def schedule_expiries(self) -> int:
        """Schedule the expiry job of every pending prompt (after the scheduler starts), and
        the reminder of each not reminded yet; idempotent. Returns how many prompts."""
        count = await self._upkeep.schedule_expiries()
        await self._reminders.schedule_all()
        return count

    def remind_through(self, notices: Notices, nudges: NudgePolicy | None = None) -> None:
        """Remind the person asked at 80 % of a prompt's lifetime, posting through `notices`
        (the outbox) under the nudge policy `nudges` (before the scheduler starts)."""
        self._reminders.send_through(notices, nudges)

    async def on_reminder_job(self, job: FiredJob) -> None:
        """Scheduler handler for `prompt_reminder` jobs: remind once, unless answered."""
        await self._reminders.on_job(job)

    async def recover(self) -> None:
        """At startup: finish decided-but-unhandled prompts, expire overdue ones, show the
        ones a crash left unshown."""
        await self._upkeep.recover()

    async def cancel_conversation(
        self, conversation: ConversationRef, *, actor: str = "system", requester: str | None = None
    ) -> int:
        """Cancel the pending prompts of a conversation (for `stop`): every one, or only
        those `requester` asked for when given; return how many."""
        return len(await self._decider.cancel(conversation, actor=actor, requester=requester))

    async def cancel_conversation_id(self, event: ConversationStopped) -> None:
        """`stop` hook: cancel the conversation's pending prompts its typist may stop
        (those they requested, or all when privileged); record both in the tally."""
        conversation = ConversationRef.parse(event.conversation_id)
        cancelled: list[Prompt] = []
        if event.privileged or event.by:
            requester = None if event.privileged else event.by
            cancelled = await self._decider.cancel(
                conversation, actor=event.by or "system", requester=requester
            )
        left = await self.pending(conversation)
        # Named as everywhere else people see prompts: short id and what it asked.
        shorts = short_ids([*cancelled, *left])
        for prompts, stopped in ((cancelled, True), (left, False)):
            for prompt in prompts:
                item = StoppedItem(
                    "question", shorts[prompt.id], prompt.requester, gist(prompt.question, 60)
                )
                event.tally.record(item, cancelled=stopped)

    # ------------------------------------------------------------------------- reading

    async def wait(self, prompt_id: str, *, poll_interval: float = 1.0) -> Prompt:
        """Return the prompt once it is answered, expired or cancelled.

        Wakes at once on decisions made by this broker; polls the database for others.
        """
        return await self._decider.wait(prompt_id, poll_interval=poll_interval)

    async def get(self, prompt_id: str) -> Prompt | None:
        """One prompt by id, as stored."""
        return await self._records.get(prompt_id)

    async def status(self, conversation: ConversationRef) -> str:
        """The conversation's pending prompts, one line each, for `status`: what waits,
        for whom, since when, and whether it is held past its deadline."""
        pending = await self.pending(conversation)
        # By the short ids a typed answer can name them with (`1 abc12345`).
        shorts = short_ids(pending)
        lines = []
        for p in pending:
            asked = p.allowed_responders if p.requester not in p.allowed_responders else ()
            names = await self._people.names(conversation, asked or (p.requester,))
            line = (
                f"- prompt `{shorts[p.id]}` waiting: {gist(p.question)} "
                f"(waiting for an answer from {', '.join(names)} since {shown_time(p.created_at)})"
            )
            if is_held(p):
                line += " — held past its deadline: answer it, or `stop` ends it"
            lines.append(line)
        return "\n".join(lines)

    async def with_payload(self, purpose: str, key: str, value: str) -> list[Prompt]:
        """Every prompt of `purpose` (any state) whose payload's `key` is `value`, oldest first."""
        return await self._records.with_payload(purpose, key, value)

    async def pending(self, conversation: ConversationRef | None = None) -> list[Prompt]:
        """Pending prompts, oldest first; of one conversation when given."""
        return await self._records.pending(conversation)

    async def audit(self, prompt_id: str) -> list[dict[str, Any]]:
        """The prompt's audit trail, oldest first."""
        return await self._records.audit(prompt_id)


def _options(kind: PromptKind, options: Sequence[str]) -> tuple[str, ...]:
    """The options a new prompt of `kind` offers (approvals: Approve and Deny)."""
    if kind == "approval":
        return (APPROVE, DENY)
    if kind == "choice":
        opts = tuple(o.strip() for o in options if o.strip())
        if not opts:
            raise ValueError("a choice prompt needs at least one option")
        if len({o.casefold() for o in opts}) != len(opts):
            raise ValueError("choice options must differ (case-insensitively)")
        return opts
    return ()
