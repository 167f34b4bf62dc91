"""The run records one node's prompt names by path, served to its agent (paper Eq. 32).

A node's prompt lists the memory records of its upstream nodes (and may name their output
files). Those live under `runs/`, outside every workspace: an in-process agent's file tools
refuse them and a sandboxed command does not see them. The shelf serves exactly those
records to the in-process file tools (from memory or the journal, by the name the prompt
gave), and lists their folders for a sandboxed command to see read-only.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from host.graph.records import RunFiles, read_memory
from host.graph.render import Artifact


def _key(path: Path | str) -> str:
    # Lexical only: the name is looked up, never opened, so `..` cannot lead anywhere.
    return os.path.normpath(str(path))


class RecordShelf:
    """The outputs and memory records of one node's upstream nodes, by path. Built per
    dispatch in O(1): a read finds the node by the file's name and checks the full path."""

    def __init__(
        self,
        upstream: Collection[str],
        artifacts: Mapping[str, Artifact],
        *,
        files: RunFiles,
        in_run: Callable[[str], str | None],
    ) -> None:
        self._upstream = upstream
        self._artifacts = artifacts  # completed nodes' outputs (upstream ones never change)
        self._files = files
        self._in_run = in_run  # a memory record of this run's node (None: an earlier run's)

    def folders(self) -> tuple[Path, ...]:
        """The folders holding the records, for a sandboxed command to see read-only."""
        found: dict[Path, None] = {}
        for node_id in self._upstream:
            artifact = self._artifacts.get(node_id)
            if artifact is not None:
                found[artifact.output_path.parent] = None
                found[self._files.memory_beside(artifact.output_path).parent] = None
        return tuple(found)

    async def read(self, path: str) -> str | None:
        """The record the prompt named `path` (None when it named none there)."""
        key = _key(path)
        node_id = Path(key).stem
        artifact = self._artifacts.get(node_id) if node_id in self._upstream else None
        if artifact is None:
            return None
        if key == _key(artifact.output_path):
            return artifact.output
        memory_path = self._files.memory_beside(artifact.output_path)
        if key != _key(memory_path):
            return None
        memory = self._in_run(node_id)
        if memory is not None:
            return memory
        return await asyncio.to_thread(_stored_memory, memory_path)


def _stored_memory(path: Path) -> str | None:
    """An earlier run's memory record: its file, or its run's journal."""
    try:
        return read_memory(path)
    except OSError:
        return None
