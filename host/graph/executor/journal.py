"""A run's files as it executes: journal lines, output and memory record files, manifest.

The run journal is one group commit (prompts, outputs, transcripts, memory records; one
write per batch, off the loop; fsynced before the store's checkpoints). A settling node
waits for its journal lines to be written before its state is committed, so SQLite (the
source of truth) never points at a record the journal does not hold.

The per-node files (`outputs/<node>.md`, `memory/<node>.md`) are views of the journal,
written when the run ends (before its report) or before an agent that reads them from disk
starts. Creating two files per node on the settle path was most of a node's cost.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from agents.backends.base import AgentOutcome
from core.fence import Markers
from core.store import BeforeCheckpoint
from host.graph.records import JournalSync, RunFiles, RunJournal, write_view
from host.graph.render import Artifact
from host.graph.run_store import NodeRecord, RunRecord

log = logging.getLogger(__name__)


class RunWriter:
    """Writes one run's records: what each attempt was asked and answered, completed
    nodes' outputs and memory records, and the manifest at decision points and the end."""

    def __init__(
        self, run_id: str, files: RunFiles, checkpoints: BeforeCheckpoint | None = None
    ) -> None:
        self._run_id = run_id
        self._files = files
        self._journal: RunJournal = files.open_journal(run_id, checkpoints)
        self._markers = Markers()
        self._outputs_dir = files.outputs_dir(run_id)
        self._memory_dir = files.memory_dir(run_id)
        # This run's memory records, for the agents of later nodes (served by their shelf).
        self._memories: dict[str, str] = {}
        # View files owed: the journal holds each of them durably already.
        # By path string: hashing a Path (and building one per memory record) cost a share
        # of each node's settling.
        self._unwritten: dict[str, str] = {}
        self._memory_prefix = f"{self._memory_dir}{os.sep}"
        self._started_fd: int | None = None

    def marker(self) -> str:
        """A fence marker for untrusted text shown in this run's prompts and reports."""
        return self._markers()

    def started(self, node_id: str, attempt: int) -> None:
        """Record that an attempt starts, before its agent does (raises OSError if it cannot).

        Written at once, on the loop (one short append, no fsync: like a commit, it survives
        a crash of the bot): the node's `running` state then rides with the next commit
        instead of being awaited, and a restart that finds this line and the node still
        pending reports it interrupted while running, never as not started."""
        if self._started_fd is None:
            path = self._files.started_path(self._run_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._started_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        line = json.dumps({"node": node_id, "attempt": attempt}) + "\n"
        os.write(self._started_fd, line.encode())

    def prompt(self, node_id: str, attempt: int, request: str) -> None:
        """Journal what an attempt asks for (before dispatch; synced with the next batch)."""
        self._journal.record("prompt", node_id, attempt, text=request)

    def answer(self, node_id: str, attempt: int, outcome: AgentOutcome) -> None:
        """Journal an attempt's output and transcript (synced with the next batch)."""
        self._journal.record("output", node_id, attempt, text=outcome.output)
        self._journal.record("transcript", node_id, attempt, items=outcome.transcript)

    def output_path(self, node_id: str) -> Path:
        """Where a completed node's output is written (`outputs/<node>.md`)."""
        return self._outputs_dir / f"{node_id}.md"

    def output(self, path: Path, text: str) -> None:
        """Owe a completed node's output file (its text is journaled with the attempt)."""
        self._unwritten[str(path)] = text

    def memory(self, node_id: str, attempt: int, text: str) -> None:
        """Journal a completed node's memory record (paper Eq. 32) and owe its file: it never
        delays successors (Fig. 5a)."""
        self._journal.record("memory", node_id, attempt, text=text)
        self._memories[node_id] = text
        self._unwritten[f"{self._memory_prefix}{node_id}.md"] = text

    def memory_text(self, node_id: str) -> str | None:
        """The memory record of a node of this run (None when it has none yet)."""
        return self._memories.get(node_id)

    @property
    def files(self) -> RunFiles:
        """Where the runs' records live."""
        return self._files

    def memory_paths(
        self, outside: Iterable[str], inside: Sequence[str], artifacts: dict[str, Artifact]
    ) -> list[str]:
        """Eq. 32: the memory records of every transitive predecessor — earlier runs' nodes
        (`outside` the run) one path each, this run's (`inside`) as one line."""
        lines = [
            str(self._files.memory_beside(artifacts[a].output_path))
            for a in sorted(outside)
            if a in artifacts
        ]
        if inside:
            lines.append(RunFiles.memory_listing(self._memory_dir, list(inside)))
        return lines

    async def sync(self) -> None:
        """Wait until every journal line queued so far is written: one write for every
        node settling meanwhile (raises OSError when it failed)."""
        try:
            await self._journal.sync()
        except OSError:
            log.exception("run %s: the journal could not be written", self._run_id)
            raise

    def claim_sync(self) -> JournalSync | None:
        """`sync`, to be written by the caller's SQLite unit (see `RunJournal.claim_sync`)."""
        return self._journal.claim_sync()

    async def write_manifest(self, record: RunRecord, nodes: Iterable[NodeRecord]) -> None:
        """A snapshot of states, paths and accounting (SQLite is the live record)."""
        # Built here (the nodes change on this loop), written with fsync off it.
        manifest = self._manifest(record, nodes)
        try:
            await asyncio.to_thread(self._files.write_manifest, self._run_id, manifest)
        except OSError:
            log.exception("writing the manifest of run %s failed", self._run_id)

    async def write_views(self) -> None:
        """Write the view files owed so far, in one worker thread (a file that cannot be
        written is logged: its journal record stays the durable copy)."""
        owed, self._unwritten = self._unwritten, {}
        if owed:
            await asyncio.to_thread(_write_views, owed)

    async def close_journal(self) -> None:
        """Write and sync what is queued, then close the journal."""
        await self._journal.close()
        if self._started_fd is not None:
            os.close(self._started_fd)
            self._started_fd = None

    async def close(self) -> None:
        """Close the journal, then write the view files still owed."""
        await self.close_journal()
        await self.write_views()

    def _manifest(self, record: RunRecord, nodes: Iterable[NodeRecord]) -> dict[str, Any]:
        return {
            "run_id": record.id,
            "conversation": record.conversation.id,
            "state": record.state,
            "task_summary": record.task_summary,
            "replaces_run": record.replaces_run,
            "journal": str(self._journal.path),
            "nodes": {
                n.node_id: {
                    "agent": n.agent,
                    "state": n.state,
                    "attempts": n.attempts,
                    "instance": n.instance,
                    "deps": list(n.deps),
                    "output_path": str(n.output_path) if n.output_path else None,
                    "error": n.error,
                    "verdict": n.verdict,
                    "model_calls": n.model_calls,
                    "input_tokens": n.input_tokens,
                    "output_tokens": n.output_tokens,
                    "judge_calls": n.judge_calls,
                    "judge_tokens": n.judge_tokens,
                    "seconds": round(n.seconds, 3),
                    "fallback": n.fallback,
                }
                for n in nodes
            },
        }


def _write_views(views: dict[str, str]) -> None:
    for path, text in views.items():
        try:
            write_view(Path(path), text)
        except OSError:
            log.exception("writing %s failed (its journal record is kept)", path)
