"""Executes one admitted graph run: dependency-ready scheduling (paper Eq. 31), judging,
suspension on exceptions, skipping after failures, cancellation.

How a node moves (paper §3.2, Fig. 5a):

- Ready set, incrementally: every node keeps a counter of in-graph predecessors not yet
  completed; a completed node decrements its children's counters once its state is
  committed (so a consumer never reads an unsettled output), and a child reaching zero is
  submitted at once — no scan of the graph on any wake-up. Skipping after a failure walks the
  pending descendants only.
- Slots: a submitted node renders its prompt, then waits for its instance (nodes sharing a
  handle run one after another) and for the conversation's slot — `queued` while it waits,
  `running` once it holds the slot. The slot is held for the agent call only: journaling,
  judging and committing happen outside it, so the next node starts meanwhile.
- Records and commits: two group commits per run, each one batch at a time (what arrives
  meanwhile goes into the next batch): the run journal (prompts, outputs, transcripts; one
  write and one fsync per batch, off the loop) and the SQLite node rows (one statement per
  batch). A settling node waits for its journal lines to be on disk before its state is
  committed, so SQLite (the source of truth) never points at records that are not there, and
  nothing is announced before it is committed; a node only starting (queued, running) never
  waits behind an fsync.
- Announcements: progress is published by one task per run after commits, coalesced (a
  slow chat API delays the status message, never the run).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agents.backends.base import AgentBackend, AgentOutcome, AgentTask, Permit
from agents.models.types import Message, Usage
from agents.registry import AgentEntry
from core.ids import ConversationRef
from core.keyed import KeyedLocks
from host.graph.admission import AdmittedGraph
from host.graph.judge import CompletionJudge, Verdict
from host.graph.model import NOT_STARTED_STATES, NodeSpec, NodeState
from host.graph.records import GroupFlush, RunFiles, RunJournal
from host.graph.render import (
    Artifact,
    Markers,
    RenderError,
    fence,
    render_prompt,
    untrusted_preface,
)
from host.graph.run_store import NodeRecord, RunRecord, RunState, RunStore
from host.runtime.events import EventBus, RunException, RunFinished, RunProgress

log = logging.getLogger(__name__)


class WorkerPrompts(Protocol):
    """How a running node reaches a person: clarifying questions and command approvals."""

    async def answer_for_worker(
        self, conv: ConversationRef, requester: str, question: str, *, node_id: str
    ) -> str:
        """An answer to a worker's question (from the conversation or the requester)."""
        ...

    async def approve_command(
        self, conv: ConversationRef, requester: str, command: str, *, node_id: str
    ) -> bool:
        """Whether a person approved running `command` (False unless approved)."""
        ...

    async def ask_permission(
        self, conv: ConversationRef, requester: str, question: str, *, node_id: str
    ) -> str:
        """A person's answer to a permission question (`allow_once`, `allow_conversation`,
        `deny`)."""
        ...


class PermitFactory(Protocol):
    """Builds the permission gate one node's tool calls pass (host-provided)."""

    def __call__(
        self,
        conv: ConversationRef,
        requester: str,
        ask: Callable[[str], Awaitable[str]] | None,
    ) -> Permit:
        """The gate for one task; `ask` is None for an unattended run (it cannot ask)."""
        ...


@dataclass
class ConversationCapacity:
    """Shared per conversation: one semaphore for graphs and delegations, instance locks."""

    semaphore: asyncio.Semaphore
    instance_locks: KeyedLocks = field(default_factory=KeyedLocks)
    # Holders and waiters per handle, so a node can tell it is about to wait (`queued`).
    _instance_users: dict[str, int] = field(default_factory=dict, init=False, repr=False)

    def instance_busy(self, handle: str) -> bool:
        """True when another node holds (or waits for) this instance."""
        return self._instance_users.get(handle, 0) > 0

    def instance_lock(self, handle: str) -> AbstractAsyncContextManager[None]:
        """Held while a node of this handle runs, so nodes sharing it run one after another."""
        return self._hold_instance(handle)

    @contextlib.asynccontextmanager
    async def _hold_instance(self, handle: str) -> AsyncIterator[None]:
        self._instance_users[handle] = self._instance_users.get(handle, 0) + 1
        try:
            async with self.instance_locks.hold(handle):
                yield
        finally:
            left = self._instance_users[handle] - 1
            if left:
                self._instance_users[handle] = left
            else:
                del self._instance_users[handle]


@dataclass(frozen=True)
class RunDeps:
    """The collaborators a run needs (injected by the run manager)."""

    store: RunStore
    files: RunFiles
    judge: CompletionJudge
    agent: Callable[[str], AgentEntry | None]
    backend: Callable[[AgentEntry], AgentBackend]
    bus: EventBus
    workspace: Path
    host_reachable: bool
    decision_seconds: float
    clock: Callable[[], float] = time.time
    # None: nobody to ask, and no command can be approved.
    prompts: WorkerPrompts | None = None
    # None: nodes get their task alone (group memory off).
    prefetch: DispatchContext | None = None
    # None: tool calls pass no permission gate (only the tools' own rules apply).
    gates: PermitFactory | None = None


class DispatchContext(Protocol):
    """Adds context to a node's task at dispatch (group memory's prefetch, Eq. 34)."""

    async def for_node(self, run: RunRecord, agent: str, task: str, *, node_id: str = "") -> str:
        """The block appended after the task ("" for nothing)."""
        ...


@dataclass(frozen=True)
class _Job:
    """One attempt of one node, prepared before it waits for a slot."""

    spec: NodeSpec
    entry: AgentEntry
    attempt: int
    prompt: str  # the task the agent receives
    request: str  # what this attempt asks for, as journaled and judged
    continuation: str | None  # sent alone to a stateful session that holds the last attempt


class GraphRun:
    """The scheduler of one run. States live here and in SQLite; SQLite is written first."""

    def __init__(
        self,
        run: RunRecord,
        graph: AdmittedGraph,
        nodes: Mapping[str, NodeRecord],
        deps: RunDeps,
        capacity: ConversationCapacity,
        external: Mapping[str, Artifact],
    ) -> None:
        self.record = run
        self.graph = graph
        self.nodes = dict(nodes)
        self._deps = deps
        self._capacity = capacity
        # Outputs successors may render: earlier runs' nodes now, this run's as they complete.
        self._artifacts: dict[str, Artifact] = dict(external)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._previous_output: dict[str, str] = {}
        # Nodes whose last attempt was recorded in their instance's session (a continuation
        # can then send the Host's message alone).
        self._in_session: set[str] = set()
        position = {node_id: i for i, node_id in enumerate(graph.order)}
        self._children: dict[str, list[str]] = {node_id: [] for node_id in self.nodes}
        self._waiting: dict[str, int] = {}
        for node_id, node in self.nodes.items():
            inside = [d for d in node.deps if d in self.nodes]
            for dep in inside:
                self._children[dep].append(node_id)
            self._waiting[node_id] = sum(1 for d in inside if self.nodes[d].state != "completed")
        for children in self._children.values():
            children.sort(key=lambda n: position.get(n, 0))
        # Suspended nodes and their decision deadlines.
        self._suspended: dict[str, float | None] = {
            n.node_id: n.deadline for n in self.nodes.values() if n.state == "exception"
        }
        # Decided but not yet committed: the newest record of each such node.
        self._decided: dict[str, NodeRecord] = {}
        self._completing: dict[str, Artifact] = {}
        self._writes = GroupFlush[NodeRecord](self._write_batch, name=f"commits:{run.id}")
        self._journal: RunJournal = deps.files.open_journal(run.id)
        self._markers = Markers()
        self._outputs_dir = deps.files.outputs_dir(run.id)
        self._memory_dir = deps.files.memory_dir(run.id)
        self._wake = asyncio.Event()
        self.changed = asyncio.Event()
        self.done = asyncio.Event()
        # Set once the run is being cancelled: nothing new starts and the canceller finishes it.
        self._stopping = False
        self._canceller: asyncio.Task[None] | None = None
        self._finishing = False
        # Set by `halt()` at shutdown: leave the records as they are (running) so the next
        # start marks them interrupted and reports it, exactly as after a crash.
        self._halting = False
        self._announcer: asyncio.Task[None] | None = None
        self._announce = asyncio.Event()
        self._dirty = False
        self._quiet = False

    @property
    def id(self) -> str:
        """The run id."""
        return self.record.id

    @property
    def conversation_id(self) -> str:
        """The conversation the run belongs to."""
        return self.record.conversation.id

    def state(self, node_id: str) -> NodeState:
        """Current (committed) state of one node of this run."""
        return self.nodes[node_id].state

    def suspended(self) -> list[str]:
        """Nodes waiting for a Host decision, in the order they were suspended."""
        return list(self._suspended)

    def output_text(self, node_id: str) -> str:
        """The recorded output of a completed node of this run."""
        artifact = self._artifacts.get(node_id)
        return artifact.output if artifact is not None else ""

    async def run(self) -> None:
        """Schedule until every node settled (suspended nodes wait for a decision)."""
        if self._stopping or self._halting or self.done.is_set():
            await self._ended()  # stopped before it began: the canceller finishes it
            return
        self._announcer = asyncio.create_task(self._announcements(), name=f"run-progress:{self.id}")
        try:
            await self._schedule()
        except asyncio.CancelledError:
            if not self._halting:
                await self.cancel(reason="cancelled")
            raise
        finally:
            await self._ended()

    async def _schedule(self) -> None:
        for node_id in self.graph.order:
            self._submit_if_ready(node_id)
        while not self._halting:
            await self._expire_decisions()
            if not self._tasks and not self._suspended:
                if self._writes.idle:
                    return
                await self._writes.drain()  # a commit may still submit nodes
                continue
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._next_deadline()):
                    await self._wake.wait()

    async def _ended(self) -> None:
        """Wait for the canceller, or finish; the announcer never outlives the run."""
        try:
            if self._canceller is not None:
                await asyncio.shield(self._canceller)
            elif not self.done.is_set() and not self._halting:
                await asyncio.shield(self._finish())
        finally:
            announcer = self._announcer
            if announcer is not None and not announcer.done():
                announcer.cancel()
                await asyncio.wait({announcer})

    async def halt(self) -> None:
        """Shutdown: stop executing without rewriting records (the restart reports them)."""
        self._halting = True
        self._wake.set()
        await self._stop_tasks()
        await self._writes.drain()
        await self._journal.close()
        await self._stop_announcements()

    async def cancel(self, *, reason: str = "cancelled", superseded: bool = False) -> None:
        """Stop the run: running and suspended nodes cancelled, pending ones skipped."""
        if self._canceller is None and not self.done.is_set():
            self._canceller = asyncio.create_task(
                self._cancel_all(reason, superseded=superseded), name=f"run-cancel:{self.id}"
            )
        if self._canceller is not None:
            # Shielded: a cancelled caller must not leave the run half stopped.
            await asyncio.shield(self._canceller)
        self._wake.set()

    async def resolve_continue(self, node_id: str, message: str) -> bool:
        """Return a suspended node to pending with the Host's message attached (False when
        it no longer waits for a decision)."""
        if self._stopping or self._current(node_id).state != "exception":
            return False
        await self._commit(node_id, "pending", continuation=message, deadline=None, error=None)
        return True

    async def resolve_abandon(self, node_id: str) -> bool:
        """Fail a suspended node and skip its dependents (False when it no longer waits)."""
        if self._stopping or self._current(node_id).state != "exception":
            return False
        await self._commit(
            node_id,
            "failed",
            error="abandoned by the Host",
            deadline=None,
            finished_at=self._deps.clock(),
        )
        return True

    # -- scheduling --------------------------------------------------------------------

    def _current(self, node_id: str) -> NodeRecord:
        """The newest decided record of a node (committed or about to be)."""
        return self._decided.get(node_id) or self.nodes[node_id]

    def _submit_if_ready(self, node_id: str) -> None:
        """Eq. 31: pending, not submitted, every in-graph predecessor completed and settled
        (the counter drops only once a completion is committed)."""
        if self._stopping or self._halting or node_id in self._tasks:
            return
        if self._waiting[node_id] or self.nodes[node_id].state != "pending":
            return
        if self._current(node_id).state != "pending":
            return  # about to be skipped, or a decision not committed yet
        task = asyncio.create_task(self._attempt(node_id), name=f"node:{self.id}:{node_id}")
        self._tasks[node_id] = task
        task.add_done_callback(functools.partial(self._node_done, node_id))

    def _node_done(self, node_id: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(node_id) is task:
            del self._tasks[node_id]
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("node %s of run %s crashed", node_id, self.id, exc_info=exc)
        # A continuation decided while the last attempt was still announcing starts now.
        self._submit_if_ready(node_id)
        self._wake.set()

    def _next_deadline(self) -> float | None:
        deadlines = [d for d in self._suspended.values() if d is not None]
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - self._deps.clock())

    async def _expire_decisions(self) -> None:
        if self._stopping or not self._suspended:
            return
        now = self._deps.clock()
        expired = [
            node_id
            for node_id, deadline in self._suspended.items()
            if deadline is not None
            and deadline <= now
            and self._current(node_id).state == "exception"
        ]
        for node_id in expired:
            self._decide(
                node_id,
                "failed",
                error=f"no decision by the deadline ({self.nodes[node_id].error})",
                deadline=None,
                finished_at=now,
            )
        if expired:
            await self._writes.flushed()

    # -- one node ----------------------------------------------------------------------

    async def _attempt(self, node_id: str) -> None:
        try:
            job = await self._prepare(node_id)
            if isinstance(job, str):
                await self._fail(node_id, job)
                return
            outcome = await self._run_agent(job)
            await self._settle(job, outcome)
        except asyncio.CancelledError:
            # The canceller (or the restart, after a halt) records what this node became.
            raise
        except Exception as exc:
            log.exception("node %s of run %s crashed", node_id, self.id)
            await self._fail(node_id, f"internal error: {type(exc).__name__}: {exc}")

    async def _prepare(self, node_id: str) -> _Job | str:
        """The attempt's prompt (rendered before the node waits for a slot), or why the node
        cannot run."""
        spec = self.graph.node(node_id)
        entry = self._deps.agent(spec.agent)
        if entry is None or not entry.enabled:
            return f"agent `{spec.agent}` is no longer available"
        try:
            prompt = self._render(spec, entry)
        except RenderError as exc:
            return f"the prompt could not be rendered: {exc}"
        if not entry.runs_commands:
            # Context is prose for a reader; a command agent's task is the command that is
            # approved and run byte for byte, so nothing is added to it.
            prompt = await self._prefetched(spec, prompt)
        record = self.nodes[node_id]
        attempt = record.attempts + 1
        prompt, request, continuation = self._continued(spec, entry, record, prompt)
        # Journaled before dispatch; synced with the next batch.
        self._journal.record("prompt", node_id, attempt, text=request)
        return _Job(spec, entry, attempt, prompt, request, continuation)

    async def _prefetched(self, spec: NodeSpec, prompt: str) -> str:
        """The task followed by the dispatch context; a failing source adds nothing."""
        if self._deps.prefetch is None:
            return prompt
        try:
            block = await self._deps.prefetch.for_node(
                self.record, spec.agent, prompt, node_id=spec.id
            )
        except Exception:
            log.exception(
                "prefetch for node %s of run %s failed; dispatching without", spec.id, self.id
            )
            return prompt
        return f"{prompt}\n\n{block}" if block else prompt

    def _continued(
        self, spec: NodeSpec, entry: AgentEntry, record: NodeRecord, prompt: str
    ) -> tuple[str, str, str | None]:
        """(prompt, request, continuation) of an attempt, given the Host's message if any."""
        continuation = record.continuation
        if continuation is None or entry.runs_commands:
            # A command runs again as written: the Host's words never join it (a replan
            # changes a command, and is approved again like any other).
            return prompt, prompt, None
        if entry.stateful and spec.instance and spec.id in self._in_session:
            # The session holds the previous attempt: the message alone continues it.
            request = (
                f"{prompt}\n\n---\nMessage from the Host (sent as a continuation of the "
                f"session):\n{continuation}"
            )
            return prompt, request, continuation
        # A stateless agent (or a session that never recorded the previous attempt) gets
        # its prompt, its previous result and the message.
        previous = self._previous_output.get(spec.id, "(no output was recorded)")
        marker = self._markers()
        previous = fence(previous, source=f"previous attempt of node {spec.id}", marker=marker)
        prompt = (
            f"{prompt}\n\n---\n{untrusted_preface(marker)}\n"
            f"Your previous attempt returned:\n{previous}\n\n---\n"
            f"Message from the Host about that attempt:\n{continuation}"
        )
        return prompt, prompt, None

    async def _run_agent(self, job: _Job) -> AgentOutcome:
        """Wait for the instance and the slot (`queued`), call the agent (`running`); the slot
        is released as soon as the call returns."""
        capacity, handle = self._capacity, job.spec.instance
        if handle is None:
            self._queue_if(job.spec.id, capacity.semaphore.locked())
            async with capacity.semaphore:
                return await self._call_in_slot(job, [])
        self._queue_if(job.spec.id, capacity.instance_busy(handle))
        async with capacity.instance_lock(handle):
            loaded = await self._deps.store.load_instance(self.conversation_id, handle)
            history = loaded[1] if loaded is not None else []
            self._queue_if(job.spec.id, capacity.semaphore.locked())
            async with capacity.semaphore:
                outcome = await self._call_in_slot(job, history)
            # Saved before the instance is released: the next node of the handle loads it.
            await self._keep_session(job, history, outcome)
        return outcome

    def _queue_if(self, node_id: str, must_wait: bool) -> None:
        # Not awaited: `queued` matters only to what is shown (a restart treats it as
        # pending), and its commit rides along with the next batch instead of delaying the
        # node's turn for the slot.
        if must_wait and self._current(node_id).state == "pending":
            self._decide(node_id, "queued")

    async def _call_in_slot(self, job: _Job, history: list[Message]) -> AgentOutcome:
        node_id = job.spec.id
        await self._commit(node_id, "running", attempts=job.attempt, started_at=self._deps.clock())
        task = AgentTask(
            node_id=node_id,
            agent=job.entry,
            prompt=job.prompt,
            workspace=self._deps.workspace,
            history=list(history),
            continuation=job.continuation,
            on_progress=None,
            ask=self._asker(node_id),
            approve=self._approver(node_id),
            permit=self._permit(node_id),
        )
        return await self._call_backend(job.entry, task)

    async def _keep_session(self, job: _Job, history: list[Message], outcome: AgentOutcome) -> None:
        assert job.spec.instance is not None
        if len(outcome.history) > len(history):
            self._in_session.add(job.spec.id)
        else:
            self._in_session.discard(job.spec.id)
        if outcome.history:
            await self._deps.store.save_instance(
                self.conversation_id, job.spec.instance, job.entry.name, outcome.history
            )

    async def _settle(self, job: _Job, outcome: AgentOutcome) -> None:
        """Journal the attempt, judge it, then commit completed / exception / failed."""
        node_id, attempt = job.spec.id, job.attempt
        # Journaled before the judge reads them (synced with the next batch).
        self._journal.record("output", node_id, attempt, text=outcome.output)
        self._journal.record("transcript", node_id, attempt, items=outcome.transcript)
        verdict = await self._verdict(job.request, outcome)
        if outcome.output or not outcome.error:
            self._previous_output[node_id] = outcome.output or "(empty output)"
        else:
            self._previous_output[node_id] = f"(no output; the call failed: {outcome.error})"
        record = self.nodes[node_id]
        accounting: dict[str, Any] = {
            "model_calls": record.model_calls + outcome.model_calls,
            "input_tokens": record.input_tokens + outcome.usage.input_tokens,
            "output_tokens": record.output_tokens + outcome.usage.output_tokens,
            "judge_calls": record.judge_calls + verdict.calls,
            "judge_tokens": record.judge_tokens + verdict.tokens,
            "seconds": record.seconds + outcome.seconds,
            "verdict": verdict.as_dict(),
            "continuation": None,
        }
        if verdict.accomplished:
            await self._complete(job, outcome, verdict, accounting)
            return
        problem = outcome.error or (
            outcome.output[:300]
            if outcome.offline
            else f"{verdict.category}: {verdict.missing}".strip(": ")
        )
        # The attempt's records are on disk before its outcome is committed and announced.
        with contextlib.suppress(OSError):
            await self._journal_synced(node_id)
        if attempt < record.max_attempts and self._deps.host_reachable and not outcome.offline:
            await self._commit(
                node_id,
                "exception",
                output_path=None,
                error=problem,
                deadline=self._deps.clock() + self._deps.decision_seconds,
                **accounting,
            )
            # A snapshot at each decision point (SQLite is the live record).
            await self._write_manifest()
            report = self.exception_report(node_id)
            await self._deps.bus.publish(RunException(self, node_id, report))
            return
        await self._commit(
            node_id,
            "failed",
            output_path=None,
            error=problem,
            finished_at=self._deps.clock(),
            **accounting,
        )

    async def _complete(
        self, job: _Job, outcome: AgentOutcome, verdict: Verdict, accounting: dict[str, Any]
    ) -> None:
        node_id = job.spec.id
        output_path = self._outputs_dir / f"{node_id}.md"
        # On disk (with the journal synced) before the commit that points at it.
        self._journal.view(output_path, outcome.output)
        memory = self._memory_record(job.spec, outcome, verdict, output_path)
        self._journal.record("memory", node_id, job.attempt, text=memory)
        # The memory record follows asynchronously (paper Fig. 5a): it never delays successors.
        self._journal.later(self._memory_dir / f"{node_id}.md", memory)
        try:
            await self._journal_synced(node_id)
        except OSError as exc:
            # SQLite must not point at an output that is not on disk.
            await self._fail(node_id, f"internal error: the records could not be written: {exc}")
            return
        await self._commit(
            node_id,
            "completed",
            artifact=Artifact(node_id, outcome.output, output_path),
            output_path=output_path,
            error=None,
            finished_at=self._deps.clock(),
            **accounting,
        )

    async def _journal_synced(self, node_id: str) -> None:
        """Wait until this node's journal lines (and output file) are on disk: one write and
        one fsync for every node settling meanwhile (raises OSError when they failed)."""
        try:
            await self._journal.sync()
        except OSError:
            log.exception("run %s: the records of node %s could not be written", self.id, node_id)
            raise

    def _asker(self, node_id: str) -> Callable[[str], Awaitable[str]] | None:
        prompts = self._deps.prompts
        if prompts is None:
            return None
        return functools.partial(
            prompts.answer_for_worker,
            self.record.conversation,
            self.record.submitted_by,
            node_id=node_id,
        )

    def _permit(self, node_id: str) -> Permit | None:
        gates, prompts = self._deps.gates, self._deps.prompts
        if gates is None:
            return None
        # No prompts: nobody can be asked, so the gate is built unable to ask.
        ask = (
            None
            if prompts is None
            else functools.partial(
                prompts.ask_permission,
                self.record.conversation,
                self.record.submitted_by,
                node_id=node_id,
            )
        )
        return gates(self.record.conversation, self.record.submitted_by, ask)

    def _approver(self, node_id: str) -> Callable[[str], Awaitable[bool]] | None:
        prompts = self._deps.prompts
        if prompts is None:
            return None
        return functools.partial(
            prompts.approve_command,
            self.record.conversation,
            self.record.submitted_by,
            node_id=node_id,
        )

    async def _call_backend(self, entry: AgentEntry, task: AgentTask) -> AgentOutcome:
        started = time.monotonic()
        try:
            return await self._deps.backend(entry).run(task)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("backend %s raised on node %s: %s", entry.name, task.node_id, exc)
            return AgentOutcome(
                output="",
                transcript=[{"type": "error", "text": str(exc)}],
                usage=Usage(),
                model_calls=0,
                seconds=time.monotonic() - started,
                history=task.history,
                error=f"{type(exc).__name__}: {exc}",
            )

    async def _verdict(self, prompt: str, outcome: AgentOutcome) -> Verdict:
        if outcome.offline:
            return Verdict(
                accomplished=False,
                category="missing_credential",
                missing="a language model (ANTHROPIC_API_KEY)",
                evidence=outcome.output[:500],
            )
        transcript = "\n".join(json.dumps(t, default=str) for t in outcome.transcript)
        return await self._deps.judge.judge(
            prompt=prompt,
            output=outcome.output,
            transcript=transcript,
            error=outcome.error,
            truncated=outcome.truncated,
        )

    def _render(self, spec: NodeSpec, entry: AgentEntry) -> str:
        rendered = render_prompt(
            spec,
            artifacts=self._artifacts,
            workspace=self._deps.workspace,
            file_capable=entry.file_capable,
            memory_paths=self._memory_paths(spec.id) if entry.file_capable else (),
            marker=self._markers(),
            command=entry.runs_commands,
        )
        return rendered.text

    def _memory_paths(self, node_id: str) -> list[str]:
        """Eq. 32: the memory records of every transitive predecessor — earlier runs' nodes
        one path each, this run's as one line (its ancestors are all completed by now)."""
        ancestors = self.graph.ancestors.get(node_id, frozenset())
        inside = sorted(a for a in ancestors if a in self.nodes)
        lines = [
            str(self._deps.files.memory_beside(self._artifacts[a].output_path))
            for a in sorted(ancestors.difference(inside))
            if a in self._artifacts
        ]
        if inside:
            lines.append(RunFiles.memory_listing(self._memory_dir, inside))
        return lines

    def _memory_record(
        self, spec: NodeSpec, outcome: AgentOutcome, verdict: Verdict, output_path: Path
    ) -> str:
        marker = self._markers()
        excerpt = f"node {spec.id} output"
        return (
            f"# Memory record of node `{spec.id}` ({spec.agent})\n\n"
            f"Task summary: {spec.summary or spec.template[:200]}\n\n"
            f"Verdict: accomplished.\n\n"
            f"Output: {output_path}\n\n"
            f"{untrusted_preface(marker)}\n\n"
            f"Judge's evidence:\n{fence(verdict.evidence[:300], source='judge', marker=marker)}"
            f"\n\nExcerpt:\n{fence(outcome.output[:1500], source=excerpt, marker=marker)}\n"
        )

    def exception_report(self, node_id: str) -> str:
        """What the Host needs to decide: task, verdict, blocked dependents, ready calls."""
        node = self.nodes[node_id]
        spec = self.graph.node(node_id)
        verdict = node.verdict or {}
        blocked = sorted(self.graph.descendants(node_id) & self.nodes.keys())
        left = node.max_attempts - node.attempts
        marker = self._markers()
        deadline = time.strftime("%H:%M:%S UTC", time.gmtime(node.deadline or 0))
        calls = [
            json.dumps(
                {
                    "run_id": self.id,
                    "node_id": node_id,
                    "action": "continue",
                    "message": "<what to do differently>",
                }
            ),
            json.dumps({"run_id": self.id, "node_id": node_id, "action": "abandon"}),
            json.dumps(
                {
                    "run_id": self.id,
                    "node_id": node_id,
                    "action": "replan",
                    "graph": {"task_summary": "...", "nodes": ["..."]},
                }
            ),
        ]
        return "\n".join(
            [
                f"**Exception in run `{self.id}`**: node `{node_id}` ({spec.agent}) was judged "
                "not accomplished.",
                f"- Task: {spec.summary or spec.template[:300]}",
                f"- Category: {verdict.get('category') or 'other'}",
                f"- Blocked dependents: {', '.join(blocked) or 'none'}",
                f"- Attempts left: {left}; decide by {deadline} or the node fails.",
                *self._command_note(spec),
                # The judge quotes the agent's output, and errors carry stderr: fenced.
                untrusted_preface(marker),
                fence(
                    str(verdict.get("missing") or node.error or "unknown"),
                    source=f"judge: what node {node_id} is missing",
                    marker=marker,
                ),
                fence(
                    str(verdict.get("evidence", ""))[:500],
                    source=f"judge: evidence for node {node_id}",
                    marker=marker,
                ),
                "Resolve with `resolve_exception`, e.g.:",
                *[f"  `{c}`" for c in calls],
            ]
        )

    def _command_note(self, spec: NodeSpec) -> list[str]:
        """For a command node: what `continue` can and cannot change."""
        entry = self._deps.agent(spec.agent)
        if entry is None or not entry.runs_commands:
            return []
        return [
            "- This node's task is its command: `continue` runs the same command again (asked "
            "for approval again; your message is not added to it); to change the command, "
            "`replan`."
        ]

    # -- commits -----------------------------------------------------------------------

    async def _commit(
        self, node_id: str, state: NodeState, *, artifact: Artifact | None = None, **fields: Any
    ) -> None:
        """Decide a node's new state and wait until it is committed (and applied)."""
        self._decide(node_id, state, artifact=artifact, **fields)
        await self._writes.flushed()

    async def _fail(self, node_id: str, error: str) -> None:
        await self._commit(node_id, "failed", error=error, finished_at=self._deps.clock())

    def _decide(
        self, node_id: str, state: NodeState, *, artifact: Artifact | None = None, **fields: Any
    ) -> None:
        self._queue(dataclasses.replace(self._current(node_id), state=state, **fields))
        if artifact is not None:
            self._completing[node_id] = artifact
        if state == "failed" and not self._stopping:
            self._skip_below(node_id)

    def _queue(self, record: NodeRecord) -> None:
        self._decided[record.node_id] = record
        self._writes.add(record)

    def _skip_below(self, root: str) -> None:
        """A failed node skips its pending descendants (in the same commit); each pending
        node is visited once, through the children lists."""
        error = f"skipped: depends on `{root}`, which did not complete"
        now = self._deps.clock()
        stack = list(self._children[root])
        while stack:
            node_id = stack.pop()
            current = self._current(node_id)
            if current.state != "pending":
                continue
            self._queue(dataclasses.replace(current, state="skipped", error=error, finished_at=now))
            stack.extend(self._children[node_id])

    async def _write_batch(self, records: list[NodeRecord]) -> None:
        """One group commit: the newest record of each node in one statement, then applied."""
        latest = list({r.node_id: r for r in records}.values())
        try:
            await self._deps.store.commit_nodes(latest)
        except BaseException:
            # Not committed: these decisions are void (their waiters get the error).
            for record in latest:
                if self._decided.get(record.node_id) is record:
                    del self._decided[record.node_id]
                    self._completing.pop(record.node_id, None)
            raise
        self._apply(latest)

    def _apply(self, records: list[NodeRecord]) -> None:
        """Committed: the in-memory state follows, then successors are submitted."""
        for record in records:
            node_id = record.node_id
            previous = self.nodes[node_id].state
            self.nodes[node_id] = record
            if self._decided.get(node_id) is record:
                del self._decided[node_id]
            if record.state == "exception":
                self._suspended[node_id] = record.deadline
            else:
                self._suspended.pop(node_id, None)
            if record.state == "completed" and previous != "completed":
                artifact = self._completing.pop(node_id, None)
                if artifact is not None:
                    self._artifacts[node_id] = artifact
                for child in self._children[node_id]:
                    self._waiting[child] -= 1
                    self._submit_if_ready(child)
            elif record.state == "pending":
                self._submit_if_ready(node_id)
        self.changed.set()
        self._wake.set()
        self._dirty = True
        self._announce.set()

    # -- announcements -----------------------------------------------------------------

    async def _announcements(self) -> None:
        """Publish progress after commits; changes made during a publish share the next."""
        while True:
            await self._announce.wait()
            self._announce.clear()
            if self._halting:
                return
            if self._dirty:
                self._dirty = False
                await self._deps.bus.publish(RunProgress(self))
            if self._quiet and not self._dirty:
                return

    async def _stop_announcements(self) -> None:
        """Publish what is still owed (not after a halt), then end the announcer."""
        task = self._announcer
        if task is None:
            return
        self._quiet = True
        self._announce.set()
        if self._halting:
            task.cancel()
        await asyncio.wait({task})

    # -- stopping and finishing --------------------------------------------------------

    async def _stop_tasks(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    async def _cancel_all(self, reason: str, *, superseded: bool = False) -> None:
        # Stays set: from here on nothing starts, and only this call finishes the run (the
        # scheduler loop could otherwise finish it concurrently with the wrong final state).
        self._stopping = True
        label = "superseded by a replan" if superseded else reason
        await self._stop_tasks()
        await self._writes.drain()
        now = self._deps.clock()
        for node in list(self.nodes.values()):
            state: NodeState
            if node.state in {"running", "exception"}:
                state = "failed" if superseded and node.state == "exception" else "cancelled"
                self._queue(
                    dataclasses.replace(
                        node, state=state, error=label, finished_at=now, deadline=None
                    )
                )
            elif node.state in NOT_STARTED_STATES:
                self._queue(
                    dataclasses.replace(node, state="skipped", error=label, finished_at=now)
                )
        await self._writes.flushed()
        await self._finish(state="superseded" if superseded else "cancelled")

    async def _finish(self, state: RunState | None = None) -> None:
        if self.done.is_set() or self._finishing:
            return
        self._finishing = True
        await self._writes.drain()
        states = {n.state for n in self.nodes.values()}
        final: RunState = state or ("completed" if states == {"completed"} else "failed")
        await self._deps.store.set_run_state(self.id, final, finished=True)
        self.record = dataclasses.replace(self.record, state=final)
        await self._stop_announcements()
        await self._write_manifest()
        # Memory records still owed are written before the run counts as done.
        await self._journal.close()
        self.done.set()
        self.changed.set()
        await self._deps.bus.publish(RunFinished(self))

    def _manifest(self) -> dict[str, Any]:
        return {
            "run_id": self.id,
            "conversation": self.conversation_id,
            "state": self.record.state,
            "task_summary": self.record.task_summary,
            "replaces_run": self.record.replaces_run,
            "journal": str(self._journal.path),
            "nodes": {
                n.node_id: {
                    "agent": n.agent,
                    "state": n.state,
                    "attempts": n.attempts,
                    "instance": n.instance,
                    "deps": list(n.deps),
                    "output_path": str(n.output_path) if n.output_path else None,
                    "error": n.error,
                    "verdict": n.verdict,
                    "model_calls": n.model_calls,
                    "input_tokens": n.input_tokens,
                    "output_tokens": n.output_tokens,
                    "judge_calls": n.judge_calls,
                    "judge_tokens": n.judge_tokens,
                    "seconds": round(n.seconds, 3),
                }
                for n in self.nodes.values()
            },
        }

    async def _write_manifest(self) -> None:
        # Built here (the nodes change on this loop), written with fsync off it.
        manifest = self._manifest()
        try:
            await asyncio.to_thread(self._deps.files.write_manifest, self.id, manifest)
        except OSError:
            log.exception("writing the manifest of run %s failed", self.id)
