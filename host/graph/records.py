"""File-backed run records: runs/<run>/graph.json, manifest.json, nodes/<node>/… per attempt."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def atomic_write(path: Path, text: str) -> None:
    """Write a file so a crash leaves either the old or the new content, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class RunFiles:
    """Where a run's records live on disk."""

    def __init__(self, runs_root: Path) -> None:
        self.root = runs_root

    def run_dir(self, run_id: str) -> Path:
        """`runs/<run>/`."""
        return self.root / run_id

    def node_dir(self, run_id: str, node_id: str) -> Path:
        """`runs/<run>/nodes/<node>/`."""
        return self.run_dir(run_id) / "nodes" / node_id

    def output_path(self, run_id: str, node_id: str) -> Path:
        """The node's current output file (what successors reference)."""
        return self.node_dir(run_id, node_id) / "output.md"

    def memory_path(self, run_id: str, node_id: str) -> Path:
        """The deterministic location of the node's memory record (paper Eq. 32)."""
        return self.node_dir(run_id, node_id) / "memory.md"

    def write_graph(self, run_id: str, submission: dict[str, Any]) -> Path:
        """`graph.json`: the admitted submission, exactly as run."""
        path = self.run_dir(run_id) / "graph.json"
        atomic_write(path, json.dumps(submission, indent=2, ensure_ascii=False))
        return path

    def write_manifest(self, run_id: str, manifest: dict[str, Any]) -> Path:
        """`manifest.json`: run state, node states, paths and accounting."""
        path = self.run_dir(run_id) / "manifest.json"
        atomic_write(path, json.dumps(manifest, indent=2, ensure_ascii=False, default=str))
        return path

    def write_prompt(self, run_id: str, node_id: str, attempt: int, prompt: str) -> Path:
        """Write the rendered prompt before dispatch (current + numbered copy)."""
        return self._write_pair(run_id, node_id, attempt, "prompt", "md", prompt)

    def write_output(self, run_id: str, node_id: str, attempt: int, output: str) -> Path:
        """Write the output when the backend returns (current + numbered copy)."""
        return self._write_pair(run_id, node_id, attempt, "output", "md", output)

    def write_transcript(
        self, run_id: str, node_id: str, attempt: int, transcript: list[dict[str, Any]]
    ) -> Path:
        """Write the transcript before the judge reads it (current + numbered copy)."""
        lines = "".join(
            json.dumps(item, ensure_ascii=False, default=str) + "\n" for item in transcript
        )
        return self._write_pair(run_id, node_id, attempt, "transcript", "jsonl", lines)

    def write_memory(self, run_id: str, node_id: str, text: str) -> Path:
        """Write the node's memory record (after completion, off the critical path)."""
        path = self.memory_path(run_id, node_id)
        atomic_write(path, text)
        return path

    def _write_pair(
        self, run_id: str, node_id: str, attempt: int, stem: str, ext: str, text: str
    ) -> Path:
        folder = self.node_dir(run_id, node_id)
        atomic_write(folder / f"{stem}.{attempt}.{ext}", text)
        current = folder / f"{stem}.{ext}"
        atomic_write(current, text)
        return current
