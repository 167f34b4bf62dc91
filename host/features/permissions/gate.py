"""The permission gate in the bot: rules from `RAVEN_HOME/permissions.toml` (per
workspace), "allow in this conversation" remembered in SQLite, every decision audited in
SQLite, and "ask" answered by a person through the prompt broker — or, for a run nobody can
be asked about, a gate built unable to ask that denies instead."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from agents.backends.base import Permit
from agents.permissions import (
    Answer,
    Decision,
    PermissionConfigError,
    PermissionGate,
    PermissionRules,
    ToolCallRequest,
    ToolTrust,
    load_rules,
)
from core.ids import ConversationRef
from core.store import Store

log = logging.getLogger(__name__)

RULES_FILE = "permissions.toml"


class SqliteRemembered:
    """Allows granted "for this conversation", kept across restarts."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock

    async def has(self, conversation_id: str, tool: str, subject: str) -> bool:
        """Was this exact call allowed for the conversation?"""
        row = await self._store.fetchone(
            "SELECT 1 FROM permission_allows WHERE conversation_id = ? AND tool = ?"
            " AND subject = ?",
            (conversation_id, tool, subject),
        )
        return row is not None

    async def add(self, conversation_id: str, tool: str, subject: str) -> None:
        """Remember the allow."""
        await self._store.execute(
            "INSERT OR IGNORE INTO permission_allows (conversation_id, tool, subject,"
            " created_at) VALUES (?, ?, ?, ?)",
            (conversation_id, tool, subject, self._clock()),
        )


class SqliteAudit:
    """Every decision, appended."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock

    async def record(self, call: ToolCallRequest, decision: Decision) -> None:
        """Append one decision."""
        await self._store.execute(
            "INSERT INTO permission_audit (at, conversation_id, requester, workspace, tool,"
            " subject, allowed, tier, reason, rule) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                self._clock(),
                call.conversation_id,
                call.requester,
                call.workspace,
                call.tool,
                call.subject[:4000],
                int(decision.allowed),
                decision.tier,
                decision.reason,
                decision.rule,
            ),
        )


class _PromptAsker:
    """The gate's `Asker` over a node's permission prompt."""

    def __init__(self, ask: Callable[[str], Awaitable[str]]) -> None:
        self._ask = ask

    async def ask(self, call: ToolCallRequest, question: str) -> Answer:
        """The person's answer (anything unexpected is a deny)."""
        answer = await self._ask(question)
        if answer == "allow_once":
            return "allow_once"
        if answer == "allow_conversation":
            return "allow_conversation"
        return "deny"


class PermissionGates:
    """Builds one gate per task (the `PermitFactory` the graph runtime takes)."""

    def __init__(self, home: Path, store: Store) -> None:
        self._path = home / RULES_FILE
        self._remembered = SqliteRemembered(store)
        self._audit = SqliteAudit(store)

    def __call__(
        self,
        conv: ConversationRef,
        requester: str,
        ask: Callable[[str], Awaitable[str]] | None,
    ) -> Permit:
        """The permit function for one task in `conv` requested by `requester`."""
        gate: PermissionGate | None = None
        lock = asyncio.Lock()

        async def permit(
            tool: str, subject: str, detail: str = "", *, trust: ToolTrust | None = None
        ) -> Decision:
            nonlocal gate
            async with lock:
                if gate is None:
                    # Read when first needed, so an edit of the file applies to the next task.
                    try:
                        rules = await asyncio.to_thread(self.rules, conv.workspace)
                    except PermissionConfigError as exc:
                        # Fail closed: a broken rules file allows nothing it might deny.
                        return Decision(False, "builtin", f"{exc} (nothing runs until it is fixed)")
                    gate = PermissionGate(
                        rules,
                        asker=_PromptAsker(ask) if ask is not None else None,
                        remembered=self._remembered,
                        audit=self._audit,
                        rules_label=str(self._path),
                    )
            call = ToolCallRequest(tool, subject, conv.id, requester, conv.workspace, detail, trust)
            return await gate.check(call)

        return permit

    def rules(self, workspace: str) -> PermissionRules:
        """The rules for one workspace (defaults when the file is missing)."""
        return load_rules(self._path, workspace)
