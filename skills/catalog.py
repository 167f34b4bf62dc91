"""The local skill catalog (paper §6.1–6.2 `local` source): bundled skills plus a user directory.

Skills are SKILL.md directories (`skills.skill_md`). A broken one is skipped with a WARNING
naming the file and the problem, and kept in `load_problems` for `doctor`; a user skill whose
name matches a bundled one replaces it. The user directory is hot-reloaded: at most once per
`reload_interval` seconds a cheap stat fingerprint is compared, and only a change triggers a
rescan. Every file access runs in a worker thread, never on the event loop.

Retrieval is BM25 over name (×3), description (×2) and body with this module's tokenizer.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.bm25 import Bm25, top_k
from skills.model import Skill, SkillHit, SourceName
from skills.skill_md import RESOURCE_DIRS, SKILL_FILE, SkillFormatError, load_skill_dir

log = logging.getLogger(__name__)

BUNDLED_DIR = Path(__file__).parent / "bundled"
NAME_WEIGHT = 3
DESCRIPTION_WEIGHT = 2

# Words too common in procedures and queries to tell skills apart; no stemming on purpose.
# fmt: off
STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "do", "does", "for", "from",
    "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "me", "my", "of", "on",
    "or", "our", "so", "than", "that", "the", "their", "then", "there", "these", "this", "to",
    "use", "used", "using", "was", "we", "what", "when", "where", "which", "while", "who",
    "will", "with", "you", "your"
})
# fmt: on

# Runs of letters/digits; `_` counts as a separator so snake_case splits here.
_RUN = re.compile(r"[^\W_]+")
# camelCase, PascalCase and acronym boundaries in an ASCII run: getHTTPResponse → get HTTP Response.
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z0-9]+")

Fingerprint = tuple[tuple[str, int, int, int], ...]
Problem = tuple[Path, str]


def tokenize(text: str) -> list[str]:
    """Lowercase terms of `text`: split on non-alphanumerics and camelCase, stopwords dropped."""
    terms: list[str] = []
    for run in _RUN.findall(text):
        parts = _CAMEL.findall(run) if run.isascii() else [run]
        terms.extend(part.lower() for part in parts)
    return [term for term in terms if term not in STOPWORDS]


@dataclass(frozen=True)
class _Snapshot:
    """One scan's result: skills by name, their search index and the problems found."""

    fingerprint: Fingerprint
    by_name: Mapping[str, Skill]
    ordered: tuple[Skill, ...]
    index: SkillIndex
    problems: tuple[Problem, ...]
    overrides: tuple[str, ...]

    def search(self, query: str, k: int) -> list[SkillHit]:
        """Hits with a positive BM25 score, best first (ties by name), at most k."""
        return self.index.search(query, k)


class SkillIndex:
    """BM25 over skills' name (×3), description (×2) and body; any source may use it."""

    def __init__(self, skills: Sequence[Skill], source: SourceName) -> None:
        self._skills = tuple(skills)
        self._source: SourceName = source
        # None for no skills: BM25 cannot index zero documents.
        self._bm25 = Bm25([_document(s) for s in self._skills]) if self._skills else None

    def search(self, query: str, k: int) -> list[SkillHit]:
        """Hits with a positive BM25 score, best first (ties by name), at most k."""
        terms = tokenize(query)
        if self._bm25 is None or not terms or k <= 0:
            return []
        scores = self._bm25.get_scores(terms)
        best = top_k(scores, k, lambda i: self._skills[i].name)
        return [
            SkillHit(source=self._source, skill=self._skills[i], score=float(scores[i]))
            for i in best
        ]


class LocalCatalog:
    """The `local` skill source: bundled skills overlaid by the user's skill directory."""

    def __init__(
        self,
        user_dir: Path | None = None,
        *,
        bundled_dir: Path | None = BUNDLED_DIR,
        reload_interval: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Bundled first: a later root's skill of the same name overrides an earlier one.
        self._roots: tuple[tuple[Path, str], ...] = tuple(
            (root, origin)
            for root, origin in ((bundled_dir, "bundled"), (user_dir, "user"))
            if root is not None
        )
        self._reload_interval = reload_interval
        self._clock = clock
        self._snapshot: _Snapshot | None = None
        self._checked_at = -math.inf
        self._lock = asyncio.Lock()

    @property
    def name(self) -> SourceName:
        """Always `local`."""
        return "local"

    @property
    def load_problems(self) -> list[Problem]:
        """(SKILL.md path, problem) of every skill the last scan skipped."""
        return [] if self._snapshot is None else list(self._snapshot.problems)

    async def skills(self) -> list[Skill]:
        """Every loaded skill, sorted by name."""
        return list((await self._current()).ordered)

    async def get(self, name: str) -> Skill | None:
        """The skill with this display name, if loaded."""
        return (await self._current()).by_name.get(name)

    async def search(self, query: str, k: int, history: Sequence[str] = ()) -> list[SkillHit]:
        """Up to k BM25 hits with a positive score, best first (`history` is not used)."""
        snapshot = await self._current()
        return await asyncio.to_thread(snapshot.search, query, k)

    async def refresh(self) -> None:
        """Rescan now, whatever the interval (e.g. for `doctor`)."""
        async with self._lock:
            self._checked_at = self._clock()
            await self._rescan(await asyncio.to_thread(self._fingerprint))

    async def _current(self) -> _Snapshot:
        async with self._lock:
            now = self._clock()
            if self._snapshot is not None and now - self._checked_at < self._reload_interval:
                return self._snapshot
            self._checked_at = now
            fingerprint = await asyncio.to_thread(self._fingerprint)
            if self._snapshot is not None and fingerprint == self._snapshot.fingerprint:
                return self._snapshot
            return await self._rescan(fingerprint)

    async def _rescan(self, fingerprint: Fingerprint) -> _Snapshot:
        previous = self._snapshot
        snapshot = await asyncio.to_thread(self._scan, fingerprint)
        self._snapshot = snapshot
        self._log_changes(previous, snapshot)
        return snapshot

    def _fingerprint(self) -> Fingerprint:
        # Taken before the scan: an edit during the scan changes the next fingerprint, so the
        # next check rescans rather than missing it.
        return tuple(entry for root, _ in self._roots for entry in _fingerprint_root(root))

    def _scan(self, fingerprint: Fingerprint) -> _Snapshot:
        by_name: dict[str, Skill] = {}
        problems: list[Problem] = []
        overrides: list[str] = []
        for root, origin in self._roots:
            own: dict[str, Skill] = {}
            for skill in _load_root(root, origin, problems):
                if skill.name in own:
                    problems.append(_duplicate(skill, own[skill.name]))
                    continue
                own[skill.name] = skill
            for name, skill in own.items():
                if name in by_name:
                    overrides.append(f"{name}: {_skill_md(skill)} over {_skill_md(by_name[name])}")
                by_name[name] = skill
        ordered = tuple(sorted(by_name.values(), key=lambda s: s.name))
        return _Snapshot(
            fingerprint=fingerprint,
            by_name=by_name,
            ordered=ordered,
            index=SkillIndex(ordered, "local"),
            problems=tuple(problems),
            overrides=tuple(sorted(overrides)),
        )

    @staticmethod
    def _log_changes(previous: _Snapshot | None, current: _Snapshot) -> None:
        # Hot reload rescans on any change: log only what is new, not every skip again.
        old_problems = set() if previous is None else set(previous.problems)
        for path, problem in current.problems:
            if (path, problem) not in old_problems:
                log.warning("skipped skill %s: %s", path, problem)
        old_overrides = set() if previous is None else set(previous.overrides)
        for override in current.overrides:
            if override not in old_overrides:
                log.info("user skill overrides bundled skill %s", override)
        if previous is not None and previous.fingerprint != current.fingerprint:
            loaded, skipped = len(current.ordered), len(current.problems)
            log.info("skills reloaded: %d loaded, %d skipped", loaded, skipped)


def _skill_dirs(root: Path) -> list[Path]:
    """Candidate skill directories of a root, sorted (names starting with `.` or `__` skipped).

    A missing root has none; an unreadable one raises OSError.
    """
    try:
        entries = sorted(root.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [e for e in entries if not e.name.startswith((".", "__")) and e.is_dir()]


def _load_root(root: Path, origin: str, problems: list[Problem]) -> Iterator[Skill]:
    stray = root / SKILL_FILE
    if stray.is_file():
        problems.append(
            (stray, f"a skill lives in its own directory: move it to {root}/<skill-name>/SKILL.md")
        )
    try:
        directories = _skill_dirs(root)
    except OSError as exc:
        problems.append((root, f"cannot list the skill directory: {exc.strerror or exc}"))
        return
    for directory in directories:
        try:
            yield load_skill_dir(directory, origin)
        except SkillFormatError as exc:
            problems.append((exc.path, exc.problem))
        except OSError as exc:  # unreadable file or directory, a race with a deletion
            problems.append((directory / SKILL_FILE, f"cannot read it: {exc.strerror or exc}"))


def _fingerprint_root(root: Path) -> Iterator[tuple[str, int, int, int]]:
    """(path, mtime_ns, size, inode) of each skill's SKILL.md and resource files.

    The inode catches editors that replace a file by renaming a same-sized copy over it.
    Directories are listed too, so adding or removing a (still empty) skill is noticed.
    """
    yield from _stat(root / SKILL_FILE)
    try:
        directories = _skill_dirs(root)
    except OSError:  # the scan reports it; a fixed permission changes the fingerprint
        yield (str(root), -1, 0, 0)
        return
    for directory in directories:
        yield (str(directory), 0, 0, 0)
        yield from _stat(directory / SKILL_FILE)
        for kind in RESOURCE_DIRS:
            for current, dirs, files in os.walk(directory / kind):
                dirs.sort()
                for file_name in sorted(files):
                    yield from _stat(Path(current, file_name))


def _stat(path: Path) -> Iterator[tuple[str, int, int, int]]:
    try:
        st = path.stat()
    except OSError:
        return
    yield (str(path), st.st_mtime_ns, st.st_size, st.st_ino)


def _document(skill: Skill) -> list[str]:
    """The BM25 document of a skill: name terms ×3, description ×2, then the body."""
    return (
        tokenize(skill.name) * NAME_WEIGHT
        + tokenize(skill.description) * DESCRIPTION_WEIGHT
        + tokenize(skill.body)
    )


def _skill_md(skill: Skill) -> str:
    return str(skill.directory / SKILL_FILE) if skill.directory is not None else skill.id


def _duplicate(skill: Skill, kept: Skill) -> Problem:
    path = Path(_skill_md(skill))
    return (
        path,
        f"duplicate skill name {skill.name!r}, already defined by {_skill_md(kept)}: "
        "rename one of them (the first in directory order is kept)",
    )


__all__ = ["BUNDLED_DIR", "STOPWORDS", "LocalCatalog", "tokenize"]
