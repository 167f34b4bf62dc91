"""A run's files on their way to its thread: chosen when the run ends (`host.graph.attachments`),
named in its report instead of host paths, and queued in the outbox to follow the report's
reply."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from core.files import atomic_write
from core.ids import ConversationRef
from host.graph.attachments import RUN_PICTURE, RunFiles, run_files
from host.graph.excerpt import excerpt
from host.graph.records import read_output
from host.graph.report import TERMINAL_OUTPUT_CAP, terminal_nodes
from host.graph.report_loader import Audience
from host.graph.run_store import NodeRecord, RunRecord, RunStore
from host.runtime.messages import OutboundFile

if TYPE_CHECKING:
    from host.graph.picture import RunPicture

log = logging.getLogger(__name__)

# A run of more nodes than this gets its picture in the thread: a smaller one reads at a glance.
PICTURE_MIN_NODES = 4

Draw = Callable[["RunPicture"], bytes]


def draw_run(picture: RunPicture) -> bytes:
    """The run picture as PNG bytes; networkx and matplotlib are loaded by the first one
    drawn, not when the bot starts."""
    from host.graph.picture import render_run

    return render_run(picture)


class FileQueue(Protocol):
    """Where files are recorded and sent from (the outbox)."""

    async def attach(
        self,
        conv: ConversationRef,
        files: Sequence[OutboundFile],
        *,
        key: str,
        after: str | None = None,
    ) -> None:
        """Record `files`, then send them after the reply to the inbound record `after`."""
        ...


@dataclass(frozen=True)
class ChosenFiles:
    """A run's files, and the host paths its report shows that name one of them."""

    files: RunFiles = field(default_factory=RunFiles)
    renamed: dict[str, str] = field(default_factory=dict)

    def named(self, report: str, run_id: str) -> str:
        """The report naming attached files instead of their host paths, with a line on what
        is attached and one on what was left out."""
        for path, name in self.renamed.items():
            report = report.replace(path, name)
        lines = self.files.report_lines(run_id)
        return "\n\n".join([report, "\n".join(lines)]) if lines else report


def report_turn_key(conv: ConversationRef, key: str) -> str:
    """The inbound record of the system turn started under `key` (see
    `ConversationService.system_turn`: its event id is `system:<key>`, recorded as
    `in:<platform>:event:<event id>`)."""
    return f"in:{conv.platform}:event:" + f"system:{key}"[:256]


class RunAttachments:
    """Chooses a finished run's files and queues them behind its report."""

    def __init__(
        self,
        files: FileQueue,
        workspace: Callable[[ConversationRef], Path],
        *,
        draw: Draw = draw_run,
    ) -> None:
        self._files = files
        self._workspace = workspace
        self._draw = draw  # the run picture as PNG bytes (replaced only by tests)

    async def choose(self, store: RunStore, run_id: str, *, audience: Audience) -> ChosenFiles:
        """The run's files (none when it is unknown or they cannot be listed)."""
        record = await store.run(run_id)
        if record is None:
            return ChosenFiles()
        nodes = await store.nodes_of_run(run_id)
        workspace = self._workspace(record.conversation)
        picture = await self._picture(record, nodes)
        try:
            return await asyncio.to_thread(_choose, record, nodes, workspace, audience, picture)
        except OSError as exc:
            log.warning("listing the files of run %s failed: %s", run_id, exc)
            return ChosenFiles()

    async def _picture(
        self, record: RunRecord, nodes: Sequence[NodeRecord]
    ) -> tuple[str, Path] | None:
        """The run picture of a graph of more than three nodes, drawn in a worker thread and
        written into the run's records (its shown name, its path); None for a smaller graph
        or when drawing fails (the report goes out without it)."""
        if len(nodes) < PICTURE_MIN_NODES:
            return None
        path = record.run_dir / RUN_PICTURE
        try:
            data = await asyncio.to_thread(self._drawn, record, nodes)
            await asyncio.to_thread(atomic_write, path, data)
        except Exception:
            log.warning(
                "the picture of run %s was not drawn; not attached", record.id, exc_info=True
            )
            return None
        return picture_name(record.id), path

    def _drawn(self, record: RunRecord, nodes: Sequence[NodeRecord]) -> bytes:
        """In a worker thread: the picture's data and its PNG (the modules load here too)."""
        from host.graph.picture import picture_of

        return self._draw(picture_of(record, nodes))

    async def queue(
        self, conv: ConversationRef, run_id: str, chosen: ChosenFiles, *, report_key: str
    ) -> None:
        """Record the files; they go out after the reply to the report turn `report_key`."""
        if chosen.files.attached:
            await self._files.attach(
                conv,
                chosen.files.attached,
                key=f"run:{run_id}:files",
                after=report_turn_key(conv, report_key),
            )

    async def follow_turn(
        self,
        store: RunStore,
        conv: ConversationRef,
        run_id: str,
        report: str,
        *,
        after: str,
        audience: Audience,
    ) -> str:
        """A foreground run's files, recorded to follow the reply of the turn that took up the
        inbound record `after` (the one that waited for the run; empty: at once); returns
        `report` naming them. Listing failures attach nothing: the report goes back as it is."""
        try:
            chosen = await self.choose(store, run_id, audience=audience)
        except Exception:
            log.exception("choosing the files of run %s failed; none attached", run_id)
            return report
        if chosen.files.attached:
            await self._files.attach(
                conv, chosen.files.attached, key=f"run:{run_id}:files", after=after or None
            )
        return chosen.named(report, run_id)


def picture_name(run_id: str) -> str:
    """What the run picture is called in the thread: `run-<short id>.png`."""
    short = "".join(c for c in run_id.removeprefix("run_") if c.isalnum() or c in "-_")[:10]
    return f"run-{short or 'graph'}.png"


def _choose(
    record: RunRecord,
    nodes: Sequence[NodeRecord],
    workspace: Path,
    audience: Audience,
    picture: tuple[str, Path] | None = None,
) -> ChosenFiles:
    shortened: list[tuple[str, Path]] = []
    for node in terminal_nodes(nodes):
        if node.output_path is None:
            continue
        try:
            # Written back from the journal when the view file is gone: it is sent by path.
            text = read_output(node.output_path, restore=True)
        except OSError:
            continue
        cut = len(text) > TERMINAL_OUTPUT_CAP if audience == "host" else excerpt(text) != text
        if cut:
            shortened.append((node.node_id, node.output_path))
    files = run_files(
        record.run_dir,
        workspace,
        since=record.created_at,
        shortened=shortened,
        pictures=(picture,) if picture is not None else (),
    )
    attached = {f.name for f in files.attached}
    renamed = {
        str(path): f"{node_id}-output.md"
        for node_id, path in shortened
        if f"{node_id}-output.md" in attached
    }
    return ChosenFiles(files, renamed)


__all__ = [
    "PICTURE_MIN_NODES",
    "ChosenFiles",
    "FileQueue",
    "RunAttachments",
    "picture_name",
    "report_turn_key",
]
