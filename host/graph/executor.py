"""Executes one admitted graph run: dependency-ready scheduling (paper Eq. 31), judging,
suspension on exceptions, skipping after failures, cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agents.backends.base import AgentBackend, AgentOutcome, AgentTask
from agents.models.types import Message, Usage
from agents.registry import AgentEntry
from core.ids import ConversationRef
from host.events import EventBus, RunException, RunFinished, RunProgress
from host.graph.admission import AdmittedGraph
from host.graph.judge import CompletionJudge, Verdict
from host.graph.model import NodeSpec, NodeState
from host.graph.records import RunFiles
from host.graph.render import (
    Artifact,
    RenderError,
    fence,
    new_marker,
    render_prompt,
    untrusted_preface,
)
from host.graph.run_store import NodeRecord, RunRecord, RunStore
from host.keyed import KeyedLocks

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


@dataclass
class ConversationCapacity:
    """Shared per conversation: one semaphore for graphs and delegations, instance locks."""

    semaphore: asyncio.Semaphore
    instance_locks: KeyedLocks = field(default_factory=KeyedLocks)

    def instance_lock(self, handle: str) -> AbstractAsyncContextManager[None]:
        """Held while a node of this handle runs, so nodes sharing it run one after another."""
        return self.instance_locks.hold(handle)


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
        self._external = dict(external)
        self._artifacts: dict[str, Artifact] = {}
        self._submitted: set[str] = set()
        self._unsettled: set[str] = set()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._previous_output: dict[str, str] = {}
        # Nodes whose last attempt was recorded in their instance's session (a continuation
        # can then send the Host's message alone).
        self._in_session: set[str] = set()
        self._wake = asyncio.Event()
        self.changed = asyncio.Event()
        self.done = asyncio.Event()
        # Set once the run is being cancelled: nothing new starts and the canceller finishes it.
        self._stopping = False
        self._stop_label = "cancelled"
        self._finishing = False
        # Set by `halt()` at shutdown: leave the records as they are (running) so the next
        # start marks them interrupted and reports it, exactly as after a crash.
        self._halting = False

    @property
    def id(self) -> str:
        """The run id."""
        return self.record.id

    @property
    def conversation_id(self) -> str:
        """The conversation the run belongs to."""
        return self.record.conversation.id

    def state(self, node_id: str) -> NodeState:
        """Current state of one node of this run."""
        return self.nodes[node_id].state

    def ready(self) -> list[str]:
        """Eq. 31: pending, not submitted, every in-graph predecessor completed and settled."""
        if self._stopping or self._halting:
            return []
        ready = []
        for node_id in self.graph.order:
            node = self.nodes[node_id]
            if node.state != "pending" or node_id in self._submitted:
                continue
            in_graph = [d for d in node.deps if d in self.nodes]
            if all(
                self.nodes[d].state == "completed" and d not in self._unsettled for d in in_graph
            ):
                ready.append(node_id)
        return ready

    def output_text(self, node_id: str) -> str:
        """The recorded output of a completed node of this run."""
        artifact = self._artifacts.get(node_id)
        return artifact.output if artifact is not None else ""

    async def run(self) -> None:
        """Schedule until every node settled (suspended nodes wait for a decision)."""
        try:
            while not self._halting:
                await self._expire_decisions()
                for node_id in self.ready():
                    self._submitted.add(node_id)
                    self._tasks[node_id] = asyncio.create_task(
                        self._attempt(node_id), name=f"node:{self.id}:{node_id}"
                    )
                suspended = [n for n in self.nodes.values() if n.state == "exception"]
                if not self._tasks and not suspended:
                    break
                self._wake.clear()
                timeout = None
                if suspended:
                    nearest = min(n.deadline or 0.0 for n in suspended)
                    timeout = max(0.0, nearest - self._deps.clock())
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
        except asyncio.CancelledError:
            if not self._halting:
                await asyncio.shield(self._cancel_all("cancelled"))
            raise
        finally:
            if not self.done.is_set() and not self._stopping and not self._halting:
                await asyncio.shield(self._finish())

    async def halt(self) -> None:
        """Shutdown: stop executing without rewriting records (the restart reports them)."""
        self._halting = True
        self._wake.set()
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    async def cancel(self, *, reason: str = "cancelled", superseded: bool = False) -> None:
        """Stop the run: running and suspended nodes cancelled, pending ones skipped."""
        await self._cancel_all(reason, superseded=superseded)
        self._wake.set()

    async def resolve_continue(self, node_id: str, message: str) -> None:
        """Return a suspended node to pending with the Host's message attached."""
        await self._set(node_id, "pending", continuation=message, deadline=None, error=None)
        self._wake.set()

    async def resolve_abandon(self, node_id: str) -> None:
        """Fail a suspended node and skip its dependents."""
        await self._set(
            node_id,
            "failed",
            error="abandoned by the Host",
            deadline=None,
            finished_at=self._deps.clock(),
        )
        await self._skip_dependents(node_id)
        self._wake.set()

    # -- internals ---------------------------------------------------------------------

    async def _attempt(self, node_id: str) -> None:
        spec = self.graph.node(node_id)
        entry = self._deps.agent(spec.agent)
        report: str | None = None
        try:
            lock = (
                self._capacity.instance_lock(spec.instance)
                if spec.instance
                else contextlib.nullcontext()
            )
            async with lock, self._capacity.semaphore:
                record = self.nodes[node_id]
                if entry is None or not entry.enabled:
                    await self._fail(node_id, f"agent `{spec.agent}` is no longer available")
                else:
                    report = await self._execute(spec, record, entry)
            # Settled, slot and instance released: successors may start right away, before
            # the (possibly slow) announcements below.
            self._wake.set()
            if report is not None:
                await self._deps.bus.publish(RunException(self, node_id, report))
            await self._deps.bus.publish(RunProgress(self))
        except asyncio.CancelledError:
            # Only a started node is cancelled; one still queued for a slot stays pending and
            # is skipped by `_cancel_all` (paper §3.2: stopping skips pending nodes).
            if not self._halting and self.nodes[node_id].state == "running":
                await asyncio.shield(
                    self._set(
                        node_id,
                        "cancelled",
                        error=self._stop_label,
                        finished_at=self._deps.clock(),
                    )
                )
            raise
        except Exception as exc:
            log.exception("node %s of run %s crashed", node_id, self.id)
            await self._fail(node_id, f"internal error: {type(exc).__name__}: {exc}")
        finally:
            self._submitted.discard(node_id)
            self._unsettled.discard(node_id)
            self._tasks.pop(node_id, None)
            self._wake.set()

    async def _execute(self, spec: NodeSpec, record: NodeRecord, entry: AgentEntry) -> str | None:
        """One attempt; returns the exception report when the node was suspended."""
        node_id = spec.id
        attempt = record.attempts + 1
        started = self._deps.clock()
        await self._set(node_id, "running", attempts=attempt, started_at=started)
        await self._deps.bus.publish(RunProgress(self))
        try:
            prompt = self._render(spec, entry)
        except RenderError as exc:
            await self._fail(node_id, f"the prompt could not be rendered: {exc}")
            return None
        history: list[Message] = []
        if spec.instance:
            loaded = await self._deps.store.load_instance(self.conversation_id, spec.instance)
            history = loaded[1] if loaded is not None else []
        continuation = record.continuation
        # What this attempt asks for, as recorded in prompt.md and read by the judge.
        request = prompt
        if continuation is not None:
            if entry.stateful and spec.instance and node_id in self._in_session:
                # The session holds the previous attempt: the message alone continues it.
                request = (
                    f"{prompt}\n\n---\nMessage from the Host (sent as a continuation of the "
                    f"session):\n{continuation}"
                )
            else:
                # A stateless agent (or a session that never recorded the previous attempt)
                # gets its prompt, its previous result and the message.
                previous = self._previous_output.get(node_id, "(no output was recorded)")
                marker = new_marker()
                previous = fence(
                    previous, source=f"previous attempt of node {node_id}", marker=marker
                )
                prompt = (
                    f"{prompt}\n\n---\n{untrusted_preface(marker)}\n"
                    f"Your previous attempt returned:\n{previous}\n\n---\n"
                    f"Message from the Host about that attempt:\n{continuation}"
                )
                request = prompt
                continuation = None
        files = self._deps.files
        # File writes fsync: off the event loop, so other conversations never stall on them.
        await asyncio.to_thread(files.write_prompt, self.id, node_id, attempt, request)
        task = AgentTask(
            node_id=node_id,
            agent=entry,
            prompt=prompt,
            workspace=self._deps.workspace,
            history=list(history),
            continuation=continuation,
            on_progress=None,
            ask=self._asker(node_id),
            approve=self._approver(node_id),
        )
        outcome = await self._call_backend(entry, task)
        output_path = await asyncio.to_thread(
            files.write_output, self.id, node_id, attempt, outcome.output
        )
        await asyncio.to_thread(
            files.write_transcript, self.id, node_id, attempt, outcome.transcript
        )
        if spec.instance:
            if len(outcome.history) > len(history):
                self._in_session.add(node_id)
            else:
                self._in_session.discard(node_id)
            if outcome.history:
                await self._deps.store.save_instance(
                    self.conversation_id, spec.instance, entry.name, outcome.history
                )
        self._unsettled.add(node_id)
        verdict = await self._verdict(request, outcome)
        if outcome.output or not outcome.error:
            self._previous_output[node_id] = outcome.output or "(empty output)"
        else:
            self._previous_output[node_id] = f"(no output; the call failed: {outcome.error})"
        accounting = {
            "model_calls": record.model_calls + outcome.model_calls,
            "input_tokens": record.input_tokens + outcome.usage.input_tokens,
            "output_tokens": record.output_tokens + outcome.usage.output_tokens,
            "judge_calls": record.judge_calls + verdict.calls,
            "judge_tokens": record.judge_tokens + verdict.tokens,
            "seconds": record.seconds + outcome.seconds,
            "verdict": verdict.as_dict(),
            "continuation": None,
        }
        report: str | None = None
        if verdict.accomplished:
            await self._set(
                node_id,
                "completed",
                output_path=output_path,
                error=None,
                finished_at=self._deps.clock(),
                **accounting,
            )
            self._artifacts[node_id] = Artifact(node_id, outcome.output, output_path)
            self._write_memory(spec, outcome, verdict, output_path)
        else:
            problem = outcome.error or (
                outcome.output[:300]
                if outcome.offline
                else f"{verdict.category}: {verdict.missing}".strip(": ")
            )
            can_retry = (
                attempt < record.max_attempts and self._deps.host_reachable and not outcome.offline
            )
            if can_retry:
                deadline = self._deps.clock() + self._deps.decision_seconds
                await self._set(
                    node_id,
                    "exception",
                    output_path=None,
                    error=problem,
                    deadline=deadline,
                    **accounting,
                )
                report = self.exception_report(node_id)
            else:
                await self._set(
                    node_id,
                    "failed",
                    output_path=None,
                    error=problem,
                    finished_at=self._deps.clock(),
                    **accounting,
                )
                await self._skip_dependents(node_id)
        self._unsettled.discard(node_id)
        return report

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
        artifacts = {**self._external, **self._artifacts}
        memory_paths = [
            self._deps.files.memory_path(self._run_of(a), a)
            for a in sorted(self.graph.ancestors.get(spec.id, frozenset()))
        ]
        rendered = render_prompt(
            spec,
            artifacts=artifacts,
            workspace=self._deps.workspace,
            file_capable=entry.file_capable,
            memory_paths=[p for p in memory_paths if p.exists()],
        )
        return rendered.text

    def _run_of(self, node_id: str) -> str:
        external = self._external.get(node_id)
        if external is not None:
            # runs/<run>/nodes/<node>/output.md → <run>
            return external.output_path.parent.parent.parent.name
        return self.id

    def _write_memory(
        self, spec: NodeSpec, outcome: AgentOutcome, verdict: Verdict, output_path: Path
    ) -> None:
        marker = new_marker()
        excerpt = f"node {spec.id} output"
        text = (
            f"# Memory record of node `{spec.id}` ({spec.agent})\n\n"
            f"Task summary: {spec.summary or spec.template[:200]}\n\n"
            f"Verdict: accomplished.\n\n"
            f"Output: {output_path}\n\n"
            f"{untrusted_preface(marker)}\n\n"
            f"Judge's evidence:\n{fence(verdict.evidence[:300], source='judge', marker=marker)}"
            f"\n\nExcerpt:\n{fence(outcome.output[:1500], source=excerpt, marker=marker)}\n"
        )
        try:
            self._deps.files.write_memory(self.id, spec.id, text)
        except OSError:
            log.exception("writing the memory record of %s failed", spec.id)

    def exception_report(self, node_id: str) -> str:
        """What the Host needs to decide: task, verdict, blocked dependents, ready calls."""
        node = self.nodes[node_id]
        spec = self.graph.node(node_id)
        verdict = node.verdict or {}
        blocked = sorted(self._descendants(node_id))
        left = node.max_attempts - node.attempts
        marker = new_marker()
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

    def _descendants(self, node_id: str) -> frozenset[str]:
        # Admission computed every node's ancestry once (networkx); no graph walk here.
        return self.graph.descendants(node_id) & self.nodes.keys()

    async def _skip_dependents(self, node_id: str) -> None:
        skipped = [d for d in self._descendants(node_id) if self.nodes[d].state == "pending"]
        if skipped:
            now = self._deps.clock()
            error = f"skipped: depends on `{node_id}`, which did not complete"
            await self._deps.store.update_nodes(
                self.conversation_id, skipped, state="skipped", error=error, finished_at=now
            )
            for d in skipped:
                self.nodes[d] = _replace(self.nodes[d], state="skipped", error=error)
            self.changed.set()

    async def _expire_decisions(self) -> None:
        if self._stopping:
            return
        now = self._deps.clock()
        for node_id in list(self.nodes):
            # Read afresh each time: a decision may have arrived during the awaits below.
            node = self.nodes[node_id]
            if node.state == "exception" and node.deadline is not None and node.deadline <= now:
                await self._set(
                    node.node_id,
                    "failed",
                    error=f"no decision by the deadline ({node.error})",
                    deadline=None,
                    finished_at=now,
                )
                await self._skip_dependents(node.node_id)
                await self._deps.bus.publish(RunProgress(self))

    async def _fail(self, node_id: str, error: str) -> None:
        await self._set(node_id, "failed", error=error, finished_at=self._deps.clock())
        await self._skip_dependents(node_id)

    async def _cancel_all(self, reason: str, *, superseded: bool = False) -> None:
        if self.done.is_set():
            return
        # Stays set: from here on nothing starts, and only this call finishes the run (the
        # scheduler loop could otherwise finish it concurrently with the wrong final state).
        self._stopping = True
        label = "superseded by a replan" if superseded else reason
        self._stop_label = label
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        now = self._deps.clock()
        for node_id in list(self.nodes):
            node = self.nodes[node_id]
            if node.state in {"running", "exception"}:
                state: NodeState = (
                    "failed" if superseded and node.state == "exception" else "cancelled"
                )
                await self._set(node.node_id, state, error=label, finished_at=now, deadline=None)
            elif node.state == "pending":
                await self._set(node.node_id, "skipped", error=label, finished_at=now)
        await self._finish(state="superseded" if superseded else "cancelled")

    async def _finish(self, state: str | None = None) -> None:
        if self.done.is_set() or self._finishing:
            return
        self._finishing = True
        states = {n.state for n in self.nodes.values()}
        final = state or ("completed" if states == {"completed"} else "failed")
        await self._deps.store.set_run_state(self.id, final, finished=True)  # type: ignore[arg-type]
        self.record = _replace_run(self.record, final)
        await asyncio.to_thread(self._write_manifest)
        self.done.set()
        self.changed.set()
        await self._deps.bus.publish(RunFinished(self))

    def _write_manifest(self) -> None:
        manifest = {
            "run_id": self.id,
            "conversation": self.conversation_id,
            "state": self.record.state,
            "task_summary": self.record.task_summary,
            "replaces_run": self.record.replaces_run,
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
        try:
            self._deps.files.write_manifest(self.id, manifest)
        except OSError:
            log.exception("writing the manifest of run %s failed", self.id)

    async def _set(self, node_id: str, state: NodeState, **fields: object) -> None:
        # Committed to SQLite first; only then does the in-memory state (and any announcement)
        # change.
        await self._deps.store.update_node(self.conversation_id, node_id, state=state, **fields)
        self.nodes[node_id] = _replace(self.nodes[node_id], state=state, **fields)
        self.changed.set()
        # The manifest is a snapshot at decision points and at the end (SQLite is the live
        # record): rewriting it on every change made large runs quadratic (bench/).
        if state == "exception":
            await asyncio.to_thread(self._write_manifest)


def _replace(node: NodeRecord, **fields: object) -> NodeRecord:
    known = {k: v for k, v in fields.items() if k in NodeRecord.__dataclass_fields__}
    if "output_path" in known and isinstance(known["output_path"], str):
        known["output_path"] = Path(known["output_path"])
    from dataclasses import replace

    return replace(node, **known)  # type: ignore[arg-type]


def _replace_run(run: RunRecord, state: str) -> RunRecord:
    from dataclasses import replace

    return replace(run, state=state)  # type: ignore[arg-type]
