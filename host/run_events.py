"""Announces graph runs into their conversation: one edited status message, exception and
completion reports as proactive turns of the Host."""

from __future__ import annotations

import logging
from typing import Protocol

from host.graph.executor import GraphRun
from host.graph.report import progress_text
from host.graph.run_store import RunStore
from host.keyed import KeyedLocks
from host.outbox import DeliveryError
from memory.conversation_log import ConversationRef

log = logging.getLogger(__name__)


class ConversationPort(Protocol):
    """The parts of the conversation service a run announces through."""

    async def notify(self, conv: ConversationRef, text: str, *, idempotency_key: str) -> str | None:
        """Post a message (persisted first); return its platform id."""
        ...

    async def edit(self, conv: ConversationRef, message_id: str, text: str, *, key: str) -> None:
        """Edit an earlier message."""
        ...

    async def system_turn(self, conv: ConversationRef, text: str, *, key: str) -> None:
        """Start a proactive Host turn in the conversation's lane."""
        ...


class ConversationRunEvents:
    """`RunEvents` for chat conversations (background runs announce; foreground runs return
    their reports to the waiting tool call instead)."""

    def __init__(self, store: RunStore) -> None:
        self._store = store
        self._report: ReportSource | None = None
        self._port: ConversationPort | None = None
        self._locks = KeyedLocks()
        self._last_text: dict[str, str] = {}

    def bind(self, port: ConversationPort, reports: ReportSource) -> None:
        """Attach the conversation service and the run manager (assembly root, before use)."""
        self._port = port
        self._report = reports

    async def progress(self, run: GraphRun) -> None:
        """Create or edit the run's single status message."""
        if not run.record.background or self._port is None:
            return
        text = progress_text(run.record, list(run.nodes.values()))
        conv = run.record.conversation
        async with self._locks.hold(run.id):
            current = await self._store.run(run.id)
            message_id = current.status_message if current is not None else None
            key = f"run:{run.id}:status"
            if message_id is None:
                try:
                    posted = await self._port.notify(conv, text, idempotency_key=key)
                except DeliveryError as exc:
                    # The outbox retries it; the next progress call finds it sent.
                    log.warning("status message of run %s not posted yet: %s", run.id, exc)
                    return
                if posted is not None:
                    await self._store.set_status_message(run.id, posted)
            elif self._last_text.get(run.id) != text:
                await self._port.edit(conv, message_id, text, key=key)
            self._last_text[run.id] = text

    async def exception(self, run: GraphRun, node_id: str, report: str) -> None:
        """Background: the Host gets the exception report as a proactive turn."""
        if not run.record.background or self._port is None:
            return
        attempt = run.nodes[node_id].attempts
        await self._port.system_turn(
            run.record.conversation, report, key=f"run:{run.id}:exception:{node_id}:{attempt}"
        )

    async def finished(self, run: GraphRun) -> None:
        """Background: final status edit, then the run report as a proactive turn."""
        if not run.record.background or self._port is None or self._report is None:
            return
        await self.progress(run)
        self._last_text.pop(run.id, None)
        report = await self._report.report(run.id)
        await self._port.system_turn(run.record.conversation, report, key=f"run:{run.id}:report")
        await self._store.mark_reported(run.id)


class ReportSource(Protocol):
    """Produces the run report text (the run manager)."""

    async def report(self, run_id: str) -> str:
        """The report of one run."""
        ...
