"""Prompt decisions in conversations: typed answers take prompts instead of turns, and a
decided prompt's purpose says what follows (approved graphs start, answers reach the Host)."""

from __future__ import annotations

import functools
import json
from typing import Protocol

from core.ids import ConversationRef
from host.conversation.outbox import Outbox
from host.graph.admission import AdmissionError
from host.graph.runs import RunManager
from host.prompts.broker import PromptBroker
from host.prompts.clarify import COMMAND_APPROVAL, Clarifier
from host.runtime.conversation_log import ConversationLog
from host.runtime.events import EventBus, subscribe_decision
from host.runtime.messages import InboundMessage
from host.runtime.people import People
from host.runtime.prompt_record import Prompt


class ConversationPort(Protocol):
    """What a decision says or starts in its conversation (the conversation service)."""

    async def notify(
        self, conv: ConversationRef, text: str, *, idempotency_key: str
    ) -> str | None: ...

    async def system_turn(self, conv: ConversationRef, text: str, *, key: str) -> None: ...


class TypedAnswerReplies:
    """Lets a typed message answer a pending prompt, and says in the thread how that went."""

    def __init__(
        self, broker: PromptBroker, conversation_log: ConversationLog, outbox: Outbox
    ) -> None:
        self._broker = broker
        self._log = conversation_log
        self._outbox = outbox

    async def take(
        self, msg: InboundMessage, message_id: int, *, waiting_only: bool = False
    ) -> bool:
        """True when `msg` answered (or tried to answer) a prompt, so it starts no turn;
        `waiting_only`: only a question waiting for its author counts (chatter otherwise)."""
        outcome = await self._broker.answer_typed(
            msg.conversation, msg.author_id, msg.text, waiting_only=waiting_only
        )
        if outcome is None:
            return False
        await self._log.mark_handled(message_id)
        if not outcome.notified:
            # Said in the thread, next to the typed answer: which prompt it answered, which
            # ones it could answer, or why it was not taken.
            plain = outcome.status in ("accepted", "ambiguous")
            await self._outbox.send(
                msg.conversation,
                outcome.message if plain else f"⚠️ {outcome.message}",
                idempotency_key=f"prompt-reply:{message_id}",
            )
        return True

    async def waiting_for(self, msg: InboundMessage) -> bool:
        """True when a question of the conversation waits for the message's author."""
        pending = await self._broker.pending(msg.conversation)
        return any(msg.author_id in p.allowed_responders for p in pending)


def subscribe_decision_handlers(
    bus: EventBus,
    runs: RunManager,
    service: ConversationPort,
    clarifier: Clarifier,
    people: People | None = None,
) -> None:
    """Wire what each prompt purpose's decision does (clarifications are read by `wait`).
    `people` names who decided (display names, not ids)."""
    people = people or People()
    subscribe_decision(
        bus,
        "graph_approval",
        functools.partial(handle_graph_approval, runs=runs, service=service, people=people),
    )
    subscribe_decision(
        bus, "ask_user", functools.partial(handle_ask_user, service=service, people=people)
    )
    subscribe_decision(
        bus,
        COMMAND_APPROVAL,
        functools.partial(handle_command_approval, clarifier=clarifier, service=service),
    )


async def handle_graph_approval(
    prompt: Prompt, runs: RunManager, service: ConversationPort, people: People
) -> None:
    """Start an approved graph (re-admitted, in the background); say so either way."""
    conv = prompt.conversation
    key = f"prompt:{prompt.id}:outcome"
    decider = await people.name(conv, prompt.answered_by or "")
    if not prompt.approved:
        who = f" by {decider}" if decider else ""
        outcome = "denied" if prompt.state == "answered" else prompt.state
        await service.notify(
            conv, f"Graph not approved ({outcome}{who}): nothing ran.", idempotency_key=key
        )
        return
    submission = json.loads(str(prompt.payload.get("submission", "{}")))
    # Nobody is waiting on the original tool call any more: report in the background.
    submission["background"] = True
    replaces = prompt.payload.get("replaces_run")
    try:
        result = await runs.submit(
            conv,
            submission,
            submitted_by=str(prompt.payload.get("submitted_by", prompt.requester)),
            approval_collected=True,
            replaces_run=str(replaces) if replaces else None,
        )
    except AdmissionError as exc:
        await service.notify(
            conv,
            f"Approved, but the graph no longer passes admission: {exc.for_user()}",
            idempotency_key=key,
        )
        return
    assert result.run is not None
    if replaces:
        await runs.supersede(conv, str(replaces))
    await service.notify(
        conv,
        f"Approved by {decider}: run `{result.run.id}` started ({len(result.run.nodes)} node(s)).",
        idempotency_key=key,
    )


async def handle_ask_user(prompt: Prompt, service: ConversationPort, people: People) -> None:
    """Give the Host the user's answer (or the lack of one) as a proactive turn."""
    if prompt.state == "answered":
        who = await people.name(prompt.conversation, prompt.answered_by or "")
        text = f"{who} answered your question \u201c{prompt.question}\u201d: {prompt.answer}"
    else:
        text = f"Your question \u201c{prompt.question}\u201d was {prompt.state} without an answer."
    await service.system_turn(prompt.conversation, text, key=f"prompt:{prompt.id}:answer")


async def handle_command_approval(
    prompt: Prompt, clarifier: Clarifier, service: ConversationPort
) -> None:
    """The waiting node reads its decision itself; an approval nobody waits for is said so."""
    if clarifier.command_decision_awaited(prompt) or prompt.state != "answered":
        return
    await service.notify(
        prompt.conversation,
        f"Nothing ran: node `{prompt.payload.get('node_id')}` is no longer waiting for this "
        "command (it was stopped or interrupted by a restart).",
        idempotency_key=f"prompt:{prompt.id}:outcome",
    )
