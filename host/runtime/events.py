"""The host's typed event bus: what happened, published once it is committed.

Publishers (the graph runtime, the conversation service, the prompt broker, the scheduler)
know only the bus; subscribers (run announcements, prompt decision handlers, memory writes,
Oncall) are attached by the assembly root before the bus is frozen, so parts are built in
one direction and nothing is bound late.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from core.ids import ConversationRef
from host.runtime.prompt_record import Prompt
from host.runtime.run_snapshot import RunSnapshot
from host.runtime.scheduling import FiredJob
from host.runtime.turn import TurnOrigin
from memory.group import Attribution

log = logging.getLogger(__name__)


class Event:
    """Base of every bus event; `topic` narrows a subscription (a prompt purpose, a job kind)."""

    @property
    def topic(self) -> str | None:
        """The sub-kind subscribers may select on; None for events without one."""
        return None


StoppedKind = Literal["request", "report", "run", "question", "campaign"]


@dataclass(frozen=True)
class StoppedItem:
    """One piece of a conversation's work that a `stop` saw: what it is and whose."""

    kind: StoppedKind
    # The run, prompt or campaign id; "" for a request (a turn in the lane).
    ref: str
    # The user id of who asked for it; "" for the bot's own work (reports, notices).
    owner: str
    # What stopping it ended, for the reply (a run's unfinished nodes); "" when nothing more.
    detail: str = ""


@dataclass
class StopTally:
    """What one `stop` cancelled and what it left running, filled in by every owner of
    work in the conversation so the reply can say both."""

    cancelled: list[StoppedItem] = field(default_factory=list)
    left: list[StoppedItem] = field(default_factory=list)

    def record(self, item: StoppedItem, *, cancelled: bool) -> None:
        """Add `item` to what was cancelled (True) or what was left running (False)."""
        (self.cancelled if cancelled else self.left).append(item)


@dataclass(frozen=True)
class ConversationStopped(Event):
    """`stop` in a conversation cancelled its lane's turns that `by` may stop; the owners
    of its other work (graph runs, prompts, campaigns) cancel theirs by the same rule.

    `by` may stop what they requested; `privileged` (an approver or admin) may stop
    everything. Each subscriber records what it cancelled and what it left in `tally`."""

    conversation_id: str
    by: str
    privileged: bool
    tally: StopTally = field(default_factory=StopTally)

    def may_stop(self, owner: str) -> bool:
        """Whether this stop cancels work requested by `owner`."""
        return self.privileged or (bool(owner) and owner == self.by)


@dataclass(frozen=True)
class RunProgress(Event):
    """Node states of a run changed (committed); `run` is the run as of the publish."""

    run: RunSnapshot


@dataclass(frozen=True)
class RunException(Event):
    """A node was suspended and needs a Host decision; `run` is the run as suspended."""

    run: RunSnapshot
    node_id: str
    report: str


@dataclass(frozen=True)
class RunFinished(Event):
    """Every node of a run settled; `run` is the run in its final state."""

    run: RunSnapshot


@dataclass(frozen=True)
class TurnCompleted(Event):
    """A Host turn ended and its reply was handed to the outbox."""

    conversation: ConversationRef
    turn_id: str
    author_id: str
    origin: TurnOrigin
    request: str
    reply: str
    author_name: str = ""
    is_dm: bool = False
    # Attribution blocks the Host appended to its reply (already stripped from `reply`).
    attributions: tuple[Attribution, ...] = ()


@dataclass(frozen=True)
class TurnRequested(Event):
    """Start a turn on someone's behalf (a scheduled task's firing), recorded once per `key`
    before this returns: a repeat with the same key starts nothing."""

    conversation: ConversationRef
    text: str
    key: str
    author_id: str
    author_name: str
    roles: tuple[str, ...] = ()
    task: str = ""


@dataclass(frozen=True)
class PromptDecided(Event):
    """A prompt was answered, denied, expired or cancelled (topic: its purpose)."""

    prompt: Prompt

    @property
    def topic(self) -> str | None:
        """The prompt's purpose (`graph_approval`, `ask_user`, …)."""
        return self.prompt.purpose


@dataclass(frozen=True)
class WakeUp(Event):
    """A scheduled job fired (topic: its kind)."""

    job: FiredJob

    @property
    def topic(self) -> str | None:
        """The job kind (`prompt-expiry`, `system-turn`, …)."""
        return self.job.kind


E = TypeVar("E", bound=Event)
Handler = Callable[[E], Awaitable[None]]


class EventBus:
    """Subscribers by event type (and optional topic), called in subscription order."""

    def __init__(self) -> None:
        self._handlers: defaultdict[
            tuple[type[Event], str | None], list[Callable[[Event], Awaitable[None]]]
        ] = defaultdict(list)
        self._frozen = False

    def subscribe(self, kind: type[E], handler: Handler[E], *, topic: str | None = None) -> None:
        """Call `handler` for every published `kind` event (of `topic`, when given)."""
        if self._frozen:
            raise RuntimeError("the event bus is frozen: subscribe while assembling the runtime")
        self._handlers[(kind, topic)].append(handler)  # type: ignore[arg-type]

    def freeze(self) -> None:
        """No subscriptions after assembly: who hears what is fixed for the generation."""
        self._frozen = True

    def has_subscriber(self, kind: type[Event], topic: str | None = None) -> bool:
        """True when a `kind` event of `topic` would reach at least one handler."""
        return bool(self._handlers.get((kind, None)) or self._handlers.get((kind, topic)))

    async def publish(self, event: Event) -> bool:
        """Await every subscriber; return False when one failed (it is logged, the others
        still run). Cancellation propagates."""
        handlers = [*self._handlers.get((type(event), None), ())]
        if event.topic is not None:
            handlers += self._handlers.get((type(event), event.topic), ())
        ok = True
        for handler in handlers:
            try:
                await handler(event)
            except Exception:
                log.exception("%s handler %s failed", type(event).__name__, _name(handler))
                ok = False
        return ok


def subscribe_job(bus: EventBus, kind: str, handler: Callable[[FiredJob], Awaitable[None]]) -> None:
    """Run `handler` with the fired job whenever a `kind` wake-up fires."""

    async def on_wake_up(event: WakeUp) -> None:
        await handler(event.job)

    bus.subscribe(WakeUp, on_wake_up, topic=kind)


def subscribe_stop(bus: EventBus, handler: Callable[[str], Awaitable[None]]) -> None:
    """Run `handler` with the conversation id whenever `stop` ends a conversation's work.

    Only for work that belongs to the conversation as a whole: work with an owner must
    subscribe to `ConversationStopped` itself and cancel only what `may_stop` allows."""

    async def on_stopped(event: ConversationStopped) -> None:
        await handler(event.conversation_id)

    bus.subscribe(ConversationStopped, on_stopped)


def subscribe_decision(
    bus: EventBus, purpose: str, handler: Callable[[Prompt], Awaitable[None]]
) -> None:
    """Run `handler` with the decided prompt whenever a `purpose` prompt is decided."""

    async def on_decided(event: PromptDecided) -> None:
        await handler(event.prompt)

    bus.subscribe(PromptDecided, on_decided, topic=purpose)


def _name(handler: Callable[..., object]) -> str:
    return getattr(handler, "__qualname__", repr(handler))
