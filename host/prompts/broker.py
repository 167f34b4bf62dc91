"""The prompt broker: one durable path for approvals, choices and free-text clarifications.

Prompts are persisted before they are shown, every decision is a conditional UPDATE on
`state = 'pending'` (so exactly one answer wins), and each decision handler runs at most once
per broker and is retried by `recover()` when it failed or a crash interrupted it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import re
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal

import aiosqlite

from core.ids import ConversationRef
from core.keyed import KeyedLocks
from core.store import Row, Store
from host.runtime.conversation_log import ensure_conversation
from host.runtime.events import ConversationStopped, EventBus, PromptDecided, StoppedItem
from host.runtime.people import People
from host.runtime.ports import PromptSurface
from host.runtime.prompt_record import APPROVE, DENY, Prompt, PromptKind, PromptState
from host.runtime.scheduling import FiredJob, Scheduler

log = logging.getLogger(__name__)

AnswerStatus = Literal[
    "accepted", "not_allowed", "already_decided", "expired", "unknown", "invalid", "ambiguous"
]
DecisionHandler = Callable[[Prompt], Awaitable[None]]

MAX_ANSWER_CHARS = 4000
_KINDS: tuple[PromptKind, ...] = ("approval", "choice", "free_text")
_STATES: tuple[PromptState, ...] = ("pending", "answered", "expired", "cancelled")
# Outcome texts quote answers; free-text answers can be long, so quotes are shortened.
_QUOTE_CHARS = 200
# The scheduler job kind that expires one prompt at its deadline.
PROMPT_EXPIRY_JOB = "prompt_expiry"
# Prompts are listed by the start of their id, this long unless more is needed to tell
# them apart; a typed answer may name one by any start this long or longer.
SHORT_ID_CHARS = 8
_ID_START = re.compile(r"[\w-]{6,64}")
# Echoed in the "which one?" reply only when it is this plain.
_PLAIN_ANSWER = re.compile(r"[\w .,'-]{1,24}")
# For `help`: how a typed message answers a question (see `answer_typed`).
TYPED_ANSWER_HELP = (
    "type the option's number or its text (`1`, `approve`), or your answer to a free-text "
    "question. When several questions wait for you I list them: add the prompt's id, as "
    "in `1 abc12345` or `abc12345 1`."
)


def expiry_job_id(prompt_id: str) -> str:
    """The scheduler job id of a prompt's expiry (stable, so re-scheduling replaces it)."""
    return f"prompt-expiry:{prompt_id}"


@dataclass(frozen=True)
class AnswerOutcome:
    """What happened to one answer attempt, with the text to show the responder."""

    status: AnswerStatus
    message: str
    prompt: Prompt | None = None
    # True when the broker already told the responder privately (refusals), so the caller
    # should not show `message` a second time.
    notified: bool = False


class PromptBroker:
    """Creates, shows, answers, expires and cancels prompts; runs decision handlers once."""

    def __init__(
        self,
        store: Store,
        *,
        surfaces: Mapping[str, PromptSurface],
        bus: EventBus,
        admins: Sequence[str] = (),
        approvers: Sequence[str] = (),
        default_expiry_seconds: float = 1800,
        clock: Callable[[], float] = time.time,
        new_id: Callable[[], str] | None = None,
        scheduler: Scheduler | None = None,
        people: People | None = None,
    ) -> None:
        if default_expiry_seconds <= 0:
            raise ValueError("default_expiry_seconds must be positive")
        self._store = store
        self._surfaces = dict(surfaces)
        self._bus = bus
        self._admins = frozenset(admins)
        self._approvers = tuple(approvers)
        self._default_expiry = float(default_expiry_seconds)
        self._clock = clock
        self._new_id = new_id or (lambda: uuid.uuid4().hex)
        # Expires each prompt at its deadline; without one, only sweeps and waiters expire.
        self._scheduler = scheduler
        # Who is named in what people read (refusals, outcomes): display names, not ids.
        self._people = people or People()
        # In-process wake-ups for wait(); the database stays the source of truth.
        self._decided: dict[str, asyncio.Event] = {}
        # Per-prompt locks so a handler never runs twice in this process (answer vs recover).
        self._locks = KeyedLocks()

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
        if kind not in _KINDS:
            raise ValueError(f"unknown prompt kind {kind!r}")
        if not question.strip():
            raise ValueError("a prompt needs a question")
        if kind == "approval":
            opts: tuple[str, ...] = (APPROVE, DENY)
        elif kind == "choice":
            opts = tuple(o.strip() for o in options if o.strip())
            if not opts:
                raise ValueError("a choice prompt needs at least one option")
            if len({o.casefold() for o in opts}) != len(opts):
                raise ValueError("choice options must differ (case-insensitively)")
        else:
            opts = ()
        ttl = self._default_expiry if expires_in is None else float(expires_in)
        if ttl <= 0:
            raise ValueError("expires_in must be positive")
        allowed = _unique(
            [requester, *(self._approvers if kind == "approval" else ()), *extra_responders]
            if responders is None
            else responders
        )
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
        payload_json = json.dumps(prompt.payload)  # fails here, before anything is stored
        conv = conversation
        async with self._store.transaction() as db:
            await ensure_conversation(db, conv, now)
            await db.execute(
                "INSERT INTO prompts (id, nonce, kind, question, options, requester,"
                " allowed_responders, conversation_id, platform, workspace, channel, thread,"
                " created_at, expires_at, state, purpose, payload)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?)",
                (
                    prompt.id,
                    prompt.nonce,
                    kind,
                    question,
                    json.dumps(list(opts)),
                    requester,
                    json.dumps(list(allowed)),
                    conv.id,
                    conv.platform,
                    conv.workspace,
                    conv.channel,
                    conv.thread,
                    now,
                    prompt.expires_at,
                    purpose,
                    payload_json,
                ),
            )
            await _audit(
                db, prompt.id, "created", by=requester, at=now, detail=f"{kind}: {question}"
            )
        # Before showing: an answer during the show cancels the job, so it must exist by then.
        await self._schedule_expiry(prompt)
        return await self._show(prompt)

    async def _show(self, prompt: Prompt) -> Prompt:
        """Display a stored prompt on its platform and remember the message id."""
        surface = self._surfaces.get(prompt.conversation.platform)
        if surface is None:
            log.warning(
                "no prompt surface for %r; prompt %s is answerable by text only",
                prompt.conversation.platform,
                prompt.id,
            )
            return prompt
        try:
            message_id = await surface.show_prompt(prompt)
        except Exception:
            log.exception("showing prompt %s failed; it stays pending", prompt.id)
            return prompt
        async with self._store.transaction() as db:
            await db.execute(
                "UPDATE prompts SET message_id = ? WHERE id = ?", (message_id, prompt.id)
            )
            await _audit(db, prompt.id, "shown", by="system", at=self._clock(), detail=message_id)
            # Read the state in the same transaction as the id: a decision either commits
            # before (seen here) or after (and then reads this message id to close it).
            cur = await db.execute("SELECT state FROM prompts WHERE id = ?", (prompt.id,))
            row = await cur.fetchone()
        if row is not None and row["state"] != "pending":
            # Answered (e.g. clicked) before the post returned, so whoever decided could not
            # edit a message whose id was unknown: close it here, or its buttons stay live.
            decided = await self.get(prompt.id)
            if decided is not None:
                await self._close_on_surface(decided)
                return decided
        return replace(prompt, message_id=message_id)

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
        prompt = await self.get(prompt_id)
        if prompt is None or not hmac.compare_digest(prompt.nonce, nonce):
            return AnswerOutcome("unknown", "This request is no longer known.")
        return await self._answer(prompt, responder_id, answer, message_id=message_id)

    async def answer_typed(
        self, conversation: ConversationRef, responder_id: str, text: str
    ) -> AnswerOutcome | None:
        """Treat a typed reply as an answer to a prompt of the conversation, if it fits one.

        `1 abc12345` or `abc12345 1` (the start of a prompt's id) answers that prompt. Else
        the text answers the one pending prompt it fits that the typer may answer; when it
        fits several, the outcome (`ambiguous`) lists them instead of guessing. An accepted
        outcome's message names the prompt answered. None means the text answers nothing,
        so the caller handles it as a normal turn.
        """
        pending = await self._pending_rows(conversation, newest_first=True)
        addressed = await self._addressed(conversation, pending, text)
        if addressed is not None:
            prompt, rest = addressed
            return _named(await self._answer(prompt, responder_id, rest), pending)
        now = self._clock()
        fits = [
            p
            for p in pending
            # Any text fits a free-text prompt, so only its live responders' messages count;
            # a bystander chatting in the thread must still get a normal turn.
            if (
                bool(text.strip()) and self._may_answer(p, responder_id) and now < p.expires_at
                if p.kind == "free_text"
                else _match_option(p.options, text) is not None
            )
        ]
        mine = [p for p in fits if self._may_answer(p, responder_id)]
        live = [p for p in mine if now < p.expires_at]
        if len(live) > 1:
            return AnswerOutcome("ambiguous", _which_one(live[::-1], text, pending))
        # One live prompt; else the newest expired one of theirs (to say it expired), else
        # someone else's (to say who may answer it).
        target = next(iter(live or mine or fits), None)
        if target is None:
            return None
        return _named(await self._answer(target, responder_id, text), pending)

    async def _addressed(
        self, conversation: ConversationRef, pending: Sequence[Prompt], text: str
    ) -> tuple[Prompt, str] | None:
        """The prompt a typed answer names by the start of its id (first or last word; only
        first for free text), with the rest of the text as the answer."""
        words = text.split()
        if len(words) < 2:
            return None
        stripped = text.strip()
        forms = (
            (words[0], stripped[len(words[0]) :].strip(), True),
            (words[-1], stripped[: -len(words[-1])].strip(), False),
        )
        for token, rest, id_first in forms:
            start = token.strip("`#").casefold()
            if not _ID_START.fullmatch(start):
                continue
            named = [p for p in pending if p.id.casefold().startswith(start)]
            if not named:
                # A decided prompt, so the answer hears that it was decided.
                named = await self._decided_with_id_start(conversation, start)
            if len(named) == 1 and (id_first or named[0].kind != "free_text"):
                return named[0], rest
        return None

    async def _decided_with_id_start(
        self, conversation: ConversationRef, start: str
    ) -> list[Prompt]:
        rows = await self._store.fetchall(
            "SELECT * FROM prompts WHERE conversation_id = ? AND state != 'pending'"
            " AND lower(substr(id, 1, ?)) = ? LIMIT 2",
            (conversation.id, len(start), start),
        )
        return [_prompt(r) for r in rows]

    async def _answer(
        self, prompt: Prompt, responder_id: str, raw: str, *, message_id: str | None = None
    ) -> AnswerOutcome:
        if not self._may_answer(prompt, responder_id):
            return await self._refuse(prompt, responder_id)
        if prompt.state != "pending":
            return await self._duplicate(prompt, responder_id, raw)
        now = self._clock()
        if now >= prompt.expires_at:
            # Fail closed even when the expiry sweep has not run yet.
            await self._expire_ids([prompt.id], now)
            current = await self.get(prompt.id) or prompt
            if current.state != "expired":
                return await self._duplicate(current, responder_id, raw)
            return AnswerOutcome("expired", _expired_text(current), current)
        value, problem = _normalise(prompt, raw)
        if value is None:
            return AnswerOutcome("invalid", problem, prompt)

        shown_as: str | None = None
        async with self._store.transaction() as db:
            cur = await db.execute(
                "UPDATE prompts SET state = 'answered', answer = ?, answered_by = ?,"
                " decided_at = ?, message_id = COALESCE(message_id, ?)"
                " WHERE id = ? AND state = 'pending' AND expires_at > ?",
                (value, responder_id, now, message_id, prompt.id, now),
            )
            won = cur.rowcount == 1
            if won:
                await _audit(db, prompt.id, "answered", by=responder_id, at=now, detail=value)
                # `prompt` was read before this transaction: take the message id as stored
                # now, so a post that returned meanwhile is the one that gets closed.
                cur = await db.execute("SELECT message_id FROM prompts WHERE id = ?", (prompt.id,))
                row = await cur.fetchone()
                shown_as = row["message_id"] if row is not None else message_id
        if not won:
            # Someone else decided first (or it expired meanwhile): report what happened.
            latest = await self.get(prompt.id)
            if latest is None:
                return AnswerOutcome("unknown", "This request is no longer known.")
            return await self._answer(latest, responder_id, raw, message_id=message_id)

        decided = replace(
            prompt,
            state="answered",
            answer=value,
            answered_by=responder_id,
            decided_at=now,
            message_id=shown_as,
        )
        await self._after_decision(decided)
        return AnswerOutcome(
            "accepted",
            f"Recorded {await self._people.name(prompt.conversation, responder_id)}'s answer: "
            f"{_quote(value)}.",
            decided,
        )

    def _may_answer(self, prompt: Prompt, responder_id: str) -> bool:
        # Admins are checked now, not stored, so a changed admin list applies to old prompts.
        return responder_id in prompt.allowed_responders or responder_id in self._admins

    async def _refuse(self, prompt: Prompt, responder_id: str) -> AnswerOutcome:
        conv = prompt.conversation
        requester = await self._people.name(conv, prompt.requester)
        if prompt.requester not in prompt.allowed_responders:
            names = await self._people.names(conv, prompt.allowed_responders)
            text = f"Only {', '.join(names)} or an admin can answer this."
        elif prompt.kind == "approval":
            text = f"Only {requester} or an approver can answer this."
        elif len(prompt.allowed_responders) > 1:
            text = f"Only {requester} or the people they asked can answer this."
        else:
            text = f"Only {requester} can answer this."
        await self._store.execute(
            "INSERT INTO prompt_audit (prompt_id, at, actor, action, detail)"
            " VALUES (?, ?, ?, 'refused', ?)",
            (prompt.id, self._clock(), responder_id, "not an allowed responder"),
        )
        notified = await self.notify_private(prompt.conversation, responder_id, text)
        return AnswerOutcome("not_allowed", text, prompt, notified=notified)

    async def notify_private(self, conv: ConversationRef, user_id: str, text: str) -> bool:
        """Tell one person something only they see; False when it could not be said."""
        surface = self._surfaces.get(conv.platform)
        if surface is None:
            return False
        try:
            await surface.notify_private(conv, user_id, text)
        except Exception:
            log.exception("a private note to %s in %s failed", user_id, conv.id)
            return False
        return True

    async def _duplicate(self, prompt: Prompt, responder_id: str, raw: str) -> AnswerOutcome:
        await self._store.execute(
            "INSERT INTO prompt_audit (prompt_id, at, actor, action, detail)"
            " VALUES (?, ?, ?, 'duplicate', ?)",
            (prompt.id, self._clock(), responder_id, f"{prompt.state}; tried {_quote(raw)}"),
        )
        if prompt.state == "expired":
            return AnswerOutcome("expired", _expired_text(prompt), prompt)
        if prompt.state == "cancelled":
            return AnswerOutcome("already_decided", "This request was cancelled.", prompt)
        by = await self._people.name(prompt.conversation, prompt.answered_by or "")
        text = f"Already answered by {by}: {_quote(prompt.answer or '')}."
        return AnswerOutcome("already_decided", text, prompt)

    # ------------------------------------------------------------------ expiry and cancel

    async def expire_due(self) -> list[Prompt]:
        """Expire every pending prompt past its deadline (approvals count as denied)."""
        now = self._clock()
        rows = await self._store.fetchall(
            "SELECT id FROM prompts WHERE state = 'pending' AND expires_at <= ?"
            " ORDER BY expires_at",
            (now,),
        )
        return await self._expire_ids([str(r["id"]) for r in rows], now)

    async def _expire_ids(self, prompt_ids: Sequence[str], now: float) -> list[Prompt]:
        if not prompt_ids:
            return []
        won: list[str] = []
        async with self._store.transaction() as db:
            for prompt_id in prompt_ids:
                cur = await db.execute(
                    "UPDATE prompts SET state = 'expired', decided_at = ?"
                    " WHERE id = ? AND state = 'pending' AND expires_at <= ?",
                    (now, prompt_id, now),
                )
                if cur.rowcount == 1:
                    won.append(prompt_id)
                    await _audit(
                        db, prompt_id, "expired", by="system", at=now, detail="deadline passed"
                    )
        return await self._finish_all(won)

    async def on_expiry_job(self, job: FiredJob) -> None:
        """Scheduler handler for `prompt_expiry` jobs: expire that prompt if it is due."""
        prompt = await self.get(str(job.payload["prompt_id"]))
        if prompt is None or prompt.state != "pending":
            return
        now = self._clock()
        if now < prompt.expires_at:
            # Fired early by this broker's clock (skew or rounding): wake again at the deadline.
            await self._schedule_expiry(prompt)
            return
        log.info("prompt %s expired by its job, %.3fs late", prompt.id, job.lateness_seconds)
        await self._expire_ids([prompt.id], now)

    async def schedule_expiries(self) -> int:
        """Schedule the expiry job of every pending prompt (after the scheduler starts).

        Covers prompts created before expiry jobs existed and jobs lost or missed beyond the
        scheduler's grace; re-scheduling replaces a job, so this is idempotent.
        """
        pending = await self.pending()
        for prompt in pending:
            await self._schedule_expiry(prompt)
        return len(pending)

    async def _schedule_expiry(self, prompt: Prompt) -> None:
        if self._scheduler is None:
            return
        when = datetime.fromtimestamp(prompt.expires_at, UTC)
        try:
            await self._scheduler.schedule_at(
                expiry_job_id(prompt.id), when, PROMPT_EXPIRY_JOB, {"prompt_id": prompt.id}
            )
        except Exception:
            # Still fails closed: answers and waiters check the deadline, and the next
            # start's sweep expires it.
            log.warning("scheduling the expiry of prompt %s failed", prompt.id, exc_info=True)

    async def cancel_conversation(
        self, conversation: ConversationRef, *, actor: str = "system", requester: str | None = None
    ) -> int:
        """Cancel the pending prompts of a conversation (for `stop`): every one, or only
        those `requester` asked for when given; return how many."""
        return len(await self._cancel_pending(conversation, actor=actor, requester=requester))

    async def _cancel_pending(
        self, conversation: ConversationRef, *, actor: str, requester: str | None
    ) -> list[Prompt]:
        now = self._clock()
        won: list[str] = []
        async with self._store.transaction() as db:
            cur = await db.execute(
                "SELECT id FROM prompts WHERE conversation_id = ? AND state = 'pending'"
                " AND (? IS NULL OR requester = ?)",
                (conversation.id, requester, requester),
            )
            ids = [str(r["id"]) for r in await cur.fetchall()]
            for prompt_id in ids:
                cur = await db.execute(
                    "UPDATE prompts SET state = 'cancelled', decided_at = ?"
                    " WHERE id = ? AND state = 'pending'",
                    (now, prompt_id),
                )
                if cur.rowcount == 1:
                    won.append(prompt_id)
                    await _audit(
                        db, prompt_id, "cancelled", by=actor, at=now, detail="conversation stopped"
                    )
        return await self._finish_all(won)

    async def _finish_all(self, prompt_ids: Iterable[str]) -> list[Prompt]:
        done: list[Prompt] = []
        for prompt_id in prompt_ids:
            prompt = await self.get(prompt_id)
            if prompt is not None:
                await self._after_decision(prompt)
                done.append(prompt)
        return done

    # ------------------------------------------------------------- after a decision

    async def _after_decision(self, prompt: Prompt) -> None:
        # Called only by whoever won the conditional UPDATE (or by recover), never twice.
        event = self._decided.pop(prompt.id, None)
        if event is not None:
            event.set()
        await self._cancel_expiry(prompt.id)
        await self._close_on_surface(prompt)
        await self._run_handler(prompt.id)

    async def _cancel_expiry(self, prompt_id: str) -> None:
        if self._scheduler is None:
            return
        try:
            await self._scheduler.cancel(expiry_job_id(prompt_id))
        except Exception:
            # Harmless: the job finds the prompt decided and does nothing.
            log.warning("cancelling the expiry job of prompt %s failed", prompt_id, exc_info=True)

    async def _close_on_surface(self, prompt: Prompt) -> None:
        surface = self._surfaces.get(prompt.conversation.platform)
        if surface is None:
            return
        try:
            await surface.close_prompt(prompt)
        except Exception:
            log.exception("closing prompt %s on %s failed", prompt.id, prompt.conversation.platform)

    async def _run_handler(self, prompt_id: str) -> None:
        async with self._locks.hold(prompt_id):
            # Re-read under the lock: whoever came first may have handled it already.
            row = await self._store.fetchone("SELECT * FROM prompts WHERE id = ?", (prompt_id,))
            if row is None or row["state"] == "pending" or row["handled"]:
                return
            prompt = _prompt(row)
            detail = "ok"
            if not self._bus.has_subscriber(PromptDecided, prompt.purpose):
                # Nothing to do beyond waking `wait()`ers (clarifications read it themselves).
                detail = f"no handler for purpose {prompt.purpose!r}"
            elif not await self._bus.publish(PromptDecided(prompt)):
                # Left unhandled on purpose: recover() retries it after a restart.
                return
            async with self._store.transaction() as db:
                cur = await db.execute(
                    "UPDATE prompts SET handled = 1 WHERE id = ? AND handled = 0", (prompt_id,)
                )
                if cur.rowcount == 1:
                    await _audit(
                        db, prompt_id, "handled", by="system", at=self._clock(), detail=detail
                    )

    async def recover(self) -> None:
        """At startup: finish decided-but-unhandled prompts, then expire overdue ones."""
        rows = await self._store.fetchall(
            "SELECT id FROM prompts WHERE state != 'pending' AND handled = 0"
            " ORDER BY decided_at, rowid"
        )
        for row in rows:
            prompt = await self.get(str(row["id"]))
            if prompt is None:
                continue
            # The crash may have come before the message was edited; editing is idempotent.
            await self._close_on_surface(prompt)
            await self._run_handler(prompt.id)
        await self.expire_due()
        # A crash between storing a prompt and showing it left it invisible: show it now.
        # (A crash after showing but before recording the message id shows it twice, which
        # beats a question nobody can see.)
        for prompt in await self.pending():
            if prompt.message_id is None and prompt.conversation.platform in self._surfaces:
                await self._show(prompt)

    # ------------------------------------------------------------------------- reading

    async def wait(self, prompt_id: str, *, poll_interval: float = 1.0) -> Prompt:
        """Return the prompt once it is answered, expired or cancelled.

        Wakes at once on decisions made by this broker; polls the database for others.
        """
        while True:
            event = self._decided.setdefault(prompt_id, asyncio.Event())
            # Read after registering the event, so a decision in between cannot be missed.
            prompt = await self.get(prompt_id)
            if prompt is None:
                self._decided.pop(prompt_id, None)
                raise LookupError(f"unknown prompt {prompt_id!r}")
            if prompt.state != "pending":
                if self._decided.get(prompt_id) is event:
                    self._decided.pop(prompt_id, None)
                return prompt
            if self._clock() >= prompt.expires_at:
                await self._expire_ids([prompt_id], self._clock())
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), poll_interval)

    async def get(self, prompt_id: str) -> Prompt | None:
        """One prompt by id, as stored."""
        row = await self._store.fetchone("SELECT * FROM prompts WHERE id = ?", (prompt_id,))
        return _prompt(row) if row is not None else None

    async def cancel_conversation_id(self, event: ConversationStopped) -> None:
        """`stop` hook: cancel the conversation's pending prompts its typist may stop
        (those they requested, or all when privileged); record both in the tally."""
        conversation = ConversationRef.parse(event.conversation_id)
        cancelled: list[Prompt] = []
        if event.privileged or event.by:
            requester = None if event.privileged else event.by
            cancelled = await self._cancel_pending(
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

    async def status(self, conversation: ConversationRef) -> str:
        """The conversation's pending prompts, one line each, for `status`."""
        pending = await self.pending(conversation)
        # By the short ids a typed answer can name them with (`1 abc12345`).
        shorts = short_ids(pending)
        return "\n".join(f"- prompt `{shorts[p.id]}` waiting: {gist(p.question)}" for p in pending)

    async def with_payload(self, purpose: str, key: str, value: str) -> list[Prompt]:
        """Every prompt of `purpose` (any state) whose payload's `key` is `value`, oldest first."""
        rows = await self._store.fetchall(
            "SELECT * FROM prompts WHERE purpose = ? AND json_extract(payload, ?) = ?"
            " ORDER BY created_at, rowid",
            (purpose, f"$.{key}", value),
        )
        return [_prompt(r) for r in rows]

    async def pending(self, conversation: ConversationRef | None = None) -> list[Prompt]:
        """Pending prompts, oldest first; of one conversation when given."""
        return await self._pending_rows(conversation, newest_first=False)

    async def _pending_rows(
        self, conversation: ConversationRef | None, *, newest_first: bool
    ) -> list[Prompt]:
        order = "DESC" if newest_first else "ASC"
        if conversation is None:
            rows = await self._store.fetchall(
                "SELECT * FROM prompts WHERE state = 'pending'"
                f" ORDER BY created_at {order}, rowid {order}"
            )
        else:
            rows = await self._store.fetchall(
                "SELECT * FROM prompts WHERE state = 'pending' AND conversation_id = ?"
                f" ORDER BY created_at {order}, rowid {order}",
                (conversation.id,),
            )
        return [_prompt(r) for r in rows]

    async def audit(self, prompt_id: str) -> list[dict[str, Any]]:
        """The prompt's audit trail, oldest first."""
        rows = await self._store.fetchall(
            "SELECT id, prompt_id, at, actor, action, detail FROM prompt_audit"
            " WHERE prompt_id = ? ORDER BY id",
            (prompt_id,),
        )
        return [dict(r) for r in rows]


# --------------------------------------------------------------------------- helpers


async def _audit(
    db: aiosqlite.Connection, prompt_id: str, action: str, *, by: str, at: float, detail: str
) -> None:
    await db.execute(
        "INSERT INTO prompt_audit (prompt_id, at, actor, action, detail) VALUES (?, ?, ?, ?, ?)",
        (prompt_id, at, by, action, detail),
    )


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(i for i in items if i))


def _match_option(options: Sequence[str], text: str) -> str | None:
    """The option a reply names: its text (case-insensitive) or its 1-based number."""
    wanted = text.strip().rstrip(".!").strip().casefold()
    if not wanted:
        return None
    for option in options:
        if option.casefold() == wanted:
            return option
    if wanted.isdecimal() and 1 <= int(wanted) <= len(options):
        return options[int(wanted) - 1]
    return None


def _normalise(prompt: Prompt, raw: str) -> tuple[str | None, str]:
    """The canonical answer, or None with the reason it is not acceptable."""
    if prompt.kind == "free_text":
        text = raw.strip()
        if not text:
            return None, "Please type an answer."
        if len(text) > MAX_ANSWER_CHARS:
            return None, f"Answers are limited to {MAX_ANSWER_CHARS} characters."
        return text, ""
    option = _match_option(prompt.options, raw)
    if option is None:
        listed = ", ".join(f"{n}. {o}" for n, o in enumerate(prompt.options, start=1))
        return None, f"Please answer with one of: {listed}."
    return option, ""


def short_ids(prompts: Iterable[Prompt]) -> dict[str, str]:
    """Each prompt's id shortened as far as it stays distinct among `prompts`."""
    ids = list(dict.fromkeys(p.id for p in prompts))
    length = SHORT_ID_CHARS
    while len({i[:length] for i in ids}) < len(ids):
        length += 1
    return {i: i[:length] for i in ids}


def gist(question: str, limit: int = 80) -> str:
    """The first line of a question that is not a code fence, shortened."""
    lines = [ln.strip() for ln in question.splitlines()]
    first = next((ln for ln in lines if ln and not ln.startswith("```")), "")
    first = first.rstrip(":").strip()
    return first if len(first) <= limit else first[: limit - 1] + "…"


def _named(outcome: AnswerOutcome, pending: Sequence[Prompt]) -> AnswerOutcome:
    """A typed answer's outcome whose confirmation says which prompt it answered."""
    prompt = outcome.prompt
    if outcome.status != "accepted" or prompt is None:
        return outcome
    short = short_ids([*pending, prompt])[prompt.id]
    message = (
        f"✔ Answered prompt `{short}` ({gist(prompt.question)}) with {_quote(prompt.answer or '')}."
    )
    return replace(outcome, message=message)


def _which_one(prompts: Sequence[Prompt], text: str, pending: Sequence[Prompt]) -> str:
    """The reply to a typed answer that fits several prompts (oldest first): which, and how
    to pick one."""
    shorts = short_ids([*pending])
    typed = text.strip()
    plain = bool(_PLAIN_ANSWER.fullmatch(typed))
    answer = typed if plain else "ANSWER"
    example = shorts[prompts[0].id]
    said = f"“{typed}”" if plain else "Your answer"
    lines = [
        f"{said} fits {len(prompts)} questions waiting for you here, so I answered none. "
        f"Add the prompt's id to pick one, as in `{answer} {example}` or "
        f"`{example} {answer}`:"
    ]
    for prompt in prompts:
        if prompt.options:
            choices = ", ".join(f"{n}. {o}" for n, o in enumerate(prompt.options, start=1))
        else:
            choices = "free text"
        lines.append(f"- `{shorts[prompt.id]}`: {gist(prompt.question)} ({choices})")
    return "\n".join(lines)


def _quote(text: str) -> str:
    return text if len(text) <= _QUOTE_CHARS else text[: _QUOTE_CHARS - 1] + "…"


def _expired_text(prompt: Prompt) -> str:
    if prompt.kind == "approval":
        return "This request expired and was not approved; ask again if it is still needed."
    return "This request expired; ask again if it is still needed."


def _prompt(row: Row) -> Prompt:
    state = str(row["state"])
    kind = str(row["kind"])
    if state not in _STATES or kind not in _KINDS:
        raise ValueError(f"corrupt prompt row {row['id']!r}: kind={kind!r} state={state!r}")
    return Prompt(
        id=str(row["id"]),
        nonce=str(row["nonce"]),
        kind=kind,
        question=str(row["question"]),
        options=tuple(json.loads(row["options"])),
        requester=str(row["requester"]),
        allowed_responders=tuple(json.loads(row["allowed_responders"])),
        conversation=ConversationRef(
            str(row["platform"]), str(row["workspace"]), str(row["channel"]), str(row["thread"])
        ),
        created_at=float(row["created_at"]),
        expires_at=float(row["expires_at"]),
        state=state,
        answer=row["answer"],
        answered_by=row["answered_by"],
        purpose=str(row["purpose"]),
        payload=dict(json.loads(row["payload"] or "{}")),
        message_id=row["message_id"],
        decided_at=row["decided_at"],
    )
