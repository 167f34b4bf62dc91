"""Conversation service: inbound messages become turns in lanes; replies go out once."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, Protocol

from agents.campaign_syntax import HELP as CAMPAIGN_HELP
from agents.models.offline import OFFLINE_REMINDER, is_offline_notice
from agents.models.types import ModelError
from agents.plan_syntax import HELP as PLAN_HELP
from core.call_scope import call_scope
from core.ids import ConversationRef
from core.keyed import KeyedSerial
from host.agent.host_agent import HostAgent
from host.conversation.lanes import LaneBusy, LaneManager, LanesClosed
from host.conversation.near_misses import (
    NO_QUESTION_WAITING,
    did_you_mean_text,
    is_bare_answer,
    near_miss,
)
from host.conversation.outbox import DeliveryError, Outbox
from host.conversation.prompt_decisions import TypedAnswerReplies
from host.conversation.status_text import status_reply
from host.conversation.viewer_links import RunLinks, with_footer
from host.conversation.working import THINKING, WorkingStatuses
from host.prompts.broker import TYPED_ANSWER_HELP, PromptBroker, gist
from host.runtime.conversation_log import ConversationLog, LoggedMessage
from host.runtime.events import EventBus, StoppedItem, StopTally, TurnCompleted, TurnRequested
from host.runtime.messages import InboundMessage, stored_inbound
from host.runtime.people import People
from host.runtime.record_links import without_link_tokens
from host.runtime.spending import SpendGate
from host.runtime.turn import TurnContext, TurnOrigin
from memory.group import Attribution

log = logging.getLogger(__name__)

ControlWord = Literal["stop", "status", "help"]
# Which messages in a thread that do not mention the bot it answers: its requester's
# (`requester`), everyone's (`anyone`), or none (`mentions`). See `_spoken_to`.
ThreadReplies = Literal["requester", "anyone", "mentions"]
# Each control word (a message that is just the word) and what it does, for `help`.
CONTROL_WORDS: Mapping[ControlWord, str] = MappingProxyType(
    {
        "stop": "cancels what you asked for in this thread (requests, graph runs, questions, "
        "campaigns); approvers and admins stop everything here.",
        "status": "shows what is running or waiting here.",
        "help": "shows this message.",
    }
)
# How the bot's own turns are shown in the log and to the model.
SYSTEM_AUTHOR = "raven-system"
SYSTEM_NAME = "raven (system)"
# A flooding author hears "busy" once per this many seconds per conversation.
BUSY_NOTICE_SECONDS = 60.0
_CONTROL = re.compile(rf"^\s*({'|'.join(CONTROL_WORDS)})\s*[.!?]*\s*$", re.IGNORECASE)
# The dedup key recording that a conversation was shown the full offline notice.
_OFFLINE_NOTICE_KEY = "offline-notice:{}"
_FOREVER_SECONDS = 100 * 365 * 86_400.0


def help_text(commands_help: str = "") -> str:
    """The answer to `help`, built from where each syntax is defined so it cannot drift:
    the control words, typed answers, the chat commands given, campaigns and plans."""
    lines = [
        "**raven-bot** — mention me with a request and I answer in this thread. "
        "These work without a model:",
        *(f"- `{word}` {does}" for word, does in CONTROL_WORDS.items()),
        f"- **Answering a question**: {TYPED_ANSWER_HELP}",
        # One `- **Topic**: …` line per feature's commands.
        *([commands_help] if commands_help else []),
        f"- **Campaigns**: {CAMPAIGN_HELP}",
        # Last: it ends with an example block.
        f"- **Plans**: {PLAN_HELP}",
    ]
    return "\n".join(lines)


HELP_TEXT = help_text()


@dataclass(frozen=True)
class TurnOutcome:
    """How a submitted turn ended, as seen by the adapter that submitted it."""

    turn_id: str
    status: Literal["completed", "failed", "cancelled"]
    text: str


def _consume_outcome(turn: asyncio.Future[TurnOutcome]) -> None:
    if not turn.cancelled() and (exc := turn.exception()) is not None:
        log.debug("turn ended with %r (reported in its thread)", exc)


# How many recent messages of a thread are searched for the names of work owners.
_NAME_LOOKBACK = 500
# Kept from a display name: nothing that could mention or ping anyone, or format text.
_UNSAFE_NAME = re.compile(r"[^\w .'-]+")
_KIND_ORDER = ("request", "report", "run", "question", "campaign")


def stop_reply(tally: StopTally, *, by: str, privileged: bool, names: Mapping[str, str]) -> str:
    """The answer to `stop`: what it cancelled, then what it left running by owner.

    Owners are named by display name when known (else by id), never mentioned."""

    def name(owner: str) -> str:
        shown = _UNSAFE_NAME.sub("", names.get(owner, "")).strip()[:40]
        return shown or f"`{owner}`"

    cancelled = _describe(tally.cancelled, by=by, name=name)
    text = (
        f"Stopped: cancelled {', '.join(cancelled)}."
        if cancelled
        else "Stopped: nothing was running in this thread."
        if privileged
        else "Stopped: nothing of yours was running in this thread."
    )
    left: list[str] = []
    for owner in dict.fromkeys(item.owner for item in tally.left):
        items = [item for item in tally.left if item.owner == owner]
        things = _join(_describe(items, by=owner, name=name))
        pronoun = "it" if len(items) == 1 else "them"
        if owner:
            who = name(owner)
            left.append(f"{things} by {who} — {who}, an approver or an admin can stop {pronoun}")
        else:
            left.append(f"{things} — an approver or an admin can stop {pronoun}")
    if left:
        text += f"\nStill running (not yours to stop): {'; '.join(left)}."
    return text


def _describe(items: Sequence[StoppedItem], *, by: str, name: Callable[[str], str]) -> list[str]:
    """One phrase per run, question or campaign, and one for the requests and the reports;
    an owner other than `by` is named."""
    phrases: list[str] = []
    for kind in _KIND_ORDER:
        of_kind = [item for item in items if item.kind == kind]
        if not of_kind:
            continue
        if kind == "report":
            phrases.append(f"{len(of_kind)} report(s) of mine")
            continue
        if kind == "request":
            owners = list(dict.fromkeys(item.owner for item in of_kind))
            whose = (
                "" if owners == [by] else f" (of {_join([_whose(o, by, name) for o in owners])})"
            )
            phrases.append(f"{len(of_kind)} request(s) in this thread{whose}")
            continue
        for item in of_kind:
            owner = f" by {name(item.owner)}" if item.owner != by else ""
            detail = f" ({item.detail})" if item.detail else ""
            phrases.append(f"{kind} `{item.ref}`{owner}{detail}")
    return phrases


def _running_label(msg: InboundMessage) -> str:
    """What `status` says a turn is: whose request it is, by display name (no ids)."""
    if msg.origin == "system":
        return "a report of mine"
    name = _UNSAFE_NAME.sub("", msg.author_name).strip()[:40] or "someone"
    if msg.origin == "scheduled":
        return f"scheduled task `{msg.task}` of {name}"
    return f"a request by {name}"


def _whose(owner: str, by: str, name: Callable[[str], str]) -> str:
    return "you" if owner == by else name(owner) if owner else "me"


def _join(parts: Sequence[str]) -> str:
    return ", ".join(parts[:-1]) + f" and {parts[-1]}" if len(parts) > 1 else "".join(parts)


def control_word(text: str) -> ControlWord | None:
    """The control word a message consists of, if any."""
    match = _CONTROL.match(text)
    return match.group(1).lower() if match else None  # type: ignore[return-value]


class ReplyGate(Protocol):
    """Decides whether a scheduled firing's result is posted (a task's `notify:`)."""

    async def admit(self, ctx: TurnContext, text: str, *, failed: bool, since: float) -> str | None:
        """The text to post for a firing that began at `since` (wall clock), or None to say
        nothing; `failed` when the turn itself failed."""
        ...


class CommandHandler(Protocol):
    """Chat commands answered without a Host turn (memory controls)."""

    @property
    def help(self) -> str:
        """What the commands are and do, for `help`: one line, `**Topic**: …`."""
        ...

    async def handle(self, msg: InboundMessage) -> str | None:
        """The reply, or None when `msg` is not a command."""
        ...


@dataclass(frozen=True)
class ConversationParts:
    """What every conversation needs: its log, lanes, Host, outbox and event bus."""

    conversation_log: ConversationLog
    lanes: LaneManager
    host: HostAgent
    outbox: Outbox
    # Hears TurnCompleted (memory writes, notifications) and nothing else from here.
    bus: EventBus


@dataclass(frozen=True)
class ConversationConfig:
    """How long events are remembered, how much history a turn sees, who may stop all."""

    dedup_ttl_seconds: float
    history_messages: int = 40
    busy_notice_seconds: float = BUSY_NOTICE_SECONDS
    # Their `stop` cancels everyone's work in a thread; anyone else's only their own.
    admins: frozenset[str] = frozenset()
    approvers: frozenset[str] = frozenset()
    # Whose messages in a thread are answered without a mention (`RAVEN_THREAD_REPLIES`).
    thread_replies: ThreadReplies = "requester"


@dataclass(frozen=True)
class ConversationExtras:
    """Optional collaborators: typed prompt answers, chat commands, `status` lines, the
    background work `quiesce` waits for, platform enrichment, display names."""

    broker: PromptBroker | None = None
    commands: CommandHandler | None = None
    status_sources: tuple[Callable[[ConversationRef], Awaitable[str]], ...] = ()
    background_idle: Callable[[str], Awaitable[None]] | None = None
    enrichers: Mapping[str, Callable[[InboundMessage], Awaitable[InboundMessage]]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    # How replies name people (whose work `stop` left running): display names.
    people: People = field(default_factory=People)
    # Whether a scheduled firing's result is posted.
    reply_gate: ReplyGate | None = None
    # The "is thinking…" line shown while a turn works (none: not shown).
    working: WorkingStatuses | None = None
    # Whether a person's turn may spend on models today (none: no budgets).
    spend: SpendGate | None = None
    # The viewer's links under replies about runs (none: no viewer, RAVEN_WEB_PORT unset).
    run_links: RunLinks | None = None


class ConversationService:
    """Owns the path inbound message → durable record → lane → Host turn → one reply."""

    def __init__(
        self,
        parts: ConversationParts,
        config: ConversationConfig,
        extras: ConversationExtras | None = None,
        *,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex[:16],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        extras = extras or ConversationExtras()
        self._log = parts.conversation_log
        self._people = extras.people
        self._lanes = parts.lanes
        self._host = parts.host
        self._outbox = parts.outbox
        self._ttl = config.dedup_ttl_seconds
        self._history = config.history_messages
        self._new_id = new_id
        self._typed_answers = (
            TypedAnswerReplies(extras.broker, parts.conversation_log, parts.outbox)
            if extras.broker is not None
            else None
        )
        self._bus = parts.bus
        self._commands = extras.commands
        self._status_sources = extras.status_sources
        self._background_idle = extras.background_idle
        self._enrichers = extras.enrichers
        self._reply_gate = extras.reply_gate
        self._working = extras.working
        self._spend = extras.spend
        self._run_links = extras.run_links
        self._busy_notice_seconds = config.busy_notice_seconds
        self._clock = clock
        self._privileged = config.admins | config.approvers
        self._thread_replies = config.thread_replies
        # (conversation, author) → when that author was last told the lane is full.
        self._busy_told: dict[tuple[str, str], float] = {}
        # What one conversation receives is dispatched in order, off the ingress path.
        self._ingress = KeyedSerial("ingress")

    async def accept(self, msg: InboundMessage) -> asyncio.Future[TurnOutcome] | None:
        """Persist and dedup `msg`, then start its turn; None for a duplicate or a control word.

        Waits for the message's dispatch (control replies, typed answers, queueing), so a
        script's next line sees its effect. Adapters with an ack deadline use `receive`.
        """
        message_id = await self._claim(msg)
        if message_id is None:
            return None
        task = self._ingress.spawn(msg.conversation.id, lambda: self._dispatch(msg, message_id))
        return await asyncio.shield(task)

    async def recent(self, platform: str, since: float) -> list[tuple[ConversationRef, str | None]]:
        """Conversations active since `since` with their newest message id from a person (for
        an adapter catching up on what arrived while the bot was down; None: none yet)."""
        return await self._log.recent_conversations(platform, since=since)

    async def claim(self, platform: str, event_id: str) -> bool:
        """True the first time a platform event that is not a message (a click, a form) is
        seen: redeliveries, even across a restart, are dropped."""
        return await self._log.claim_key(f"{platform}:event:{event_id}", ttl_seconds=self._ttl)

    async def receive(self, msg: InboundMessage) -> bool:
        """Persist and dedup `msg` and return at once; False for a duplicate.

        Everything else (control replies, typed answers, busy notes, the turn) runs after, in
        order per conversation, so acknowledging an event never waits on a post.
        """
        message_id = await self._claim(msg)
        if message_id is None:
            return False

        async def dispatch() -> None:
            turn = await self._dispatch(msg, message_id)
            if turn is not None:
                # Nobody waits for this turn; its failure was already told to the user.
                turn.add_done_callback(_consume_outcome)

        self._ingress.spawn(msg.conversation.id, dispatch)
        return True

    async def _claim(self, msg: InboundMessage) -> int | None:
        message_id = await self._log.claim_inbound(
            msg.conversation,
            event_keys=msg.dedup_keys,
            ttl_seconds=self._ttl,
            author_id=msg.author_id,
            author_name=msg.author_name,
            text=msg.text,
            payload=msg.model_dump_json(),
        )
        if message_id is None:
            log.info("duplicate event %s dropped", msg.event_id)
        return message_id

    def dispatching(self) -> bool:
        """Whether a received message (or the bot's own turn) is still being dispatched."""
        return self._ingress.busy()

    async def dispatched(self) -> None:
        """Wait until every received message was dispatched (queued, answered or refused)."""
        await self._ingress.settled()

    async def dispatched_in(self, conversation_id: str) -> None:
        """Wait until what the conversation received so far was dispatched: a notice about
        its consequences (a campaign a typed approval started) then follows its reply."""
        await self._ingress.idle(conversation_id)

    async def close(self) -> None:
        """Cancel dispatches still queued (their messages stay unhandled and resume later) and
        stop retrying failed posts (they stay recorded and go out at the next start)."""
        await self._ingress.close()
        await self._outbox.close()
        if self._working is not None:
            await self._working.close()

    async def _dispatch(
        self, msg: InboundMessage, message_id: int
    ) -> asyncio.Future[TurnOutcome] | None:
        # Only a person's own message can be a control word, an answer or a command.
        person = msg.origin == "user"
        word = control_word(msg.text) if person else None
        if word is not None:
            await self._control(word, msg, message_id)
            return None
        if person and await self._answered_without_turn(msg, message_id):
            return None
        turn_id = self._new_id()
        try:
            return self._lanes.submit(
                msg.conversation.id,
                lambda: self._run_turn(msg, message_id, turn_id),
                kind="user" if person else "system",
                label=_running_label(msg),
                # A scheduled firing is its owner's to stop; the bot's own reports nobody's.
                owner="" if msg.origin == "system" else msg.author_id,
            )
        except LanesClosed:
            # Shutting down: the message stays unhandled and runs after the restart.
            log.info("message %s arrived during shutdown; it resumes at the next start", message_id)
            return None
        except LaneBusy as exc:
            await self._log.mark_handled(message_id)
            await self._tell_busy(msg, exc, message_id)
            return None

    async def _answered_without_turn(self, msg: InboundMessage, message_id: int) -> bool:
        """A person's message that needs no Host turn, handled here: a typed answer, others'
        chatter (recorded, said nothing to), a command, a near miss, a stray answer."""
        spoken_to = await self._spoken_to(msg)
        # A typed reply to a pending prompt answers it instead of starting a turn; without
        # a mention, only a question waiting for its author is answered so.
        typed = self._typed_answers
        if typed is not None and await typed.take(msg, message_id, waiting_only=not spoken_to):
            return True
        if not spoken_to:
            # Chatter between people: it stays in the log (context for later turns), and
            # gets nothing, not even the offline notice or a busy note.
            await self._log.mark_handled(message_id)
            log.info(
                "message %s is not for the bot (%s mode); not answered",
                message_id,
                self._thread_replies,
            )
            return True
        reply = await self._commands.handle(msg) if self._commands is not None else None
        key = f"command:{message_id}"
        if reply is None and (meant := near_miss(msg.text, CONTROL_WORDS)) is not None:
            reply, key = did_you_mean_text(meant), f"near-miss:{message_id}"
        # Offline only: a model may have asked something in plain words ("1 or 2?").
        stray = reply is None and self._host.provider.offline and is_bare_answer(msg.text)
        if stray and (typed is None or not await typed.waiting_for(msg)):
            reply, key = NO_QUESTION_WAITING, f"stray-answer:{message_id}"
        if reply is None:
            return False
        await self._log.mark_handled(message_id)
        await self._outbox.send(msg.conversation, reply, idempotency_key=key)
        return True

    async def _spoken_to(self, msg: InboundMessage) -> bool:
        """Whether a person's message is for the bot: it mentions the bot (or is a DM, or
        the console); else, by `thread_replies`, it comes from the thread's requester (the
        author of its first message that addressed the bot, or the owner of the scheduled
        task that opened it), from anyone, or it is not."""
        if msg.addressed or self._thread_replies == "anyone":
            return True
        if self._thread_replies == "mentions":
            return False
        return await self._log.thread_requester(msg.conversation.id) == msg.author_id

    async def _tell_busy(self, msg: InboundMessage, exc: LaneBusy, message_id: int) -> None:
        """Say "busy" to a flooding author once per window, not once per refused message."""
        now = self._clock()
        key = (msg.conversation.id, msg.author_id)
        told = self._busy_told.get(key)
        if told is not None and now - told < self._busy_notice_seconds:
            log.info("message %s refused (lane full); %s was already told", message_id, key)
            return
        self._busy_told = {
            k: t for k, t in self._busy_told.items() if now - t < self._busy_notice_seconds
        }
        self._busy_told[key] = now
        window = int(self._busy_notice_seconds)
        await self._outbox.send(
            msg.conversation,
            f"⚠️ {exc} Further requests from you here are dropped for the next {window} s "
            "while the queue is full.",
            idempotency_key=f"busy:{message_id}",
        )

    async def knows(self, conv: ConversationRef) -> bool:
        """True when the bot already takes part in this conversation (thread replies)."""
        return await self._log.exists(conv.id)

    async def _run_turn(self, msg: InboundMessage, message_id: int, turn_id: str) -> TurnOutcome:
        conv = msg.conversation
        # "is thinking…" from the start (enrichment may take a while) until the turn ends.
        if self._working is not None:
            self._working.begin(conv, f"turn:{turn_id}", THINKING)
        try:
            return await self._enriched_turn(msg, message_id, turn_id)
        finally:
            if self._working is not None:
                self._working.end(conv, f"turn:{turn_id}")

    async def _enriched_turn(
        self, msg: InboundMessage, message_id: int, turn_id: str
    ) -> TurnOutcome:
        conv = msg.conversation
        enrich = self._enrichers.get(msg.platform)
        if enrich is not None and msg.origin == "user":
            # Platform context (names, thread re-read, attachments) is fetched here, not at
            # ingress, so acknowledging an event never waits on it — and a message resumed
            # after a restart gets it too.
            try:
                msg = await enrich(msg)
            except Exception:
                log.exception("enriching message %s failed; using it as received", message_id)
        history = await self._log.history(conv.id, limit=self._history + 1)
        history = [m for m in history if m.id != message_id][-self._history :]
        # A viewer link opens its conversation's records: no model is shown one.
        hide = without_link_tokens
        history = [dataclasses.replace(m, text=hide(m.text)) for m in history]
        msg = msg.model_copy(update={"text": hide(msg.text), "context": hide(msg.context)})
        replied = asyncio.Event()
        # The turn's model calls (and the memory write after it) are counted against its
        # author; the bot's own turns (a report, a wake-up) against the channel only.
        person = msg.author_id if msg.origin != "system" else ""
        try:
            with call_scope(person=person, conversation=conv):
                return await self._turn_body(msg, message_id, turn_id, history, replied)
        except asyncio.CancelledError:
            # Wherever the cancel landed (even in the commit that recorded the turn as
            # running), the turn ends recorded as cancelled, never left running.
            await asyncio.shield(self._log.cancel_turn(turn_id))
            raise
        finally:
            replied.set()

    async def _turn_body(
        self,
        msg: InboundMessage,
        message_id: int,
        turn_id: str,
        history: list[LoggedMessage],
        replied: asyncio.Event,
    ) -> TurnOutcome:
        conv = msg.conversation
        started = time.time()
        await self._log.start_turn(
            conv,
            turn_id=turn_id,
            # The log knows people's turns and the bot's; a firing is the bot acting.
            kind="user" if msg.origin == "user" else "system",
            author_id=msg.author_id,
            author_name=msg.author_name,
            inbound_message_id=message_id,
        )
        ctx = TurnContext(
            conv,
            turn_id,
            msg.author_id,
            msg.author_name,
            msg.origin,
            msg.text,
            msg.is_dm,
            roles=msg.roles,
            task=msg.task,
            replied=replied,
            inbound_key=f"in:{msg.dedup_keys[0]}",
        )
        if msg.origin == "system" and self._host.provider.offline:
            # No model to synthesise from a report: the report itself is the reply.
            await self._log.finish_turn(turn_id, status="completed")
            await self._outbox.send(
                conv,
                await self._linked(msg, msg.text, since=started),
                idempotency_key=f"turn:{turn_id}:reply",
                turn_id=turn_id,
            )
            await self._completed(ctx, msg.text, msg.text)
            return TurnOutcome(turn_id, "completed", msg.text)
        refusal = await self._over_budget(msg)
        if refusal is not None:
            return await self._refused(ctx, refusal, started)
        try:
            reply = await self._host.run_turn(
                ctx,
                text=msg.text,
                history=history,
                thread_context=msg.context,
                # A mention always gets a reply; a follow-up may need none.
                may_stay_silent=msg.origin == "user" and not msg.addressed,
            )
        except Exception as exc:
            error = str(exc) if isinstance(exc, ModelError) else f"{type(exc).__name__}: {exc}"
            log.exception("turn %s failed", turn_id)
            await self._log.finish_turn(turn_id, status="failed", error=error)
            said = await self._gated(
                ctx, f"⚠️ I couldn't complete that request: {error}", failed=True, since=started
            )
            if said is not None:
                await self._outbox.send(
                    conv, said, idempotency_key=f"turn:{turn_id}:error", turn_id=turn_id
                )
            raise
        loop = reply.loop
        await self._log.finish_turn(
            turn_id,
            status="completed",
            model_calls=loop.model_calls,
            input_tokens=loop.usage.input_tokens,
            output_tokens=loop.usage.output_tokens,
            transcript=loop.transcript,
            no_reply=reply.no_reply,
        )
        if reply.no_reply:
            # Recorded in the turn log, nothing posted, nothing owed to memory.
            return TurnOutcome(turn_id, "completed", "")
        text = await self._offline_once(conv, reply.text)
        said = await self._gated(
            ctx, await self._linked(msg, text, since=started), failed=False, since=started
        )
        if said is not None:
            await self._outbox.send(
                conv, said, idempotency_key=f"turn:{turn_id}:reply", turn_id=turn_id
            )
        await self._completed(ctx, msg.text, text, reply.attributions)
        return TurnOutcome(turn_id, "completed", text)

    async def _linked(self, msg: InboundMessage, text: str, *, since: float) -> str:
        """A reply with the viewer's links to the runs it is about (a report's run, the runs
        the turn started) under it, made by the bot: a model writes no link."""
        if self._run_links is None:
            return text
        key = msg.message_id if msg.origin == "system" else ""
        footer = await self._run_links.footer(msg.conversation, since=since, turn_key=key)
        return with_footer(text, footer)

    async def _over_budget(self, msg: InboundMessage) -> str | None:
        """Why this turn may not call a model today (None: it may). A person's message and
        their scheduled firing are asked; the bot's own turns finish work already started."""
        if self._spend is None or msg.origin == "system" or self._host.provider.offline:
            return None
        return await self._spend.refusal(msg.author_id, msg.conversation)

    async def _refused(self, ctx: TurnContext, refusal: str, started: float) -> TurnOutcome:
        """A turn refused before any model call: recorded, and said (a firing's, as its
        task's `notify:` says for a failure)."""
        await self._log.finish_turn(ctx.turn_id, status="failed", error=refusal)
        said = await self._gated(ctx, f"⛔ {refusal}", failed=True, since=started)
        if said is not None:
            await self._outbox.send(
                ctx.conversation,
                said,
                idempotency_key=f"turn:{ctx.turn_id}:reply",
                turn_id=ctx.turn_id,
            )
        return TurnOutcome(ctx.turn_id, "failed", refusal)

    async def _gated(
        self, ctx: TurnContext, text: str, *, failed: bool, since: float
    ) -> str | None:
        """What to post of a turn's reply: all of it, but a scheduled firing's result only
        when its task's `notify:` says so."""
        if ctx.origin != "scheduled" or self._reply_gate is None:
            return text
        return await self._reply_gate.admit(ctx, text, failed=failed, since=since)

    async def _offline_once(self, conv: ConversationRef, text: str) -> str:
        """The offline notice the first time in a conversation (recorded in the database,
        so a restart does not repeat it), a one-line reminder after that."""
        if not self._host.provider.offline or not is_offline_notice(text):
            return text
        key = _OFFLINE_NOTICE_KEY.format(conv.id)
        first = await self._log.claim_key(key, ttl_seconds=_FOREVER_SECONDS)
        return text if first else OFFLINE_REMINDER

    async def _completed(
        self,
        ctx: TurnContext,
        request: str,
        reply: str,
        attributions: tuple[Attribution, ...] = (),
    ) -> None:
        # After the reply went out: subscribers (memory) never delay it.
        await self._bus.publish(
            TurnCompleted(
                ctx.conversation,
                ctx.turn_id,
                ctx.author_id,
                ctx.origin,
                request,
                reply,
                author_name=ctx.author_name,
                is_dm=ctx.is_dm,
                attributions=attributions,
            )
        )

    async def _control(self, word: ControlWord, msg: InboundMessage, message_id: int) -> None:
        text = await self._control_text(word, msg, message_id)
        await self._outbox.send(msg.conversation, text, idempotency_key=f"ctl:{msg.event_id}")

    async def _control_text(self, word: ControlWord, msg: InboundMessage, message_id: int) -> str:
        conv = msg.conversation
        if word == "stop":
            return await self._stop(msg, message_id)
        await self._log.mark_handled(message_id)
        if word == "status":
            status = self._lanes.status(conv.id)
            running = status.running or "nothing"
            head = f"**Status**: running {running}; {status.queued} request(s) queued."
            sections = [await source(conv) for source in self._status_sources]
            return status_reply(head, [*sections, await self._delivery_status(conv)])
        return help_text(self._commands.help if self._commands is not None else "")

    async def answer_privately(self, msg: InboundMessage) -> asyncio.Task[str] | None:
        """A command whose answer only its caller sees (a slash command): recorded and
        deduplicated like a typed message (None: a duplicate), then answered in order with
        the conversation's other messages, as the typed control word or chat command would
        be, with the same rules. The answer is returned, never posted or logged as the
        bot's message, and never a Host turn: text that is no command gets `help`.

        Marked handled at once: after a crash it must not resume as a typed message, whose
        answer everyone would see (a command cut short is simply given again)."""
        message_id = await self._claim(msg)
        if message_id is None:
            return None
        await self._log.mark_handled(message_id)

        async def answer() -> str:
            word = control_word(msg.text)
            if word is not None:
                return await self._control_text(word, msg, message_id)
            reply = await self._commands.handle(msg) if self._commands is not None else None
            if reply is not None:
                return reply
            return help_text(self._commands.help if self._commands is not None else "")

        return self._ingress.spawn(msg.conversation.id, answer)

    async def _stop(self, msg: InboundMessage, message_id: int) -> str:
        """Cancel what the typist may stop (everything when privileged); the reply says
        what was cancelled and what was left running, and whose it is."""
        conv, by = msg.conversation, msg.author_id
        privileged = by in self._privileged
        # Durable first: what this stop cancels must not come back after a restart.
        await self._log.handle_stop(conv.id, message_id, by=by, privileged=privileged)
        tally = StopTally()
        await self._lanes.stop(conv.id, by=by, privileged=privileged, tally=tally)
        # Only now: a crash before this line runs the same stop again at the next start.
        await self._log.mark_handled(message_id)
        names = {
            m.author_id: m.author_name
            for m in await self._log.history(conv.id, limit=_NAME_LOOKBACK)
            if m.direction == "in"
        }
        # The platform's directory first: a name logged at ingress may be the bare id.
        for item in (*tally.cancelled, *tally.left):
            if item.owner and item.owner != by:
                shown = await self._people.name(conv, item.owner)
                names[item.owner] = shown if shown != item.owner else names.get(item.owner, "")
        return stop_reply(tally, by=by, privileged=privileged, names=names)

    async def _delivery_status(self, conv: ConversationRef) -> str:
        failed = await self._log.undelivered(conv.id)
        if not failed:
            return ""
        retrying = self._outbox.retrying(conv)
        lines = [
            f"⚠️ {len(failed)} message(s) here could not be delivered"
            + (f" ({retrying} being retried)" if retrying else "")
            + "; they are sent again at the next start:"
        ]
        lines += [f"- `{m.idempotency_key}`: {m.text[:80]}" for m in failed[:5]]
        return "\n".join(lines)

    async def recover(self, platform: str) -> None:
        """After a restart: report interrupted turns, resend pending replies, resume messages."""
        for turn, conv, request in await self._log.unreported_interruptions():
            if conv.platform != platform:
                continue
            which = f" (“{gist(request, 60)}”)" if request.strip() else ""
            try:
                await self._outbox.send(
                    conv,
                    "⚠️ A restart interrupted my work on an earlier request in this thread"
                    f"{which}, so it did not finish. Please ask again if you still need it.",
                    idempotency_key=f"interrupted:{turn.id}",
                    turn_id=turn.id,
                )
            except DeliveryError as exc:
                # Recorded, and retried by the outbox: the platform being down must not stop
                # the bot from starting.
                log.warning("telling %s about turn %s failed: %s", conv.id, turn.id, exc)
            await self._log.mark_reported(turn.id)
        await self._outbox.redeliver_pending(platform)
        for message_id, payload in await self._log.unhandled_inbound(platform):
            msg = stored_inbound(payload)
            log.info("resuming message %s accepted before the restart", message_id)
            await self._ingress.spawn(
                msg.conversation.id, functools.partial(self._dispatch, msg, message_id)
            )

    async def notify(self, conv: ConversationRef, text: str, *, idempotency_key: str) -> str | None:
        """Post a proactive message into a conversation (persisted first); return its id."""
        return await self._outbox.send(conv, text, idempotency_key=idempotency_key)

    async def edit(self, conv: ConversationRef, message_id: str, text: str, *, key: str) -> None:
        """Edit an earlier message of the bot (one status message per run)."""
        await self._outbox.edit(conv, message_id, text, key=key)

    async def quiesce(self, conv: ConversationRef) -> None:
        """Wait until the conversation's lane is empty and its graph runs have ended.

        Two quiet checks in a row are required: a run that just ended queues its report turn.
        """
        quiet = 0
        while quiet < 2:
            await self._ingress.idle(conv.id)
            if self._background_idle is not None:
                await self._background_idle(conv.id)
            status = self._lanes.status(conv.id)
            quiet = quiet + 1 if status.running is None and status.queued == 0 else 0
            await asyncio.sleep(0.05)

    async def system_turn(self, conv: ConversationRef, text: str, *, key: str) -> None:
        """A proactive turn (run report, wake-up) in the conversation's own lane and history.

        Recorded like an inbound message first, so it survives a crash and runs once;
        returns once recorded. System turns are never refused by the user queue cap.
        """
        await self._proactive(
            conv, text, key=key, author=(SYSTEM_AUTHOR, SYSTEM_NAME), origin="system"
        )

    async def requested_turn(self, event: TurnRequested) -> None:
        """A scheduled task's firing: a turn on its owner's behalf, recorded once per key
        before this returns, run in the system pool (never refused by the user queue cap)."""
        await self._proactive(
            event.conversation,
            event.text,
            key=event.key,
            author=(event.author_id, event.author_name),
            origin="scheduled",
            roles=event.roles,
            task=event.task,
        )

    async def _proactive(
        self,
        conv: ConversationRef,
        text: str,
        *,
        key: str,
        author: tuple[str, str],
        origin: TurnOrigin,
        roles: tuple[str, ...] = (),
        task: str = "",
    ) -> None:
        msg = InboundMessage(
            platform=conv.platform,
            workspace=conv.workspace,
            channel=conv.channel,
            thread=conv.thread,
            message_id=key[:128],
            author_id=author[0],
            author_name=author[1],
            text=text[:40_000],
            event_id=f"system:{key}"[:256],
            origin=origin,
            roles=roles,
            task=task,
        )
        message_id = await self._log.claim_inbound(
            conv,
            event_keys=msg.dedup_keys,
            ttl_seconds=self._ttl,
            author_id=msg.author_id,
            author_name=msg.author_name,
            text=msg.text,
            payload=msg.model_dump_json(),
        )
        if message_id is not None:
            # Not awaited: the caller may be work that a queued `stop` is waiting for.
            self._ingress.spawn(conv.id, lambda: self._dispatch(msg, message_id))
