"""`forget everything`: erase what raven.db and RAVEN_HOME hold derived from one user's
messages. All rows change in one commit; the user's run records on disk are deleted after
it; then the memory service rebuilds the recall index from what is left. The erasure is
recorded (memory_erasures) in that commit and marked finished only after the index was
rebuilt: one left unfinished (a crash mid-way, or a run of theirs still going) is done
again at the next start. Every step is idempotent, so doing it again finishes the job.

What counts as the user's: their inbound messages (their author id in a conversation of
their platform workspace); the turns they started and the bot's messages in them; each of
their DM conversations as a whole; the graph runs they submitted or that ran in their DM,
the report turns about those runs, and everything derived from those runs. In other
people's records of the conversations they took part in, exact quotes of their messages
(whole, or one line of at least MIN_QUOTE characters) and of their runs' tasks become
`[forgotten]`; a model's paraphrase cannot be recognised and stays.

Per table, what happens and why anything stays:
- memory_users, memory_notes, memory_episodes, memory_facts: the owner's rows deleted.
- messages: text → `[forgotten]` (and the payload's `text`/`context`); rows kept as the
  delivery ledger (ids, author, time, dedup key: who wrote when, not what).
- turns: transcript → `[]`, error cleared; rows kept for accounting (status, tokens).
- graph_runs: task_summary, status_message → `[forgotten]`, submission → `{}`; kept: the
  run ledger (state, submitter, times). A run still going is left until it ended.
- graph_nodes of those runs: summary, template → `[forgotten]`; continuation, error and the
  judge's verdict cleared; kept: agent, state, counts.
- agent_instances used by those runs or living in their DMs: deleted (history = tasks).
- round_summaries of those runs or in their host libraries: summary → `[forgotten]`, node
  tasks emptied, unlinked from the library; kept: the agents' outcome labels (Eq. 36).
- verdicts about those runs: body → `[forgotten]`; kept: agent, phase, outcome label.
- outcome_entries: kept (agent and labels, no text).
- agent_cases from those runs: deleted. skill_clusters: their case ids and intent previews
  removed, a cluster left empty deleted (the centroid, a mean of vectors, stays).
  experience_skills: their case ids dropped from the lineage; bodies kept as agent-level
  lessons (exact quotes scrubbed).
- prompts asked of the user (once decided) and every prompt in their DMs: question →
  `[forgotten]`, options `[]`, answer and payload cleared; prompt_audit detail of those
  cleared; audit rows kept (who decided what, when).
- permission_audit of the user's requests: subject and reason → `[forgotten]`; kept: who,
  tool, decision, tier, time. permission_allows of their DMs deleted.
- kept as they are: campaigns and their rounds, measurements, decisions and wake-ups (the
  audit of commands run on machines), skill_injections, dispatches, dedup, conversations and
  conversation_flags (ids only), memory_erasures (owner key and times).
Files: runs/<run>/ of those runs deleted; index/ rebuilt by the memory service. Kept:
workspaces/ (the work agents produced in a conversation, shared by its members) and
campaigns/ (round logs, part of the campaign audit).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from core.store import Store

T = TypeVar("T")
FORGOTTEN = "[forgotten]"
MIN_QUOTE = 8  # shorter lines ("ok", "thanks") are not recognisable as anyone's quote
LIVE_RUN_STATES = ("running", "awaiting_approval")

# SQL: the owner key of a row's author in its conversation's platform workspace.
_OWNER_OF = "'user:' || c.platform || ':' || c.workspace || ':' || {author}"


@dataclass(frozen=True)
class Erased:
    """What one erasure did: memory records deleted, run folders deleted, and whether
    something had to wait (a run still going)."""

    records: int
    run_dirs: tuple[Path, ...]
    complete: bool


class UserErasure:
    """Erases one user's derived rows in one commit and their run folders after it."""

    def __init__(
        self, store: Store, *, runs_root: Path | None, clock: Callable[[], float] = time.time
    ) -> None:
        self._store = store
        self._runs_root = runs_root.resolve() if runs_root is not None else None
        self._clock = clock

    async def erase(self, owner: str) -> Erased:
        """Redact and delete the owner's rows (one commit), then their run folders."""
        if not owner.startswith("user:"):
            raise ValueError(f"not a user's owner key: {owner!r} (expected user:PLATFORM:…)")
        now = self._clock()
        erased: Erased = await self._store.write(lambda db: _erase(db, owner, now))
        await self._store.checkpoint()
        for run_dir in erased.run_dirs:
            if self._inside_runs(run_dir):
                await asyncio.to_thread(shutil.rmtree, run_dir, True)
        return erased

    async def finish(self, owner: str) -> None:
        """The erasure is complete (its index was rebuilt)."""
        await self._store.execute(
            "UPDATE memory_erasures SET finished_at = ? WHERE owner = ?", (self._clock(), owner)
        )

    async def unfinished(self) -> list[str]:
        """Owners whose erasure was started and not finished (a crash, a live run)."""
        rows = await self._store.fetchall(
            "SELECT owner FROM memory_erasures WHERE finished_at IS NULL ORDER BY requested_at"
        )
        return [str(r["owner"]) for r in rows]

    def _inside_runs(self, path: Path) -> bool:
        # A path read from the database is deleted only inside runs/: never follow it out.
        if self._runs_root is None:
            return False
        try:
            return path.resolve().is_relative_to(self._runs_root) and path.resolve() != (
                self._runs_root
            )
        except OSError:
            return False


def _erase(db: sqlite3.Connection, owner: str, now: float) -> Erased:
    # Freed and rewritten cells are zeroed, not left readable in the file's free space.
    db.execute("PRAGMA secure_delete = ON")
    db.execute(
        "INSERT INTO memory_erasures (owner, requested_at) VALUES (?, ?)"
        " ON CONFLICT(owner) DO UPDATE SET requested_at = excluded.requested_at,"
        " finished_at = NULL",
        (owner, now),
    )
    records = _delete_memory(db, owner)
    said = db.execute(
        "SELECT m.id, m.conversation_id, m.text, m.payload FROM messages m"
        " JOIN conversations c ON c.id = m.conversation_id"
        f" WHERE m.direction = 'in' AND {_OWNER_OF.format(author='m.author_id')} = ?",
        (owner,),
    ).fetchall()
    dms = sorted({str(r[1]) for r in said if _is_dm(r[3])})
    runs, live = _runs_of(db, owner, dms)
    turns = _turns_of(db, owner, dms, runs)
    needles = _needles([str(r[2]) for r in said] + _run_texts(db, runs))
    conversations = sorted(
        {str(r[1]) for r in said}
        | {
            str(r[0])
            for r in _select_in(db, "SELECT DISTINCT conversation_id FROM graph_runs", "id", runs)
        }
    )
    run_dirs = _redact_runs(db, runs)
    _forget_host_libraries(db, owner)
    _redact_messages_and_turns(db, [int(r[0]) for r in said], turns, dms)
    _redact_prompts_and_audit(db, owner, dms)
    _forget_cases(db, runs)
    _scrub_quotes(db, conversations, needles)
    return Erased(records, tuple(run_dirs), complete=not live)


def _delete_memory(db: sqlite3.Connection, owner: str) -> int:
    counts = [
        db.execute("DELETE FROM memory_facts WHERE owner = ?", (owner,)).rowcount,
        db.execute("DELETE FROM memory_episodes WHERE owner = ?", (owner,)).rowcount,
        db.execute("DELETE FROM memory_notes WHERE owner = ?", (owner,)).rowcount,
    ]
    db.execute("DELETE FROM memory_users WHERE owner = ?", (owner,))
    return sum(counts)


def _is_dm(payload: object) -> bool:
    try:
        data = json.loads(str(payload))
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("is_dm") is True


def _runs_of(db: sqlite3.Connection, owner: str, dms: Sequence[str]) -> tuple[list[str], bool]:
    """The finished runs the owner submitted or that ran in their DMs; whether a live one
    had to wait."""
    marks = ",".join("?" * len(dms))
    in_dm = f" OR g.conversation_id IN ({marks})" if dms else ""
    rows = db.execute(
        "SELECT g.id, g.state FROM graph_runs g JOIN conversations c ON c.id = g.conversation_id"
        f" WHERE {_OWNER_OF.format(author='g.submitted_by')} = ?{in_dm}",
        (owner, *dms),
    ).fetchall()
    finished = [str(r[0]) for r in rows if r[1] not in LIVE_RUN_STATES]
    return finished, len(finished) < len(rows)


def _turns_of(
    db: sqlite3.Connection, owner: str, dms: Sequence[str], runs: Sequence[str]
) -> list[str]:
    """The owner's turns, every turn of their DMs and the report turns about their runs."""
    turns = {
        str(r[0])
        for r in db.execute(
            "SELECT t.id FROM turns t JOIN conversations c ON c.id = t.conversation_id"
            f" WHERE t.kind = 'user' AND {_OWNER_OF.format(author='t.author_id')} = ?",
            (owner,),
        )
    }
    turns |= {str(r[0]) for r in _select_in(db, "SELECT id FROM turns", "conversation_id", dms)}
    for run_id in runs:
        turns |= {
            str(r[0])
            for r in db.execute(
                "SELECT DISTINCT t.id FROM turns t JOIN messages m ON m.turn_id = t.id"
                " WHERE t.kind = 'system' AND instr(m.text, ?) > 0",
                (run_id,),
            )
        }
    return sorted(turns)


def _run_texts(db: sqlite3.Connection, runs: Sequence[str]) -> list[str]:
    texts = [str(r[0]) for r in _select_in(db, "SELECT task_summary FROM graph_runs", "id", runs)]
    for summary, template in _select_in(
        db, "SELECT summary, template FROM graph_nodes", "run_id", runs
    ):
        texts += [str(summary or ""), str(template or "")]
    return [t for t in texts if t != FORGOTTEN]


def _redact_runs(db: sqlite3.Connection, runs: Sequence[str]) -> list[Path]:
    run_dirs = [
        Path(str(r[0])) for r in _select_in(db, "SELECT run_dir FROM graph_runs", "id", runs)
    ]
    instances = _select_in(
        db,
        "SELECT DISTINCT conversation_id, instance FROM graph_nodes",
        "run_id",
        runs,
        "instance IS NOT NULL",
    )
    _update_in(
        db,
        "UPDATE graph_runs SET task_summary = ?, status_message = CASE WHEN status_message"
        " IS NULL THEN NULL ELSE ? END, submission = '{}'",
        (FORGOTTEN, FORGOTTEN),
        "id",
        runs,
    )
    _update_in(
        db,
        "UPDATE graph_nodes SET summary = ?, template = ?, continuation = NULL, error = NULL,"
        " verdict = NULL",
        (FORGOTTEN, FORGOTTEN),
        "run_id",
        runs,
    )
    db.executemany(
        "DELETE FROM agent_instances WHERE conversation_id = ? AND handle = ?", instances
    )
    _update_in(db, "UPDATE verdicts SET body = ?", (FORGOTTEN,), "run_id", runs)
    for rowid, nodes in _select_in(db, "SELECT rowid, nodes FROM round_summaries", "run_id", runs):
        _forget_round(db, int(rowid), str(nodes))
    return run_dirs


def _forget_host_libraries(db: sqlite3.Connection, owner: str) -> None:
    # Rounds deposited in the user's libraries (their runs, found above, as a rule).
    libraries = [f"host:{owner}", f"host:{owner}#dm"]
    for rowid, nodes in _select_in(
        db, "SELECT rowid, nodes FROM round_summaries", "library", libraries
    ):
        _forget_round(db, int(rowid), str(nodes))


def _forget_round(db: sqlite3.Connection, rowid: int, nodes: str) -> None:
    try:
        decoded = [[*n[:4], ""] for n in json.loads(nodes)]  # [id, agent, status, deps, task]
    except (ValueError, TypeError):
        decoded = []
    db.execute(
        "UPDATE round_summaries SET summary = ?, nodes = ?, library = '' WHERE rowid = ?",
        (FORGOTTEN, json.dumps(decoded), rowid),
    )


def _redact_messages_and_turns(
    db: sqlite3.Connection, said: Sequence[int], turns: Sequence[str], dms: Sequence[str]
) -> None:
    redact_message = (
        "UPDATE messages SET text = ?, payload = CASE WHEN json_valid(payload)"
        " THEN json_set(payload, '$.text', ?, '$.context', '') ELSE NULL END"
    )
    params = (FORGOTTEN, FORGOTTEN)
    _update_in(db, redact_message, params, "id", said)
    # Replies made without a turn (a command's answer, a notice) are keyed by the message.
    answers = [f"{kind}:{i}" for i in said for kind in ("command", "prompt-reply", "busy")]
    _update_in(db, redact_message, params, "idempotency_key", answers)
    _update_in(db, redact_message, params, "turn_id", turns)
    _update_in(db, redact_message, params, "conversation_id", dms)
    _update_in(db, "UPDATE turns SET transcript = '[]', error = NULL", (), "id", turns)
    _update_in(db, "DELETE FROM agent_instances", (), "conversation_id", dms)
    _update_in(db, "DELETE FROM permission_allows", (), "conversation_id", dms)


def _redact_prompts_and_audit(db: sqlite3.Connection, owner: str, dms: Sequence[str]) -> None:
    marks = ",".join("?" * len(dms))
    in_dm = f" OR p.conversation_id IN ({marks})" if dms else ""
    prompts = [
        str(r[0])
        for r in db.execute(
            "SELECT p.id FROM prompts p JOIN conversations c ON c.id = p.conversation_id"
            f" WHERE p.state != 'pending' AND p.handled = 1"
            f" AND ({_OWNER_OF.format(author='p.requester')} = ?{in_dm})",
            (owner, *dms),
        )
    ]
    _update_in(
        db,
        "UPDATE prompts SET question = ?, options = '[]', answer = NULL, payload = '{}'",
        (FORGOTTEN,),
        "id",
        prompts,
    )
    _update_in(db, "UPDATE prompt_audit SET detail = NULL", (), "prompt_id", prompts)
    db.execute(
        "UPDATE permission_audit SET subject = ?, reason = ? WHERE rowid IN (SELECT a.rowid"
        " FROM permission_audit a JOIN conversations c ON c.id = a.conversation_id"
        f" WHERE {_OWNER_OF.format(author='a.requester')} = ?)",
        (FORGOTTEN, FORGOTTEN, owner),
    )
    if dms:
        _update_in(
            db,
            "UPDATE permission_audit SET subject = ?, reason = ?",
            (FORGOTTEN, FORGOTTEN),
            "conversation_id",
            dms,
        )


def _forget_cases(db: sqlite3.Connection, runs: Sequence[str]) -> None:
    cases = _select_in(db, "SELECT id, intent FROM agent_cases", "run_id", runs)
    if not cases:
        return
    ids = {str(r[0]) for r in cases}
    intents = {str(r[1]) for r in cases}
    _update_in(db, "DELETE FROM agent_cases", (), "run_id", runs)
    for cluster_id, count, members, previews in db.execute(
        "SELECT id, count, members, previews FROM skill_clusters"
    ).fetchall():
        kept = [m for m in json.loads(members) if str(m) not in ids]
        shown = [p for p in json.loads(previews) if str(p) not in intents]
        if not kept:
            db.execute("DELETE FROM skill_clusters WHERE id = ?", (cluster_id,))
            continue
        removed = len(json.loads(members)) - len(kept)
        db.execute(
            "UPDATE skill_clusters SET count = ?, members = ?, previews = ? WHERE id = ?",
            (max(int(count) - removed, len(kept)), json.dumps(kept), json.dumps(shown), cluster_id),
        )
    for skill_id, lineage in db.execute("SELECT id, lineage FROM experience_skills").fetchall():
        kept = [c for c in json.loads(lineage) if str(c) not in ids]
        db.execute(
            "UPDATE experience_skills SET lineage = ? WHERE id = ?", (json.dumps(kept), skill_id)
        )


# (table, text columns) scrubbed of quotes in the conversations the user took part in.
_IN_CONVERSATIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("messages", ("text", "payload")),
    ("turns", ("transcript", "error")),
    ("agent_instances", ("history",)),
    ("prompts", ("question", "options", "answer", "payload")),
    ("graph_runs", ("task_summary", "submission", "status_message")),
    ("graph_nodes", ("summary", "template", "continuation", "error", "verdict")),
    ("round_summaries", ("summary", "nodes")),
    ("verdicts", ("body",)),
)
# Agent-level records, not tied to a conversation: scrubbed everywhere.
_EVERYWHERE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("agent_cases", ("intent", "approach", "insight")),
    ("skill_clusters", ("previews",)),
    ("experience_skills", ("description", "body")),
)


def _needles(texts: Iterable[str]) -> list[str]:
    """Quotes to look for: each text whole and each of its lines, as stored and as JSON
    escapes them (transcripts and payloads are JSON), longest first."""
    found: set[str] = set()
    for text in texts:
        for line in [text, *text.splitlines()]:
            quote = line.strip()
            if len(quote) < MIN_QUOTE or quote == FORGOTTEN:
                continue
            found.add(quote)
            found.add(json.dumps(quote)[1:-1])
            found.add(json.dumps(quote, ensure_ascii=False)[1:-1])
    return sorted(found, key=len, reverse=True)


def _scrub_quotes(
    db: sqlite3.Connection, conversations: Sequence[str], needles: Sequence[str]
) -> None:
    if not needles:
        return
    for table, columns in _IN_CONVERSATIONS:
        for batch in _batches(conversations):
            marks = ",".join("?" * len(batch))
            _scrub_table(db, table, columns, f"conversation_id IN ({marks})", batch, needles)
    for table, columns in _EVERYWHERE:
        _scrub_table(db, table, columns, "1", (), needles)


def _scrub_table(
    db: sqlite3.Connection,
    table: str,
    columns: Sequence[str],
    where: str,
    params: Sequence[object],
    needles: Sequence[str],
) -> None:
    listed = ", ".join(columns)
    for row in db.execute(f"SELECT rowid, {listed} FROM {table} WHERE {where}", params).fetchall():
        changed: dict[str, str] = {}
        for column, value in zip(columns, row[1:], strict=True):
            if not isinstance(value, str):
                continue
            scrubbed = value
            for needle in needles:
                if needle in scrubbed:
                    scrubbed = scrubbed.replace(needle, FORGOTTEN)
            if scrubbed != value:
                changed[column] = scrubbed
        if changed:
            sets = ", ".join(f"{c} = ?" for c in changed)
            db.execute(f"UPDATE {table} SET {sets} WHERE rowid = ?", (*changed.values(), row[0]))


def _batches(values: Sequence[T], size: int = 500) -> list[Sequence[T]]:
    # SQLite limits bound parameters per statement; large lists go in slices.
    return [values[i : i + size] for i in range(0, len(values), size)]


def _select_in(
    db: sqlite3.Connection, select: str, column: str, values: Sequence[str], also: str = "1"
) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for batch in _batches(values):
        marks = ",".join("?" * len(batch))
        rows += db.execute(f"{select} WHERE {column} IN ({marks}) AND {also}", batch).fetchall()
    return rows


def _update_in(
    db: sqlite3.Connection,
    statement: str,
    params: Sequence[object],
    column: str,
    values: Sequence[object],
) -> None:
    for batch in _batches(values):
        marks = ",".join("?" * len(batch))
        db.execute(f"{statement} WHERE {column} IN ({marks})", (*params, *batch))
