"""Assembly root: build the runtime once from Settings, top to bottom, then run its lifecycle.

`build_runtime` collects and validates, builds every part from parts already built, wires
subscribers on the event bus and freezes it, then opens the store. Every part that must be
stopped is registered on one `AsyncExitStack` as it starts, so shutdown is the reverse of
startup.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import signal
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from agents.backends import build_backend
from agents.backends.base import AgentBackend
from agents.models.offline import OfflineProvider
from agents.models.provider import ClosableProvider, ModelProvider
from agents.permissions import DEFAULT_RULES_LABEL, rules_file_problem
from agents.registry import AgentEntry, AgentRegistry, RegistryError, load_registry
from agents.sandbox import DetachedSandbox, Sandbox, select_sandbox, shown_by
from agents.specialists import default_specialists
from agents.tools import ToolRegistry
from agents.web_tools import WebConfig, web_tools_hook
from agents.workspace_tools import ShellPolicy
from bot.channel import ChannelAdapter, Ingress, SupportsEnrichment, check_adapter
from bot.channels import AdapterFactory
from bot.console.people import CONSOLE_PLATFORM, ConsolePeople
from bot.home import HomeError, check_home, workspace_for
from bot.render.unfenced import UnfencedChannel
from bot.schema import all_migrations
from bot.settings import Settings
from bot.skill_forge import local_catalog, skill_router
from core.ids import ConversationRef
from core.store import Store
from host.agent.host_agent import HostAgent
from host.agent.tools import HostToolDeps, OrchestrationContext, build_host_tools
from host.conversation.lanes import LaneManager
from host.conversation.outbox import DeliveryError, Outbox
from host.conversation.run_events import ConversationRunEvents
from host.conversation.scheduled_turns import SYSTEM_TURN, system_turn_handler
from host.conversation.service import ConversationService
from host.features.memory.episode_former import ModelFormer
from host.features.memory.group import (
    AssessmentRequest,
    GroupContext,
    GroupMemoryWriter,
    GroupPrefetch,
)
from host.features.memory.personal import MemoryCommands, MemoryContext, MemoryWriter
from host.features.oncall.approval import (
    CAMPAIGN_COMMAND,
    PromptCommandApprovals,
    handle_campaign_command,
)
from host.features.oncall.decider import ModelDecider
from host.features.oncall.notices import LaneNotifier
from host.features.oncall.tools import build_campaign_tools
from host.features.permissions.gate import PermissionGates
from host.features.skills.completer import ProviderCompleter
from host.features.skills.context import SkillContext
from host.features.skills.experience import ExperienceWriter
from host.features.skills.prefetch import DispatchContexts, NodeSkills
from host.features.skills.store import ExperienceStore
from host.graph.executor import DispatchContext
from host.graph.judge import CompletionJudge
from host.graph.records import RunFiles
from host.graph.run_store import RunStore
from host.graph.runs import RunManager, RunSettings
from host.prompts.broker import PROMPT_EXPIRY_JOB, PromptBroker
from host.prompts.clarify import Clarifier
from host.prompts.handlers import subscribe_decision_handlers
from host.runtime.apscheduler_adapter import ApschedulerScheduler
from host.runtime.conversation_log import ConversationLog
from host.runtime.events import (
    ConversationStopped,
    EventBus,
    StoppedItem,
    subscribe_decision,
    subscribe_job,
)
from host.runtime.people import People
from host.runtime.ports import Channel, PeopleDirectory, PromptSurface
from host.runtime.roles import Roles
from host.runtime.scheduling import FiredJob
from host.runtime.turn import TurnContext
from memory.archive import Archive
from memory.embeddings import Embedder, EmbedderUnavailable, select_embedder
from memory.episodes import RuleFormer
from memory.erasure import UserErasure
from memory.group_store import GroupStore
from memory.index import HybridIndex
from memory.service import MemoryService
from oncall.access import CampaignLimits
from oncall.engine import CampaignEngine, EngineSettings
from oncall.machines.registry import (
    Allocator,
    Confinement,
    build_machines,
    load_machines,
)
from oncall.model import FINAL_STATES, MachineSpec
from oncall.ports import CAMPAIGN_WAKE
from oncall.store import CampaignStore
from oncall.workdirs import BotPaths
from skills.catalog import LocalCatalog

log = logging.getLogger(__name__)

__all__ = ["AdapterFactory", "Runtime", "build_runtime", "serve", "shutdown"]

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
    provider: ModelProvider
    registry: AgentRegistry
    runs: RunManager
    broker: PromptBroker
    host: HostAgent
    service: ConversationService
    adapters: tuple[ChannelAdapter, ...]
    scheduler: ApschedulerScheduler
    run_events: ConversationRunEvents
    campaigns: CampaignEngine
    memory: MemoryService
    memory_writer: MemoryWriter
    experience_writer: ExperienceWriter
    # Stop callbacks of everything started, in start order (closed in reverse).
    lifecycle: AsyncExitStack = field(default_factory=AsyncExitStack)
    serving: set[asyncio.Task[None]] = field(default_factory=set)


def build_provider(settings: Settings) -> ModelProvider:
    """The Anthropic provider when a key is set, else the honest offline provider."""
    if settings.offline or settings.anthropic_api_key is None:
        return OfflineProvider()
    from agents.models.anthropic_provider import AnthropicProvider

    return AnthropicProvider(
        api_key=settings.anthropic_api_key.get_secret_value(),
        model=settings.model,
        base_url=settings.anthropic_base_url,
        timeout=settings.model_timeout,
        max_retries=settings.model_max_retries,
    )


def build_sandbox(settings: Settings) -> Sandbox:
    """The sandbox for agent subprocesses; hides the data dir and this working dir (`.env`)."""
    return select_sandbox(hidden=hidden_paths(settings), unsandboxed=settings.unsandboxed)


def hidden_paths(settings: Settings) -> tuple[Path, ...]:
    """What no sandboxed command may see: the data dir and this working dir (`.env`)."""
    return (settings.home, Path.cwd())


def confinement(settings: Settings) -> Confinement:
    """How remote (Slurm, ssh) rounds are confined: the same hidden paths as the sandbox."""
    return Confinement(hidden=hidden_paths(settings), unsandboxed=settings.unsandboxed)


def backend_factory(
    provider: ModelProvider, settings: Settings, sandbox: Sandbox
) -> Callable[[AgentEntry], AgentBackend]:
    """Builds each agent's backend once, on first use."""
    web = WebConfig(fetch=settings.web_fetch, search_url=settings.web_search_url)
    specialists = default_specialists(
        shell=ShellPolicy(sandbox=sandbox), web_tools=web_tools_hook(web)
    )
    built: dict[str, AgentBackend] = {}

    def backend(entry: AgentEntry) -> AgentBackend:
        if entry.name not in built:
            built[entry.name] = build_backend(
                entry,
                provider=provider,
                specialists=specialists,
                sandbox=sandbox,
                max_iterations=settings.max_iterations,
                max_tokens=settings.max_tokens,
            )
        return built[entry.name]

    return backend


def load_machine_specs(home: Path, *, operator_dir: bool = False) -> dict[str, MachineSpec]:
    """RAVEN_HOME/machines.toml (a RuntimeError naming the problem). `operator_dir`: loaded
    by a one-shot command, whose current directory is the operator's project."""
    try:
        return load_machines(home, operator_dir=operator_dir)
    except ValueError as exc:
        raise RuntimeError(str(exc)) from None


async def stop_campaigns(
    campaigns: CampaignEngine, event: ConversationStopped, *, people: People | None = None
) -> None:
    """`stop` hook for campaigns: the engine cancels those the stopper may act on and
    returns the rest; both go into the stop's tally. Notices name the stopper by display
    name (`people`)."""
    active = [
        record
        for record in await campaigns.store.of_conversation(event.conversation_id)
        if record.state not in FINAL_STATES
    ]
    conv = ConversationRef.parse(event.conversation_id)
    left = await campaigns.stop_conversation(
        event.conversation_id,
        by=event.by,
        privileged=event.privileged,
        by_name=await (people or People()).name(conv, event.by),
    )
    kept = {record.id for record in left}
    for record in active:
        if record.id not in kept:
            event.tally.record(StoppedItem("campaign", record.id, record.owner), cancelled=True)
    for record in left:
        event.tally.record(StoppedItem("campaign", record.id, record.owner), cancelled=False)


async def on_campaign_wake(campaigns: CampaignEngine, job: FiredJob) -> None:
    """A campaign's scheduled wake-up fired."""
    await campaigns.on_wake_job(str(job.payload["campaign_id"]), str(job.payload["wake_id"]))


def build_embedder(settings: Settings) -> Embedder | None:
    """The memory embedder for RAVEN_MEMORY_EMBEDDER (None: keyword-only recall)."""
    try:
        return select_embedder(settings.memory_embedder)
    except EmbedderUnavailable as exc:
        raise RuntimeError(f"RAVEN_MEMORY_EMBEDDER=semantic, but {exc}") from None


def load_agents(settings: Settings, sandbox: Sandbox | None = None) -> AgentRegistry:
    """The agent registry from RAVEN_HOME/agents.toml (a RuntimeError naming the problem);
    with `sandbox`, a CLI agent whose program that sandbox cannot see is disabled, saying so."""
    visible = None if sandbox is None else shown_by(sandbox, os.environ)
    try:
        return load_registry(settings.home / "agents.toml", visible=visible)
    except RegistryError as exc:
        raise RuntimeError(str(exc)) from None


def check_permissions_file(settings: Settings) -> None:
    """A broken RAVEN_HOME/permissions.toml stops the start (`HomeError`: one line naming the
    file and the problem, as `doctor` reports it) rather than serve with every call denied."""
    problem = rules_file_problem(settings.home / DEFAULT_RULES_LABEL)
    if problem is not None:
        raise HomeError(problem)


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


def build_adapters(factories: Sequence[AdapterFactory]) -> tuple[ChannelAdapter, ...]:
    """Every adapter, one per platform, each checked against the features it declares."""
    adapters = tuple(factory() for factory in factories)
    platforms = [a.platform for a in adapters]
    if len(set(platforms)) != len(platforms):
        raise RuntimeError(f"two adapters for one platform: {platforms}")
    for adapter in adapters:
        check_adapter(adapter)
    return adapters


def dispatch_context(
    settings: Settings,
    memory: MemoryService,
    group_store: GroupStore,
    registry: AgentRegistry,
    catalog: LocalCatalog,
    experience: ExperienceStore,
    provider: ModelProvider,
) -> DispatchContext | None:
    """What dispatched nodes get after their task: group memory's prefetch (Eq. 34) and
    their specialist's default skills, each when turned on."""
    parts: list[DispatchContext] = []
    if settings.group_memory:
        parts.append(
            GroupPrefetch(
                memory,
                group_store,
                k_group=settings.group_recall_k,
                k_verdict=settings.group_verdicts_k,
                budget_chars=settings.group_budget_chars,
            )
        )
    if settings.skills:
        specialists = default_specialists()
        defaults = {
            e.name: specialists[e.role].default_skills
            for e in registry.entries()
            if e.backend == "inproc" and e.role in specialists
        }
        tools = {
            e.name: specialists[e.role].tools(settings.home).names()
            for e in registry.entries()
            if e.backend == "inproc" and e.role in specialists
        }
        parts.append(
            NodeSkills(
                catalog,
                defaults,
                router=skill_router(settings, experience, provider, catalog),
                tools_by_agent=tools,
                store=experience,
            )
        )
    return DispatchContexts(parts) if parts else None


async def build_runtime(settings: Settings, adapter_factories: Sequence[AdapterFactory]) -> Runtime:
    """Collect → validate → build → subscribe → open the store (crash leftovers marked)."""
    check_home(settings.home)
    check_permissions_file(settings)
    home = settings.home
    # Probed once (it runs bwrap): off the event loop.
    sandbox = await asyncio.to_thread(build_sandbox, settings)
    if sandbox.kind != "bwrap":
        log.warning("agent sandbox %s", sandbox.description)
    registry = load_agents(settings, sandbox)
    provider = build_provider(settings)
    adapters = build_adapters(adapter_factories)
    machine_specs = await asyncio.to_thread(load_machine_specs, home)
    embedder = build_embedder(settings)

    # Build, each part from parts already built.
    store = Store(home / "raven.db", all_migrations())
    conversation_log = ConversationLog(store)
    bus = EventBus()
    # People never see fence markers: every post and edit is unfenced on its way out.
    channels: MappingProxyType[str, Channel] = MappingProxyType(
        {a.platform: UnfencedChannel(a) for a in adapters}
    )
    outbox = Outbox(conversation_log, channels)
    # What people read names people by display name (each platform's directory), not by id.
    people = People(people_directories(adapters))
    run_store = RunStore(store)
    scheduler = ApschedulerScheduler(
        home / "scheduler.db", bus, misfire_grace_seconds=settings.scheduler_misfire_grace_seconds
    )
    broker = PromptBroker(
        store,
        surfaces=MappingProxyType(
            {a.platform: a for a in adapters if isinstance(a, PromptSurface)}
        ),
        bus=bus,
        admins=settings.admins,
        approvers=settings.approvers,
        default_expiry_seconds=settings.prompt_expiry_seconds,
        scheduler=scheduler,
        people=people,
    )
    clarifier = Clarifier(provider, broker, conversation_log)
    group_store = GroupStore(store)
    memory = MemoryService(
        Archive(store),
        HybridIndex(embedder, home / "index"),
        sources=(group_store,) if settings.group_memory else (),
        former=ModelFormer(provider)
        if settings.memory_episodes == "model" and not provider.offline
        else RuleFormer(),
        erasure=UserErasure(store, runs_root=home / "runs"),
    )
    group = settings.group_memory
    catalog = local_catalog(settings)
    experience = ExperienceStore(store)
    runs = RunManager(
        store=run_store,
        files=RunFiles(home / "runs"),
        registry=registry,
        judge=CompletionJudge(provider, timeout=settings.judge_timeout),
        backend=backend_factory(provider, settings, sandbox),
        workspace=workspace_for(home),
        bus=bus,
        host_reachable=not provider.offline,
        settings=RunSettings(
            concurrency=settings.graph_concurrency,
            max_attempts=settings.node_max_attempts,
            decision_seconds=settings.decision_seconds,
            dispatch_budget_per_hour=settings.dispatch_budget_per_hour,
        ),
        prompts=clarifier,
        prefetch=dispatch_context(
            settings, memory, group_store, registry, catalog, experience, provider
        ),
        gates=PermissionGates(home, store),
    )
    # `stop` reaches runs, prompts and campaigns as ConversationStopped on the bus.
    lanes = LaneManager(
        user_pool=settings.user_pool,
        system_pool=settings.system_pool,
        idle_seconds=settings.lane_idle_seconds,
        queue_cap=settings.lane_queue_cap,
        bus=bus,
    )
    campaigns = CampaignEngine(
        store=CampaignStore(store),
        machines=build_machines(
            machine_specs, DetachedSandbox(sandbox), confinement=confinement(settings)
        ),
        allocator=Allocator(machine_specs),
        scheduler=scheduler,
        # Notices are system work in the conversation's lane, recorded before they post.
        notifier=LaneNotifier(conversation_log, outbox, lanes),
        decider=ModelDecider(provider),
        root=home / "campaigns",
        settings=EngineSettings(
            report_tolerance=settings.campaign_report_tolerance,
            limits=CampaignLimits(
                max_budget_seconds=settings.campaign_max_budget_hours * 3600,
                max_active_per_user=settings.campaign_max_per_user,
            ),
        ),
        approvals=PromptCommandApprovals(broker),
        # A chat campaign without a machine `workdir` runs in the conversation's workspace
        # (where its attachments land); never in RAVEN_HOME itself or this directory.
        workspace=workspace_for(home),
        bot_paths=BotPaths.of(home, Path.cwd()),
    )
    memory_writer = MemoryWriter(memory, conversation_log)
    memory_commands = MemoryCommands(memory, broker, outbox, people)
    group_writer = GroupMemoryWriter(group_store, memory)
    group_context = GroupContext(
        memory,
        agents=[e.name for e in registry.entries()],
        k_group=settings.group_recall_k,
        budget_chars=settings.group_budget_chars,
    )
    group_sources = (group_context, AssessmentRequest(group_store)) if group else ()
    experience_writer = ExperienceWriter(
        experience,
        completer=None if provider.offline else ProviderCompleter(provider),
        embedder=embedder,
    )
    tool_deps = HostToolDeps(
        runs=runs,
        broker=broker,
        registry=registry,
        results_reach_users=provider.offline,
        request_attribution=group,
        roles=Roles(admins=settings.admins, approvers=settings.approvers),
        people=people,
    )
    host_tools = build_host_tools(tool_deps) + build_campaign_tools(
        campaigns,
        roles=Roles(admins=settings.admins, approvers=settings.approvers),
        private=broker.notify_private,
        people=people,
    )
    skill_sources = (
        (
            SkillContext(
                skill_router(settings, experience, provider, catalog),
                experience,
                tools=[t.name for t in host_tools],
                specialists=[e.name for e in registry.entries() if e.enabled],
            ),
        )
        if settings.skills
        else ()
    )
    host = HostAgent(
        provider,
        ToolRegistry[TurnContext](host_tools),
        context_sources=(
            OrchestrationContext(tool_deps),
            MemoryContext(
                memory, k=settings.memory_recall_k, budget_chars=settings.memory_budget_chars
            ),
            *group_sources,
            *skill_sources,
        ),
        max_iterations=settings.max_iterations,
        max_tokens=settings.max_tokens,
    )
    service = ConversationService(
        conversation_log=conversation_log,
        lanes=lanes,
        host=host,
        outbox=outbox,
        bus=bus,
        commands=memory_commands,
        dedup_ttl_seconds=settings.dedup_ttl_seconds,
        history_messages=settings.history_messages,
        broker=broker,
        admins=settings.admins,
        approvers=settings.approvers,
        people=people,
        status_sources=(runs.status, broker.status, campaigns.status),
        background_idle=runs.idle,
        enrichers=MappingProxyType(
            {a.platform: a.enrich for a in adapters if isinstance(a, SupportsEnrichment)}
        ),
    )
    run_events = ConversationRunEvents(run_store, service, runs)

    # Subscribe, then freeze: who hears what is fixed for this generation. Group memory
    # hears a finished run before its report becomes a turn that may close the round.
    if group:
        group_writer.subscribe(bus)
    run_events.subscribe(bus)
    subscribe_decision_handlers(bus, runs, service, clarifier, people)
    subscribe_decision(
        bus,
        CAMPAIGN_COMMAND,
        functools.partial(
            handle_campaign_command,
            engine=campaigns,
            broker=broker,
            admins=settings.admins,
            people=people,
        ),
    )
    # Each owner of work cancels only what the stopper may stop and tallies the rest.
    for stop in (
        runs.stop_conversation,
        broker.cancel_conversation_id,
        functools.partial(stop_campaigns, campaigns, people=people),
    ):
        bus.subscribe(ConversationStopped, stop)
    subscribe_job(bus, PROMPT_EXPIRY_JOB, broker.on_expiry_job)
    subscribe_job(bus, SYSTEM_TURN, system_turn_handler(service))
    subscribe_job(bus, CAMPAIGN_WAKE, functools.partial(on_campaign_wake, campaigns))
    memory_writer.subscribe(bus)
    memory_commands.subscribe(bus)
    experience_writer.subscribe(bus)
    bus.freeze()

    runtime = Runtime(
        settings=settings,
        store=store,
        conversation_log=conversation_log,
        bus=bus,
        lanes=lanes,
        provider=provider,
        registry=registry,
        runs=runs,
        broker=broker,
        host=host,
        service=service,
        adapters=adapters,
        scheduler=scheduler,
        run_events=run_events,
        campaigns=campaigns,
        memory=memory,
        memory_writer=memory_writer,
        experience_writer=experience_writer,
    )
    try:
        await open_core(runtime)
    except BaseException:
        await runtime.lifecycle.aclose()
        raise
    return runtime


async def open_core(runtime: Runtime) -> None:
    """Open the store first, so a crash's leftovers are marked before anything new runs;
    register every part's stop so that the last started stops first."""
    stack = runtime.lifecycle
    await runtime.store.open()
    stack.push_async_callback(runtime.store.close)
    # The recall index is derived: loaded (or rebuilt) from SQLite, saved at shutdown.
    await runtime.memory.load_index()
    stack.push_async_callback(runtime.memory.save_index)
    stack.push_async_callback(runtime.memory_writer.close)
    stack.push_async_callback(runtime.experience_writer.close)
    stack.push_async_callback(close_provider, runtime.provider)
    # Egress lives almost to the end: messages said while draining must still go out.
    stack.push_async_callback(close_adapters, runtime)
    stack.push_async_callback(runtime.service.close)
    stack.push_async_callback(runtime.run_events.close)
    stack.push_async_callback(runtime.runs.shutdown)
    stack.push_async_callback(runtime.lanes.drain, runtime.settings.shutdown_grace)
    interrupted = await runtime.conversation_log.interrupt_running()
    if interrupted:
        log.warning("%d turn(s) were interrupted by the last shutdown", len(interrupted))
    interrupted_runs = await runtime.runs.store.interrupt_unfinished()
    if interrupted_runs:
        log.warning("%d graph run(s) were interrupted by the last shutdown", len(interrupted_runs))


async def start_serving(runtime: Runtime) -> None:
    """Recover, start the scheduler, then let every adapter receive."""
    await runtime.broker.recover()
    for adapter in runtime.adapters:
        await runtime.service.recover(adapter.platform)
        await report_interrupted_runs(runtime, adapter.platform)
    # Completed turns a crash kept from memory are taken in now, before serving.
    caught_up = await runtime.memory_writer.recover()
    if caught_up:
        log.info("memory: taking in %d turn(s) completed before a crash", caught_up)
    waiting = await runtime.experience_writer.catch_up()
    if waiting:
        log.info("skills: revising from %d case(s) recorded while no model was available", waiting)
    # After recovery, so a job firing now cannot race the replay of unhandled messages.
    await runtime.scheduler.start()
    # First to stop: a job firing during the drain would start work shutdown then cuts off.
    runtime.lifecycle.push_async_callback(runtime.scheduler.stop)
    # Campaign monitors re-attach to rounds still running; overdue wake-ups fire once.
    await runtime.campaigns.recover()
    runtime.lifecycle.push_async_callback(runtime.campaigns.close)
    await runtime.broker.schedule_expiries()
    await runtime.memory.warm_up()
    # Everything built so far (the embedder's model too) lives as long as the process: keep
    # it out of the cyclic collector, whose full passes over it stalled the loop 130–290 ms.
    gc.collect()
    gc.freeze()
    ingress = Ingress(runtime.service, runtime.broker)
    runtime.serving.update(
        asyncio.create_task(a.serve(ingress), name=f"serve-{a.platform}") for a in runtime.adapters
    )


async def serve(runtime: Runtime) -> int:
    """Recover, serve every adapter until they end or a signal arrives, then shut down.

    Returns the process exit code: 0 after a clean stop, 1 when an adapter crashed.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    stopper = asyncio.create_task(stop.wait(), name="stop-signal")
    try:
        await start_serving(runtime)
        return await _until_stopped(runtime, stopper)
    finally:
        stopper.cancel()
        await asyncio.shield(shutdown(runtime))
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


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
        text = (
            f"⚠️ A restart interrupted run `{run.id}`. Completed nodes are kept and can be "
            f"reused by id; nodes that were running are marked interrupted.\n\n{report}"
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
