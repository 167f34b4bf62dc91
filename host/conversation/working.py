"""The "is working…" line of each conversation: shown while a Host turn or a run's node works
there, cleared when nothing does.

Several owners may work in one conversation at once (a turn and a background run): each
owner's text is kept, the most recently set one is shown, and the line is cleared only when
the last owner ends. Changes are pushed to the platform by one task per conversation, so a
slow or failing platform call never delays or fails a turn; it is logged at debug.

Status text is built from a node's id, its agent's name and the first line of what it runs,
with every configured secret redacted and control characters removed — never from a
person's prompt.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
from collections.abc import Callable, Mapping, Sequence

from core.ids import ConversationRef
from host.runtime.events import EventBus, RunFinished, RunProgress
from host.runtime.ports import WorkingStatus
from host.runtime.run_snapshot import NodeSnapshot

log = logging.getLogger(__name__)

THINKING = "is thinking…"
# What a node runs, at most, in its status line (Slack shows one short line).
DESCRIPTION_CHARS = 80
# How long shutting down waits for the last clears to reach the platforms.
CLOSE_GRACE_SECONDS = 1.0
# C0/C1 controls, zero-width and bidirectional overrides: nothing that could hide or reorder
# text in a one-line status.
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def clean(text: str, redact: Callable[[str], str]) -> str:
    """`text` on one line: secrets redacted first (so a cap never cuts one in half),
    unprintable characters removed, whitespace collapsed."""
    return " ".join(_UNPRINTABLE.sub(" ", redact(text)).split())


def cap(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    """At most `limit` characters, an ellipsis marking a cut."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def node_text(running: Sequence[NodeSnapshot], redact: Callable[[str], str]) -> str:
    """`is running `s2` (shell): pytest -q…` for the first running node, `(+N more)` for the
    others. What a node runs is its summary (a plan line's command) or its task's first line."""
    node = running[0]
    task = (node.summary or node.template).strip()
    first_line = task.splitlines()[0] if task else ""
    description = cap(clean(first_line, redact))
    head = f"is running `{clean(node.node_id, redact)}` ({clean(node.agent, redact)})"
    more = f" (+{len(running) - 1} more)" if len(running) > 1 else ""
    return f"{head}: {description}{more}" if description else f"{head}{more}"


class WorkingStatuses:
    """Tracks who works in which conversation and keeps each platform's working line in step.

    `surfaces`: each platform's `WorkingStatus`, by platform name (platforms without one are
    skipped). `redact`: the log redactor's, so a status shows no secret a log would not.
    """

    def __init__(
        self, surfaces: Mapping[str, WorkingStatus], *, redact: Callable[[str], str]
    ) -> None:
        self._surfaces = dict(surfaces)
        self._redact = redact
        self._order = itertools.count()
        # conversation id → owner ("turn:…", "run:…") → (when set, text)
        self._work: dict[str, dict[str, tuple[int, str]]] = {}
        self._shown: dict[str, str] = {}
        self._pushers: dict[str, asyncio.Task[None]] = {}

    def subscribe(self, bus: EventBus) -> None:
        """A run shows its running node while one runs (assembly root, before freezing)."""
        bus.subscribe(RunProgress, self._on_progress)
        bus.subscribe(RunFinished, self._on_finished)

    def begin(self, conv: ConversationRef, owner: str, text: str) -> None:
        """`owner` works in `conv` and says `text` (shown unless a newer owner's text is)."""
        if conv.platform not in self._surfaces:
            return
        owners = self._work.setdefault(conv.id, {})
        current = owners.get(owner)
        if current is not None and current[1] == text:
            return  # unchanged: it does not become the newest
        owners[owner] = (next(self._order), text)
        self._kick(conv)

    def end(self, conv: ConversationRef, owner: str) -> None:
        """`owner` stopped working in `conv` (finished, failed or cancelled)."""
        owners = self._work.get(conv.id)
        if owners is None or owners.pop(owner, None) is None:
            return
        if not owners:
            del self._work[conv.id]
        self._kick(conv)

    def wanted(self, conversation_id: str) -> str:
        """What the conversation's line should show: the newest owner's text, "" for none."""
        owners = self._work.get(conversation_id)
        if not owners:
            return ""
        return max(owners.values())[1]

    async def settled(self) -> None:
        """Wait until every platform shows what is wanted (tests, shutdown)."""
        while self._pushers:
            await asyncio.wait(list(self._pushers.values()))

    async def close(self, grace: float = CLOSE_GRACE_SECONDS) -> None:
        """Give the last clears `grace` seconds to go out, then stop pushing (platforms
        expire a line left behind by themselves)."""
        tasks = list(self._pushers.values())
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=grace)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late)

    async def _on_progress(self, event: RunProgress) -> None:
        run = event.run
        running = [n for n in run.nodes if n.state == "running"]
        if running:
            self.begin(run.conversation, f"run:{run.id}", node_text(running, self._redact))
        else:
            self.end(run.conversation, f"run:{run.id}")

    async def _on_finished(self, event: RunFinished) -> None:
        self.end(event.run.conversation, f"run:{event.run.id}")

    def _kick(self, conv: ConversationRef) -> None:
        """Make sure one task pushes the conversation's wanted line (it reads the newest)."""
        task = self._pushers.get(conv.id)
        if task is not None and not task.done():
            return
        task = asyncio.get_running_loop().create_task(self._push(conv), name=f"working:{conv.id}")
        self._pushers[conv.id] = task
        task.add_done_callback(lambda done: self._forget(conv.id, done))

    def _forget(self, conversation_id: str, task: asyncio.Task[None]) -> None:
        if self._pushers.get(conversation_id) is task:
            del self._pushers[conversation_id]

    async def _push(self, conv: ConversationRef) -> None:
        surface = self._surfaces[conv.platform]
        while (want := self.wanted(conv.id)) != self._shown.get(conv.id, ""):
            try:
                if want:
                    await surface.show(conv, want)
                else:
                    await surface.clear(conv)
            except Exception as exc:
                log.debug("working status of %s not updated: %r", conv.id, exc)
            # Recorded even when it failed: the next change tries again, this one does not loop.
            self._shown[conv.id] = want
        if not self._shown.get(conv.id):
            self._shown.pop(conv.id, None)
