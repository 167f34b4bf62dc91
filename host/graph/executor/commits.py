"""The node records of one run: what SQLite holds (the source of truth), what was decided
and is being committed, and the group commit between the two.

A decision is queued and committed in one batch with whatever arrives meanwhile (one
statement per batch); only once committed does the in-memory state follow, and only then
are successors submitted and the change announced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from core.deadlines import Expiring
from host.graph.executor.ready import ReadySet, RunFlags
from host.graph.model import NodeState
from host.graph.records import GroupFlush, JournalSync
from host.graph.render import Artifact
from host.graph.run_store import NodeRecord, RunStore

# How long a decision nobody waits for (`queued`, `running`) may wait to share a commit:
# short enough that the status message shows a running node at once to a person.
DEFER_SECONDS = 0.05


class CommitListener(Protocol):
    """Hears each committed record, in commit order, then the end of the batch."""

    def committed(self, record: NodeRecord, previous: NodeState) -> None:
        """`record` is now the node's committed state (it was `previous`)."""
        ...

    def batch_applied(self) -> None:
        """Every record of one batch is applied."""
        ...


class JournalSyncs(Protocol):
    """Makes the run's journal durable: claimed into a commit's own SQLite unit when no
    journal batch is being written (one thread hop for both), else waited for."""

    def claim_sync(self) -> JournalSync | None:
        """The sync for the commit to write, or None (then `sync`)."""
        ...

    async def sync(self) -> None:
        """Wait until the journal is durable."""
        ...


class NodeBook:
    """Committed and decided node records of one run, and the artifacts of completed ones."""

    def __init__(
        self,
        run_id: str,
        nodes: Mapping[str, NodeRecord],
        external: Mapping[str, Artifact],
        *,
        store: RunStore,
        ready: ReadySet,
        flags: RunFlags,
        clock: Callable[[], float],
        journal: JournalSyncs | None = None,
        defer_seconds: float = DEFER_SECONDS,
    ) -> None:
        self.nodes = dict(nodes)
        # Outputs successors may render: earlier runs' nodes now, this run's as they complete.
        self.artifacts: dict[str, Artifact] = dict(external)
        # Suspended nodes and their decision deadlines.
        self.suspended: dict[str, float | None] = {
            n.node_id: n.deadline for n in self.nodes.values() if n.state == "exception"
        }
        self._store = store
        self._ready = ready
        self._flags = flags
        self._clock = clock
        self._listeners: list[CommitListener] = []
        # Decided but not yet committed: the newest record of each such node.
        self._decided: dict[str, NodeRecord] = {}
        self._completing: dict[str, Artifact] = {}
        # Makes the run's journal durable; a batch holding a record that points into the
        # journal (a completed node's output) runs it first, in the same batch.
        self._journal = journal
        self._synced_first: set[str] = set()
        # Node ids whose newest decided record is to be committed.
        self._writes = GroupFlush[str](self._write_batch, name=f"commits:{run_id}")
        # Nodes whose newest decision nobody waits for, committed by their deadline.
        self._deferred = Expiring[str](defer_seconds, self._writes.add)
        # Set after every applied batch (waiters clear it).
        self.changed = asyncio.Event()

    def listen(self, listener: CommitListener) -> None:
        """Tell `listener` about every commit from now on (in the order listened)."""
        self._listeners.append(listener)

    @property
    def idle(self) -> bool:
        """Nothing decided that is not committed, and no commit running."""
        return self._writes.idle and not self._deferred

    def current(self, node_id: str) -> NodeRecord:
        """The newest decided record of a node (committed or about to be)."""
        return self._decided.get(node_id) or self.nodes[node_id]

    async def commit(
        self,
        node_id: str,
        state: NodeState,
        *,
        artifact: Artifact | None = None,
        synced: bool = False,
        **fields: Any,
    ) -> None:
        """Decide a node's new state and wait until it is committed (and applied). `synced`:
        the journal is synced first, in the same batch (one wait instead of two; OSError
        when it could not be, and then nothing of the batch is committed)."""
        if synced:
            self._synced_first.add(node_id)
        self.decide(node_id, state, artifact=artifact, **fields)
        await self._writes.flushed()

    async def fail(self, node_id: str, error: str) -> None:
        """Commit `node_id` failed with `error` (its pending descendants skipped)."""
        await self.commit(node_id, "failed", error=error, finished_at=self._clock())

    def decide(
        self, node_id: str, state: NodeState, *, artifact: Artifact | None = None, **fields: Any
    ) -> None:
        """Queue a node's new state for the next commit (without waiting for it)."""
        self.queue(self.current(node_id).with_fields(state=state, **fields))
        if artifact is not None:
            self._completing[node_id] = artifact
        if state == "failed" and not self._flags.stopping:
            self._skip_below(node_id)

    def defer(self, node_id: str, state: NodeState, **fields: Any) -> None:
        """Decide a node's new state that nobody waits for (`queued`, `running`): committed
        with the node's next decision, or `defer_seconds` from now at the latest. A short
        node's `running` and `completed` are then one row write, whatever else commits."""
        self._decided[node_id] = self.current(node_id).with_fields(state=state, **fields)
        self._deferred.add(node_id)

    def queue(self, record: NodeRecord) -> None:
        """Queue `record` as decided for the next commit."""
        node_id = record.node_id
        self._decided[node_id] = record
        self._deferred.discard(node_id)
        self._writes.add(node_id)

    async def flushed(self) -> None:
        """Wait until everything decided so far is committed (deferred decisions too)."""
        self._write_deferred()
        await self._writes.flushed()

    async def drain(self) -> None:
        """Wait until no commit runs (what is queued meanwhile is committed too)."""
        self._write_deferred()
        await self._writes.drain()

    def _write_deferred(self) -> None:
        for node_id in self._deferred.take_all():
            self._writes.add(node_id)

    def _skip_below(self, root: str) -> None:
        """A failed node skips its pending descendants (in the same commit); each pending
        node is visited once, through the children lists."""
        error = f"skipped: depends on `{root}`, which did not complete"
        now = self._clock()
        stack = list(self._ready.children(root))
        while stack:
            node_id = stack.pop()
            current = self.current(node_id)
            if current.state != "pending":
                continue
            self.queue(current.with_fields(state="skipped", error=error, finished_at=now))
            stack.extend(self._ready.children(node_id))

    async def _write_batch(self, node_ids: list[str]) -> None:
        """One group commit: the newest record of each node in one statement, then applied."""
        decided = self._decided
        latest = [decided[n] for n in dict.fromkeys(node_ids) if n in decided]
        synced_first = self._synced_first.intersection(node_ids)
        self._synced_first -= synced_first
        claimed = None
        try:
            if synced_first and self._journal is not None:
                claimed = self._journal.claim_sync() if latest else None
                if claimed is None:
                    await self._journal.sync()
            await self._store.commit_nodes(latest, prepare=claimed.write if claimed else None)
        except BaseException:
            # Not committed: these decisions are void (their waiters get the error).
            for record in latest:
                if decided.get(record.node_id) is record:
                    del decided[record.node_id]
                    self._completing.pop(record.node_id, None)
            raise
        finally:
            if claimed is not None:
                claimed.release()
        self._apply(latest)

    def _apply(self, records: list[NodeRecord]) -> None:
        """Committed: the in-memory state follows, then the listeners hear it."""
        for record in records:
            node_id = record.node_id
            previous = self.nodes[node_id].state
            self.nodes[node_id] = record
            if self._decided.get(node_id) is record:
                del self._decided[node_id]
            if record.state == "exception":
                self.suspended[node_id] = record.deadline
            else:
                self.suspended.pop(node_id, None)
            if record.state == "completed" and previous != "completed":
                artifact = self._completing.pop(node_id, None)
                if artifact is not None:
                    self.artifacts[node_id] = artifact
            for listener in self._listeners:
                listener.committed(record, previous)
        self.changed.set()
        for listener in self._listeners:
            listener.batch_applied()
