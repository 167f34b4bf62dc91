"""Running one attempt of one node: render its prompt, wait for its instance and the
conversation's slot, call the agent, then hand the outcome to the settler."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from agents.backends.base import AgentOutcome, AgentTask, NodeToolset, Permit
from agents.models.metered import ModelCall
from agents.models.types import Message, Usage
from agents.registry import AgentEntry
from core.call_scope import call_scope, current_scope
from core.fence import fence, untrusted_preface
from host.graph.admission import AdmittedGraph
from host.graph.executor.commits import NodeBook
from host.graph.executor.deps import DispatchAids, RunDeps
from host.graph.executor.journal import RunWriter
from host.graph.executor.scheduling import ConversationCapacity
from host.graph.executor.settle import Job, Settler
from host.graph.executor.shelf import RecordShelf
from host.graph.model import NodeSpec
from host.graph.render import RenderError, render_prompt
from host.graph.run_store import NodeRecord, RunRecord

log = logging.getLogger(__name__)


class WorkerReach:
    """How one run's nodes reach a person: questions, command approvals, permission gates
    (each None when nobody can be asked).

    A run for a scheduled task is unattended: its nodes ask no questions and its permission
    gates cannot ask (they deny); its commands are approved with the task, and any other
    command posts an approval prompt and waits for it instead of running."""

    def __init__(self, run: RunRecord, aids: DispatchAids) -> None:
        self._conv = run.conversation
        self._requester = run.submitted_by
        self._for_task = run.for_task
        self._prompts = aids.prompts
        self._gates = aids.gates

    def asker(self, node_id: str) -> Callable[[str], Awaitable[str]] | None:
        """Answers to the node's clarifying questions."""
        prompts = self._prompts
        if prompts is None or self._for_task is not None:
            return None
        return functools.partial(
            prompts.answer_for_worker, self._conv, self._requester, node_id=node_id
        )

    def approver(self, node_id: str) -> Callable[[str], Awaitable[bool]] | None:
        """Approvals of the node's commands."""
        prompts = self._prompts
        if prompts is None:
            return None
        if self._for_task is not None:
            return functools.partial(
                prompts.approve_command,
                self._conv,
                self._requester,
                node_id=node_id,
                for_task=self._for_task,
            )
        return functools.partial(
            prompts.approve_command, self._conv, self._requester, node_id=node_id
        )

    def permit(self, node_id: str) -> Permit | None:
        """The permission gate of the node's tool calls."""
        gates, prompts = self._gates, self._prompts
        if gates is None:
            return None
        # Nobody to ask (no prompts, or an unattended run): the gate is built unable to ask.
        ask = (
            None
            if prompts is None or self._for_task is not None
            else functools.partial(
                prompts.ask_permission, self._conv, self._requester, node_id=node_id
            )
        )
        return gates(self._conv, self._requester, ask)


class Attempts:
    """Runs node attempts of one run (one task each, started by the scheduler)."""

    def __init__(
        self,
        run: RunRecord,
        graph: AdmittedGraph,
        book: NodeBook,
        writer: RunWriter,
        deps: RunDeps,
        capacity: ConversationCapacity,
        settler: Settler,
        *,
        noted: Callable[[str, str], None] | None = None,
    ) -> None:
        self._noted = noted
        self._run = run
        self._graph = graph
        self._book = book
        self._writer = writer
        self._deps = deps
        self._capacity = capacity
        self._settler = settler
        self._reach = WorkerReach(run, deps.aids)
        self._previous_output: dict[str, str] = {}
        # Nodes whose last attempt was recorded in their instance's session (a continuation
        # can then send the Host's message alone).
        self._in_session: set[str] = set()

    async def run(self, node_id: str) -> None:
        """One attempt of `node_id`, from its prompt to its committed outcome; its model calls
        are counted against the run's owner."""
        run = self._run
        with call_scope(
            person=run.submitted_by, conversation=run.conversation, run=run.id, node=node_id
        ):
            await self._attempt(node_id)

    async def _attempt(self, node_id: str) -> None:
        try:
            refusal = await self._over_budget()
            if refusal is not None:
                # Running nodes finish; no new one starts once the budget is spent.
                await self._book.fail(node_id, f"not started: {refusal}")
                return
            job = await self._prepare(node_id)
            if isinstance(job, str):
                await self._book.fail(node_id, job)
                return
            outcome = await self._run_agent(job)
            await self._count_usage(job.entry, outcome)
            self._remember(node_id, outcome)
            await self._settler.settle(job, outcome)
        except asyncio.CancelledError:
            # The canceller (or the restart, after a halt) records what this node became.
            raise
        except Exception as exc:
            log.exception("node %s of run %s crashed", node_id, self._run.id)
            await self._book.fail(node_id, f"internal error: {type(exc).__name__}: {exc}")

    async def _count_usage(self, entry: AgentEntry, outcome: AgentOutcome) -> None:
        """An agent that calls its model itself (an API or ACP agent) reports its usage with
        its outcome: recorded here. An in-process agent's calls were recorded as made."""
        recorder = self._deps.aids.usage
        if recorder is None or entry.backend == "inproc" or not outcome.usage.total_tokens:
            return
        model = (
            f"{entry.api_style}:{entry.model}"
            if entry.backend == "api" and entry.model
            else f"{entry.backend}:{entry.name}"
        )
        call = ModelCall(f"agent:{entry.name}", model, current_scope(), outcome.usage, time.time())
        try:
            await recorder.record(call)
        except Exception:
            log.exception("recording the usage of node agent %s failed", entry.name)

    async def _over_budget(self) -> str | None:
        spend = self._deps.aids.spend
        if spend is None:
            return None
        return await spend.refusal(self._run.submitted_by, self._run.conversation)

    async def _prepare(self, node_id: str) -> Job | str:
        """The attempt's prompt (rendered before the node waits for a slot), or why the node
        cannot run."""
        spec = self._graph.node(node_id)
        entry = self._deps.agents.agent(spec.agent)
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
        record = self._book.nodes[node_id]
        attempt = record.attempts + 1
        prompt, request, continuation = self._continued(spec, entry, record, prompt)
        # Journaled before dispatch; synced with the next batch.
        self._writer.prompt(node_id, attempt, request)
        return Job(spec, entry, attempt, prompt, request, continuation)

    def _render(self, spec: NodeSpec, entry: AgentEntry) -> str:
        rendered = render_prompt(
            spec,
            artifacts=self._book.artifacts,
            workspace=self._deps.agents.workspace,
            file_capable=entry.file_capable,
            memory_paths=self._memory_paths(spec.id) if entry.file_capable else (),
            marker=self._writer.marker(),
            command=entry.runs_commands,
            placeholders=self._graph.placeholders.get(spec.id),
        )
        return rendered.text

    def _memory_paths(self, node_id: str) -> list[str]:
        """Eq. 32: the memory records of every transitive predecessor (this run's are all
        completed by now)."""
        upstream = self._graph.ancestors.upstream(node_id)
        return self._writer.memory_paths(upstream.outside, upstream.inside(), self._book.artifacts)

    async def _prefetched(self, spec: NodeSpec, prompt: str) -> str:
        """The task followed by the dispatch context; a failing source adds nothing."""
        prefetch = self._deps.aids.prefetch
        if prefetch is None:
            return prompt
        try:
            block = await prefetch.for_node(
                self._run, spec.agent, prompt, node_id=spec.id, skills=spec.skills
            )
        except Exception:
            log.exception(
                "prefetch for node %s of run %s failed; dispatching without", spec.id, self._run.id
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
        marker = self._writer.marker()
        previous = fence(previous, source=f"previous attempt of node {spec.id}", marker=marker)
        prompt = (
            f"{prompt}\n\n---\n{untrusted_preface(marker)}\n"
            f"Your previous attempt returned:\n{previous}\n\n---\n"
            f"Message from the Host about that attempt:\n{continuation}"
        )
        return prompt, prompt, None

    def _remember(self, node_id: str, outcome: AgentOutcome) -> None:
        """What a continuation of this attempt shows as its previous result (read only by
        the node's next attempt, which starts after this one settled)."""
        if outcome.output or not outcome.error:
            self._previous_output[node_id] = outcome.output or "(empty output)"
        else:
            self._previous_output[node_id] = f"(no output; the call failed: {outcome.error})"

    async def _run_agent(self, job: Job) -> AgentOutcome:
        """Wait for the instance and the slot (`queued`), call the agent (`running`); the slot
        is released as soon as the call returns."""
        capacity, handle = self._capacity, job.spec.instance
        if handle is None:
            self._queue_if(job.spec.id, capacity.semaphore.locked())
            async with capacity.semaphore:
                return await self._call_in_slot(job, [])
        self._queue_if(job.spec.id, capacity.instance_busy(handle))
        async with capacity.instance_lock(handle):
            loaded = await self._deps.store.load_instance(self._run.conversation.id, handle)
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
        if must_wait and self._book.current(node_id).state == "pending":
            self._book.defer(node_id, "queued")

    async def _call_in_slot(self, job: Job, history: list[Message]) -> AgentOutcome:
        node_id = job.spec.id
        clock = self._deps.policy.clock
        # Written ahead of the agent; the `running` state rides with the next commit.
        self._writer.started(node_id, job.attempt)
        self._book.defer(node_id, "running", attempts=job.attempt, started_at=clock())
        # Only a file-capable agent's prompt names records by path (a command names none).
        shelf = self._shelf(node_id) if job.entry.file_capable else None
        readable: tuple[Path, ...] = ()
        if shelf is not None and job.entry.backend == "cli":
            # A CLI agent, started per task in the sandbox, reads the records from disk: the
            # view files owed are written first and their folders shown to it.
            await self._writer.write_views()
            readable = shelf.folders()
        permit = self._reach.permit(node_id)
        async with self._toolset(job, permit) as granted:
            task = AgentTask(
                node_id=node_id,
                agent=job.entry,
                prompt=job.prompt,
                workspace=self._deps.agents.workspace,
                history=list(history),
                continuation=job.continuation,
                on_progress=self._progress(node_id),
                ask=self._reach.asker(node_id),
                approve=self._reach.approver(node_id),
                permit=permit,
                records=shelf,
                readable=readable,
                granted=granted,
            )
            return await self._call_backend(job.entry, task)

    def _toolset(
        self, job: Job, permit: Permit | None
    ) -> contextlib.AbstractAsyncContextManager[NodeToolset]:
        """The team's tools granted to this attempt (none when no tool servers exist)."""
        tools = self._deps.aids.tools
        if tools is None:
            return contextlib.nullcontext(NodeToolset())
        return tools.open(self._run, job.entry, job.spec.mcp, permit)

    def _shelf(self, node_id: str) -> RecordShelf:
        """The records the node's prompt names by path, for its agent to read."""
        return RecordShelf(
            self._graph.ancestors.upstream(node_id),
            self._book.artifacts,
            files=self._writer.files,
            in_run=self._writer.memory_text,
        )

    def _progress(self, node_id: str) -> Callable[[str], Awaitable[None]] | None:
        """What the node's agent reports while it works, for the run's status message."""
        noted = self._noted
        if noted is None:
            return None

        async def progress(note: str) -> None:
            noted(node_id, note)

        return progress

    async def _call_backend(self, entry: AgentEntry, task: AgentTask) -> AgentOutcome:
        started = time.monotonic()
        try:
            return await self._deps.agents.backend(entry).run(task)
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

    async def _keep_session(self, job: Job, history: list[Message], outcome: AgentOutcome) -> None:
        assert job.spec.instance is not None
        if len(outcome.history) > len(history):
            self._in_session.add(job.spec.id)
        else:
            self._in_session.discard(job.spec.id)
        if outcome.history:
            await self._deps.store.save_instance(
                self._run.conversation.id, job.spec.instance, job.entry.name, outcome.history
            )
