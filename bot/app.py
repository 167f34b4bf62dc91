"""Assembly root: build the runtime once from Settings, top to bottom, then run its lifecycle.

`build_runtime` collects and validates, builds every part from parts already built, wires
subscribers on the event bus and freezes it, then opens the store. Every part that must be
stopped is registered on one `AsyncExitStack` as it starts, so shutdown is the reverse of
startup.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TypeVar
from zoneinfo import ZoneInfo

from agents.backends import AcpProcesses, build_backend
from agents.backends.base import AgentBackend
from agents.backends.inproc import InProcessBackend
from agents.models.provider import ClosableProvider, ModelProvider
from agents.registry import AgentEntry, AgentRegistry, RegistryError, load_registry
from agents.sandbox import Sandbox, select_sandbox, shown_by
from agents.specialists import Specialist, default_specialists
from agents.tools import ToolRegistry
from agents.web_tools import WebConfig, web_tools_hook
from agents.workspace_tools import ShellPolicy
from bot.channel import ChannelAdapter, Ingress, SupportsEnrichment, check_adapter
from bot.channels import AdapterFactory
from bot.console.people import CONSOLE_PLATFORM, ConsolePeople
from bot.home import check_home, workspace_for
from bot.models import RoleModels, build_provider, build_role_models
from bot.render.unfenced import UnfencedChannel
from bot.schema import all_migrations
from bot.settings import Settings, declared_secret_names
from bot.web.serving import WebSection, start_viewer, web_links
from bot.wind_down import wind_down
from bot.working import working_statuses
from core.ids import ConversationRef
from core.lifecycle import TimedExitStack
from core.store import Store
from host.agent.host_agent import HostAgent
from host.agent.tools import (
    HostToolDeps,
    OrchestrationContext,
    agent_calls_as_delegate,
    agent_tool_hint,
    build_host_tools,
)
from host.conversation.lanes import LaneManager
from host.conversation.outbox import DeliveryError, Outbox
from host.conversation.prompt_decisions import subscribe_decision_handlers
from host.conversation.run_events import ConversationRunEvents
from host.conversation.run_files import RunAttachments
from host.conversation.service import (
    ConversationConfig,
    ConversationExtras,
    ConversationParts,
    ConversationService,
)
from host.conversation.viewer_links import RunLinks
from host.evaluation.evolution.harness import Harness as EvolvedHarness
from host.evaluation.evolution.runtime import (
    ActiveHarnesses,
    HarnessedBackend,
    builtin_harness,
    harnessed,
)
from host.features.evolution.feature import EvolutionFeature
from host.features.feature import Commands, Feature, FeatureKind, HostParts
from host.features.mcp.feature import McpFeature
from host.features.memory.feature import MemoryFeature
from host.features.memory.group import close_request
from host.features.memory.personal import MemoryWriter
from host.features.oncall.feature import OncallFeature
from host.features.oncall.site import CampaignSite
from host.features.permissions.feature import PermissionsFeature
from host.features.schedules.feature import SchedulesFeature
from host.features.skills.experience import ExperienceWriter
from host.features.skills.feature import SkillsFeature
from host.features.skills.prefetch import DispatchContexts
from host.features.usage.feature import UsageFeature, UsageSection, accounting
from host.graph.judge import CompletionJudge
from host.graph.records import RunFiles
from host.graph.report_loader import Audience
from host.graph.run_store import UNSTARTED, RunStore
from host.graph.runs import RunAids, RunManager, RunParts, RunSettings
from host.nudges.backlog import HeldBack
from host.nudges.feature import NudgesFeature
from host.nudges.policy import NudgeLimits, NudgePolicy
from host.nudges.quiet import parse_quiet_hours
from host.nudges.status import proactive_status
from host.prompts.broker import (
    PROMPT_EXPIRY_JOB,
    PROMPT_REMINDER_JOB,
    PromptBroker,
    PromptPolicy,
)
from host.prompts.clarify import Clarifier
from host.runtime.admission import AccessDirectory, Admission
from host.runtime.apscheduler_adapter import ApschedulerScheduler
from host.runtime.conversation_log import ConversationLog
from host.runtime.events import (
    ConversationStopped,
    EventBus,
    TurnRequested,
    subscribe_job,
)
from host.runtime.people import People
from host.runtime.ports import Channel, PeopleDirectory, PromptSurface
from host.runtime.record_links import open_line
from host.runtime.roles import Roles
from host.runtime.turn import TurnContext
from memory.embeddings import Embedder, EmbedderUnavailable, select_embedder
from memory.service import MemoryService
from oncall.engine import CampaignEngine

log = logging.getLogger(__name__)

# The collector settings of a serving bot (see `tune_interpreter_for_serving`).
GC_THRESHOLDS = (10_000, 20, 20)

# `build_provider` lives in bot/models.py; named here too for the callers that import it here.
__all__ = ["AdapterFactory", "Runtime", "build_provider", "build_runtime", "serve", "shutdown"]

F = TypeVar("F", bound=Feature)

# How long adapters' serve loops get to end after their adapter was closed.
SERVE_END_SECONDS = 5.0


@dataclass(frozen=True)
class Runtime:
    """One frozen generation of the bot: every part built once from one Settings."""

    settings: Settings
    store: Store
    conversation_log: ConversationLog
    bus: EventBus
    lanes: LaneManager
    # The Host's model; `models`: every role's (each distinct one closed once at shutdown).
    provider: ModelProvider
    models: RoleModels
    registry: AgentRegistry
    runs: RunManager
    broker: PromptBroker
    host: HostAgent
    service: ConversationService
    adapters: tuple[ChannelAdapter, ...]
    scheduler: ApschedulerScheduler
    run_events: ConversationRunEvents
    features: tuple[Feature, ...]
    agent_processes: AcpProcesses
    harnesses: ActiveHarnesses
    # Stop callbacks of everything started, in start order (closed in reverse).
    lifecycle: AsyncExitStack = field(default_factory=TimedExitStack)
    serving: set[asyncio.Task[None]] = field(default_factory=set)

    def feature(self, kind: type[F]) -> F:
        """The installed feature of class `kind`."""
        for installed in self.features:
            if isinstance(installed, kind):
                return installed
        raise LookupError(f"no {kind.__name__} in this runtime")

    @property
    def campaigns(self) -> CampaignEngine:
        return self.feature(OncallFeature).engine

    @property
    def memory(self) -> MemoryService:
        return self.feature(MemoryFeature).memory

    @property
    def memory_writer(self) -> MemoryWriter:
        return self.feature(MemoryFeature).writer

    @property
    def experience_writer(self) -> ExperienceWriter:
        return self.feature(SkillsFeature).writer


def build_sandbox(settings: Settings) -> Sandbox:
    """The sandbox for agent subprocesses; hides the data dir and this working dir (`.env`)."""
    return select_sandbox(hidden=hidden_paths(settings), unsandboxed=settings.unsandboxed)


def hidden_paths(settings: Settings) -> tuple[Path, ...]:
    """What no sandboxed command may see: the data dir and this working dir (`.env`)."""
    return (settings.home, Path.cwd())


def campaign_site(settings: Settings, sandbox: Sandbox, *, one_shot: bool) -> CampaignSite:
    """Where campaigns run: rounds confined like the sandbox (the same hidden paths)."""
    return CampaignSite(
        settings.home, Path.cwd(), one_shot, sandbox, hidden_paths(settings), settings.unsandboxed
    )


def backend_factory(
    provider: ModelProvider,
    settings: Settings,
    sandbox: Sandbox,
    acp: AcpProcesses,
    harnesses: ActiveHarnesses,
    own: Mapping[str, Callable[[AgentEntry], AgentBackend]] | None = None,
    agent_provider: Callable[[AgentEntry], ModelProvider] | None = None,
) -> Callable[[AgentEntry], AgentBackend]:
    """Builds each agent's backend once, on first use; an in-process specialist with a
    promoted harness runs with it; `own`: the agents a feature runs itself, by name;
    `agent_provider`: an agent's own model (agents.toml `model`), else `provider`."""
    web = WebConfig(fetch=settings.web_fetch, search_url=settings.web_search_url)
    secret_names = declared_secret_names()
    specialists = default_specialists(
        shell=ShellPolicy(sandbox=sandbox, secret_names=secret_names),
        web_tools=web_tools_hook(web),
    )
    built: dict[str, AgentBackend] = {}

    def backend(entry: AgentEntry) -> AgentBackend:
        if own and entry.name in own and entry.name not in built:
            built[entry.name] = own[entry.name](entry)
        if entry.name not in built:
            model = provider if agent_provider is None else agent_provider(entry)
            harness = harnesses.get(entry.name) if entry.backend == "inproc" else None
            if harness is not None and entry.role in specialists:
                built[entry.name] = _harnessed_backend(
                    entry, harness, model, specialists[entry.role], settings
                )
                return built[entry.name]
            built[entry.name] = build_backend(
                entry,
                provider=model,
                specialists=specialists,
                sandbox=sandbox,
                secret_names=secret_names,
                max_iterations=settings.max_iterations,
                max_tokens=settings.max_tokens,
                acp=acp,
                call_timeout=settings.model_timeout,
            )
        return built[entry.name]

    return backend


def _harnessed_backend(
    entry: AgentEntry,
    harness: EvolvedHarness,
    provider: ModelProvider,
    specialist: Specialist,
    settings: Settings,
) -> AgentBackend:
    """An in-process specialist running its promoted harness."""
    base = builtin_harness(specialist, settings.max_iterations, settings.max_tokens)
    inner = InProcessBackend(
        provider,
        harnessed(specialist, harness, base),
        max_iterations=int(harness.runtime.get("max_iterations", settings.max_iterations)),
        max_tokens=int(harness.runtime.get("max_tokens", settings.max_tokens)),
    )
    return HarnessedBackend(inner, harness, base)


def build_embedder(settings: Settings) -> Embedder | None:
    """The memory embedder for RAVEN_MEMORY_EMBEDDER (None: keyword-only recall)."""
    try:
        return select_embedder(settings.memory_embedder)
    except EmbedderUnavailable as exc:
        raise RuntimeError(f"RAVEN_MEMORY_EMBEDDER=semantic, but {exc}") from None


def load_agents(
    settings: Settings,
    sandbox: Sandbox | None = None,
    features: Sequence[FeatureKind] | None = None,
) -> AgentRegistry:
    """The agent registry: the built-in agents and those the features run (all of
    `FEATURES` unless given), then RAVEN_HOME/agents.toml (a RuntimeError naming the
    problem); with `sandbox`, a CLI agent whose program that sandbox cannot see is disabled,
    saying so."""
    visible = None if sandbox is None else shown_by(sandbox, os.environ)
    kinds = FEATURES if features is None else features
    extra = [entry for kind in kinds for entry in kind.agents(settings.home)]
    try:
        return load_registry(
            settings.home / "agents.toml",
            visible=visible,
            extra=extra,
            secret_names=declared_secret_names(),
        )
    except RegistryError as exc:
        raise RuntimeError(str(exc)) from None


def people_directories(adapters: Sequence[ChannelAdapter]) -> dict[str, PeopleDirectory]:
    """Each platform's directory of display names: the adapter itself where it is one
    (Slack, Discord), the local user for the console."""
    directories: dict[str, PeopleDirectory] = {}
    for adapter in adapters:
        if isinstance(adapter, PeopleDirectory):
            directories[adapter.platform] = adapter
        elif adapter.platform == CONSOLE_PLATFORM:
            directories[adapter.platform] = ConsolePeople()
    return directories


def access_directories(adapters: Sequence[ChannelAdapter]) -> dict[str, AccessDirectory]:
    """Each platform whose ingress applies the access policy, judging people the same way
    for the work the bot's own timers start (the console's ingress judges nobody)."""
    return {a.platform: a for a in adapters if isinstance(a, AccessDirectory)}


def build_adapters(factories: Sequence[AdapterFactory]) -> tuple[ChannelAdapter, ...]:
    """Every adapter, one per platform, each checked against the features it declares."""
    adapters = tuple(factory() for factory in factories)
    platforms = [a.platform for a in adapters]
    if len(set(platforms)) != len(platforms):
        raise RuntimeError(f"two adapters for one platform: {platforms}")
    for adapter in adapters:
        check_adapter(adapter)
    return adapters


# The capabilities, in the order they subscribe, open and start (and stop in reverse).
FEATURES: tuple[FeatureKind, ...] = (
    # First: the gates every run passes, and its rules file checked before anything else.
    PermissionsFeature,
    MemoryFeature,
    SkillsFeature,
    OncallFeature,
    SchedulesFeature,
    EvolutionFeature,
    McpFeature,
    UsageFeature,
    # Last: what the caps held back is listed after the work that said it.
    NudgesFeature,
)


async def build_runtime(
    settings: Settings,
    adapter_factories: Sequence[AdapterFactory],
    features: Sequence[FeatureKind] = FEATURES,
) -> Runtime:
    """Collect → validate → build the shared parts, then each feature, then the Host around
    what the features add → subscribe → open the store (crash leftovers marked)."""
    check_home(settings.home)
    # A feature's broken file stops the start before anything is probed, opened or connected.
    for kind in features:
        kind.preflight(settings.home)
    adapters = build_adapters(adapter_factories)
    parts, models = await host_parts(settings, adapters, features)
    installed = tuple(kind(parts, settings.section(kind.Section)) for kind in features)
    gates = next((p for f in installed if (p := f.permit_factory()) is not None), None)
    if gates is None:
        # Fail closed: without gates every tool call would run unchecked.
        raise RuntimeError(
            "no installed feature provides permission gates: list PermissionsFeature among "
            "the features"
        )
    home = settings.home
    roles = parts.roles
    dispatch = [c for f in installed for c in f.dispatch_contexts()]
    run_store = RunStore(parts.store)
    # The ACP agents' processes, one per agent and conversation (closed after the runs).
    agent_processes = AcpProcesses(parts.sandbox, secret_names=parts.secret_names)
    harnesses = ActiveHarnesses()
    runs = RunManager(
        RunParts(
            store=run_store,
            files=RunFiles(home / "runs"),
            registry=parts.registry,
            judge=CompletionJudge(models.judge, timeout=settings.judge_timeout),
            backend=backend_factory(
                parts.provider,
                settings,
                parts.sandbox,
                agent_processes,
                harnesses,
                own={n: b for f in installed for n, b in f.agent_backends().items()},
                agent_provider=models.for_agent,
            ),
            workspace=parts.workspace,
            bus=parts.bus,
        ),
        host_reachable=not parts.provider.offline,
        settings=RunSettings(
            concurrency=settings.graph_concurrency,
            max_attempts=settings.node_max_attempts,
            decision_seconds=settings.decision_seconds,
            dispatch_budget_per_hour=settings.dispatch_budget_per_hour,
        ),
        aids=RunAids(
            skill_names=next((n for f in installed if (n := f.skill_names()) is not None), None),
            tool_server_names=next(
                (n for f in installed if (n := f.tool_server_names()) is not None), None
            ),
            tools=next((t for f in installed if (t := f.node_tools()) is not None), None),
            prompts=(
                clarifier := Clarifier(
                    models.named("clarify"),
                    parts.broker,
                    parts.conversation_log,
                    grants=[g for f in installed for g in f.command_grants()],
                )
            ),
            prefetch=DispatchContexts(dispatch) if dispatch else None,
            gates=gates,
            spend=parts.spend,
            usage=parts.usage,
        ),
    )
    # What a run made follows into the thread through the outbox: a background run's files its
    # report's reply, a foreground run's the reply of the turn that waited for it.
    attachments = RunAttachments(parts.outbox, parts.workspace)
    audience: Audience = "chat" if parts.provider.offline else "host"

    async def foreground_files(ctx: TurnContext, run_id: str, report: str) -> str:
        return await attachments.follow_turn(
            run_store, ctx.conversation, run_id, report, after=ctx.inbound_key, audience=audience
        )

    tool_deps = HostToolDeps(
        runs=runs,
        broker=parts.broker,
        registry=parts.registry,
        results_reach_users=parts.provider.offline,
        close_request=close_request if settings.group_memory else None,
        roles=roles,
        people=parts.people,
        attach_files=foreground_files,
    )
    host_tools = [*build_host_tools(tool_deps), *(t for f in installed for t in f.host_tools())]
    tool_names = [t.name for t in host_tools]
    host = HostAgent(
        parts.provider,
        ToolRegistry[TurnContext](host_tools, unknown_hint=agent_tool_hint(parts.registry)),
        context_sources=(
            OrchestrationContext(tool_deps),
            *(c for f in installed for c in f.context_sources(tool_names)),
        ),
        tool_sources=[s for f in installed if (s := f.tool_source()) is not None],
        max_iterations=settings.max_iterations,
        max_tokens=settings.max_tokens,
        # A weak model calls an agent by its name as if it were a tool: read as `delegate`.
        rewrite=agent_calls_as_delegate(parts.registry),
    )
    commands = [h for f in installed if (h := f.commands()) is not None]
    # "is thinking…" / "is running `s2`…" while a turn or a node works in a thread.
    working = working_statuses(settings, adapters)
    working.subscribe(parts.bus)
    # The viewer's "Open" links under replies about runs and on their status messages.
    run_links = RunLinks(run_store, parts.links) if parts.links is not None else None
    service = ConversationService(
        ConversationParts(parts.conversation_log, parts.lanes, host, parts.outbox, parts.bus),
        ConversationConfig(
            dedup_ttl_seconds=settings.dedup_ttl_seconds,
            history_messages=settings.history_messages,
            admins=frozenset(settings.admins),
            approvers=frozenset(settings.approvers),
            thread_replies=settings.thread_replies,
        ),
        ConversationExtras(
            broker=parts.broker,
            commands=Commands(tuple(commands)) if commands else None,
            status_sources=(
                runs.status,
                *viewer_status(parts),
                parts.broker.status,
                proactive_status([s for f in installed for s in f.status_sources()], parts.nudges),
            ),
            background_idle=runs.idle,
            enrichers=MappingProxyType(
                {a.platform: a.enrich for a in adapters if isinstance(a, SupportsEnrichment)}
            ),
            people=parts.people,
            reply_gate=next((g for f in installed if (g := f.reply_gate()) is not None), None),
            working=working,
            spend=parts.spend,
            run_links=run_links,
        ),
    )
    run_events = ConversationRunEvents(
        run_store,
        service,
        runs,
        reports_reach_users=parts.provider.offline,
        attachments=attachments,
        run_links=run_links,
    )
    # Campaign notices follow the replies to what their thread received (causal order).
    for feature in installed:
        if isinstance(feature, OncallFeature):
            feature.notifier.follow(service.dispatched_in)
    subscribe(parts, installed, runs, service, clarifier, run_events)

    runtime = Runtime(
        settings=settings,
        store=parts.store,
        conversation_log=parts.conversation_log,
        bus=parts.bus,
        lanes=parts.lanes,
        provider=parts.provider,
        models=models,
        registry=parts.registry,
        runs=runs,
        broker=parts.broker,
        host=host,
        service=service,
        adapters=adapters,
        scheduler=parts.scheduler,
        run_events=run_events,
        features=installed,
        agent_processes=agent_processes,
        harnesses=harnesses,
    )
    try:
        await open_core(runtime)
    except BaseException:
        await runtime.lifecycle.aclose()
        raise
    return runtime


async def host_parts(
    settings: Settings, adapters: Sequence[ChannelAdapter], features: Sequence[FeatureKind]
) -> tuple[HostParts, RoleModels]:
    """The parts every feature and the Host are built from, each from parts already built
    (the store with the tables of the Host and of `features`), and every role's model."""
    home = settings.home
    # Probed once (it runs bwrap): off the event loop.
    sandbox = await asyncio.to_thread(build_sandbox, settings)
    if sandbox.kind != "bwrap":
        log.warning("agent sandbox %s", sandbox.description)
    registry = load_agents(settings, sandbox, features)
    # The bot owns the log's checkpoints: its run journals are fsynced before each one, and
    # one-shot commands leave them to it while it runs.
    store = Store(home / "raven.db", all_migrations(features), log_owner=True)
    # Every model call is recorded, and work over its budget refused (host/features/usage):
    # built here, before any feature, because every role's provider reports to its ledger.
    usage = (
        accounting(store, home, settings.section(UsageSection))
        if UsageFeature in features
        else None
    )
    # Each role's model, built once; roles naming the same model share its provider.
    models = build_role_models(settings, registry, usage.ledger if usage else None)
    conversation_log = ConversationLog(store)
    bus = EventBus()
    # People never see fence markers: every post and edit is unfenced on its way out.
    channels: MappingProxyType[str, Channel] = MappingProxyType(
        {a.platform: UnfencedChannel(a) for a in adapters}
    )
    # What people read names people by display name (each platform's directory), not by id.
    people = People(people_directories(adapters))
    scheduler = ApschedulerScheduler(
        home / "scheduler.db", bus, misfire_grace_seconds=settings.scheduler_misfire_grace_seconds
    )
    # Clicks, firings, checks, wake-ups and releases pass the policy live messages pass.
    admission = Admission(
        store,
        access_directories(adapters),
        served=[a.platform for a in adapters],
        admins=settings.admins,
    )
    broker = PromptBroker(
        store,
        surfaces=MappingProxyType(
            {a.platform: a for a in adapters if isinstance(a, PromptSurface)}
        ),
        bus=bus,
        policy=PromptPolicy(
            admins=frozenset(settings.admins),
            approvers=tuple(settings.approvers),
            default_expiry_seconds=settings.prompt_expiry_seconds,
        ),
        scheduler=scheduler,
        people=people,
        admission=admission,
        on_expiry=settings.prompt_on_expiry,
    )
    # Where campaign rounds and standing checks run (reads machines.toml: assembly).
    site = campaign_site(settings, sandbox, one_shot=False)
    secret_names = declared_secret_names()
    parts = HostParts(
        home=home,
        cwd=Path.cwd(),
        workspace=workspace_for(home),
        store=store,
        conversation_log=conversation_log,
        bus=bus,
        provider=models.host,
        models=models,
        registry=registry,
        broker=broker,
        outbox=Outbox(conversation_log, channels),
        people=people,
        # `stop` reaches runs, prompts and campaigns as ConversationStopped on the bus.
        lanes=LaneManager(
            user_pool=settings.user_pool,
            system_pool=settings.system_pool,
            idle_seconds=settings.lane_idle_seconds,
            queue_cap=settings.lane_queue_cap,
            bus=bus,
        ),
        scheduler=scheduler,
        roles=Roles(admins=settings.admins, approvers=settings.approvers),
        sandbox=sandbox,
        embedder=build_embedder(settings),
        machines=site.machines(site.machine_specs(), secret_names=secret_names),
        nudges=NudgePolicy(
            store,
            NudgeLimits(settings.nudge_channel_per_hour, settings.nudge_owner_per_hour),
            quiet=parse_quiet_hours(settings.quiet_hours),
            default_tz=settings.timezone,
            people=people,
            # What a cap holds back is recorded, listed in `status` and summarised later.
            held_back=HeldBack(store, scheduler),
        ),
        hidden=hidden_paths(settings),
        unsandboxed=settings.unsandboxed,
        secret_names=secret_names,
        admission=admission,
        spend=usage.gate if usage else None,
        usage=usage.ledger if usage else None,
        # The viewer's signed links (RAVEN_WEB_PORT): posted with runs and campaigns.
        links=await asyncio.to_thread(web_links, home, settings.section(WebSection)),
    )
    return parts, models


def viewer_status(parts: HostParts) -> tuple[Callable[[ConversationRef], Awaitable[str]], ...]:
    """`status`'s line linking the conversation's records in the viewer (none without it)."""
    links = parts.links
    if links is None:
        return ()

    async def line(conv: ConversationRef) -> str:
        return open_line(
            "Open this conversation's runs, campaigns and schedules", links.conversation(conv)
        )

    return (line,)


def subscribe(
    parts: HostParts,
    features: Sequence[Feature],
    runs: RunManager,
    service: ConversationService,
    clarifier: Clarifier,
    run_events: ConversationRunEvents,
) -> None:
    """Subscribe, then freeze: who hears what is fixed for this generation."""
    bus, broker = parts.bus, parts.broker
    subscribe_decision_handlers(bus, runs, service, clarifier, parts.people)
    # Each owner of work cancels only what the stopper may stop and tallies the rest
    # (runs and prompts here, each feature's work in its own subscription).
    bus.subscribe(ConversationStopped, runs.stop_conversation)
    bus.subscribe(ConversationStopped, broker.cancel_conversation_id)
    subscribe_job(bus, PROMPT_EXPIRY_JOB, broker.on_expiry_job)
    # A prompt's reminder is a notice the bot says on its own: through the outbox, under the
    # nudge policy (host/prompts/reminders.py).
    broker.remind_through(parts.outbox, parts.nudges)
    subscribe_job(bus, PROMPT_REMINDER_JOB, broker.on_reminder_job)
    bus.subscribe(TurnRequested, service.requested_turn)
    for feature in features:
        feature.subscribe(bus)
    # Last: every feature has heard a finished run before its report becomes a turn.
    run_events.subscribe(bus)
    bus.freeze()


async def open_core(runtime: Runtime) -> None:
    """Open the store first, so a crash's leftovers are marked before anything new runs;
    register every part's stop so that the last started stops first."""
    stack = runtime.lifecycle
    await runtime.store.open()
    stack.push_async_callback(runtime.store.close)
    # The model client closes after the features: a memory write still in flight at the end
    # of `chat`'s input finishes its model call instead of being cut off.
    stack.push_async_callback(runtime.models.aclose)
    await runtime.harnesses.load(runtime.store)
    for feature in runtime.features:
        await feature.open(stack)
    # Egress lives almost to the end: messages said while draining must still go out.
    stack.push_async_callback(close_adapters, runtime)
    stack.push_async_callback(runtime.service.close)
    stack.push_async_callback(runtime.run_events.close)
    # After the runs stopped (their turns cancelled and settled): end the agents' processes.
    stack.push_async_callback(runtime.agent_processes.close)
    stack.push_async_callback(runtime.runs.shutdown)
    stack.push_async_callback(runtime.lanes.drain, runtime.settings.shutdown_grace)
    interrupted = await runtime.conversation_log.interrupt_running()
    if interrupted:
        log.warning("%d turn(s) were interrupted by the last shutdown", len(interrupted))
    interrupted_runs = await runtime.runs.store.interrupt_unfinished(runtime.runs.files.started)
    if interrupted_runs:
        log.warning("%d graph run(s) were interrupted by the last shutdown", len(interrupted_runs))


def tune_interpreter_for_serving() -> None:
    """The collector settings a serving bot runs under (the benchmarks measure the runtime
    under them too)."""
    # Everything built so far (the embedder's model too) lives as long as the process: keep
    # it out of the cyclic collector, whose full passes over it stalled the loop 130–290 ms.
    gc.collect()
    gc.freeze()
    # Fewer, cheaper collections: at 200 Slack events/s the defaults ran 330 collections in
    # 3 s (550 ms stopped, 54 ms at most); these ran 9 (65 ms, 14 ms at most).
    gc.set_threshold(*GC_THRESHOLDS)
    # The interpreter's switch interval stays at its default (5 ms). A 0.2 ms one served the
    # Slack endpoint while it was a thread of this process; in its own process since, its
    # ack p99 at 200 events/s is the same either way (8.9 / 8.3 ms), and the short interval
    # cost this process CPU (92 % against 77 % at 200 events/s; the graph runtime's kernel
    # time per node tripled) and loop lag (p99 35.5 against 17.8 ms).


async def start_serving(runtime: Runtime) -> None:
    """Recover, start the scheduler, then let every adapter receive."""
    await runtime.broker.recover()
    for adapter in runtime.adapters:
        await runtime.service.recover(adapter.platform)
        await report_interrupted_runs(runtime, adapter.platform)
    # What a crash kept from the features (completed turns, recorded cases) is taken in now.
    for feature in runtime.features:
        await feature.recover()
    # After recovery, so a job firing now cannot race the replay of unhandled messages.
    await runtime.scheduler.start()
    # First to stop: a job firing during the drain would start work shutdown then cuts off.
    runtime.lifecycle.push_async_callback(runtime.scheduler.stop)
    await runtime.broker.schedule_expiries()
    for feature in runtime.features:
        await feature.start(runtime.lifecycle)
    web = runtime.settings.section(WebSection)
    if web.enabled:
        # Read-only: it serves the records, so it starts once everything is recovered.
        await start_viewer(
            runtime.store,
            runtime.settings.home,
            web,
            ZoneInfo(runtime.settings.timezone),
            runtime.lifecycle,
        )
    tune_interpreter_for_serving()
    ingress = Ingress(runtime.service, runtime.broker)
    runtime.serving.update(
        asyncio.create_task(a.serve(ingress), name=f"serve-{a.platform}") for a in runtime.adapters
    )


async def serve(runtime: Runtime) -> int:
    """Recover, serve every adapter until they end or a signal arrives, then shut down.

    Returns the process exit code: 0 after a clean stop, 1 when an adapter crashed.
    """
    stop, now = asyncio.Event(), asyncio.Event()

    def on_signal() -> None:
        # The first stop gives running work its grace; the second stops at once.
        (now if stop.is_set() else stop).set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, on_signal)
    stopper = asyncio.create_task(stop.wait(), name="stop-signal")
    try:
        await start_serving(runtime)
        return await _until_stopped(runtime, stopper)
    finally:
        stopper.cancel()
        await asyncio.shield(_wind_down_then_shutdown(runtime, now))
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


async def _wind_down_then_shutdown(runtime: Runtime, now: asyncio.Event) -> None:
    try:
        await wind_down(
            lanes=runtime.lanes,
            runs=runtime.runs,
            service=runtime.service,
            scheduler=runtime.scheduler,
            grace=runtime.settings.shutdown_grace,
            now=now,
        )
    finally:
        await shutdown(runtime)


async def _until_stopped(runtime: Runtime, stopper: asyncio.Task[bool]) -> int:
    """Wait for a stop signal or for every adapter to end; 1 when one crashed."""
    pending = set(runtime.serving)
    while pending:
        done, _ = await asyncio.wait(pending | {stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stopper in done:
            log.info("shutdown requested")
            break
        for task in done:
            pending.discard(task)
            if not task.cancelled() and task.exception() is not None:
                log.error("adapter %s crashed", task.get_name(), exc_info=task.exception())
                return 1
    return 0


async def report_interrupted_runs(runtime: Runtime, platform: str) -> None:
    """Tell each conversation about its runs a restart interrupted (once)."""
    for run in await runtime.runs.store.unreported_interrupted_runs():
        if run.conversation.platform != platform:
            continue
        report = await runtime.runs.report(run.id)
        nodes = await runtime.runs.store.nodes_of_run(run.id)
        if nodes and all(n.error == UNSTARTED for n in nodes):
            # Nothing of it ran: said as a run that never started, not as interrupted work.
            text = (
                f"⚠️ Run `{run.id}` did not start: the bot stopped before any of its nodes "
                f"began, so nothing ran. Ask again to run it.\n\n{report}"
            )
        else:
            text = (
                f"⚠️ A restart interrupted run `{run.id}`. Completed nodes are kept and can "
                f"be reused by id; nodes that were running are marked interrupted.\n\n{report}"
            )
        try:
            await runtime.service.notify(
                run.conversation, text, idempotency_key=f"run:{run.id}:interrupted"
            )
        except DeliveryError as exc:
            # Recorded and retried by the outbox; an unreachable platform must not stop startup.
            log.warning("telling %s about run %s failed: %s", run.conversation.id, run.id, exc)
        await runtime.runs.store.mark_reported(run.id)


async def shutdown(runtime: Runtime) -> None:
    """Stop everything started, last started first (idempotent)."""
    await runtime.lifecycle.aclose()


async def close_adapters(runtime: Runtime) -> None:
    """Close every adapter (which ends its serve loop), then wait briefly for the loops."""
    for adapter in runtime.adapters:
        try:
            await adapter.close()
        except Exception:
            log.exception("closing the %s adapter failed", adapter.platform)
    if runtime.serving:
        _, still = await asyncio.wait(runtime.serving, timeout=SERVE_END_SECONDS)
        for task in still:
            task.cancel()
        await asyncio.gather(*runtime.serving, return_exceptions=True)


async def close_provider(provider: ModelProvider) -> None:
    """Release the model client's connections, if it holds any."""
    if isinstance(provider, ClosableProvider):
        await provider.aclose()
