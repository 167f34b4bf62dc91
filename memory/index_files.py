"""The recall index's derived files: one FAISS + rows file per owner and a manifest.

`IndexFiles` writes a `HybridIndex`'s partitions under its directory and, at start,
restores them from there, re-encoding whatever is missing, corrupt, built with another
embedder, or out of step with the documents SQLite holds (the source of truth).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import AsyncIterable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from core.files import atomic_write
from memory.embeddings import Embedder

if TYPE_CHECKING:  # memory.index imports this module: its names are for annotations only
    from memory.index import Doc, HybridIndex, _Partition

# The index's logger: a rebuild is the index's news, and operators filter on that name.
log = logging.getLogger("memory.index")

# 2: verdict bodies moved to their conversation's audience library and DM rounds to the DM
# partition of a host library (migration 11): an index of version 1 is rebuilt at start.
MANIFEST_VERSION = 2
MANIFEST_NAME = "manifest.json"


def owner_key(owner: str) -> str:
    """The file-name stem of an owner's partition (owner ids may contain any character)."""
    return hashlib.sha1(owner.encode()).hexdigest()[:20]


def _manifest_problem(manifest: Any, embedder: Embedder | None) -> str | None:
    """Why a manifest cannot be used with `embedder`, or None."""
    if not isinstance(manifest, dict) or manifest.get("version") != MANIFEST_VERSION:
        return "manifest version differs"
    want_name = embedder.name if embedder is not None else None
    want_dim = embedder.dimension if embedder is not None else None
    if manifest.get("embedder") != want_name or manifest.get("dimension") != want_dim:
        return (
            f"built with embedder {manifest.get('embedder')}/{manifest.get('dimension')}, "
            f"now {want_name}/{want_dim}"
        )
    if not isinstance(manifest.get("owners"), dict):
        return "manifest has no owners table"
    return None


class IndexFiles:
    """Saves and restores an index's partitions under `directory` (nothing when None).

    `parts` is the index's own owner -> partition table, shared, not copied: saves see
    every change the index makes.
    """

    def __init__(
        self, directory: Path | None, embedder: Embedder | None, parts: dict[str, _Partition]
    ) -> None:
        self.directory = directory
        self.embedder = embedder
        self._parts = parts
        # Saves overlap (after each write, on shutdown): one manifest writer at a time.
        self._manifest_lock = asyncio.Lock()

    def _owner_paths(self, owner: str) -> tuple[Path, Path]:
        assert self.directory is not None
        stem = owner_key(owner)
        return self.directory / f"{stem}.faiss", self.directory / f"{stem}.rows.json"

    def delete_owner_files(self, owner: str) -> None:
        for path in self._owner_paths(owner):
            path.unlink(missing_ok=True)

    def _write_partition_files(self, part: _Partition) -> None:
        import faiss  # imported at the first vector index, not at start-up

        assert self.directory is not None
        self.directory.mkdir(parents=True, exist_ok=True)
        faiss_path, rows_path = self._owner_paths(part.owner)
        if part.faiss is None or not part.docs:
            self.delete_owner_files(part.owner)
            return
        if part.dead:
            part.compact()  # files never carry deleted vectors
        rows = [[d, part.hashes[d]] for d in part.row_ids if d is not None]
        atomic_write(faiss_path, bytes(faiss.serialize_index(part.faiss)))
        atomic_write(rows_path, json.dumps({"owner": part.owner, "rows": rows}).encode())
        part.saved = True

    async def persist(self, part: _Partition) -> None:
        if self.directory is None:
            return
        async with part.lock:
            await asyncio.to_thread(self._write_partition_files, part)
        await self.write_manifest()

    async def write_manifest(self) -> None:
        if self.directory is None:
            return
        async with self._manifest_lock:
            await asyncio.to_thread(
                atomic_write, self.directory / MANIFEST_NAME, self._manifest_bytes()
            )

    def _manifest_bytes(self) -> bytes:
        manifest = {
            "version": MANIFEST_VERSION,
            "embedder": self.embedder.name if self.embedder is not None else None,
            "dimension": self.embedder.dimension if self.embedder is not None else None,
            "owners": {
                o: {"file": owner_key(o), "documents": len(p.docs), "vectors": len(p.row_of)}
                for o, p in self._parts.items()
                if p.docs
            },
        }
        return json.dumps(manifest, indent=1, sort_keys=True).encode()

    async def save(self) -> None:
        """Write every changed partition and the manifest under `directory`."""
        if self.directory is None:
            return
        for part in list(self._parts.values()):
            if not part.saved:
                async with part.lock:
                    await asyncio.to_thread(self._write_partition_files, part)
        await self.write_manifest()

    async def restore(self, index: HybridIndex, documents_source: AsyncIterable[Doc]) -> str | None:
        """Fill `index` from `documents_source`, reusing saved vectors where valid.

        Returns why vectors were re-encoded (also logged once), or None when the saved
        files were used as they are (or the home is fresh).
        """
        by_owner: dict[str, list[Doc]] = {}
        async for doc in documents_source:
            by_owner.setdefault(doc.owner, []).append(doc)
        manifest_problem = await asyncio.to_thread(self._read_manifest_problem)
        reasons: dict[str, int] = {}
        for owner, docs in by_owner.items():
            reason = manifest_problem or await self._load_owner(index, owner, docs)
            if reason is not None:
                reasons[reason] = reasons.get(reason, 0) + 1
                await self._rebuild_owner(index, owner, docs)
        stale = set(await asyncio.to_thread(self._saved_owner_keys)) - {
            owner_key(o) for o in by_owner
        }
        # A fresh home (nothing to index, no files) is not a rebuild worth a warning.
        fresh = not by_owner and not stale and manifest_problem == "no index files"
        if not (reasons or stale or manifest_problem) or fresh:
            return None
        why = "; ".join(f"{r} ({n} owner{'s' if n > 1 else ''})" for r, n in reasons.items()) or (
            manifest_problem or "files of owners no longer in the source"
        )
        log.warning("memory index: rebuilding under %s: %s", self.directory, why)
        await asyncio.to_thread(self._delete_stale_files, stale)
        await self.save()
        return why

    def _read_manifest_problem(self) -> str | None:
        assert self.directory is not None
        path = self.directory / MANIFEST_NAME
        if not path.exists():
            return "no index files"
        try:
            manifest = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            return f"unreadable manifest ({exc.__class__.__name__})"
        return _manifest_problem(manifest, self.embedder)

    def _saved_owner_keys(self) -> list[str]:
        if self.directory is None or not self.directory.is_dir():
            return []
        return [p.name.removesuffix(".rows.json") for p in self.directory.glob("*.rows.json")]

    def _delete_stale_files(self, keys: Iterable[str]) -> None:
        assert self.directory is not None
        for key in keys:
            for suffix in (".faiss", ".rows.json"):
                (self.directory / f"{key}{suffix}").unlink(missing_ok=True)

    async def _load_owner(self, index: HybridIndex, owner: str, docs: list[Doc]) -> str | None:
        """Install saved vectors for `owner` if they match `docs` exactly; else say why."""
        part = index.partition(owner)
        part.put(docs, None)
        if self.embedder is None:
            part.saved = True
            return None
        try:
            loaded = await asyncio.to_thread(self._read_owner_files, owner)
        except Exception as exc:  # any load error means the derived files are unusable
            return f"unreadable index files ({exc.__class__.__name__})"
        faiss_index, rows = loaded
        expected = sorted([d, h] for d, h in part.hashes.items())
        if sorted(rows) != expected or faiss_index.d != self.embedder.dimension:
            return "index files do not match the stored documents"
        order = [r[0] for r in rows]
        await asyncio.to_thread(part.adopt_vectors, faiss_index, order)
        part.saved = True
        return None

    def _read_owner_files(self, owner: str) -> tuple[Any, list[list[str]]]:
        import faiss  # imported at the first vector index, not at start-up

        faiss_path, rows_path = self._owner_paths(owner)
        payload = json.loads(rows_path.read_text())
        rows = [[str(r[0]), str(r[1])] for r in payload["rows"]]
        if payload.get("owner") != owner:
            raise ValueError("rows file belongs to another owner")
        data = np.frombuffer(faiss_path.read_bytes(), dtype=np.uint8)
        faiss_index = faiss.deserialize_index(data)
        if faiss_index.ntotal != len(rows):
            raise ValueError("vector count differs from the rows file")
        return faiss_index, rows

    async def _rebuild_owner(self, index: HybridIndex, owner: str, docs: list[Doc]) -> None:
        self._parts.pop(owner, None)
        await index.add(docs)


__all__ = ["MANIFEST_NAME", "MANIFEST_VERSION", "IndexFiles", "owner_key"]
