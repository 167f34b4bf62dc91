"""The channel contract: what every platform adapter (console, Slack, Discord) provides.

Required: egress (`Channel`: post, edit), `serve(ingress)` and `close()`, and a declared
`features` set. Optional capabilities are protocols checked once at startup
(`check_adapter`), never probed with `getattr`: `PromptSurface` (buttons, modals, private
notes) and `SupportsEnrichment` (names, thread re-reads, attachments fetched before a turn).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from core.ids import ConversationRef
from host.conversation.service import TurnOutcome
from host.prompts.broker import AnswerOutcome
from host.runtime.messages import Attachment, InboundMessage, OutboundMessage
from host.runtime.ports import Channel, PromptSurface
from host.runtime.prompt_record import Prompt

__all__ = [
    "Attachment",
    "Channel",
    "ChannelAdapter",
    "ChannelFeatures",
    "InboundMessage",
    "Inbox",
    "Ingress",
    "OutboundMessage",
    "PrivateCommands",
    "PromptAnswers",
    "SupportsEnrichment",
    "check_adapter",
]


@dataclass(frozen=True)
class ChannelFeatures:
    """What a platform can show: checked against the protocols the adapter implements."""

    threads: bool = False  # replies go into a thread of their own
    buttons: bool = False  # prompts have clickable choices
    modals: bool = False  # free-text prompts open a form
    private_notes: bool = False  # one user alone sees a message (ephemeral)
    editing: bool = False  # a posted message is edited in place (run status)

    @classmethod
    def full(cls, *, threads: bool) -> ChannelFeatures:
        """Everything a chat platform with widgets offers (threads as configured)."""
        return cls(threads=threads, buttons=True, modals=True, private_notes=True, editing=True)

    def names(self) -> list[str]:
        """The features present, for `doctor` and logs."""
        return [name for name, on in vars(self).items() if on]


# At startup, conversations active this recently are read back for messages sent while the
# bot was down (neither platform redelivers an outage's events to a new connection).
CATCH_UP_SECONDS = 24 * 3600.0


class Inbox(Protocol):
    """Where adapters hand normalized inbound messages (the conversation service)."""

    async def accept(self, msg: InboundMessage) -> asyncio.Future[TurnOutcome] | None:
        """Persist and dedup the message and start its turn (None: nothing to wait for)."""
        ...

    async def receive(self, msg: InboundMessage) -> bool:
        """Persist and dedup the message and return at once (False: a duplicate); the rest
        runs after, so adapters with an ack deadline acknowledge right away."""
        ...

    async def knows(self, conv: ConversationRef) -> bool:
        """True when the bot already takes part in this conversation."""
        ...

    async def claim(self, platform: str, event_id: str) -> bool:
        """True the first time an event that is not a message (a click) is seen."""
        ...

    async def recent(self, platform: str, since: float) -> list[tuple[ConversationRef, str | None]]:
        """Conversations active since `since`, each with the id of its newest message from a
        person (None: only the core's own turns, e.g. a firing's thread)."""
        ...

    async def quiesce(self, conv: ConversationRef) -> None:
        """Wait until the conversation has no turn, queued turn or graph run left."""
        ...


@runtime_checkable
class PrivateCommands(Protocol):
    """An inbox that answers slash commands to their caller alone (the conversation
    service); adapters offer `/raven` only when theirs does."""

    async def answer_privately(self, msg: InboundMessage) -> asyncio.Task[str] | None:
        """Record and dedup the command (None: a duplicate); the task gives its answer."""
        ...


class PromptAnswers(Protocol):
    """The prompt broker, as adapters use it (button clicks, modal submissions)."""

    async def answer(
        self,
        prompt_id: str,
        nonce: str,
        responder_id: str,
        answer: str,
        *,
        message_id: str | None = None,
    ) -> AnswerOutcome:
        """Answer a prompt (from message `message_id`)."""
        ...

    async def get(self, prompt_id: str) -> Prompt | None:
        """One prompt by id."""
        ...

    async def pending(self, conversation: ConversationRef | None = None) -> list[Prompt]:
        """Prompts still waiting (all conversations when None): buttons to keep alive."""
        ...


@dataclass(frozen=True)
class Ingress:
    """What a serving adapter hands inbound traffic to."""

    inbox: Inbox
    prompts: PromptAnswers


class ChannelAdapter(Channel, Protocol):
    """A running platform connection: egress (`Channel`) plus a serve loop for ingress."""

    @property
    def features(self) -> ChannelFeatures:
        """What this platform can show."""
        ...

    async def serve(self, ingress: Ingress) -> None:
        """Receive messages into `ingress` until closed (the console: until end of input)."""
        ...

    async def close(self) -> None:
        """Disconnect and release resources (idempotent)."""
        ...


@runtime_checkable
class SupportsEnrichment(Protocol):
    """Adds platform context to a message just before its turn (not at ingress)."""

    async def enrich(self, msg: InboundMessage) -> InboundMessage:
        """The message with display names, thread history and downloaded attachments."""
        ...


def check_adapter(adapter: ChannelAdapter) -> None:
    """Fail at startup when an adapter declares a feature it does not implement."""
    features = adapter.features
    shows_prompts = features.buttons or features.modals or features.private_notes
    if shows_prompts and not isinstance(adapter, PromptSurface):
        raise RuntimeError(
            f"the {adapter.platform} adapter declares {', '.join(features.names())} but does "
            "not implement PromptSurface (show_prompt, close_prompt, notify_private)"
        )
