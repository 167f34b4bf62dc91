"""Per-user archives in SQLite (the source of truth; the index is derived from it):
notes and profile sections, and episodes with their atomic facts and foresight."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from core.store import Row, Store

NoteKind = Literal["note", "profile"]
FactKind = Literal["fact", "foresight"]
Scope = Literal["any", "dm"]


def user_owner(platform: str, workspace: str, user_id: str) -> str:
    """The owner key of one person's records (user ids are unique per platform workspace)."""
    return f"user:{platform}:{workspace}:{user_id}"


@dataclass(frozen=True)
class Note:
    """An archive entry: an episode note, or a profile section revised from notes."""

    id: int
    owner: str
    kind: NoteKind
    tag: str
    text: str
    scope: Scope
    conversation_id: str | None
    created_at: float


@dataclass(frozen=True)
class Fact:
    """An atomic fact or a foresight (with a validity interval) of an episode."""

    id: int
    episode_id: int
    owner: str
    kind: FactKind
    text: str
    valid_from: float | None
    valid_until: float | None


@dataclass(frozen=True)
class Episode:
    """A stretch of conversation on one topic, told as a short narrative."""

    id: int
    owner: str
    conversation_id: str | None
    scope: Scope
    narrative: str
    source_turns: tuple[str, ...]
    created_at: float
    facts: tuple[Fact, ...] = ()


@dataclass(frozen=True)
class NewFact:
    """A fact to store with a new episode."""

    kind: FactKind
    text: str
    valid_from: float | None = None
    valid_until: float | None = None


class Archive:
    """Reads and writes one store's memory tables (SQL lives here, next to its owner)."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock

    async def ensure_user(self, owner: str, name: str) -> None:
        """Record the user (name refreshed)."""
        now = self._clock()
        await self._store.execute(
            "INSERT INTO memory_users (owner, name, created_at, updated_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT(owner) DO UPDATE SET name = excluded.name,"
            " updated_at = excluded.updated_at",
            (owner, name, now, now),
        )

    async def add_note(
        self,
        owner: str,
        text: str,
        *,
        kind: NoteKind = "note",
        tag: str = "",
        scope: Scope = "any",
        conversation_id: str | None = None,
        source_turn: str | None = None,
    ) -> Note:
        """Append a note (or a profile section); return it."""
        now = self._clock()

        def insert(db: sqlite3.Connection) -> int:
            cur = db.execute(
                "INSERT INTO memory_notes (owner, kind, tag, text, scope, conversation_id,"
                " source_turn, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (owner, kind, tag, text, scope, conversation_id, source_turn, now, now),
            )
            return int(cur.lastrowid or 0)

        note_id = await self._store.write(insert)
        return Note(note_id, owner, kind, tag, text, scope, conversation_id, now)

    async def set_profile(self, owner: str, tag: str, text: str) -> Note:
        """Create or revise the owner's profile section for `tag`."""
        now = self._clock()

        def upsert(db: sqlite3.Connection) -> int:
            row = db.execute(
                "SELECT id FROM memory_notes WHERE owner = ? AND kind = 'profile' AND tag = ?",
                (owner, tag),
            ).fetchone()
            if row is not None:
                db.execute(
                    "UPDATE memory_notes SET text = ?, updated_at = ? WHERE id = ?",
                    (text, now, row[0]),
                )
                return int(row[0])
            cur = db.execute(
                "INSERT INTO memory_notes (owner, kind, tag, text, created_at, updated_at)"
                " VALUES (?, 'profile', ?, ?, ?, ?)",
                (owner, tag, text, now, now),
            )
            return int(cur.lastrowid or 0)

        note_id = await self._store.write(upsert)
        return Note(note_id, owner, "profile", tag, text, "any", None, now)

    async def notes(self, owner: str, *, kind: NoteKind | None = None) -> list[Note]:
        """The owner's notes (and/or profile sections), oldest first."""
        sql = "SELECT * FROM memory_notes WHERE owner = ?"
        args: tuple[object, ...] = (owner,)
        if kind is not None:
            sql += " AND kind = ?"
            args += (kind,)
        rows = await self._store.fetchall(sql + " ORDER BY id", args)
        return [_note(r) for r in rows]

    async def add_episode(
        self,
        owner: str,
        narrative: str,
        facts: Sequence[NewFact],
        *,
        conversation_id: str | None,
        scope: Scope = "any",
        source_turns: Sequence[str] = (),
    ) -> Episode:
        """Store an episode with its facts in one commit."""
        now = self._clock()

        def insert(db: sqlite3.Connection) -> tuple[int, list[int]]:
            cur = db.execute(
                "INSERT INTO memory_episodes (owner, conversation_id, scope, narrative,"
                " source_turns, started_at, ended_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    owner,
                    conversation_id,
                    scope,
                    narrative,
                    json.dumps(list(source_turns)),
                    now,
                    now,
                    now,
                ),
            )
            episode_id = int(cur.lastrowid or 0)
            ids = []
            for fact in facts:
                cur = db.execute(
                    "INSERT INTO memory_facts (episode_id, owner, kind, text, valid_from,"
                    " valid_until, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        episode_id,
                        owner,
                        fact.kind,
                        fact.text,
                        fact.valid_from,
                        fact.valid_until,
                        now,
                    ),
                )
                ids.append(int(cur.lastrowid or 0))
            return episode_id, ids

        episode_id, ids = await self._store.write(insert)
        stored = tuple(
            Fact(i, episode_id, owner, f.kind, f.text, f.valid_from, f.valid_until)
            for i, f in zip(ids, facts, strict=True)
        )
        return Episode(
            episode_id, owner, conversation_id, scope, narrative, tuple(source_turns), now, stored
        )

    async def extend_episode(
        self, episode_id: int, narrative: str, facts: Sequence[NewFact], source_turn: str
    ) -> list[Fact]:
        """Continue an episode on the same topic: new narrative, more facts, one more turn."""
        now = self._clock()

        def extend(db: sqlite3.Connection) -> tuple[str, list[int]]:
            row = db.execute(
                "SELECT owner, source_turns FROM memory_episodes WHERE id = ?", (episode_id,)
            ).fetchone()
            turns = [*json.loads(row[1]), source_turn]
            db.execute(
                "UPDATE memory_episodes SET narrative = ?, source_turns = ?, ended_at = ?"
                " WHERE id = ?",
                (narrative, json.dumps(turns), now, episode_id),
            )
            ids = []
            for fact in facts:
                cur = db.execute(
                    "INSERT INTO memory_facts (episode_id, owner, kind, text, valid_from,"
                    " valid_until, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        episode_id,
                        row[0],
                        fact.kind,
                        fact.text,
                        fact.valid_from,
                        fact.valid_until,
                        now,
                    ),
                )
                ids.append(int(cur.lastrowid or 0))
            return str(row[0]), ids

        owner, ids = await self._store.write(extend)
        return [
            Fact(i, episode_id, owner, f.kind, f.text, f.valid_from, f.valid_until)
            for i, f in zip(ids, facts, strict=True)
        ]

    async def has_turn(self, owner: str, turn_id: str) -> bool:
        """True when one of the owner's episodes already holds this turn."""
        row = await self._store.fetchone(
            "SELECT 1 FROM memory_episodes WHERE owner = ? AND EXISTS"
            " (SELECT 1 FROM json_each(source_turns) WHERE value = ?)",
            (owner, turn_id),
        )
        return row is not None

    async def last_episode(self, owner: str, conversation_id: str) -> Episode | None:
        """The owner's newest episode in a conversation (a topic may continue it)."""
        rows = await self._store.fetchall(
            "SELECT * FROM memory_episodes WHERE owner = ? AND conversation_id = ?"
            " ORDER BY id DESC LIMIT 1",
            (owner, conversation_id),
        )
        return _episode(rows[0], ()) if rows else None

    async def episodes(self, owner: str, *, limit: int = 1000) -> list[Episode]:
        """The owner's episodes with their facts, newest first."""
        rows = await self._store.fetchall(
            "SELECT * FROM memory_episodes WHERE owner = ? ORDER BY id DESC LIMIT ?",
            (owner, limit),
        )
        facts = await self._store.fetchall(
            "SELECT * FROM memory_facts WHERE owner = ? ORDER BY id", (owner,)
        )
        by_episode: dict[int, list[Fact]] = {}
        for row in facts:
            by_episode.setdefault(int(row["episode_id"]), []).append(_fact(row))
        return [_episode(r, tuple(by_episode.get(int(r["id"]), ()))) for r in rows]

    async def forget(self, owner: str, *, containing: str | None = None) -> list[str]:
        """Delete the owner's records (all, or those whose text contains `containing`);
        return the index document ids removed."""

        # instr(), not LIKE: a user's `%` or `_` must not widen what is deleted.
        needle = (containing or "").lower()

        def delete(db: sqlite3.Connection) -> list[str]:
            gone = [
                f"note:{r[0]}"
                for r in db.execute(
                    "SELECT id FROM memory_notes WHERE owner = ? AND instr(lower(text), ?) > 0",
                    (owner, needle),
                )
            ]
            episodes = [
                int(r[0])
                for r in db.execute(
                    "SELECT DISTINCT e.id FROM memory_episodes e"
                    " LEFT JOIN memory_facts f ON f.episode_id = e.id WHERE e.owner = ?"
                    " AND (instr(lower(e.narrative), ?) > 0 OR instr(lower(f.text), ?) > 0)",
                    (owner, needle, needle),
                )
            ]
            for episode_id in episodes:
                gone.append(f"episode:{episode_id}")
                gone += [
                    f"fact:{r[0]}"
                    for r in db.execute(
                        "SELECT id FROM memory_facts WHERE episode_id = ?", (episode_id,)
                    )
                ]
                db.execute("DELETE FROM memory_facts WHERE episode_id = ?", (episode_id,))
                db.execute("DELETE FROM memory_episodes WHERE id = ?", (episode_id,))
            db.execute(
                "DELETE FROM memory_notes WHERE owner = ? AND instr(lower(text), ?) > 0",
                (owner, needle),
            )
            if not containing:
                db.execute("DELETE FROM memory_users WHERE owner = ?", (owner,))
            return gone

        removed: list[str] = await self._store.write(delete)
        return removed

    async def owners(self) -> list[str]:
        """Every owner with records."""
        rows = await self._store.fetchall(
            "SELECT owner FROM memory_notes UNION SELECT owner FROM memory_episodes"
        )
        return [str(r["owner"]) for r in rows]

    async def documents(self) -> AsyncIterator[tuple[str, str, str, str, str | None, Scope]]:
        """Every indexable record as (doc id, owner, kind, text, parent id, scope)."""
        for owner in await self.owners():
            for note in await self.notes(owner):
                yield f"note:{note.id}", owner, note.kind, note.text, None, note.scope
            for episode in await self.episodes(owner, limit=1_000_000):
                episode_doc = f"episode:{episode.id}"
                yield episode_doc, owner, "episode", episode.narrative, None, episode.scope
                for fact in episode.facts:
                    yield f"fact:{fact.id}", owner, "fact", fact.text, episode_doc, episode.scope


def _note(row: Row) -> Note:
    return Note(
        id=int(row["id"]),
        owner=row["owner"],
        kind=row["kind"],
        tag=row["tag"],
        text=row["text"],
        scope=row["scope"],
        conversation_id=row["conversation_id"],
        created_at=row["created_at"],
    )


def _fact(row: Row) -> Fact:
    return Fact(
        id=int(row["id"]),
        episode_id=int(row["episode_id"]),
        owner=row["owner"],
        kind=row["kind"],
        text=row["text"],
        valid_from=row["valid_from"],
        valid_until=row["valid_until"],
    )


def _episode(row: Row, facts: tuple[Fact, ...]) -> Episode:
    return Episode(
        id=int(row["id"]),
        owner=row["owner"],
        conversation_id=row["conversation_id"],
        scope=row["scope"],
        narrative=row["narrative"],
        source_turns=tuple(json.loads(row["source_turns"])),
        created_at=row["created_at"],
        facts=facts,
    )
