"""Campaign records in SQLite: campaigns, rounds, append-only measurements, the wake-up
ledger and decisions. Every state change is committed here before anything announces it."""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from core.ids import ConversationRef
from core.store import Row, Store
from oncall.model import CampaignSpec, CampaignState, JobHandle, Measurement, WakeReason


@dataclass(frozen=True)
class CampaignRecord:
    """One stored campaign."""

    id: str
    owner: str
    conversation: ConversationRef
    spec: CampaignSpec
    state: CampaignState
    baseline: float | None
    round: int
    compute_seconds: float
    model_calls: int
    status_message: str | None  # the platform id of the campaign's one status message
    status_view: str | None  # what it shows, as JSON (re-applied after a restart)
    report: str | None
    error: str | None
    created_at: float
    updated_at: float
    closed_at: float | None


@dataclass(frozen=True)
class RoundRecord:
    """One stored round of a campaign."""

    campaign_id: str
    round: int
    state: str  # submitting | running | ended | failed
    handle: JobHandle | None
    watch: dict[str, Any] | None
    granted_seconds: float | None
    note: str | None
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    wake_reason: WakeReason | None


@dataclass(frozen=True)
class WakeRecord:
    """One wake-up of the ledger: scheduled, fired once, or cancelled by an early wake."""

    id: str
    campaign_id: str
    round: int
    reason: WakeReason
    state: str  # pending | fired | cancelled
    due_at: float
    fired_at: float | None
    lateness: float | None


@dataclass(frozen=True)
class DecisionRecord:
    """One decision taken on a campaign, with the measurement it cites."""

    id: int
    campaign_id: str
    round: int
    at: float
    action: str
    cite: int | None
    reason: str
    detail: dict[str, Any]


class CampaignStore:
    """Reads and writes campaign tables (SQL lives here, next to the campaign code)."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock

    # ----------------------------------------------------------------------- campaigns

    async def create(
        self,
        campaign_id: str,
        owner: str,
        conv: ConversationRef,
        spec: CampaignSpec,
        *,
        state: CampaignState = "planning",
    ) -> CampaignRecord:
        """Record a new campaign in `state` (its conversation row created if missing).

        `approval` for one whose command awaits a person's approval: in the same commit, so a
        crash in between can never leave it startable without one."""
        now = self._clock()

        def insert(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT OR IGNORE INTO conversations (id, platform, workspace, channel,"
                " thread, created_at, updated_at) VALUES (?,?,?,?,?,?,?)",
                (conv.id, conv.platform, conv.workspace, conv.channel, conv.thread, now, now),
            )
            db.execute(
                "INSERT INTO campaigns (id, owner, conversation_id, spec, state, baseline,"
                " created_at, updated_at) VALUES (?,?,?,?,?,?,?,?)",
                (
                    campaign_id,
                    owner,
                    conv.id,
                    spec.model_dump_json(),
                    state,
                    spec.baseline,
                    now,
                    now,
                ),
            )

        await self._store.write(insert)
        record = await self.get(campaign_id)
        assert record is not None
        return record

    async def get(self, campaign_id: str) -> CampaignRecord | None:
        """One campaign, or None."""
        rows = await self._store.fetchall(_CAMPAIGN_SELECT + " WHERE c.id = ?", (campaign_id,))
        return _campaign(rows[0]) if rows else None

    async def recent(self, *, active_only: bool = False, limit: int = 50) -> list[CampaignRecord]:
        """Campaigns, newest first (only those not closed/failed/cancelled with active_only)."""
        where = " WHERE c.state NOT IN ('closed', 'failed', 'cancelled')" if active_only else ""
        rows = await self._store.fetchall(
            _CAMPAIGN_SELECT + where + " ORDER BY c.created_at DESC LIMIT ?", (limit,)
        )
        return [_campaign(r) for r in rows]

    async def of_conversation(self, conversation_id: str) -> list[CampaignRecord]:
        """The conversation's campaigns, newest first."""
        rows = await self._store.fetchall(
            _CAMPAIGN_SELECT + " WHERE c.conversation_id = ? ORDER BY c.created_at DESC",
            (conversation_id,),
        )
        return [_campaign(r) for r in rows]

    async def update(self, campaign_id: str, **fields: Any) -> None:
        """Set columns of a campaign (state, baseline, round, report, error, …)."""
        allowed = {
            "state",
            "baseline",
            "round",
            "compute_seconds",
            "status_message",
            "status_view",
            "report",
            "error",
            "closed_at",
            "created_at",
        }
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"not campaign columns: {sorted(unknown)}")
        fields["updated_at"] = self._clock()
        columns = ", ".join(f"{name} = ?" for name in fields)
        await self._store.execute(
            f"UPDATE campaigns SET {columns} WHERE id = ?", (*fields.values(), campaign_id)
        )

    async def add_model_calls(self, campaign_id: str, calls: int) -> None:
        """Count model calls spent on a campaign (waiting campaigns add none)."""
        await self._store.execute(
            "UPDATE campaigns SET model_calls = model_calls + ? WHERE id = ?", (calls, campaign_id)
        )

    # --------------------------------------------------------------------------- rounds

    async def start_round(
        self, campaign_id: str, round_no: int, granted: float | None, note: str | None
    ) -> None:
        """Record round `round_no` as submitting (before the machine is asked)."""
        now = self._clock()

        def insert(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO campaign_rounds (campaign_id, round, state, granted_seconds, note,"
                " started_at) VALUES (?, ?, 'submitting', ?, ?, ?)",
                (campaign_id, round_no, granted, note, now),
            )
            # The campaign keeps its one status message: the new round edits it too.
            db.execute(
                "UPDATE campaigns SET round = ?, state = 'running', updated_at = ? WHERE id = ?",
                (round_no, now, campaign_id),
            )

        await self._store.write(insert)

    async def set_round(self, campaign_id: str, round_no: int, **fields: Any) -> None:
        """Update a round (state, handle, watch, ended_at, exit_code, wake_reason)."""
        allowed = {"state", "handle", "watch", "ended_at", "exit_code", "wake_reason", "note"}
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"not round columns: {sorted(unknown)}")
        if isinstance(fields.get("handle"), JobHandle):
            fields["handle"] = fields["handle"].model_dump_json()
        if isinstance(fields.get("watch"), dict):
            fields["watch"] = json.dumps(fields["watch"])
        columns = ", ".join(f"{name} = ?" for name in fields)
        await self._store.execute(
            f"UPDATE campaign_rounds SET {columns} WHERE campaign_id = ? AND round = ?",
            (*fields.values(), campaign_id, round_no),
        )

    async def rounds(self, campaign_id: str) -> list[RoundRecord]:
        """Every round of a campaign, in order."""
        rows = await self._store.fetchall(
            "SELECT * FROM campaign_rounds WHERE campaign_id = ? ORDER BY round", (campaign_id,)
        )
        return [_round(r) for r in rows]

    async def round(self, campaign_id: str, round_no: int) -> RoundRecord | None:
        """One round, or None."""
        rows = await self._store.fetchall(
            "SELECT * FROM campaign_rounds WHERE campaign_id = ? AND round = ?",
            (campaign_id, round_no),
        )
        return _round(rows[0]) if rows else None

    # --------------------------------------------------------------------- measurements

    async def record_measurements(
        self,
        campaign_id: str,
        round_no: int,
        values: Sequence[tuple[str, float, str]],
        *,
        watch: dict[str, Any],
    ) -> list[Measurement]:
        """Append measurements and the watcher's resume state in one commit (so a restart
        neither loses nor re-reads a value). Each is numbered within its campaign (#1 first)."""
        now = self._clock()

        def append(db: sqlite3.Connection) -> list[int]:
            (last,) = db.execute(
                "SELECT COALESCE(MAX(number), 0) FROM campaign_measurements WHERE campaign_id = ?",
                (campaign_id,),
            ).fetchone()
            ids = []
            for number, (name, value, line) in enumerate(values, start=int(last) + 1):
                stored = None if math.isnan(value) else value  # SQLite stores NaN as NULL
                db.execute(
                    "INSERT INTO campaign_measurements (campaign_id, number, round, at, name,"
                    " value, source_line) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (campaign_id, number, round_no, now, name, stored, line[:500]),
                )
                ids.append(number)
            db.execute(
                "UPDATE campaign_rounds SET watch = ? WHERE campaign_id = ? AND round = ?",
                (json.dumps(watch), campaign_id, round_no),
            )
            return ids

        ids = await self._store.write(append)
        return [
            Measurement(
                id=i,
                campaign_id=campaign_id,
                round=round_no,
                at=now,
                name=name,
                value=value,
                source_line=line[:500],
            )
            for i, (name, value, line) in zip(ids, values, strict=True)
        ]

    async def measurements(self, campaign_id: str) -> list[Measurement]:
        """Every measurement of a campaign, oldest first."""
        rows = await self._store.fetchall(
            "SELECT * FROM campaign_measurements WHERE campaign_id = ? ORDER BY id",
            (campaign_id,),
        )
        return [_measurement(r) for r in rows]

    # ---------------------------------------------------------------------- wake ledger

    async def counts(self, campaign_id: str) -> tuple[int, int]:
        """How many measurements and decisions the campaign has (a cheap look for a page
        that follows it)."""
        rows = await self._store.fetchall(
            "SELECT (SELECT COUNT(*) FROM campaign_measurements WHERE campaign_id = ?),"
            " (SELECT COUNT(*) FROM campaign_decisions WHERE campaign_id = ?)",
            (campaign_id, campaign_id),
        )
        return int(rows[0][0]), int(rows[0][1])

    async def schedule_wake(
        self, wake_id: str, campaign_id: str, round_no: int, reason: WakeReason, due_at: float
    ) -> None:
        """Record a wake-up as pending (idempotent by id)."""
        await self._store.execute(
            "INSERT OR IGNORE INTO campaign_wakeups (id, campaign_id, round, reason, state,"
            " due_at) VALUES (?, ?, ?, ?, 'pending', ?)",
            (wake_id, campaign_id, round_no, reason, due_at),
        )

    async def replace_wake(
        self, campaign_id: str, round_no: int, due_at: float
    ) -> tuple[str, list[str]]:
        """Record the campaign's one scheduled wake-up, cancelling any pending one in the same
        commit; (its id, the ids it replaced, to unschedule)."""

        def replace(db: sqlite3.Connection) -> tuple[str, list[str]]:
            replaced = _cancel_pending_sync(db, campaign_id)
            # Ids are never reused (a reused one would be a fired or cancelled row): two waits
            # clamped to the same deadline get a numbered suffix.
            base = wake_id = f"wake:{campaign_id}:{round_no}:{int(due_at * 1000)}"
            taken = {
                str(r[0])
                for r in db.execute(
                    "SELECT id FROM campaign_wakeups WHERE id = ? OR id LIKE ?",
                    (base, base + ".%"),
                )
            }
            n = 1
            while wake_id in taken:
                n += 1
                wake_id = f"{base}.{n}"
            db.execute(
                "INSERT INTO campaign_wakeups (id, campaign_id, round, reason, state, due_at)"
                " VALUES (?, ?, ?, 'scheduled', 'pending', ?)",
                (wake_id, campaign_id, round_no, due_at),
            )
            return wake_id, replaced

        result: tuple[str, list[str]] = await self._store.write(replace)
        return result

    async def claim_wake(
        self, wake_id: str, *, reason: WakeReason | None = None, fired_at: float
    ) -> WakeRecord | None:
        """Mark a pending wake-up fired, once: None when it already fired or was cancelled
        (the ledger is what makes a second firing do nothing)."""

        def claim(db: sqlite3.Connection) -> bool:
            cur = db.execute(
                "UPDATE campaign_wakeups SET state = 'fired', fired_at = ?,"
                " lateness = MAX(0, ? - due_at), reason = COALESCE(?, reason)"
                " WHERE id = ? AND state = 'pending'",
                (fired_at, fired_at, reason, wake_id),
            )
            return cur.rowcount == 1

        if not await self._store.write(claim):
            return None
        rows = await self._store.fetchall("SELECT * FROM campaign_wakeups WHERE id = ?", (wake_id,))
        return _wake(rows[0])

    async def cancel_pending_wakes(self, campaign_id: str) -> list[str]:
        """Cancel the campaign's pending wake-ups; return their ids (to unschedule)."""

        result: list[str] = await self._store.write(
            lambda db: _cancel_pending_sync(db, campaign_id)
        )
        return result

    async def wakes(self, campaign_id: str) -> list[WakeRecord]:
        """The campaign's wake-ups, by due time."""
        rows = await self._store.fetchall(
            "SELECT * FROM campaign_wakeups WHERE campaign_id = ? ORDER BY due_at, id",
            (campaign_id,),
        )
        return [_wake(r) for r in rows]

    async def pending_wakes(self) -> list[WakeRecord]:
        """Every pending wake-up (startup re-registers them with the scheduler)."""
        rows = await self._store.fetchall(
            "SELECT * FROM campaign_wakeups WHERE state = 'pending' ORDER BY due_at"
        )
        return [_wake(r) for r in rows]

    # ------------------------------------------------------------------------ decisions

    async def record_decision(
        self,
        campaign_id: str,
        round_no: int,
        action: str,
        cite: int | None,
        reason: str,
        detail: dict[str, Any] | None = None,
    ) -> int:
        """Append a decision; return its id."""
        now = self._clock()

        def insert(db: sqlite3.Connection) -> int:
            cur = db.execute(
                "INSERT INTO campaign_decisions (campaign_id, round, at, action, cite, reason,"
                " detail) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (campaign_id, round_no, now, action, cite, reason, json.dumps(detail or {})),
            )
            return int(cur.lastrowid or 0)

        decision_id: int = await self._store.write(insert)
        return decision_id

    async def decisions(self, campaign_id: str) -> list[DecisionRecord]:
        """The campaign's decisions in order."""
        rows = await self._store.fetchall(
            "SELECT * FROM campaign_decisions WHERE campaign_id = ? ORDER BY id", (campaign_id,)
        )
        return [_decision(r) for r in rows]


_CAMPAIGN_SELECT = (
    "SELECT c.*, v.platform, v.workspace, v.channel, v.thread FROM campaigns c"
    " JOIN conversations v ON v.id = c.conversation_id"
)


def _campaign(row: Row) -> CampaignRecord:
    return CampaignRecord(
        id=row["id"],
        owner=row["owner"],
        conversation=ConversationRef(
            row["platform"], row["workspace"], row["channel"], row["thread"]
        ),
        spec=CampaignSpec.model_validate_json(row["spec"]),
        state=row["state"],
        baseline=row["baseline"],
        round=row["round"],
        compute_seconds=row["compute_seconds"],
        model_calls=row["model_calls"],
        status_message=row["status_message"],
        status_view=row["status_view"],
        report=row["report"],
        error=row["error"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        closed_at=row["closed_at"],
    )


def _round(row: Row) -> RoundRecord:
    return RoundRecord(
        campaign_id=row["campaign_id"],
        round=row["round"],
        state=row["state"],
        handle=JobHandle.model_validate_json(row["handle"]) if row["handle"] else None,
        watch=json.loads(row["watch"]) if row["watch"] else None,
        granted_seconds=row["granted_seconds"],
        note=row["note"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        exit_code=row["exit_code"],
        wake_reason=row["wake_reason"],
    )


def _measurement(row: Row) -> Measurement:
    value = row["value"]
    return Measurement(
        id=row["number"],  # the campaign's own numbering: #1 is its first value
        campaign_id=row["campaign_id"],
        round=row["round"],
        at=row["at"],
        name=row["name"],
        value=math.nan if value is None else float(value),
        source_line=row["source_line"],
    )


def _wake(row: Row) -> WakeRecord:
    return WakeRecord(
        id=row["id"],
        campaign_id=row["campaign_id"],
        round=row["round"],
        reason=row["reason"],
        state=row["state"],
        due_at=row["due_at"],
        fired_at=row["fired_at"],
        lateness=row["lateness"],
    )


def _decision(row: Row) -> DecisionRecord:
    return DecisionRecord(
        id=row["id"],
        campaign_id=row["campaign_id"],
        round=row["round"],
        at=row["at"],
        action=row["action"],
        cite=row["cite"],
        reason=row["reason"],
        detail=json.loads(row["detail"]),
    )


def _cancel_pending_sync(db: sqlite3.Connection, campaign_id: str) -> list[str]:
    """Cancel the campaign's pending wake-ups (in the caller's transaction); their ids."""
    ids = [
        str(r[0])
        for r in db.execute(
            "SELECT id FROM campaign_wakeups WHERE campaign_id = ? AND state = 'pending'",
            (campaign_id,),
        )
    ]
    db.execute(
        "UPDATE campaign_wakeups SET state = 'cancelled'"
        " WHERE campaign_id = ? AND state = 'pending'",
        (campaign_id,),
    )
    return ids
