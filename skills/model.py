"""Skill records (paper §6.1 Eq. 66) and the hits retrieval sources return (§6.2)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

SourceName = Literal["local", "memory", "hub"]


@dataclass(frozen=True)
class Skill:
    """One procedure: id (source-native), display name, applicability description, Markdown
    body, bundled resources (paths inside its directory) and metadata."""

    id: str
    name: str
    description: str
    body: str
    directory: Path | None = None  # None for skills that live in SQLite or on a hub
    scripts: tuple[str, ...] = ()  # relative paths under `directory`
    references: tuple[str, ...] = ()
    assets: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    origin: str = "bundled"  # bundled | user | experience | hub

    def resources(self) -> list[Path]:
        """Absolute paths of the bundled files (scripts, references, assets)."""
        if self.directory is None:
            return []
        return [self.directory / rel for rel in (*self.scripts, *self.references, *self.assets)]


@dataclass(frozen=True)
class SkillHit:
    """A ranked hit from one source: qualified id `source/native_id`, the skill and the
    source's native score (scales differ between sources; only ranks are fused)."""

    source: SourceName
    skill: Skill
    score: float

    @property
    def qid(self) -> str:
        """`source/native_id`."""
        return f"{self.source}/{self.skill.id}"

    @property
    def name(self) -> str:
        """The display name that groups hits across sources (Eq. 71)."""
        return self.skill.name


class SkillSource(Protocol):
    """One retrieval source (local catalog, experience skills in SQLite, a remote hub)."""

    @property
    def name(self) -> SourceName:
        """Which source this is."""
        ...

    async def search(self, query: str, k: int, history: Sequence[str] = ()) -> list[SkillHit]:
        """Up to k hits, best first (a source may ignore `history`)."""
        ...


@runtime_checkable
class SkillCatalog(Protocol):
    """A source that can list all its skills (the local catalog): the router reserves their
    names, so no other source can pass a skill off as one of them."""

    async def skills(self) -> list[Skill]:
        """Every skill of the source."""
        ...
