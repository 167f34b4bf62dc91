"""The node book's group commit: a decision nobody waits for (`queued`, `running`) waits
for the node's next decision or its deadline, not for other nodes' commits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from host.graph.executor.commits import NodeBook
from host.graph.executor.ready import ReadySet, RunFlags
from host.graph.records import Claim, GroupFlush, JournalSync
from host.graph.run_store import NodeRecord, RunStore
from tests.fakes.graph_kit import guarded, pending_node
from tests.helpers import eventually


class RecordingStore:
    """Stands where SQLite is: keeps each batch's (node, state) pairs."""

    def __init__(self, events: list[str] | None = None) -> None:
        self.batches: list[list[tuple[str, str]]] = []
        self.events = events if events is not None else []

    async def commit_nodes(
        self, records: Sequence[NodeRecord], *, prepare: Callable[[], None] | None = None
    ) -> None:
        if prepare is not None:
            prepare()  # on the writer's thread, before the statement
        self.batches.append([(r.node_id, r.state) for r in records])
        self.events.append("commit")


class RecordingJournal:
    """Stands where the run's journal is: a sync is claimed into the commit when `free`."""

    def __init__(self, events: list[str], *, free: bool) -> None:
        self.events = events
        self.free = free

    def claim_sync(self) -> JournalSync | None:
        if not self.free:
            return None
        claim = GroupFlush[Any](_never, name="journal").claim()
        assert claim is not None
        return RecordedSync(self.events, claim)

    async def sync(self) -> None:
        self.events.append("journal synced apart")


class RecordedSync(JournalSync):
    """A claimed sync that says when it is written and released."""

    def __init__(self, events: list[str], claim: Claim[Any]) -> None:
        super().__init__(lambda: events.append("journal written"), claim)
        self.events = events

    def release(self) -> None:
        self.events.append("released")
        super().release()


async def _never(items: list[Any]) -> None:
    raise AssertionError("a claimed batch is never flushed by the group")


def _book(
    store: RecordingStore, defer_seconds: float, journal: RecordingJournal | None = None
) -> NodeBook:
    nodes = {n: pending_node("run_1", n) for n in ("a", "b", "c")}
    return NodeBook(
        "run_1",
        nodes,
        {},
        store=cast(RunStore, store),
        ready=ReadySet(nodes, list(nodes)),
        flags=RunFlags(),
        clock=lambda: 1.0,
        journal=journal,
        defer_seconds=defer_seconds,
    )


async def test_a_synced_commit_writes_the_journal_in_its_own_sqlite_unit() -> None:
    events: list[str] = []
    book = _book(RecordingStore(events), 3600, RecordingJournal(events, free=True))
    await guarded(book.commit("a", "completed", synced=True))
    assert events == ["journal written", "commit", "released"]
    await guarded(book.commit("b", "completed"))  # not synced: no journal work
    assert events[3:] == ["commit"]


async def test_a_synced_commit_waits_for_a_journal_batch_already_being_written() -> None:
    events: list[str] = []
    book = _book(RecordingStore(events), 3600, RecordingJournal(events, free=False))
    await guarded(book.commit("a", "completed", synced=True))
    assert events == ["journal synced apart", "commit"]


async def test_a_deferred_decision_rides_with_its_nodes_next_one_not_with_others() -> None:
    store = RecordingStore()
    book = _book(store, defer_seconds=3600)  # only a waiter can write it
    book.defer("a", "running", attempts=1)
    assert not book.idle and book.current("a").state == "running"
    await guarded(book.commit("b", "completed"))
    assert store.batches == [[("b", "completed")]]  # `a` stayed out of b's commit
    await guarded(book.commit("a", "completed"))
    # One row write: the newest record, which kept the deferred decision's fields.
    assert store.batches[1:] == [[("a", "completed")]]
    assert book.nodes["a"].attempts == 1 and book.idle


async def test_waiting_for_everything_writes_the_deferred_decisions() -> None:
    store = RecordingStore()
    book = _book(store, defer_seconds=3600)
    book.defer("a", "queued")
    await guarded(book.flushed())
    book.defer("b", "running")
    await guarded(book.drain())
    assert store.batches == [[("a", "queued")], [("b", "running")]]
    assert (book.nodes["a"].state, book.nodes["b"].state) == ("queued", "running")


async def test_a_deferred_decision_nobody_waits_for_is_written_by_its_deadline() -> None:
    store = RecordingStore()
    book = _book(store, defer_seconds=0.01)
    book.defer("a", "running")
    book.defer("c", "running")
    await eventually(lambda: book.idle)
    assert store.batches[0][0] == ("a", "running")
    assert sorted(pair for batch in store.batches for pair in batch) == [
        ("a", "running"),
        ("c", "running"),
    ]
