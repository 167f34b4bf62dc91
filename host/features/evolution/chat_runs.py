"""Evolution runs started from chat: recorded before they are announced, so a restart
resumes each unfinished one where its records stop and reports in its thread."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

from core.ids import ConversationRef
from core.store import Store
from host.evaluation.evolution.search import EvolveSettings


@dataclass(frozen=True)
class ChatRun:
    """Who asked for which evolution, in which thread."""

    run_id: str
    conversation: ConversationRef
    requested_by: str
    agent: str
    tasks: str  # the task file's name under RAVEN_HOME/evolve/tasks/
    settings: EvolveSettings


class ChatRuns:
    """The `evo_chat_runs` table."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def add(self, run: ChatRun) -> None:
        """Record a run as running (before it is announced)."""
        await self._store.execute(
            "INSERT INTO evo_chat_runs (run_id, conversation, requested_by, agent, tasks,"
            " settings, state, created_at) VALUES (?, ?, ?, ?, ?, ?, 'running', ?)",
            (
                run.run_id,
                run.conversation.id,
                run.requested_by,
                run.agent,
                run.tasks,
                json.dumps(asdict(run.settings)),
                time.time(),
            ),
        )

    async def finish(self, run_id: str, state: str) -> None:
        """The run ended (`finished` or `failed`)."""
        await self._store.execute(
            "UPDATE evo_chat_runs SET state = ? WHERE run_id = ?", (state, run_id)
        )

    async def unfinished(self) -> list[ChatRun]:
        """Runs a restart interrupted, oldest first."""
        rows = await self._store.fetchall(
            "SELECT * FROM evo_chat_runs WHERE state = 'running' ORDER BY created_at"
        )
        return [
            ChatRun(
                run_id=r["run_id"],
                conversation=ConversationRef.parse(r["conversation"]),
                requested_by=r["requested_by"],
                agent=r["agent"],
                tasks=r["tasks"],
                settings=EvolveSettings(**json.loads(r["settings"])),
            )
            for r in rows
        ]
