"""Group memory records in SQLite: round summaries, outcome entries and the verdict ledger
(append-only). The recall index gets the same text under the host's and agents' libraries.

Scopes (SPEC §10, §12: user ⊂ DM | channel). A round summary quotes its tasks, so it lives in
its submitter's host library, and in the DM partition of it when the round ran in a DM: a
channel turn never recalls it. A verdict's body is the Host's prose about a round and may
quote the task, so it stays with the conversation the round ran in (its audience); what any
other turn sees of a verdict is its header: agent, round and outcome label, no user text.

A round moves through three phases, each change committed with the verdicts it produces:
`awaiting_close` (deposited when its run finished) → `awaiting_feedback` (close verdicts from
the Host's next reply) → `released` (after the one reassessment on the next user turn).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from core.store import Row, Store
from memory.group import Outcome, RoundNode, Verdict, outcome_entry, verdict_header
from memory.index import Doc

Phase = Literal["awaiting_close", "awaiting_feedback", "released"]
Scope = Literal["any", "dm"]


def host_library(user_owner: str, scope: Scope = "any") -> str:
    """The host's library for one user: shared by their channel turns, or (`dm`) recalled
    only in their DMs."""
    return f"host:{user_owner}#dm" if scope == "dm" else f"host:{user_owner}"


def agent_library(agent: str) -> str:
    """An agent's library: verdict headers about it (labels only, recalled for anyone)."""
    return f"agent:{agent}"


def audience_library(conversation_id: str) -> str:
    """What only one conversation's turns recall: the full verdicts of its rounds."""
    return f"audience:{conversation_id}"


def verdict_doc(verdict_id: int, verdict: Verdict) -> Doc:
    """A verdict's header as an index document in its agent's library (no user text)."""
    return Doc(f"verdict:{verdict_id}", agent_library(verdict.agent), "verdict", verdict.header())


def verdict_docs(verdict_id: int, verdict: Verdict, conversation_id: str) -> list[Doc]:
    """A verdict as index documents: its header in the agent's library (anyone may recall
    it), header and body in its conversation's audience library."""
    return _verdict_docs(verdict_id, verdict.agent, verdict.header(), verdict.body, conversation_id)


def _verdict_docs(
    verdict_id: int, agent: str, header: str, body: str, conversation_id: str | None
) -> list[Doc]:
    docs = [Doc(f"verdict:{verdict_id}", agent_library(agent), "verdict", header)]
    if conversation_id:
        docs.append(
            Doc(
                f"verdict-body:{verdict_id}",
                audience_library(conversation_id),
                "verdict",
                f"{header} {body}",
            )
        )
    return docs


@dataclass(frozen=True)
class StoredVerdict:
    """One verdict of the ledger."""

    id: int
    agent: str
    run_id: str
    phase: str
    outcome: str
    body: str
    created_at: float
    conversation_id: str | None = None

    def header(self) -> str:
        """Author, subject, round, phase and outcome: no user text."""
        return verdict_header(self.agent, self.run_id, self.phase, self.outcome)

    def text(self) -> str:
        """Header and body, as deposited."""
        return f"{self.header()} {self.body}"

    def text_for(self, conversation_id: str) -> str:
        """What a turn or node of `conversation_id` may see: the whole verdict in the
        conversation its round ran in, the header alone anywhere else."""
        return self.text() if conversation_id == self.conversation_id else self.header()


@dataclass(frozen=True)
class PendingRound:
    """A finished round still waiting for its close verdicts or its reassessment."""

    run_id: str
    library: str
    nodes: tuple[RoundNode, ...]
    outcomes: Mapping[str, Outcome]


class GroupStore:
    """Writes round summaries, verdicts and outcome entries; reads pending rounds and the
    most recent verdicts about an agent."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock

    async def deposit_round(
        self,
        run_id: str,
        conversation_id: str,
        library: str,
        nodes: Sequence[RoundNode],
        outcomes: Mapping[str, Outcome],
        summary: str,
        scope: Scope = "any",
    ) -> int | None:
        """Record a finished round, awaiting its close verdicts (None when already recorded)."""
        encoded = json.dumps([[n.id, n.agent, n.status, list(n.deps), n.task] for n in nodes])
        row = (run_id, conversation_id, json.dumps(dict(outcomes)), summary, self._clock())

        def insert(db: sqlite3.Connection) -> int | None:
            cur = db.execute(
                "INSERT OR IGNORE INTO round_summaries (run_id, conversation_id, outcome,"
                " summary, created_at, phase, nodes, library, scope)"
                " VALUES (?, ?, ?, ?, ?, 'awaiting_close', ?, ?, ?)",
                (*row, encoded, library, scope),
            )
            return int(cur.lastrowid or 0) if cur.rowcount else None

        result: int | None = await self._store.write(insert)
        return result

    async def conversation_scope(self, conversation_id: str) -> Scope:
        """`dm` when the conversation is a direct message (its messages say so), else `any`."""
        row = await self._store.fetchone(
            "SELECT 1 FROM messages WHERE conversation_id = ? AND direction = 'in' AND"
            " CASE WHEN json_valid(payload) THEN json_extract(payload, '$.is_dm') END = 1"
            " LIMIT 1",
            (conversation_id,),
        )
        return "dm" if row is not None else "any"

    async def pending(self, conversation_id: str, phase: Phase) -> list[PendingRound]:
        """The conversation's rounds in `phase`, oldest first."""
        rows = await self._store.fetchall(
            "SELECT run_id, library, nodes, outcome FROM round_summaries"
            " WHERE conversation_id = ? AND phase = ? ORDER BY id",
            (conversation_id, phase),
        )
        return [_pending(r) for r in rows]

    async def close_round(self, run_id: str, verdicts: Sequence[Verdict]) -> list[int] | None:
        """Append the round's close verdicts and await its reassessment (None when another
        turn closed it first)."""
        return await self._advance(run_id, "awaiting_close", "awaiting_feedback", verdicts)

    async def reassess_round(
        self, run_id: str, verdicts: Sequence[Verdict], close: Mapping[str, Outcome]
    ) -> list[int] | None:
        """Append feedback verdicts and one outcome entry per covered node, and release the
        round (None when it was released already)."""

        def entries(db: sqlite3.Connection) -> None:
            for v in verdicts:
                detail = close[v.agent]  # the initial label
                db.executemany(
                    "INSERT OR REPLACE INTO outcome_entries (run_id, node_id, agent, outcome,"
                    " detail, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (run_id, n, v.agent, v.outcome, detail, self._clock())
                        for n in v.covered_nodes
                    ],
                )

        return await self._advance(run_id, "awaiting_feedback", "released", verdicts, entries)

    async def _advance(
        self,
        run_id: str,
        before: Phase,
        after: Phase,
        verdicts: Sequence[Verdict],
        also: Callable[[sqlite3.Connection], None] | None = None,
    ) -> list[int] | None:
        now = self._clock()

        def advance(db: sqlite3.Connection) -> list[int] | None:
            cur = db.execute(
                "UPDATE round_summaries SET phase = ? WHERE run_id = ? AND phase = ?",
                (after, run_id, before),
            )
            if cur.rowcount == 0:
                return None
            ids = [_insert_verdict(db, v, now) for v in verdicts]
            if also is not None:
                also(db)
            return ids

        result: list[int] | None = await self._store.write(advance)
        return result

    async def recent_verdicts(self, agent: str, k: int) -> list[StoredVerdict]:
        """The k most recent verdicts about `agent`, newest first (prefetch, Eq. 34)."""
        rows = await self._store.fetchall(
            "SELECT * FROM verdicts WHERE subject_agent = ? ORDER BY id DESC LIMIT ?", (agent, k)
        )
        return [_stored_verdict(r) for r in rows]

    async def forget_owner(self, owner: str) -> list[str]:
        """`forget everything` without a full erasure: the user's host libraries go (round
        summaries quote their tasks); the rounds stay, unlinked, so verdicts about agents
        keep their round. (memory.erasure does this and everything else in one commit.)"""
        libraries = [host_library(owner), host_library(owner, "dm")]
        await self._store.execute(
            "UPDATE round_summaries SET summary = '[forgotten]', library = ''"
            " WHERE library IN (?, ?)",
            libraries,
        )
        return libraries

    async def documents(self) -> list[Doc]:
        """Every group record as an index document (what a rebuild indexes)."""
        docs = [
            Doc(f"round:{r['id']}", r["library"], "note", r["summary"])
            for r in await self._store.fetchall(
                "SELECT id, library, summary FROM round_summaries WHERE library != ''"
            )
        ]
        verdicts = await self._store.fetchall("SELECT * FROM verdicts ORDER BY id")
        for s in map(_stored_verdict, verdicts):
            docs += _verdict_docs(s.id, s.agent, s.header(), s.body, s.conversation_id)
        docs += [
            Doc(f"outcome:{run_id}", library, "note", text)
            for run_id, library, text in await self._outcome_texts()
        ]
        return docs

    async def _outcome_texts(self) -> list[tuple[str, str, str]]:
        rows = await self._store.fetchall(
            "SELECT e.run_id, s.library, e.agent, e.outcome, e.detail FROM outcome_entries e"
            " JOIN round_summaries s ON s.run_id = e.run_id WHERE s.library != ''"
            " GROUP BY e.run_id, e.agent ORDER BY e.run_id, e.agent"
        )
        by_run: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
        for r in rows:
            labels = by_run.setdefault((r["run_id"], r["library"]), [])
            labels.append((r["agent"], r["outcome"], r["detail"] or r["outcome"]))
        return [
            (run_id, library, outcome_entry(run_id, labels))
            for (run_id, library), labels in by_run.items()
        ]


def _insert_verdict(db: sqlite3.Connection, v: Verdict, now: float) -> int:
    # The conversation comes from the round's row: one source of truth for it.
    cur = db.execute(
        "INSERT INTO verdicts (author, subject_agent, run_id, phase, outcome, body,"
        " covered_nodes, conversation_id, created_at)"
        " SELECT 'host', ?, ?, ?, ?, ?, ?, conversation_id, ? FROM round_summaries"
        " WHERE run_id = ?",
        (
            v.agent,
            v.run_id,
            v.phase,
            v.outcome,
            v.body,
            json.dumps(list(v.covered_nodes)),
            now,
            v.run_id,
        ),
    )
    return int(cur.lastrowid or 0)


def _stored_verdict(r: Row) -> StoredVerdict:
    return StoredVerdict(
        id=int(r["id"]),
        agent=r["subject_agent"],
        run_id=r["run_id"] or "",
        phase=r["phase"],
        outcome=r["outcome"],
        body=r["body"],
        created_at=r["created_at"],
        conversation_id=r["conversation_id"],
    )


def _pending(row: Row) -> PendingRound:
    nodes = tuple(
        RoundNode(node_id, agent, status, tuple(deps), task)
        for node_id, agent, status, deps, task in json.loads(row["nodes"])
    )
    return PendingRound(row["run_id"], row["library"], nodes, json.loads(row["outcome"]))
