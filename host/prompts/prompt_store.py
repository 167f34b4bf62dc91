"""The prompts' tables: every state change is a conditional UPDATE with an audit row.

A decision only ever moves a prompt out of `pending` (so exactly one answer wins), and the
handler's "handled" mark is set once; callers learn whether they won from the return value.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import aiosqlite

from core.ids import ConversationRef
from core.store import Row, Store
from host.prompts.waiting import NO_DEADLINE
from host.runtime.conversation_log import ensure_conversation
from host.runtime.prompt_record import Prompt, PromptKind, PromptState

KINDS: tuple[PromptKind, ...] = ("approval", "choice", "free_text")
_STATES: tuple[PromptState, ...] = ("pending", "answered", "expired", "cancelled")


class PromptStore:
    """Reads and writes prompts and their audit trail; knows nothing of surfaces or handlers."""

    def __init__(self, store: Store) -> None:
        self._store = store

    # ------------------------------------------------------------------------- writing

    async def insert(self, prompt: Prompt) -> None:
        """Store a new pending prompt (and its conversation) with a `created` audit row."""
        payload_json = json.dumps(prompt.payload)  # fails here, before anything is stored
        conv = prompt.conversation
        async with self._store.transaction() as db:
            await ensure_conversation(db, conv, prompt.created_at)
            await db.execute(
                "INSERT INTO prompts (id, nonce, kind, question, options, requester,"
                " allowed_responders, conversation_id, platform, workspace, channel, thread,"
                " created_at, expires_at, state, purpose, payload)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?)",
                (
                    prompt.id,
                    prompt.nonce,
                    prompt.kind,
                    prompt.question,
                    json.dumps(list(prompt.options)),
                    prompt.requester,
                    json.dumps(list(prompt.allowed_responders)),
                    conv.id,
                    conv.platform,
                    conv.workspace,
                    conv.channel,
                    conv.thread,
                    prompt.created_at,
                    prompt.expires_at,
                    prompt.purpose,
                    payload_json,
                ),
            )
            await _audit(
                db,
                prompt.id,
                "created",
                by=prompt.requester,
                at=prompt.created_at,
                detail=f"{prompt.kind}: {prompt.question}",
            )

    async def record_shown(self, prompt_id: str, message_id: str, at: float) -> bool:
        """Remember the message showing a prompt; True while the prompt is still pending.

        The state is read in the same transaction as the id is written: a decision either
        commits before (seen here) or after (and then reads this message id to close it)."""
        async with self._store.transaction() as db:
            await db.execute(
                "UPDATE prompts SET message_id = ? WHERE id = ?", (message_id, prompt_id)
            )
            await _audit(db, prompt_id, "shown", by="system", at=at, detail=message_id)
            cur = await db.execute("SELECT state FROM prompts WHERE id = ?", (prompt_id,))
            row = await cur.fetchone()
        return row is None or row["state"] == "pending"

    async def record_answer(
        self, prompt_id: str, value: str, *, by: str, at: float, message_id: str | None
    ) -> tuple[bool, str | None]:
        """Answer a pending, unexpired prompt: (won, the message id as stored now).

        A `message_id` given fills in one `show` has not recorded yet."""
        async with self._store.transaction() as db:
            cur = await db.execute(
                "UPDATE prompts SET state = 'answered', answer = ?, answered_by = ?,"
                " decided_at = ?, message_id = COALESCE(message_id, ?)"
                " WHERE id = ? AND state = 'pending' AND expires_at > ?",
                (value, by, at, message_id, prompt_id, at),
            )
            if cur.rowcount != 1:
                return False, None
            await _audit(db, prompt_id, "answered", by=by, at=at, detail=value)
            # Read back in the same transaction: a post that returned meanwhile recorded
            # the id of the message that has to be closed.
            cur = await db.execute("SELECT message_id FROM prompts WHERE id = ?", (prompt_id,))
            row = await cur.fetchone()
        return True, row["message_id"] if row is not None else message_id

    async def expire(self, prompt_ids: Sequence[str], at: float) -> list[str]:
        """Expire those of `prompt_ids` still pending and due at `at`; return the ones won."""
        won: list[str] = []
        async with self._store.transaction() as db:
            for prompt_id in prompt_ids:
                cur = await db.execute(
                    "UPDATE prompts SET state = 'expired', decided_at = ?"
                    " WHERE id = ? AND state = 'pending' AND expires_at <= ?",
                    (at, prompt_id, at),
                )
                if cur.rowcount == 1:
                    won.append(prompt_id)
                    await _audit(
                        db, prompt_id, "expired", by="system", at=at, detail="deadline passed"
                    )
        return won

    async def hold(self, prompt_ids: Sequence[str], at: float) -> list[str]:
        """Hold those of `prompt_ids` still pending and due at `at`: no deadline from now on
        (see host/prompts/waiting.py); return the ones won."""
        won: list[str] = []
        async with self._store.transaction() as db:
            for prompt_id in prompt_ids:
                cur = await db.execute(
                    "UPDATE prompts SET expires_at = ?, held_at = ?"
                    " WHERE id = ? AND state = 'pending' AND expires_at <= ?",
                    (NO_DEADLINE, at, prompt_id, at),
                )
                if cur.rowcount == 1:
                    won.append(prompt_id)
                    await _audit(
                        db, prompt_id, "held", by="system", at=at, detail="deadline passed"
                    )
        return won

    async def claim_reminder(self, prompt_id: str, *, at: float, detail: str) -> bool:
        """Record the reminder of a pending prompt (once: False when it was recorded, or the
        prompt was decided)."""
        async with self._store.transaction() as db:
            cur = await db.execute(
                "UPDATE prompts SET reminded_at = ?"
                " WHERE id = ? AND state = 'pending' AND reminded_at IS NULL",
                (at, prompt_id),
            )
            if cur.rowcount != 1:
                return False
            await _audit(db, prompt_id, "reminded", by="system", at=at, detail=detail)
        return True

    async def cancel_pending(
        self, conversation: ConversationRef, *, actor: str, requester: str | None, at: float
    ) -> list[str]:
        """Cancel a conversation's pending prompts (only `requester`'s when given); return
        the ones won."""
        won: list[str] = []
        async with self._store.transaction() as db:
            cur = await db.execute(
                "SELECT id FROM prompts WHERE conversation_id = ? AND state = 'pending'"
                " AND (? IS NULL OR requester = ?)",
                (conversation.id, requester, requester),
            )
            ids = [str(r["id"]) for r in await cur.fetchall()]
            for prompt_id in ids:
                cur = await db.execute(
                    "UPDATE prompts SET state = 'cancelled', decided_at = ?"
                    " WHERE id = ? AND state = 'pending'",
                    (at, prompt_id),
                )
                if cur.rowcount == 1:
                    won.append(prompt_id)
                    await _audit(
                        db, prompt_id, "cancelled", by=actor, at=at, detail="conversation stopped"
                    )
        return won

    async def mark_handled(self, prompt_id: str, *, at: float, detail: str) -> None:
        """Record that a decided prompt's handler ran (once: a second mark is a no-op)."""
        async with self._store.transaction() as db:
            cur = await db.execute(
                "UPDATE prompts SET handled = 1 WHERE id = ? AND handled = 0", (prompt_id,)
            )
            if cur.rowcount == 1:
                await _audit(db, prompt_id, "handled", by="system", at=at, detail=detail)

    async def note(self, prompt_id: str, action: str, *, by: str, at: float, detail: str) -> None:
        """An audit row for an attempt that changed nothing (refused, duplicate)."""
        await self._store.execute(
            "INSERT INTO prompt_audit (prompt_id, at, actor, action, detail)"
            " VALUES (?, ?, ?, ?, ?)",
            (prompt_id, at, by, action, detail),
        )

    # ------------------------------------------------------------------------- reading

    async def get(self, prompt_id: str) -> Prompt | None:
        """One prompt by id, as stored."""
        row = await self._store.fetchone("SELECT * FROM prompts WHERE id = ?", (prompt_id,))
        return _prompt(row) if row is not None else None

    async def unhandled(self, prompt_id: str) -> Prompt | None:
        """The prompt when it is decided and its handler has not run yet, else None."""
        row = await self._store.fetchone("SELECT * FROM prompts WHERE id = ?", (prompt_id,))
        if row is None or row["state"] == "pending" or row["handled"]:
            return None
        return _prompt(row)

    async def unhandled_ids(self) -> list[str]:
        """Decided prompts whose handler has not run, in the order they were decided."""
        rows = await self._store.fetchall(
            "SELECT id FROM prompts WHERE state != 'pending' AND handled = 0"
            " ORDER BY decided_at, rowid"
        )
        return [str(r["id"]) for r in rows]

    async def due_ids(self, at: float) -> list[str]:
        """Pending prompts past their deadline at `at`, soonest first."""
        rows = await self._store.fetchall(
            "SELECT id FROM prompts WHERE state = 'pending' AND expires_at <= ?"
            " ORDER BY expires_at",
            (at,),
        )
        return [str(r["id"]) for r in rows]

    async def pending(
        self, conversation: ConversationRef | None = None, *, newest_first: bool = False
    ) -> list[Prompt]:
        """Pending prompts (of one conversation when given), oldest first unless told."""
        order = "DESC" if newest_first else "ASC"
        if conversation is None:
            rows = await self._store.fetchall(
                "SELECT * FROM prompts WHERE state = 'pending'"
                f" ORDER BY created_at {order}, rowid {order}"
            )
        else:
            rows = await self._store.fetchall(
                "SELECT * FROM prompts WHERE state = 'pending' AND conversation_id = ?"
                f" ORDER BY created_at {order}, rowid {order}",
                (conversation.id,),
            )
        return [_prompt(r) for r in rows]

    async def unreminded(self) -> list[Prompt]:
        """Pending prompts whose reminder was not recorded yet, oldest first."""
        rows = await self._store.fetchall(
            "SELECT * FROM prompts WHERE state = 'pending' AND reminded_at IS NULL"
            " ORDER BY created_at, rowid"
        )
        return [_prompt(r) for r in rows]

    async def reminded(self, prompt_id: str) -> bool:
        """True once the prompt's reminder was recorded (sent, or skipped for good)."""
        row = await self._store.fetchone(
            "SELECT reminded_at FROM prompts WHERE id = ?", (prompt_id,)
        )
        return row is not None and row["reminded_at"] is not None

    async def decided_with_id_start(
        self, conversation: ConversationRef, start: str
    ) -> list[Prompt]:
        """Up to two decided prompts of the conversation whose id starts with `start`
        (lower case)."""
        rows = await self._store.fetchall(
            "SELECT * FROM prompts WHERE conversation_id = ? AND state != 'pending'"
            " AND lower(substr(id, 1, ?)) = ? LIMIT 2",
            (conversation.id, len(start), start),
        )
        return [_prompt(r) for r in rows]

    async def with_payload(self, purpose: str, key: str, value: str) -> list[Prompt]:
        """Every prompt of `purpose` (any state) whose payload's `key` is `value`, oldest first."""
        rows = await self._store.fetchall(
            "SELECT * FROM prompts WHERE purpose = ? AND json_extract(payload, ?) = ?"
            " ORDER BY created_at, rowid",
            (purpose, f"$.{key}", value),
        )
        return [_prompt(r) for r in rows]

    async def audit(self, prompt_id: str) -> list[dict[str, Any]]:
        """The prompt's audit trail, oldest first."""
        rows = await self._store.fetchall(
            "SELECT id, prompt_id, at, actor, action, detail FROM prompt_audit"
            " WHERE prompt_id = ? ORDER BY id",
            (prompt_id,),
        )
        return [dict(r) for r in rows]


async def _audit(
    db: aiosqlite.Connection, prompt_id: str, action: str, *, by: str, at: float, detail: str
) -> None:
    await db.execute(
        "INSERT INTO prompt_audit (prompt_id, at, actor, action, detail) VALUES (?, ?, ?, ?, ?)",
        (prompt_id, at, by, action, detail),
    )


def _prompt(row: Row) -> Prompt:
    state = str(row["state"])
    kind = str(row["kind"])
    if state not in _STATES or kind not in KINDS:
        raise ValueError(f"corrupt prompt row {row['id']!r}: kind={kind!r} state={state!r}")
    return Prompt(
        id=str(row["id"]),
        nonce=str(row["nonce"]),
        kind=kind,
        question=str(row["question"]),
        options=tuple(json.loads(row["options"])),
        requester=str(row["requester"]),
        allowed_responders=tuple(json.loads(row["allowed_responders"])),
        conversation=ConversationRef(
            str(row["platform"]), str(row["workspace"]), str(row["channel"]), str(row["thread"])
        ),
        created_at=float(row["created_at"]),
        expires_at=float(row["expires_at"]),
        state=state,
        answer=row["answer"],
        answered_by=row["answered_by"],
        purpose=str(row["purpose"]),
        payload=dict(json.loads(row["payload"] or "{}")),
        message_id=row["message_id"],
        decided_at=row["decided_at"],
    )
