"""Which of a run's files go to its thread: the full output of each node the report shortened,
then what the agents left in the run's records or wrote into the conversation's workspace
while the run went on (designs, patches, reports) — regular files only, reached without
links, within caps per run.

Both roots are written by sandboxed agents, which may plant a link (`report.md ->
~/.ssh/id_rsa`) or a FIFO: the walk never follows a link, and every file chosen is checked
again (`core.safe_read`) when it is read for sending.
"""

from __future__ import annotations

import mimetypes
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.safe_read import UnsafeFile, link_free, regular_size
from host.runtime.messages import OutboundFile

# Ten files is already more than people open from one report; the rest stay on the host.
MAX_FILES_PER_RUN = 10
# Under Discord's 10 MiB upload limit for bots (the smallest of the platforms), and read
# whole into memory when it is sent.
MAX_FILE_BYTES = 8 * 1024 * 1024
# What one run may push into a thread in all: a chat is not a file share.
MAX_RUN_BYTES = 25 * 1024 * 1024
# A walk looks at this many directory entries at most: a cloned repository in the workspace
# must not hold back the run's report.
MAX_WALK_ENTRIES = 5_000
# What people open from a chat: pictures, pages, patches, documents and data.
ATTACHABLE_SUFFIXES = frozenset(
    {
        ".svg",
        ".html",
        ".htm",
        ".png",
        ".jpg",
        ".jpeg",
        ".gif",
        ".webp",
        ".pdf",
        ".patch",
        ".diff",
        ".md",
        ".txt",
        ".csv",
        ".json",
        ".log",
    }
)
# The run's own records (see host.graph.records): shown by `runs show`, not attached.
# The run picture (`RUN_PICTURE`) is attached under its own name, never found by the walk.
RUN_PICTURE = "run-graph.png"
_RECORDS = frozenset({"graph.json", "manifest.json", "journal.jsonl", "started.jsonl", RUN_PICTURE})
_RECORD_DIRS = frozenset({"outputs", "memory"})
# Directories no agent writes a deliverable into.
_SKIPPED_DIRS = frozenset({"node_modules", "__pycache__", "venv", "site-packages"})


@dataclass(frozen=True)
class RunFiles:
    """The files attached to a run's report, and the names of those left out (caps)."""

    attached: tuple[OutboundFile, ...] = ()
    left_out: tuple[str, ...] = ()

    def report_lines(self, run_id: str) -> list[str]:
        """What the report says about them: which are attached, which were left out."""
        lines: list[str] = []
        if self.attached:
            names = ", ".join(f"`{f.name}`" for f in self.attached)
            lines.append(f"📎 Attached to this thread: {names}.")
        if self.left_out:
            shown = ", ".join(f"`{name}`" for name in self.left_out[:MAX_FILES_PER_RUN])
            more = "…" if len(self.left_out) > MAX_FILES_PER_RUN else ""
            lines.append(
                f"{len(self.left_out)} more file(s) not attached: {shown}{more} (at most "
                f"{MAX_FILES_PER_RUN} files, {MAX_FILE_BYTES // 2**20} MiB each and "
                f"{MAX_RUN_BYTES // 2**20} MiB in all per run); see `raven-bot runs show "
                f"{run_id}` on the bot's host."
            )
        return lines


@dataclass(frozen=True)
class _Candidate:
    name: str
    path: Path


def run_files(
    run_dir: Path,
    workspace: Path | None,
    *,
    since: float,
    shortened: Sequence[tuple[str, Path]] = (),
    pictures: Sequence[tuple[str, Path]] = (),
) -> RunFiles:
    """The files to attach (see the module doc): `pictures` pairs a shown name with a
    picture the bot drew into the records (first: what people look at before reading),
    `shortened` a node id with its output file; files in `workspace` count when modified at
    or after `since` (the run's start)."""
    candidates: list[_Candidate] = []
    records = _root(run_dir)
    if records is not None:
        named = [(name, path) for name, path in pictures]
        named += [(f"{node_id}-output.md", path) for node_id, path in shortened]
        for name, path in named:
            try:  # read under the resolved root, like everything else
                inside = records / path.relative_to(run_dir)
            except ValueError:
                continue  # not one of this run's records
            candidates.append(_Candidate(name, inside))
        candidates += _walk(records, since=None)
    space = _root(workspace) if workspace is not None else None
    if space is not None and space != records:
        candidates += _walk(space, since=since)
    return _capped(_unique(candidates))


def _root(path: Path | None) -> Path | None:
    """The root resolved once (the bot's own directory may sit behind a link); None when it
    is missing."""
    if path is None:
        return None
    resolved = path.resolve()
    return resolved if resolved.is_dir() else None


def _walk(root: Path, *, since: float | None) -> Iterator[_Candidate]:
    """Attachable regular files under `root`, links never followed, oldest first; in the
    records only what is not the run's own bookkeeping, in the workspace only what changed
    since `since`."""
    found: list[tuple[float, _Candidate]] = []
    pending = [root]
    seen = 0
    while pending and seen < MAX_WALK_ENTRIES:
        directory = pending.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue
        at_top = directory == root
        for entry in entries[: MAX_WALK_ENTRIES - seen]:
            seen += 1
            if entry.is_dir(follow_symlinks=False):
                if _descend(entry.name, records=since is None and at_top):
                    pending.append(Path(entry.path))
                continue
            mtime = _kept(entry, records=since is None and at_top, since=since)
            if mtime is not None:
                path = Path(entry.path)
                name = entry.name if at_top else "-".join(path.relative_to(root).parts)
                found.append((mtime, _Candidate(name, path)))
    return (candidate for _, candidate in sorted(found, key=lambda item: item[0]))


def _descend(name: str, *, records: bool) -> bool:
    """Whether a directory (seen without following links) may hold deliverables."""
    if name.startswith(".") or name in _SKIPPED_DIRS:
        return False
    return not (records and name in _RECORD_DIRS)


def _kept(entry: os.DirEntry[str], *, records: bool, since: float | None) -> float | None:
    """The modification time of a file worth attaching; None for anything else (a link, a
    FIFO, a record, a hidden or unknown kind of file, one older than the run)."""
    if entry.name.startswith(".") or not entry.is_file(follow_symlinks=False):
        return None
    if records and entry.name in _RECORDS:
        return None
    if Path(entry.name).suffix.lower() not in ATTACHABLE_SUFFIXES:
        return None
    try:
        mtime = entry.stat(follow_symlinks=False).st_mtime
    except OSError:
        return None
    return None if since is not None and mtime < since else mtime


def _unique(candidates: Sequence[_Candidate]) -> list[_Candidate]:
    """One entry per file, and per shown name (the first keeps it)."""
    paths: set[Path] = set()
    names: set[str] = set()
    unique: list[_Candidate] = []
    for candidate in candidates:
        if candidate.path in paths or candidate.name in names:
            continue
        paths.add(candidate.path)
        names.add(candidate.name)
        unique.append(candidate)
    return unique


def _capped(candidates: Sequence[_Candidate]) -> RunFiles:
    attached: list[OutboundFile] = []
    left_out: list[str] = []
    total = 0
    for candidate in candidates:
        if not link_free(candidate.path):
            continue  # a link planted on the way: not a file of the run
        try:
            size = regular_size(candidate.path)
        except (UnsafeFile, OSError):
            continue
        if size == 0:
            continue  # nothing to show (and Slack refuses empty uploads)
        fits = (
            len(attached) < MAX_FILES_PER_RUN
            and size <= MAX_FILE_BYTES
            and total + size <= MAX_RUN_BYTES
        )
        if not fits:
            left_out.append(candidate.name)
            continue
        total += size
        attached.append(
            OutboundFile(
                name=candidate.name[:255],
                path=candidate.path,
                size=size,
                content_type=mimetypes.guess_type(candidate.name)[0] or "application/octet-stream",
            )
        )
    return RunFiles(tuple(attached), tuple(left_out))


__all__ = [
    "MAX_FILES_PER_RUN",
    "MAX_FILE_BYTES",
    "MAX_RUN_BYTES",
    "RUN_PICTURE",
    "RunFiles",
    "run_files",
]
