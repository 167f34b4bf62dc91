"""`GraphRun`: one admitted graph run, as the rest of the host sees it (the façade over the
ready set, scheduler, attempts, settler, commits, journal and announcer of the run)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping

from host.graph.admission import AdmittedGraph
from host.graph.executor.announcements import Announcer
from host.graph.executor.attempts import Attempts
from host.graph.executor.commits import NodeBook
from host.graph.executor.deps import RunDeps
from host.graph.executor.exception_report import exception_report
from host.graph.executor.journal import RunWriter
from host.graph.executor.ready import ReadySet, RunFlags
from host.graph.executor.scheduling import ConversationCapacity, Scheduler
from host.graph.executor.settle import Settler
from host.graph.model import NOT_STARTED_STATES, NodeState
from host.graph.render import Artifact
from host.graph.run_store import NodeRecord, RunRecord, RunState
from host.runtime.run_snapshot import RunSnapshot


class GraphRun:
    """One run: scheduled until every node settled. States live here and in SQLite; SQLite
    is written first."""

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
        self._deps = deps
        self._flags = RunFlags()
        ready = ReadySet(nodes, graph.order)
        clock = deps.policy.clock
        self._writer = RunWriter(run.id, deps.files, deps.store)
        self._book = NodeBook(
            run.id,
            nodes,
            external,
            store=deps.store,
            ready=ready,
            flags=self._flags,
            clock=clock,
            journal=self._writer,
        )
        settler = Settler(
            self._book, self._writer, deps.judge, deps.policy, suspended=self._suspended
        )
        self._announcer = Announcer(deps.bus, lambda: self.record, nodes, self._flags)
        attempts = Attempts(
            run,
            graph,
            self._book,
            self._writer,
            deps,
            capacity,
            settler,
            noted=self._announcer.noted,
        )
        self._scheduler = Scheduler(
            run.id, self._book, ready, self._flags, attempt=attempts.run, clock=clock
        )
        self._book.listen(self._scheduler)
        self._book.listen(self._announcer)
        self.done = asyncio.Event()
        # Set once the end is recorded everywhere: view files written and every RunFinished
        # subscriber run (the round deposited in group memory, the report turn queued).
        self.ended = asyncio.Event()
        self._canceller: asyncio.Task[None] | None = None
        self._finishing = False

    @property
    def id(self) -> str:
        """The run id."""
        return self.record.id

    @property
    def conversation_id(self) -> str:
        """The conversation the run belongs to."""
        return self.record.conversation.id

    @property
    def nodes(self) -> Mapping[str, NodeRecord]:
        """Each node's committed record."""
        return self._book.nodes

    @property
    def changed(self) -> asyncio.Event:
        """Set after every applied commit and when the run ends (waiters clear it)."""
        return self._book.changed

    def state(self, node_id: str) -> NodeState:
        """Current (committed) state of one node of this run."""
        return self._book.nodes[node_id].state

    def suspended(self) -> list[str]:
        """Nodes waiting for a Host decision, in the order they were suspended."""
        return list(self._book.suspended)

    def output_text(self, node_id: str) -> str:
        """The recorded output of a completed node of this run."""
        artifact = self._book.artifacts.get(node_id)
        return artifact.output if artifact is not None else ""

    def snapshot(self) -> RunSnapshot:
        """The run as committed now, frozen (what its events carry)."""
        return self._announcer.snapshot()

    def exception_report(self, node_id: str) -> str:
        """What the Host needs to decide: task, verdict, blocked dependents, ready calls."""
        spec = self.graph.node(node_id)
        entry = self._deps.agents.agent(spec.agent)
        return exception_report(
            self.id,
            self._book.nodes[node_id],
            spec,
            sorted(self.graph.descendants(node_id) & self._book.nodes.keys()),
            marker=self._writer.marker(),
            runs_commands=entry is not None and entry.runs_commands,
        )

    async def run(self) -> None:
        """Schedule until every node settled (suspended nodes wait for a decision)."""
        flags = self._flags
        if flags.stopping or flags.halting or self.done.is_set():
            await self._ended()  # stopped before it began: the canceller finishes it
            return
        self._announcer.start()
        try:
            await self._scheduler.run(self.graph.order)
        except asyncio.CancelledError:
            if not flags.halting:
                await self.cancel(reason="cancelled")
            raise
        finally:
            await self._ended()

    async def halt(self) -> None:
        """Shutdown: stop executing without rewriting records (the restart reports them)."""
        self._flags.halting = True
        self._scheduler.wake()
        await self._scheduler.stop_tasks()
        await self._book.drain()
        await self._writer.close()
        await self._announcer.stop()

    async def cancel(self, *, reason: str = "cancelled", superseded: bool = False) -> None:
        """Stop the run: running and suspended nodes cancelled, pending ones skipped."""
        if self._canceller is None and not self.done.is_set():
            self._canceller = asyncio.create_task(
                self._cancel_all(reason, superseded=superseded), name=f"run-cancel:{self.id}"
            )
        if self._canceller is not None:
            # Shielded: a cancelled caller must not leave the run half stopped.
            await asyncio.shield(self._canceller)
        self._scheduler.wake()

    async def resolve_continue(self, node_id: str, message: str) -> bool:
        """Return a suspended node to pending with the Host's message attached (False when
        it no longer waits for a decision)."""
        if self._flags.stopping or self._book.current(node_id).state != "exception":
            return False
        await self._book.commit(node_id, "pending", continuation=message, deadline=None, error=None)
        return True

    async def resolve_abandon(self, node_id: str) -> bool:
        """Fail a suspended node and skip its dependents (False when it no longer waits)."""
        if self._flags.stopping or self._book.current(node_id).state != "exception":
            return False
        await self._book.commit(
            node_id,
            "failed",
            error="abandoned by the Host",
            deadline=None,
            finished_at=self._deps.policy.clock(),
        )
        return True

    async def _suspended(self, node_id: str) -> None:
        """A node is committed as an exception: a manifest at each decision point (SQLite
        is the live record), then the Host's report is announced."""
        await self._writer.write_manifest(self.record, self._book.nodes.values())
        await self._announcer.exception(node_id, self.exception_report(node_id))

    async def _ended(self) -> None:
        """Wait for the canceller, or finish; the announcer never outlives the run."""
        try:
            if self._canceller is not None:
                await asyncio.shield(self._canceller)
            elif not self.done.is_set() and not self._flags.halting:
                await asyncio.shield(self._finish())
        finally:
            await self._announcer.end()

    async def _cancel_all(self, reason: str, *, superseded: bool = False) -> None:
        # Stays set: from here on nothing starts, and only this call finishes the run (the
        # scheduler loop could otherwise finish it concurrently with the wrong final state).
        self._flags.stopping = True
        label = "superseded by a replan" if superseded else reason
        await self._scheduler.stop_tasks()
        await self._book.drain()
        now = self._deps.policy.clock()
        for node in list(self._book.nodes.values()):
            state: NodeState
            if node.state in {"running", "exception"}:
                state = "failed" if superseded and node.state == "exception" else "cancelled"
                self._book.queue(
                    dataclasses.replace(
                        node, state=state, error=label, finished_at=now, deadline=None
                    )
                )
            elif node.state in NOT_STARTED_STATES:
                self._book.queue(
                    dataclasses.replace(node, state="skipped", error=label, finished_at=now)
                )
        await self._book.flushed()
        await self._finish(state="superseded" if superseded else "cancelled")

    async def _finish(self, state: RunState | None = None) -> None:
        if self.done.is_set() or self._finishing:
            return
        self._finishing = True
        await self._book.drain()
        states = {n.state for n in self._book.nodes.values()}
        final: RunState = state or ("completed" if states == {"completed"} else "failed")
        await self._deps.store.set_run_state(self.id, final, finished=True)
        self.record = dataclasses.replace(self.record, state=final)
        await self._announcer.stop()
        # Ended once SQLite says so: every node's journal lines were synced before its
        # commit, so the manifest (a snapshot for readers) and the journal's close follow
        # `done` instead of delaying it (50-80 ms at 2,000 nodes).
        self.done.set()
        self.changed.set()
        try:
            await self._writer.write_manifest(self.record, self._book.nodes.values())
            await self._writer.close_journal()
            # The view files, owed until now (the journal holds every record they show), are
            # there before the report that points at them.
            await self._writer.write_views()
            await self._announcer.finished()
        finally:
            self.ended.set()
