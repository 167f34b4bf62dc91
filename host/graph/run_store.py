"""SQLite persistence of graph runs, nodes, agent instances and the dispatch ledger."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agents.models.types import Message
from core.ids import ConversationRef
from core.store import Store
from host.graph.model import NodeState, PriorNode
from host.runtime.conversation_log import ensure_conversation

RunState = Literal[
    "awaiting_approval",
    "running",
    "completed",
    "failed",
    "cancelled",
    "denied",
    "interrupted",
    "superseded",
]


# Why a node that never began was skipped by a restart: its run was under way, or no node of
# its run had begun (the run itself never started; nothing ran).
INTERRUPTED_BEFORE = "not started: the run was interrupted by a restart"
UNSTARTED = "not started: the bot stopped before any node of the run began"


@dataclass(frozen=True)
class RunRecord:
    """One graph run as stored."""

    id: str
    conversation: ConversationRef
    task_summary: str
    background: bool
    state: RunState
    submitted_by: str
    submission: dict[str, Any]
    run_dir: Path
    replaces_run: str | None
    status_message: str | None
    created_at: float
    finished_at: float | None
    # The scheduled task this run fires for (set by the core from the turn, never from the
    # graph): it runs unattended, with the commands approved with the task.
    for_task: str | None = None


@dataclass(frozen=True)
class NodeRecord:
    """One node as stored (node ids are unique per conversation)."""

    conversation_id: str
    node_id: str
    run_id: str
    agent: str
    instance: str | None
    summary: str
    template: str
    deps: tuple[str, ...]
    state: NodeState
    attempts: int
    max_attempts: int
    continuation: str | None
    output_path: Path | None
    error: str | None
    verdict: dict[str, Any] | None
    deadline: float | None
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    judge_calls: int = 0
    judge_tokens: int = 0
    seconds: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    # Which fallback model answered the node's last attempt, and why ("answered by the
    # fallback model X: Y was overloaded"); None when its configured model answered.
    fallback: str | None = None

    def with_fields(self, **changes: Any) -> NodeRecord:
        """A copy with `changes` applied: `dataclasses.replace` without its per-field
        `getattr` and frozen `__setattr__` calls (a node changes state several times, and
        this was 13 µs of each change)."""
        unknown = changes.keys() - _NODE_FIELDS
        if unknown:
            raise TypeError(f"NodeRecord has no field {', '.join(sorted(unknown))}")
        copy = object.__new__(NodeRecord)
        copy.__dict__.update(self.__dict__, **changes)
        return copy

    def as_prior(self) -> PriorNode:
        """The view admission needs."""
        return PriorNode(
            id=self.node_id,
            agent=self.agent,
            state=self.state,
            output_path=self.output_path,
            instance=self.instance,
        )


_NODE_FIELDS = frozenset(f.name for f in dataclasses.fields(NodeRecord))


class RunStore:
    """Reads and writes run and node rows; every state change is committed before it is told."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock

    def before_checkpoint(self, sync: Callable[[], None]) -> Callable[[], None]:
        """A run's journal is fsynced before the store's checkpoints (see `Store`)."""
        return self._store.before_checkpoint(sync)

    async def create_run(
        self,
        run: RunRecord,
        nodes: Iterable[NodeRecord],
    ) -> None:
        """Insert a run and reserve its node ids (unique per conversation) in one transaction."""
        async with self._store.transaction() as db:
            conv = run.conversation
            await ensure_conversation(db, conv, run.created_at)
            await db.execute(
                "INSERT INTO graph_runs (id, conversation_id, task_summary, background, state,"
                " submitted_by, submission, run_dir, replaces_run, created_at, for_task)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run.id,
                    conv.id,
                    run.task_summary,
                    int(run.background),
                    run.state,
                    run.submitted_by,
                    json.dumps(run.submission),
                    str(run.run_dir),
                    run.replaces_run,
                    run.created_at,
                    run.for_task,
                ),
            )
            node_rows = list(nodes)
            await db.executemany(
                "INSERT INTO graph_nodes (conversation_id, node_id, run_id, agent, instance,"
                " summary, template, deps, state, max_attempts) VALUES (?,?,?,?,?,?,?,?,?,?)",
                [
                    (
                        n.conversation_id,
                        n.node_id,
                        n.run_id,
                        n.agent,
                        n.instance,
                        n.summary,
                        n.template,
                        json.dumps(list(n.deps)),
                        n.state,
                        n.max_attempts,
                    )
                    for n in node_rows
                ],
            )
            # Counted in the same transaction: a crash cannot start nodes without charging them.
            await db.execute(
                "INSERT INTO dispatches (conversation_id, at, count) VALUES (?, ?, ?)",
                (conv.id, run.created_at, len(node_rows)),
            )

    async def set_run_state(self, run_id: str, state: RunState, *, finished: bool = False) -> None:
        """Record a run's new state."""
        await self._store.execute(
            "UPDATE graph_runs SET state = ?, finished_at = CASE WHEN ? THEN ? ELSE finished_at"
            " END WHERE id = ?",
            (state, int(finished), self._clock(), run_id),
        )

    async def status_message_id(self, run_id: str) -> str | None:
        """The id of the run's status message, if it was posted (the run row without its
        submission, which is a graph's whole JSON: decoding it took 20-40 ms at 2,000 nodes)."""
        row = await self._store.fetchone(
            "SELECT status_message FROM graph_runs WHERE id = ?", (run_id,)
        )
        value = row["status_message"] if row is not None else None
        return str(value) if value is not None else None

    async def set_status_message(self, run_id: str, message_id: str) -> None:
        """Remember the run's single status message (edited in place)."""
        await self._store.execute(
            "UPDATE graph_runs SET status_message = ? WHERE id = ?", (message_id, run_id)
        )

    async def update_node(self, conversation_id: str, node_id: str, **fields: Any) -> None:
        """Update some columns of one node row."""
        if not fields:
            return
        encoded = {k: _encode(k, v) for k, v in fields.items()}
        columns = ", ".join(f"{k} = ?" for k in encoded)
        await self._store.execute(
            f"UPDATE graph_nodes SET {columns} WHERE conversation_id = ? AND node_id = ?",
            (*encoded.values(), conversation_id, node_id),
        )

    async def update_nodes(
        self, conversation_id: str, node_ids: Iterable[str], **fields: Any
    ) -> None:
        """Update the same columns on several nodes in one transaction."""
        ids = list(node_ids)
        if not ids or not fields:
            return
        encoded = {k: _encode(k, v) for k, v in fields.items()}
        columns = ", ".join(f"{k} = ?" for k in encoded)
        async with self._store.transaction() as db:
            await db.executemany(
                f"UPDATE graph_nodes SET {columns} WHERE conversation_id = ? AND node_id = ?",
                [(*encoded.values(), conversation_id, nid) for nid in ids],
            )

    async def commit_nodes(
        self, records: Sequence[NodeRecord], *, prepare: Callable[[], None] | None = None
    ) -> None:
        """Write the changing columns of several nodes in one statement (one transaction).

        Whole rows, not field deltas: a batch then needs a single statement whatever mix of
        changes it holds (queued, running, settled, skipped), so the runtime commits every
        change that piled up during the previous commit together (group commit). `prepare`
        runs on the writer's thread before the transaction (what it raises is raised here,
        and nothing is written)."""
        if not records:
            return
        rows = [
            (
                r.state,
                r.attempts,
                r.continuation,
                str(r.output_path) if r.output_path is not None else None,
                r.error,
                json.dumps(r.verdict) if r.verdict is not None else None,
                r.deadline,
                r.model_calls,
                r.input_tokens,
                r.output_tokens,
                r.judge_calls,
                r.judge_tokens,
                r.seconds,
                r.started_at,
                r.finished_at,
                r.fallback,
                r.conversation_id,
                r.node_id,
            )
            for r in records
        ]

        def write(conn: sqlite3.Connection) -> None:
            conn.executemany(_NODE_ROW_UPDATE, rows)

        await self._store.write(write, prepare=prepare)

    async def run(self, run_id: str) -> RunRecord | None:
        """One run by id."""
        row = await self._store.fetchone(
            "SELECT r.*, c.platform, c.workspace, c.channel, c.thread FROM graph_runs r"
            " JOIN conversations c ON c.id = r.conversation_id WHERE r.id = ?",
            (run_id,),
        )
        return _run(row) if row is not None else None

    async def runs(self, conversation_id: str | None = None, *, limit: int = 50) -> list[RunRecord]:
        """Newest runs first, optionally of one conversation."""
        where, params = (
            ("WHERE r.conversation_id = ?", (conversation_id,)) if conversation_id else ("", ())
        )
        rows = await self._store.fetchall(
            "SELECT r.*, c.platform, c.workspace, c.channel, c.thread FROM graph_runs r"
            f" JOIN conversations c ON c.id = r.conversation_id {where}"
            " ORDER BY r.created_at DESC LIMIT ?",
            (*params, limit),
        )
        return [_run(r) for r in rows]

    async def runs_for_task(self, task_id: str, *, since: float) -> list[RunRecord]:
        """The runs a scheduled task's firing started at `since` or later, oldest first."""
        rows = await self._store.fetchall(
            "SELECT r.*, c.platform, c.workspace, c.channel, c.thread FROM graph_runs r"
            " JOIN conversations c ON c.id = r.conversation_id"
            " WHERE r.for_task = ? AND r.created_at >= ? ORDER BY r.created_at",
            (task_id, since),
        )
        return [_run(r) for r in rows]

    async def nodes_of_run(self, run_id: str) -> list[NodeRecord]:
        """Nodes of one run in insertion order."""
        rows = await self._store.fetchall(
            "SELECT * FROM graph_nodes WHERE run_id = ? ORDER BY rowid", (run_id,)
        )
        return [_node(r) for r in rows]

    async def node(self, conversation_id: str, node_id: str) -> NodeRecord | None:
        """One node by conversation and id."""
        row = await self._store.fetchone(
            "SELECT * FROM graph_nodes WHERE conversation_id = ? AND node_id = ?",
            (conversation_id, node_id),
        )
        return _node(row) if row is not None else None

    async def prior_nodes(self, conversation_id: str) -> dict[str, PriorNode]:
        """Every node id used in the conversation, for admission."""
        rows = await self._store.fetchall(
            "SELECT * FROM graph_nodes WHERE conversation_id = ?", (conversation_id,)
        )
        return {r["node_id"]: _node(r).as_prior() for r in rows}

    async def interrupt_unfinished(
        self, started: Callable[[str], Mapping[str, int]] = lambda _: {}
    ) -> list[RunRecord]:
        """After a crash: running nodes → cancelled (interrupted), pending and queued (waiting
        for a slot, never started) → skipped, suspended → failed; their runs → interrupted.
        Completed nodes stay reusable.

        `started(run)`: the highest attempt of each node the run recorded as started before
        its agent began; a node still pending or queued below that attempt had started
        (its `running` commit was still on its way) and counts as running.

        Every run still recorded as `running` is interrupted, including one whose nodes all
        settled but whose end was never recorded (its report was never delivered either).
        Runs awaiting approval keep their pending nodes.
        """
        now = self._clock()
        async with self._store.transaction() as db:
            cur = await db.execute("SELECT id FROM graph_runs WHERE state = 'running'")
            run_ids = [r[0] for r in await cur.fetchall()]
            for run_id in run_ids:
                begun = await asyncio.to_thread(started, run_id)
                for node_id, attempt in begun.items():
                    await db.execute(
                        "UPDATE graph_nodes SET state = 'running', attempts = ? WHERE run_id = ?"
                        " AND node_id = ? AND state IN ('pending', 'queued') AND attempts < ?",
                        (attempt, run_id, node_id, attempt),
                    )
                await db.execute(
                    "UPDATE graph_nodes SET state = 'cancelled', error = 'interrupted by a"
                    " restart while running', finished_at = ? WHERE run_id = ? AND state ="
                    " 'running'",
                    (now, run_id),
                )
                await db.execute(
                    "UPDATE graph_nodes SET state = 'failed', error = 'interrupted by a restart"
                    " while waiting for a decision', deadline = NULL, finished_at = ?"
                    " WHERE run_id = ? AND state = 'exception'",
                    (now, run_id),
                )
                cur = await db.execute(
                    "SELECT COUNT(*) FROM graph_nodes WHERE run_id = ? AND state NOT IN"
                    " ('pending', 'queued')",
                    (run_id,),
                )
                row = await cur.fetchone()
                # No node of the run ever began: it did not start, it was not interrupted.
                why = UNSTARTED if row is not None and row[0] == 0 else INTERRUPTED_BEFORE
                await db.execute(
                    "UPDATE graph_nodes SET state = 'skipped', error = ?, finished_at = ?"
                    " WHERE run_id = ? AND state IN ('pending', 'queued')",
                    (why, now, run_id),
                )
            if run_ids:
                marks = ",".join("?" * len(run_ids))
                await db.execute(
                    f"UPDATE graph_runs SET state = 'interrupted', finished_at = ?"
                    f" WHERE id IN ({marks})",
                    (now, *run_ids),
                )
        runs = [await self.run(rid) for rid in run_ids]
        return [r for r in runs if r is not None]

    async def unreported_interrupted_runs(self) -> list[RunRecord]:
        """Interrupted runs whose conversation has not been told yet."""
        rows = await self._store.fetchall(
            "SELECT r.*, c.platform, c.workspace, c.channel, c.thread FROM graph_runs r"
            " JOIN conversations c ON c.id = r.conversation_id"
            " WHERE r.state = 'interrupted' AND r.reported = 0 ORDER BY r.created_at"
        )
        return [_run(r) for r in rows]

    async def mark_reported(self, run_id: str) -> None:
        """The conversation was told how this run ended."""
        await self._store.execute("UPDATE graph_runs SET reported = 1 WHERE id = ?", (run_id,))

    async def load_instance(
        self, conversation_id: str, handle: str
    ) -> tuple[str, list[Message]] | None:
        """The agent and session history of a stateful instance handle."""
        row = await self._store.fetchone(
            "SELECT agent, history FROM agent_instances WHERE conversation_id = ? AND handle = ?",
            (conversation_id, handle),
        )
        if row is None:
            return None
        history = [Message.model_validate(m) for m in json.loads(row["history"])]
        return str(row["agent"]), history

    async def save_instance(
        self, conversation_id: str, handle: str, agent: str, history: list[Message]
    ) -> None:
        """Persist a stateful instance's session so later nodes continue it."""
        await self._store.execute(
            "INSERT INTO agent_instances (conversation_id, handle, agent, history, updated_at)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT(conversation_id, handle) DO UPDATE SET"
            " history = excluded.history, updated_at = excluded.updated_at",
            (
                conversation_id,
                handle,
                agent,
                json.dumps([m.model_dump(mode="json") for m in history]),
                self._clock(),
            ),
        )

    async def dispatched_since(self, conversation_id: str, since: float) -> int:
        """Nodes dispatched in the conversation since `since`."""
        row = await self._store.fetchone(
            "SELECT COALESCE(SUM(count), 0) AS n FROM dispatches WHERE conversation_id = ?"
            " AND at >= ?",
            (conversation_id, since),
        )
        return int(row["n"]) if row is not None else 0

    async def get_flag(self, conversation_id: str, flag: str) -> str | None:
        """A per-conversation flag (e.g. the orchestration guide is pinned)."""
        row = await self._store.fetchone(
            "SELECT value FROM conversation_flags WHERE conversation_id = ? AND flag = ?",
            (conversation_id, flag),
        )
        return str(row["value"]) if row is not None else None

    async def set_flag(self, conversation_id: str, flag: str, value: str) -> None:
        """Set a per-conversation flag."""
        await self._store.execute(
            "INSERT INTO conversation_flags (conversation_id, flag, value) VALUES (?, ?, ?)"
            " ON CONFLICT(conversation_id, flag) DO UPDATE SET value = excluded.value",
            (conversation_id, flag, value),
        )


_NODE_ROW_UPDATE = (
    "UPDATE graph_nodes SET state = ?, attempts = ?, continuation = ?, output_path = ?,"
    " error = ?, verdict = ?, deadline = ?, model_calls = ?, input_tokens = ?,"
    " output_tokens = ?, judge_calls = ?, judge_tokens = ?, seconds = ?, started_at = ?,"
    " finished_at = ?, fallback = ? WHERE conversation_id = ? AND node_id = ?"
)


def _encode(column: str, value: Any) -> Any:
    if column in {"verdict"} and value is not None:
        return json.dumps(value)
    if column == "deps":
        return json.dumps(list(value))
    if isinstance(value, Path):
        return str(value)
    return value


def _run(row: Any) -> RunRecord:
    return RunRecord(
        id=row["id"],
        conversation=ConversationRef(
            row["platform"], row["workspace"], row["channel"], row["thread"]
        ),
        task_summary=row["task_summary"],
        background=bool(row["background"]),
        state=row["state"],
        submitted_by=row["submitted_by"],
        submission=json.loads(row["submission"]),
        run_dir=Path(row["run_dir"]),
        replaces_run=row["replaces_run"],
        status_message=row["status_message"],
        created_at=row["created_at"],
        finished_at=row["finished_at"],
        for_task=row["for_task"],
    )


def _node(row: Any) -> NodeRecord:
    return NodeRecord(
        conversation_id=row["conversation_id"],
        node_id=row["node_id"],
        run_id=row["run_id"],
        agent=row["agent"],
        instance=row["instance"],
        summary=row["summary"],
        template=row["template"],
        deps=tuple(json.loads(row["deps"])),
        state=row["state"],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        continuation=row["continuation"],
        output_path=Path(row["output_path"]) if row["output_path"] else None,
        error=row["error"],
        verdict=json.loads(row["verdict"]) if row["verdict"] else None,
        deadline=row["deadline"],
        model_calls=row["model_calls"],
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        judge_calls=row["judge_calls"],
        judge_tokens=row["judge_tokens"],
        seconds=row["seconds"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        fallback=row["fallback"],
    )
