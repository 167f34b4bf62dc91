"""Memory in the Host: recalled context for the author's own turns, episode writes after each
completed turn (in the background, never delaying a reply), and the chat commands
`remember …`, `what do you remember about me`, `forget …` and `forget everything`."""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass

from core.fence import fence, new_marker, untrusted_preface
from core.ids import ConversationRef
from host.conversation.outbox import Outbox
from host.features.memory.said import persons_words
from host.prompts.broker import PromptBroker
from host.prompts.wording import short_ids
from host.runtime.conversation_log import ConversationLog
from host.runtime.events import EventBus, PromptDecided, TurnCompleted
from host.runtime.messages import InboundMessage, stored_inbound
from host.runtime.people import People
from host.runtime.prompt_record import Prompt
from host.runtime.turn import TurnContext
from memory.archive import user_owner
from memory.service import MemoryService, render_recalled

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Written:
    """One completed user turn, as memory takes it in."""

    turn_id: str
    conversation: ConversationRef
    author_id: str
    author_name: str
    request: str  # only the author's words: the bot's reply is not memory of the person
    is_dm: bool


FORGET_PURPOSE = "memory_forget"
_REMEMBER = re.compile(r"^\s*remember(?:\s+that)?\s*[:,]?\s+(?P<text>.+?)\s*$", re.I | re.S)
_RECALL = re.compile(r"^\s*what do you (?:remember|know) about me\s*\??\s*$", re.I)
_FORGET_ALL = re.compile(r"^\s*forget everything(?: about me)?\s*[.!]?\s*$", re.I)
_FORGET = re.compile(r"^\s*forget(?:\s+that)?\s*[:,]?\s+(?P<text>.+?)\s*[.!]?\s*$", re.I | re.S)
# For `help`: each command as typed (`…` is any text) and what it does; a test feeds each
# one to the bot, so a pattern above that stops matching its line here fails.
USAGE = (
    ("remember …", "notes something about you (said in a DM: kept for our DMs)"),
    ("what do you remember about me", "lists what I remember about you"),
    ("forget …", "deletes what I remember that mentions it"),
    ("forget everything", "erases it all, once you approve"),
)


def owner_of(conv: ConversationRef, author_id: str) -> str:
    """The owner key of an author in a conversation's workspace."""
    return user_owner(conv.platform, conv.workspace, author_id)


@dataclass(frozen=True)
class MemoryContext:
    """Context source: recall for the turn's author only, fenced, within a character budget
    (system turns get none: they have no author whose memory they could use)."""

    memory: MemoryService
    k: int = 5
    budget_chars: int = 2000

    async def context(self, ctx: TurnContext) -> str:
        """The author's recalled memory block ("" when there is nothing)."""
        if ctx.origin != "user" or not ctx.text.strip() or self.k <= 0:
            return ""
        owner = owner_of(ctx.conversation, ctx.author_id)
        try:
            recalled = await self.memory.recall(owner, ctx.text, dm=ctx.is_dm, k=self.k)
        except Exception:
            log.exception("memory recall failed; the turn goes on without it")
            return ""
        marker = new_marker()
        block = render_recalled(
            recalled,
            budget_chars=self.budget_chars,
            fence=lambda text: fence(text, source=f"memory of {ctx.author_name}", marker=marker),
        )
        if not block:
            return ""
        return (
            f"## What you remember about {ctx.author_name} (only for their own request)\n"
            f"{untrusted_preface(marker)}\n{block}"
        )


class MemoryWriter:
    """Folds completed user turns into episodes in owned background tasks; each turn is
    marked as taken in afterwards, so a crash in between is caught up at the next start."""

    def __init__(self, memory: MemoryService, turns: ConversationLog) -> None:
        self._memory = memory
        self._turns = turns
        self._tasks: set[asyncio.Task[None]] = set()

    def subscribe(self, bus: EventBus) -> None:
        """Hear completed turns."""
        bus.subscribe(TurnCompleted, self._on_turn)

    async def _on_turn(self, event: TurnCompleted) -> None:
        if event.origin != "user":
            return
        written = _Written(
            event.turn_id,
            event.conversation,
            event.author_id,
            event.author_name or event.author_id,
            event.request,
            event.is_dm,
        )
        self._spawn(written)

    async def recover(self) -> int:
        """Take in the completed user turns a crash kept from memory, before anything is
        served (so a question right after the restart sees them); return how many."""
        owed = await self._turns.unremembered_turns()
        for turn_id, payload in owed:
            try:
                msg = stored_inbound(payload)
            except ValueError:
                log.warning("turn %s: its message cannot be read; not remembered", turn_id)
                await self._turns.mark_remembered(turn_id)
                continue
            await self._record(
                _Written(
                    turn_id,
                    msg.conversation,
                    msg.author_id,
                    msg.author_name or msg.author_id,
                    msg.text,
                    msg.is_dm,
                )
            )
        return len(owed)

    def _spawn(self, written: _Written) -> None:
        task = asyncio.get_running_loop().create_task(
            self._record(written), name=f"memory-write:{written.turn_id}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _record(self, w: _Written) -> None:
        # Plan, campaign and schedule lines are instructions, not memory of the person.
        words = persons_words(w.request)
        try:
            if words:
                await self._memory.record_turn(
                    owner_of(w.conversation, w.author_id),
                    w.author_name,
                    words,
                    conversation_id=w.conversation.id,
                    turn_id=w.turn_id,
                    dm=w.is_dm,
                )
            await self._turns.mark_remembered(w.turn_id)
        except Exception:
            log.exception("writing the memory of turn %s failed", w.turn_id)

    async def idle(self) -> None:
        """Wait until every pending write is done (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Let pending writes finish (they are short) before the store closes."""
        await self.idle()


class MemoryCommands:
    """The chat commands; `forget everything` asks the author to approve first."""

    def __init__(
        self,
        memory: MemoryService,
        broker: PromptBroker,
        outbox: Outbox,
        people: People | None = None,
    ) -> None:
        self._memory = memory
        self._broker = broker
        self._outbox = outbox
        self._people = people or People()

    def subscribe(self, bus: EventBus) -> None:
        """Carry out approved `forget everything` prompts."""
        bus.subscribe(PromptDecided, self._on_decided, topic=FORGET_PURPOSE)

    @property
    def help(self) -> str:
        """The memory commands, for `help`."""
        return "**Memory**: " + "; ".join(f"`{usage}` {does}" for usage, does in USAGE) + "."

    async def handle(self, msg: InboundMessage) -> str | None:
        """The reply to a memory command, or None when `msg` is not one."""
        owner = owner_of(msg.conversation, msg.author_id)
        text = msg.text
        if _RECALL.match(text):
            return await self._memory.describe(owner, dm=msg.is_dm)
        if _FORGET_ALL.match(text):
            prompt = await self._broker.create(
                conversation=msg.conversation,
                kind="approval",
                question=f"Forget everything I remember about {msg.author_name}? This "
                "deletes your notes, episodes and facts, erases the text of your messages, "
                "turns and runs (and of our DMs) wherever it is stored, deletes your runs' "
                "records, and cannot be undone.",
                requester=msg.author_id,
                purpose=FORGET_PURPOSE,
                payload={"owner": owner},
            )
            # Named as every prompt is: by its short id among those waiting here.
            short = short_ids([*await self._broker.pending(msg.conversation), prompt])[prompt.id]
            return f"Approve prompt `{short}` to confirm; nothing is deleted until then."
        if forget := _FORGET.match(text):
            count = await self._memory.forget(owner, forget["text"])
            return f"Forgot {count} record(s) mentioning “{forget['text']}”."
        if remember := _REMEMBER.match(text):
            await self._memory.remember(
                owner,
                msg.author_name,
                remember["text"],
                dm=msg.is_dm,
                conversation_id=msg.conversation.id,
            )
            where = " (only in our DMs)" if msg.is_dm else ""
            return f"Noted{where}: {remember['text']}"
        return None

    async def _on_decided(self, event: PromptDecided) -> None:
        prompt: Prompt = event.prompt
        if not prompt.approved:
            return
        count = await self._memory.forget(str(prompt.payload["owner"]))
        # The person forgotten is who asked (an approver may have approved it for them).
        who = await self._people.name(prompt.conversation, prompt.requester)
        await self._outbox.send(
            prompt.conversation,
            f"Done: I forgot everything about {who} ({count} record(s)).",
            idempotency_key=f"prompt:{prompt.id}:forgotten",
        )
