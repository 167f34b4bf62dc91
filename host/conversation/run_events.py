"""Announces graph runs into their conversation: one edited status message, exception and
completion reports as proactive turns of the Host.

With a model, the Host reads the report (outputs fenced as untrusted data) and writes the
reply. Without one (offline) the report itself is the reply, so the turn carries the report
for people instead: outputs verbatim in code blocks, no host paths."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Protocol

from core.ids import ConversationRef
from core.keyed import KeyedLocks
from host.conversation.outbox import DeliveryError
from host.conversation.run_files import ChosenFiles, RunAttachments
from host.conversation.viewer_links import RunLinks
from host.graph.report import progress_text
from host.graph.report_loader import Audience, load_report
from host.graph.run_store import RunStore
from host.runtime.events import EventBus, RunException, RunFinished, RunProgress
from host.runtime.run_snapshot import RunSnapshot

log = logging.getLogger(__name__)

# A run's status message is edited at most once per this many seconds (plus the final edit).
EDIT_INTERVAL_SECONDS = 1.0


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
    """Announces run events in chat conversations (background runs announce; foreground
    runs return their reports to the waiting tool call instead)."""

    def __init__(
        self,
        store: RunStore,
        port: ConversationPort,
        reports: ReportSource,
        *,
        edit_interval: float = EDIT_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        reports_reach_users: bool = False,
        attachments: RunAttachments | None = None,
        run_links: RunLinks | None = None,
    ) -> None:
        self._store = store
        # The viewer's "Open" line on the status message (None: no viewer).
        self._run_links = run_links
        # What a run made goes to its thread as files, after the report's reply (None: not).
        self._attachments = attachments
        # Offline: the report is posted as it is (no model writes a reply from it).
        self._reports_reach_users = reports_reach_users
        self._report = reports
        self._port = port
        self._interval = edit_interval
        self._clock = clock
        self._locks = KeyedLocks()
        self._last_text: dict[str, str] = {}
        self._last_edit: dict[str, float] = {}
        self._message_ids: dict[str, str] = {}
        # The newest snapshot of each announced background run: what an edit shows, so a
        # throttled edit shows the newest state, not the one that was throttled.
        self._latest: dict[str, RunSnapshot] = {}
        # One trailing edit per run while edits are throttled; it shows the newest state.
        self._flushers: dict[str, asyncio.Task[None]] = {}

    def subscribe(self, bus: EventBus) -> None:
        """Hear the graph runtime's events (assembly root, before the bus is frozen)."""
        bus.subscribe(RunProgress, self._on_progress)
        bus.subscribe(RunException, self._on_exception)
        bus.subscribe(RunFinished, self._on_finished)

    async def _on_progress(self, event: RunProgress) -> None:
        await self.progress(event.run)

    async def _on_exception(self, event: RunException) -> None:
        await self.exception(event.run, event.node_id, event.report)

    async def _on_finished(self, event: RunFinished) -> None:
        await self.finished(event.run)

    async def progress(self, run: RunSnapshot) -> None:
        """Create the run's single status message, or edit it at most once per interval."""
        if not run.background:
            return
        self._latest[run.id] = run
        if run.id in self._flushers:
            return  # a trailing edit is already due and will show this change too
        wait = self._last_edit.get(run.id, -math.inf) + self._interval - self._clock()
        if run.id not in self._message_ids or wait <= 0:
            await self._publish(run)
            return
        task = asyncio.get_running_loop().create_task(
            self._flush_later(run, wait), name=f"run-status:{run.id}"
        )
        self._flushers[run.id] = task
        task.add_done_callback(lambda _: self._flushers.pop(run.id, None))

    async def close(self) -> None:
        """Drop owed status edits (the next start reports interrupted runs anyway)."""
        tasks = list(self._flushers.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    async def _flush_later(self, run: RunSnapshot, delay: float) -> None:
        await asyncio.sleep(delay)
        await self._publish(run)

    async def _publish(self, run: RunSnapshot) -> None:
        conv = run.conversation
        key = f"run:{run.id}:status"
        async with self._locks.hold(run.id):
            # Built now from the newest snapshot heard: a throttled edit shows the newest state.
            newest = self._latest.get(run.id, run)
            text = progress_text(newest, newest.nodes)
            if self._run_links is not None:
                text += "\n\n" + self._run_links.line(conv, run.id)
            message_id = self._message_ids.get(run.id)
            if message_id is None:
                message_id = await self._store.status_message_id(run.id)
            if message_id is None:
                try:
                    posted = await self._port.notify(conv, text, idempotency_key=key)
                except DeliveryError as exc:
                    # The outbox retries it; the next progress call finds it sent.
                    log.warning("status message of run %s not posted yet: %s", run.id, exc)
                    return
                if posted is not None:
                    await self._store.set_status_message(run.id, posted)
                    self._message_ids[run.id] = posted
            else:
                self._message_ids[run.id] = message_id
                if self._last_text.get(run.id) != text:
                    await self._port.edit(conv, message_id, text, key=key)
            self._last_text[run.id] = text
            self._last_edit[run.id] = self._clock()

    async def exception(self, run: RunSnapshot, node_id: str, report: str) -> None:
        """Background: the Host gets the exception report as a proactive turn."""
        if not run.background:
            return
        attempt = run.node(node_id).attempts
        await self._port.system_turn(
            run.conversation, report, key=f"run:{run.id}:exception:{node_id}:{attempt}"
        )

    async def finished(self, run: RunSnapshot) -> None:
        """Background: final status edit, then the run report as a proactive turn."""
        if not run.background:
            return
        self._latest[run.id] = run
        flusher = self._flushers.pop(run.id, None)
        if flusher is not None:
            flusher.cancel()
            await asyncio.wait({flusher})
        await self._publish(run)  # the final state, never throttled away
        for table in (self._last_text, self._last_edit, self._message_ids, self._latest):
            table.pop(run.id, None)
        if self._reports_reach_users:
            report = await load_report(self._store, run.id, audience="chat")
        else:
            report = await self._report.report(run.id)
        key = f"run:{run.id}:report"
        chosen = await self._files_of(run)
        # Recorded before the report turn: they follow its reply, and never hold it back.
        if self._attachments is not None:
            await self._attachments.queue(run.conversation, run.id, chosen, report_key=key)
        report = chosen.named(report, run.id)
        await self._port.system_turn(run.conversation, report, key=key)
        await self._store.mark_reported(run.id)

    async def _files_of(self, run: RunSnapshot) -> ChosenFiles:
        """The run's files to attach (none without attachments, or when listing fails: the
        report goes out regardless)."""
        if self._attachments is None:
            return ChosenFiles()
        audience: Audience = "chat" if self._reports_reach_users else "host"
        try:
            return await self._attachments.choose(self._store, run.id, audience=audience)
        except Exception:
            log.exception("choosing the files of run %s failed; none attached", run.id)
            return ChosenFiles()


class ReportSource(Protocol):
    """Produces the run report text (the run manager)."""

    async def report(self, run_id: str) -> str:
        """The report of one run."""
        ...
