"""What a capability's glue declares to the assembly root, and what it is built from.

A capability (memory, skills, oncall) is installed by one `Feature`: its settings section,
the Host tools and turn context it adds, what dispatched nodes get, its status lines, its
chat commands, its bus subscriptions, and its own start and stop (pushed on the runtime's
exit stack by itself, so shutdown is the reverse of startup without a separate list). The
assembly root lists the features; adding a capability is one folder and one line there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

from agents.backends.base import AgentBackend
from agents.models.metered import UsageRecorder
from agents.models.provider import ModelProvider
from agents.registry import AgentEntry, AgentRegistry
from agents.sandbox import Sandbox
from agents.tools import Tool, ToolSource
from core.ids import ConversationRef
from core.secret_names import SecretNames
from core.store import Migration, Store
from host.agent.host_agent import ContextSource
from host.conversation.lanes import LaneManager
from host.conversation.outbox import Outbox
from host.conversation.service import CommandHandler, ReplyGate
from host.graph.executor import DispatchContext, NodeTools, PermitFactory
from host.nudges.policy import NudgePolicy
from host.prompts.broker import PromptBroker
from host.prompts.clarify import CommandGrants
from host.runtime.admission import Admission
from host.runtime.apscheduler_adapter import ApschedulerScheduler
from host.runtime.conversation_log import ConversationLog
from host.runtime.events import EventBus
from host.runtime.messages import InboundMessage
from host.runtime.people import People
from host.runtime.record_links import RecordLinks
from host.runtime.roles import Roles
from host.runtime.spending import SpendGate
from host.runtime.turn import TurnContext
from memory.embeddings import Embedder
from oncall.model import Machine

StatusSource = Callable[[ConversationRef], Awaitable[str]]
DoctorLevel = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class DoctorCheck:
    """One `doctor` finding: `fail` when `run` would refuse to start, `warn` when the bot
    would serve without something."""

    name: str
    level: DoctorLevel
    detail: str


@dataclass(frozen=True)
class DoctorParts:
    """What a feature's `doctor` checks may use: no runtime is built (a bot may be serving
    from the same RAVEN_HOME meanwhile)."""

    home: Path
    cwd: Path
    environ: Mapping[str, str]
    # The bot's own secret values: never printed, whatever a checked server echoes.
    secret_values: Sequence[str]
    # The settings' secret names: no child a check starts gets one.
    secret_names: SecretNames
    # The sandbox as the bot builds it, probed only by a check that starts something.
    sandbox: Callable[[], Sandbox]


class RoleProviders(Protocol):
    """The model each role talks to, built once by the assembly root (bot/models.py): roles
    naming the same model share one provider."""

    @property
    def judge(self) -> ModelProvider:
        """The completion judge's (RAVEN_MODEL_JUDGE)."""
        ...

    @property
    def episodes(self) -> ModelProvider:
        """Memory's episode former's (RAVEN_MODEL_EPISODES)."""
        ...

    @property
    def proposer(self) -> ModelProvider:
        """Harness evolution's proposer's (RAVEN_MODEL_PROPOSER)."""
        ...

    def for_agent(self, entry: AgentEntry) -> ModelProvider:
        """An in-process agent's: its agents.toml `model`, else the Host's."""
        ...

    def named(self, role: str) -> ModelProvider:
        """The Host's model, its calls counted under `role` (`clarify`, `oncall`, `skills`)."""
        ...


@dataclass(frozen=True)
class HostParts:
    """The shared parts every feature may be built from (built once, before any feature)."""

    home: Path
    # The directory the bot was started in: its own, never a campaign's workdir.
    cwd: Path
    # Each conversation's workspace (where its attachments land).
    workspace: Callable[[ConversationRef], Path]
    store: Store
    conversation_log: ConversationLog
    bus: EventBus
    # The Host's model (RAVEN_MODEL); `models`: every role's.
    provider: ModelProvider
    models: RoleProviders
    registry: AgentRegistry
    broker: PromptBroker
    outbox: Outbox
    people: People
    lanes: LaneManager
    scheduler: ApschedulerScheduler
    roles: Roles
    sandbox: Sandbox
    embedder: Embedder | None
    # The machines of RAVEN_HOME/machines.toml (campaign rounds, standing checks).
    machines: Mapping[str, Machine]
    # What the bot says on its own passes it (caps, dedup, quiet hours).
    nudges: NudgePolicy
    # What no sandboxed command may see (the data dir, the bot's own directory).
    hidden: tuple[Path, ...]
    unsandboxed: bool
    # The settings' secret names: no child a feature starts gets one (checks, rounds).
    secret_names: SecretNames
    # The one access rule for work the bot starts on someone's behalf (firings, wake-ups).
    admission: Admission
    # Whether a person's work may spend on models today (the usage feature's budgets).
    spend: SpendGate | None = None
    # Where model calls are recorded (the usage feature's ledger; None: not counted).
    usage: UsageRecorder | None = None
    # The web viewer's signed links, posted with runs and campaigns (None: no viewer).
    links: RecordLinks | None = None


class Feature(Protocol):
    """One capability installed into a runtime generation."""

    def host_tools(self) -> Sequence[Tool[TurnContext]]:
        """Tools the Host may call (fixed for the runtime's life)."""
        ...

    def tool_source(self) -> ToolSource[TurnContext] | None:
        """Host tools that may change while the bot runs, asked for at every turn (opened
        and closed with this feature's own start and stops)."""
        ...

    def context_sources(self, host_tools: Sequence[str]) -> Sequence[ContextSource]:
        """What a Host turn is told (given the names of every Host tool)."""
        ...

    def dispatch_contexts(self) -> Sequence[DispatchContext]:
        """What a dispatched node gets after its task."""
        ...

    def skill_names(self) -> Callable[[], Awaitable[frozenset[str]]] | None:
        """The skills a node may name in its `skills` override (None: this feature has none)."""
        ...

    def tool_server_names(self) -> Callable[[], Awaitable[frozenset[str]]] | None:
        """The tool servers a node may name in its `mcp` override (None: this feature has
        none)."""
        ...

    def node_tools(self) -> NodeTools | None:
        """The team's tools a node's task is granted (None: this feature grants none)."""
        ...

    def permit_factory(self) -> PermitFactory | None:
        """The permission gates a run's tool calls pass (None: this feature has none; one
        feature provides them)."""
        ...

    def agent_backends(self) -> Mapping[str, Callable[[AgentEntry], AgentBackend]]:
        """Backends this feature runs agents with, by agent name (its own agents)."""
        ...

    def status_sources(self) -> Sequence[StatusSource]:
        """Lines for `status`."""
        ...

    def commands(self) -> CommandHandler | None:
        """Chat commands answered without a Host turn."""
        ...

    def command_grants(self) -> Sequence[CommandGrants]:
        """Commands people approved in advance (a node's run without asking again)."""
        ...

    def reply_gate(self) -> ReplyGate | None:
        """Whether a scheduled firing's result is posted (one feature decides)."""
        ...

    def subscribe(self, bus: EventBus) -> None:
        """Subscribe to the bus while the runtime is assembled."""
        ...

    async def open(self, stack: AsyncExitStack) -> None:
        """After the store opened: load state, push this feature's stops on `stack`."""
        ...

    async def recover(self) -> None:
        """Before the scheduler starts: take in what a crash left behind."""
        ...

    async def start(self, stack: AsyncExitStack) -> None:
        """Once the scheduler runs: re-attach, warm up, push this feature's stops."""
        ...


class FeatureKind(Protocol):
    """A feature class: its settings section, its tables and how it is built from the shared
    parts."""

    Section: type[Any]

    def agents(self, home: Path) -> Sequence[AgentEntry]:
        """Agents this feature runs itself (their backends from `agent_backends`), added to
        the registry before agents.toml, which may override them like the built-in ones."""
        ...

    def preflight(self, home: Path) -> None:
        """Before anything is built: raise `core.errors.ConfigError` (one line naming the file
        and the fix) when this feature's files in RAVEN_HOME are unusable, so a broken file
        stops the start before anything is probed, opened or connected."""
        ...

    async def doctor(self, parts: DoctorParts, section: Any) -> Sequence[DoctorCheck]:
        """`doctor`'s findings on this feature's files and services, bounded in time, with
        nothing left running; `section` is its settings as `run` reads them."""
        ...

    @property
    def migrations(self) -> Sequence[Migration]:
        """Its tables' migrations, each package's numbered 1, 2, … in this order (the store's
        schema is collected from the features listed: a feature with tables adds no line
        anywhere else)."""
        ...

    @property
    def migrations_after(self) -> Collection[str]:
        """Packages whose tables its migrations read or replace: when installed, theirs run
        first."""
        ...

    def __call__(self, parts: HostParts, section: Any) -> Feature: ...


class BaseFeature:
    """A feature that adds nothing: subclasses override what they contribute."""

    migrations: ClassVar[Sequence[Migration]] = ()
    migrations_after: ClassVar[Collection[str]] = frozenset()

    @classmethod
    def agents(cls, home: Path) -> Sequence[AgentEntry]:
        return ()

    @classmethod
    def preflight(cls, home: Path) -> None:
        return None

    @classmethod
    async def doctor(cls, parts: DoctorParts, section: Any) -> Sequence[DoctorCheck]:
        return ()

    def host_tools(self) -> Sequence[Tool[TurnContext]]:
        return ()

    def tool_source(self) -> ToolSource[TurnContext] | None:
        return None

    def context_sources(self, host_tools: Sequence[str]) -> Sequence[ContextSource]:
        return ()

    def dispatch_contexts(self) -> Sequence[DispatchContext]:
        return ()

    def skill_names(self) -> Callable[[], Awaitable[frozenset[str]]] | None:
        return None

    def tool_server_names(self) -> Callable[[], Awaitable[frozenset[str]]] | None:
        return None

    def node_tools(self) -> NodeTools | None:
        return None

    def permit_factory(self) -> PermitFactory | None:
        return None

    def agent_backends(self) -> Mapping[str, Callable[[AgentEntry], AgentBackend]]:
        return {}

    def status_sources(self) -> Sequence[StatusSource]:
        return ()

    def commands(self) -> CommandHandler | None:
        return None

    def command_grants(self) -> Sequence[CommandGrants]:
        return ()

    def reply_gate(self) -> ReplyGate | None:
        return None

    def subscribe(self, bus: EventBus) -> None:
        return None

    async def open(self, stack: AsyncExitStack) -> None:
        return None

    async def recover(self) -> None:
        return None

    async def start(self, stack: AsyncExitStack) -> None:
        return None


@dataclass(frozen=True)
class Commands:
    """Every feature's chat commands as one handler: the first that answers wins."""

    handlers: tuple[CommandHandler, ...]

    @property
    def help(self) -> str:
        return "\n".join(f"- {h.help}" for h in self.handlers if h.help)

    async def handle(self, msg: InboundMessage) -> str | None:
        for handler in self.handlers:
            reply = await handler.handle(msg)
            if reply is not None:
                return reply
        return None
