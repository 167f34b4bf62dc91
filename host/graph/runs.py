"""The run manager: admits submissions atomically per conversation, starts and tracks runs,
resolves exceptions, cancels, reports status, and recovers after a restart."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agents.backends.base import AgentBackend
from agents.models.metered import UsageRecorder
from agents.registry import AgentEntry, AgentRegistry
from core.ids import ConversationRef
from core.keyed import KeyedLocks
from host.graph.admission import AdmissionError, AdmittedGraph, ApprovalRequired, admit
from host.graph.executor import (
    AgentAccess,
    ConversationCapacity,
    DispatchAids,
    DispatchContext,
    GraphRun,
    NodeTools,
    PermitFactory,
    RunDeps,
    RunPolicy,
    WorkerPrompts,
)
from host.graph.judge import CompletionJudge
from host.graph.model import TERMINAL_STATES, AdmissionContext, GraphSubmission
from host.graph.records import RunFiles, read_output
from host.graph.render import Artifact
from host.graph.report_loader import load_report
from host.graph.run_store import NodeRecord, RunRecord, RunState, RunStore
from host.runtime.events import ConversationStopped, EventBus, StoppedItem
from host.runtime.spending import SpendGate

log = logging.getLogger(__name__)

HOUR = 3600.0
# `status` lists these runs; the others only as a count of those finished in the last day.
LIVE_RUN_STATES: frozenset[RunState] = frozenset({"awaiting_approval", "running"})
RECENT_SECONDS = 24 * HOUR


@dataclass(frozen=True)
class RunSettings:
    """Limits of the graph runtime."""

    concurrency: int = 4
    max_attempts: int = 3
    decision_seconds: float = 1800.0
    dispatch_budget_per_hour: int = 200


@dataclass(frozen=True)
class RunParts:
    """What runs are made of: their records and files, the agents and how each is reached,
    the judge, each conversation's workspace, and the bus runs are announced on."""

    store: RunStore
    files: RunFiles
    registry: AgentRegistry
    judge: CompletionJudge
    backend: Callable[[AgentEntry], AgentBackend]
    workspace: Callable[[ConversationRef], Path]
    bus: EventBus


@dataclass(frozen=True)
class RunAids:
    """What dispatched nodes may get: a way to ask people, context after their task, and
    permission gates for their tool calls."""

    prompts: WorkerPrompts | None = None
    prefetch: DispatchContext | None = None
    gates: PermitFactory | None = None
    # The skills a node may name in its `skills` override (None: skills are off).
    skill_names: Callable[[], Awaitable[frozenset[str]]] | None = None
    # The tool servers a node may name in its `mcp` override (None: none configured).
    tool_server_names: Callable[[], Awaitable[frozenset[str]]] | None = None
    # The team's tools a node is granted (None: nodes get their agent's own tools only).
    tools: NodeTools | None = None
    # Whether the run's owner may still spend on models (None: no budgets).
    spend: SpendGate | None = None
    # Where an API or ACP agent's reported usage is recorded (None: not counted).
    usage: UsageRecorder | None = None


@dataclass(frozen=True)
class Submitted:
    """Outcome of `submit`: a started run, or a graph waiting for approval."""

    status: Literal["started", "needs_approval"]
    run: GraphRun | None = None
    submission: GraphSubmission | None = None


class RunManager:
    """Owns every live graph run of this process (one generation)."""

    def __init__(
        self,
        parts: RunParts,
        *,
        host_reachable: bool,
        settings: RunSettings = RunSettings(),
        aids: RunAids = RunAids(),
        clock: Callable[[], float] = time.time,
        new_id: Callable[[], str] = lambda: "run_" + uuid.uuid4().hex[:10],
    ) -> None:
        self._store = parts.store
        self._files = parts.files
        self._registry = parts.registry
        self._judge = parts.judge
        self._backend = parts.backend
        self._workspace = parts.workspace
        self._bus = parts.bus
        self._prompts = aids.prompts
        self._prefetch = aids.prefetch
        self._gates = aids.gates
        self._skill_names = aids.skill_names
        self._tool_server_names = aids.tool_server_names
        self._tools = aids.tools
        self._spend = aids.spend
        self._usage = aids.usage
        self._host_reachable = host_reachable
        self._settings = settings
        self._clock = clock
        self._new_id = new_id
        self._capacity: dict[str, ConversationCapacity] = {}
        self._admission_locks = KeyedLocks()
        self._runs: dict[str, GraphRun] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @property
    def files(self) -> RunFiles:
        """Where the runs' records live."""
        return self._files

    @property
    def store(self) -> RunStore:
        """The run store (for status and reports)."""
        return self._store

    def capacity(self, conversation_id: str) -> ConversationCapacity:
        """The conversation's shared semaphore (graphs and single delegations)."""
        cap = self._capacity.get(conversation_id)
        if cap is None:
            cap = ConversationCapacity(asyncio.Semaphore(self._settings.concurrency))
            self._capacity[conversation_id] = cap
        return cap

    async def admission_context(
        self, conv: ConversationRef, *, in_subagent: bool = False, approval_collected: bool = False
    ) -> AdmissionContext:
        """Everything admission checks against, read fresh."""
        used = await self._store.dispatched_since(conv.id, self._clock() - HOUR)
        return AdmissionContext(
            agents={e.name: e for e in self._registry.entries()},
            workspace=self._workspace(conv),
            prior_nodes=await self._store.prior_nodes(conv.id),
            in_subagent=in_subagent,
            dispatch_budget_remaining=max(0, self._settings.dispatch_budget_per_hour - used),
            approval_collected=approval_collected,
            skills=None if self._skill_names is None else await self._skill_names(),
            tool_servers=(
                None if self._tool_server_names is None else await self._tool_server_names()
            ),
        )

    async def submit(
        self,
        conv: ConversationRef,
        raw: str | Mapping[str, Any] | GraphSubmission,
        *,
        submitted_by: str,
        in_subagent: bool = False,
        approval_collected: bool = False,
        replaces_run: str | None = None,
        for_task: str | None = None,
        starts_after: asyncio.Event | None = None,
    ) -> Submitted:
        """Admit and start a graph. Raises AdmissionError on the first failed check.

        Admission and node-id reservation happen under one per-conversation lock, so two
        concurrent submissions can never claim the same id. `for_task`: the scheduled task
        whose firing submits it (the run is unattended). `starts_after`: a background run
        waits for it (the submitting turn's reply) before it posts or runs anything.
        """
        async with self._admission_locks.hold(conv.id):
            ctx = await self.admission_context(
                conv, in_subagent=in_subagent, approval_collected=approval_collected
            )
            try:
                graph = admit(raw, ctx)
            except ApprovalRequired as needed:
                # Every other check passed (approval is the last one).
                return Submitted("needs_approval", submission=needed.submission)
            run = await self._create(
                conv, graph, submitted_by, replaces_run, for_task, starts_after=starts_after
            )
        return Submitted("started", run=run)

    async def _create(
        self,
        conv: ConversationRef,
        graph: AdmittedGraph,
        submitted_by: str,
        replaces: str | None,
        for_task: str | None = None,
        *,
        starts_after: asyncio.Event | None = None,
    ) -> GraphRun:
        run_id = self._new_id()
        now = self._clock()
        submission = graph.submission
        record = RunRecord(
            id=run_id,
            conversation=conv,
            task_summary=submission.task_summary,
            background=submission.background,
            state="running",
            submitted_by=submitted_by,
            submission=submission.model_dump(mode="json"),
            run_dir=self._files.run_dir(run_id),
            replaces_run=replaces,
            status_message=None,
            created_at=now,
            finished_at=None,
            for_task=for_task,
        )
        nodes = {
            spec.id: NodeRecord(
                conversation_id=conv.id,
                node_id=spec.id,
                run_id=run_id,
                agent=spec.agent,
                instance=spec.instance,
                summary=spec.summary,
                template=spec.template,
                deps=tuple(spec.deps),
                state="pending",
                attempts=0,
                max_attempts=self._settings.max_attempts,
                continuation=None,
                output_path=None,
                error=None,
                verdict=None,
                deadline=None,
            )
            for spec in submission.nodes
        }
        try:
            # Written (fsynced, off the loop) before the commit that records the run: a full
            # disk stops the submission here, with nothing recorded or announced, so no later
            # start reports a run that never started as interrupted.
            await asyncio.to_thread(self._files.write_graph, run_id, record.submission)
            await self._store.create_run(record, nodes.values())
        except Exception:
            await asyncio.to_thread(shutil.rmtree, record.run_dir, ignore_errors=True)
            raise
        external = await self._external_artifacts(conv, graph)
        deps = RunDeps(
            store=self._store,
            files=self._files,
            judge=self._judge,
            bus=self._bus,
            agents=AgentAccess(self._registry.get, self._backend, self._workspace(conv)),
            policy=RunPolicy(
                self._host_reachable, self._settings.decision_seconds, clock=self._clock
            ),
            aids=DispatchAids(
                self._prompts,
                self._prefetch,
                self._gates,
                self._tools,
                self._spend,
                self._usage,
            ),
        )
        run = GraphRun(record, graph, nodes, deps, self.capacity(conv.id), external)
        self._runs[run_id] = run
        # Only a background run waits: a foreground one is waited on by the turn itself.
        gate = starts_after if record.background else None
        task = asyncio.create_task(_after(gate, run.run()), name=f"run:{run_id}")
        self._tasks[run_id] = task
        task.add_done_callback(functools.partial(self._forget, run_id))
        log.info("run %s started in %s with %d node(s)", run_id, conv.id, len(nodes))
        return run

    def _forget(self, run_id: str, task: asyncio.Task[None]) -> None:
        self._tasks.pop(run_id, None)
        self._runs.pop(run_id, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("run %s crashed", run_id, exc_info=task.exception())

    async def _external_artifacts(
        self, conv: ConversationRef, graph: AdmittedGraph
    ) -> dict[str, Artifact]:
        artifacts = {}
        for node_id in graph.external_deps:
            node = await self._store.node(conv.id, node_id)
            if node is None or node.output_path is None:
                continue
            try:
                text = await asyncio.to_thread(read_output, node.output_path, restore=True)
            except OSError:
                text = f"(output file {node.output_path} could not be read)"
            artifacts[node_id] = Artifact(node_id, text, node.output_path)
        return artifacts

    def live(self, run_id: str) -> GraphRun | None:
        """A run still executing in this process."""
        return self._runs.get(run_id)

    def live_runs(self, conversation_id: str) -> list[GraphRun]:
        """Runs of one conversation still executing."""
        return [r for r in self._runs.values() if r.conversation_id == conversation_id]

    async def wait_for_decision_point(self, run: GraphRun) -> str:
        """Foreground: wait until the run ends or a node is suspended; return the report."""
        while True:
            run.changed.clear()
            suspended = run.suspended()
            if suspended:
                return run.exception_report(suspended[0])
            if run.done.is_set():
                # The Host continues on this report: what hears the end (the round its
                # attribution blocks close) must have heard it first.
                await run.ended.wait()
                return await self.report(run.id)
            await run.changed.wait()

    async def report(self, run_id: str) -> str:
        """The run report from the records (works for finished runs after a restart too)."""
        return await load_report(self._store, run_id)

    async def resolve(
        self,
        conv: ConversationRef,
        *,
        run_id: str,
        node_id: str,
        action: Literal["continue", "abandon", "replan"],
        message: str = "",
        graph: Mapping[str, Any] | None = None,
        submitted_by: str,
    ) -> tuple[str, GraphRun | None]:
        """Apply the Host's decision on a suspended node; return (text, run to wait on)."""
        run = self._runs.get(run_id)
        if run is None or run.conversation_id != conv.id:
            return (f"Run `{run_id}` is not running in this conversation.", None)
        if node_id not in run.nodes or run.state(node_id) != "exception":
            return (_not_waiting(run, node_id), None)
        if action == "continue":
            return await _continue(run, node_id, message)
        if action == "abandon":
            if not await run.resolve_abandon(node_id):
                return (_not_waiting(run, node_id), None)
            return (f"Node `{node_id}` abandoned; its dependents are skipped.", run)
        return await self._replan(conv, run, node_id, graph, submitted_by)

    async def _replan(
        self,
        conv: ConversationRef,
        run: GraphRun,
        node_id: str,
        graph: Mapping[str, Any] | None,
        submitted_by: str,
    ) -> tuple[str, GraphRun | None]:
        run_id = run.id
        if graph is None:
            return ("`replan` needs a `graph` (a new submission).", None)
        try:
            result = await self.submit(conv, graph, submitted_by=submitted_by, replaces_run=run_id)
        except AdmissionError as exc:
            return (f"Replan rejected; run `{run_id}` is unchanged. {exc}", None)
        if result.run is None:
            # Nothing was started (and no approval prompt exists), so stopping the old run here
            # would leave the task with no run at all: keep it as it is.
            return (
                f"The replanned graph sets `confirm`, so it needs the user's approval before it "
                f"can run; run `{run_id}` is unchanged and node `{node_id}` still waits for a "
                "decision. Get the user's approval first, then replan without `confirm`.",
                None,
            )
        await run.cancel(superseded=True)
        return (f"Run `{run_id}` replaced by `{result.run.id}`.", result.run)

    def unresolvable(self, conv: ConversationRef, run_id: str, node_id: str) -> str | None:
        """Why `resolve` would refuse this node, or None when it waits for a decision."""
        run = self._runs.get(run_id)
        if run is None or run.conversation_id != conv.id:
            return f"Run `{run_id}` is not running in this conversation."
        if node_id not in run.nodes or run.state(node_id) != "exception":
            return _not_waiting(run, node_id)
        return None

    async def supersede(self, conv: ConversationRef, run_id: str) -> None:
        """Stop a run replaced by an approved replan (its completed nodes stay reusable)."""
        run = self._runs.get(run_id)
        if run is not None and run.conversation_id == conv.id:
            await run.cancel(superseded=True)

    async def cancel(self, conv: ConversationRef, run_id: str | None = None) -> list[str]:
        """Cancel one run (or every live run) of the conversation; return their ids."""
        runs = [r for r in self.live_runs(conv.id) if run_id is None or r.id == run_id]
        for run in runs:
            await run.cancel(reason="cancelled by the user")
        return [r.id for r in runs]

    async def stop_conversation(self, event: ConversationStopped) -> None:
        """`stop` hook: cancel the conversation's runs its typist may stop (those they
        submitted, or all when privileged); record both kinds in the event's tally."""
        for run in self.live_runs(event.conversation_id):
            owner = run.record.submitted_by
            stoppable = event.may_stop(owner)
            # Read before cancelling: the nodes this stop ends, as the reply names them.
            ended = [n for n in run.nodes if run.state(n) not in TERMINAL_STATES]
            detail = f"{', '.join(ended)} cancelled" if stoppable and ended else ""
            event.tally.record(StoppedItem("run", run.id, owner, detail), cancelled=stoppable)
            if stoppable:
                await run.cancel(reason="stopped")

    async def status(self, conv: ConversationRef) -> str:
        """`status`: the conversation's live runs with node counts, then what finished in the
        last 24 h as one `Recent:` line."""
        runs = await self._store.runs(conv.id, limit=50)
        live = [r for r in runs if r.state in LIVE_RUN_STATES]
        since = self._clock() - RECENT_SECONDS
        ended = [
            r
            for r in runs
            if r.state not in LIVE_RUN_STATES and (r.finished_at or r.created_at) >= since
        ]
        lines = []
        for run in live:
            nodes = await self._store.nodes_of_run(run.id)
            states: dict[str, int] = {}
            for n in nodes:
                states[n.state] = states.get(n.state, 0) + 1
            counts = ", ".join(f"{v} {k}" for k, v in sorted(states.items()))
            lines.append(f"- run `{run.id}` {run.state}: {run.task_summary} ({counts})")
        if ended:
            latest = max(ended, key=lambda r: r.finished_at or r.created_at)
            lines.append(
                f"Recent: {len(ended)} run(s) finished in the last 24 h (latest `{latest.id}`, "
                f"{latest.state})"
            )
        return "\n".join(lines)

    async def idle(self, conversation_id: str | None = None) -> None:
        """Wait until no run (of the conversation) is executing."""
        while True:
            tasks = [
                t
                for rid, t in self._tasks.items()
                if conversation_id is None or self._runs[rid].conversation_id == conversation_id
            ]
            if not tasks:
                return
            await asyncio.wait(tasks)

    def executing(self) -> list[GraphRun]:
        """Every run still executing in this process."""
        return list(self._runs.values())

    async def cancel_all(self, reason: str) -> None:
        """Cancel every executing run, recording `reason` on the nodes it stops (shutdown
        once its grace is over: a clean stop is never reported as a crash)."""
        for run in list(self._runs.values()):
            await run.cancel(reason=reason)

    async def shutdown(self) -> None:
        """Stop every live run without rewriting its records: the next start marks running
        nodes interrupted and reports them, the same path as after a crash."""
        for run in list(self._runs.values()):
            await run.halt()
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)


async def _continue(run: GraphRun, node_id: str, message: str) -> tuple[str, GraphRun | None]:
    if not message.strip():
        return ("`continue` needs a `message` telling the agent what to change.", None)
    if not await run.resolve_continue(node_id, message):
        return (_not_waiting(run, node_id), None)
    return (f"Node `{node_id}` continues (attempt {run.nodes[node_id].attempts + 1}).", run)


def _not_waiting(run: GraphRun, node_id: str) -> str:
    state = run.nodes[node_id].state if node_id in run.nodes else "unknown"
    return f"Node `{node_id}` is not waiting for a decision (state: {state})."


def submission_json(submission: GraphSubmission) -> str:
    """The submission as compact JSON (prompt payloads)."""
    return json.dumps(submission.model_dump(mode="json"), ensure_ascii=False)


async def _after(gate: asyncio.Event | None, work: Coroutine[Any, Any, None]) -> None:
    """`work`, once `gate` is set (at once without one)."""
    try:
        if gate is not None:
            await gate.wait()
    except BaseException:
        work.close()  # never started: close it, or it is reported as never awaited
        raise
    await work
