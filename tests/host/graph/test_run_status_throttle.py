"""A background run's status message is edited at most once per interval, and the final
state is always shown."""

from __future__ import annotations

from dataclasses import replace

from core.ids import ConversationRef
from host.conversation.run_events import ConversationRunEvents
from host.runtime.run_snapshot import NodeSnapshot, RunSnapshot
from tests.helpers import eventually

CONV = ConversationRef("test", "W", "C", "T")


class FakeStore:
    def __init__(self) -> None:
        self.status_message: str | None = None
        self.reported = False

    async def status_message_id(self, run_id: str) -> str | None:
        return self.status_message

    async def set_status_message(self, run_id: str, message_id: str) -> None:
        self.status_message = message_id

    async def mark_reported(self, run_id: str) -> None:
        self.reported = True


class FakePort:
    def __init__(self) -> None:
        self.posts: list[str] = []
        self.edits: list[str] = []
        self.turns: list[str] = []

    async def notify(self, conv: ConversationRef, text: str, *, idempotency_key: str) -> str:
        self.posts.append(text)
        return "m1"

    async def edit(self, conv: ConversationRef, message_id: str, text: str, *, key: str) -> None:
        self.edits.append(text)

    async def system_turn(self, conv: ConversationRef, text: str, *, key: str) -> None:
        self.turns.append(text)


class FakeReports:
    async def report(self, run_id: str) -> str:
        return "the report"


def _run(n: int) -> RunSnapshot:
    nodes = tuple(NodeSnapshot(f"n{i}", "raven", "pending", 0) for i in range(n))
    return RunSnapshot("run_1", CONV, "many nodes", True, "running", "U1", nodes)


def _with(run: RunSnapshot, node_id: str, state: str) -> RunSnapshot:
    """The next event's snapshot: `node_id` now in `state`."""
    nodes = tuple(replace(n, state=state) if n.node_id == node_id else n for n in run.nodes)
    return replace(run, nodes=nodes)


def _events(interval: float) -> tuple[ConversationRunEvents, FakeStore, FakePort]:
    store, port = FakeStore(), FakePort()
    events = ConversationRunEvents(store, port, FakeReports(), edit_interval=interval)  # type: ignore[arg-type]
    return events, store, port


async def test_a_burst_of_changes_gives_one_post_and_one_final_edit() -> None:
    events, store, port = _events(interval=3600)
    run = _run(50)
    await events.progress(run)
    for node in run.nodes:
        run = _with(run, node.node_id, "running")
        await events.progress(run)
        run = _with(run, node.node_id, "completed")
        await events.progress(run)
    await events.finished(replace(run, state="completed"))
    assert len(port.posts) == 1
    assert len(port.edits) == 1 and port.edits[0].count(": completed") == 50
    assert port.turns == ["the report"] and store.reported
    await events.close()


async def test_a_throttled_change_is_shown_by_a_trailing_edit() -> None:
    events, _, port = _events(interval=0.01)
    run = _run(3)
    await events.progress(run)
    run = _with(run, "n0", "running")
    await events.progress(run)  # within the interval: owed, then edited
    run = _with(run, "n1", "running")
    await events.progress(run)
    # However the calls fall against the interval, the newest state is shown in the end.
    await eventually(lambda: bool(port.edits) and port.edits[-1].count(": running") == 2)
    await events.close()
