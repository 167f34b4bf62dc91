"""Skills installed into a runtime: selection for Host turns and dispatched nodes, and the
experience each finished run leaves (recorded even with selection off)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from typing import ClassVar

from agents.specialists import default_specialists
from core.errors import ConfigError
from host.agent.host_agent import ContextSource
from host.features.feature import BaseFeature, DoctorCheck, DoctorParts, HostParts
from host.features.skills.completer import ProviderCompleter
from host.features.skills.context import SkillContext
from host.features.skills.experience import ExperienceWriter
from host.features.skills.forge import (
    USER_SKILLS_DIR,
    SkillsSection,
    local_catalog,
    skill_router,
)
from host.features.skills.migrations import MIGRATIONS
from host.features.skills.prefetch import NodeSkills
from host.features.skills.store import ExperienceStore
from host.graph.executor import DispatchContext
from host.runtime.events import EventBus

log = logging.getLogger(__name__)


class SkillsFeature(BaseFeature):
    """The Skill Forge's router before turns and dispatches; experience from finished runs."""

    Section: ClassVar[type[SkillsSection]] = SkillsSection
    migrations = MIGRATIONS

    @classmethod
    async def doctor(cls, parts: DoctorParts, section: SkillsSection) -> Sequence[DoctorCheck]:
        """The SKILL.md catalog: how many skills load, and which files are skipped and why."""
        if not section.skills:
            return (DoctorCheck("skills", "ok", "Skill Forge is off (RAVEN_SKILLS=false)"),)
        catalog = local_catalog(parts.home)
        loaded = await catalog.skills()
        problems = catalog.load_problems
        detail = f"{len(loaded)} skill(s) from bundled and {parts.home / USER_SKILLS_DIR}"
        if problems:
            skipped = "; ".join(f"{path}: {problem}" for path, problem in problems[:3])
            detail = f"{detail}; skipped {len(problems)}: {skipped}"
            return (DoctorCheck("skills", "warn", detail),)
        return (DoctorCheck("skills", "ok", detail),)

    def __init__(self, parts: HostParts, section: SkillsSection) -> None:
        self._on = section.skills
        self._registry = parts.registry
        self._home = parts.home
        self.store = ExperienceStore(parts.store)
        self.catalog = local_catalog(parts.home)
        self.router = skill_router(section, self.store, parts.models.named("skills"), self.catalog)
        provider = parts.models.named("skills")
        self.writer = ExperienceWriter(
            self.store,
            completer=None if provider.offline else ProviderCompleter(provider),
            embedder=parts.embedder,
        )

    def context_sources(self, host_tools: Sequence[str]) -> Sequence[ContextSource]:
        if not self._on:
            return ()
        specialists = [e.name for e in self._registry.entries() if e.enabled]
        return (SkillContext(self.router, self.store, tools=host_tools, specialists=specialists),)

    def dispatch_contexts(self) -> Sequence[DispatchContext]:
        if not self._on:
            return ()
        specialists = default_specialists()
        inproc = [
            e for e in self._registry.entries() if e.backend == "inproc" and e.role in specialists
        ]
        return (
            NodeSkills(
                self.catalog,
                {
                    e.name: specialists[e.role].default_skills if e.skills is None else e.skills
                    for e in inproc
                },
                router=self.router,
                tools_by_agent={
                    e.name: specialists[e.role].tools(self._home).names() for e in inproc
                },
                store=self.store,
            ),
        )

    def skill_names(self) -> Callable[[], Awaitable[frozenset[str]]] | None:
        if not self._on:
            return None
        catalog = self.catalog

        async def names() -> frozenset[str]:
            return frozenset(skill.name for skill in await catalog.skills())

        return names

    def subscribe(self, bus: EventBus) -> None:
        self.writer.subscribe(bus)

    async def open(self, stack: AsyncExitStack) -> None:
        stack.push_async_callback(self.writer.close)
        if self._on:
            await self._check_agent_defaults()

    async def _check_agent_defaults(self) -> None:
        """agents.toml's `skills` defaults name skills that exist (a typo would silently
        give an agent nothing)."""
        known = {skill.name for skill in await self.catalog.skills()}
        for entry in self._registry.entries():
            unknown = [n for n in entry.skills or () if n not in known]
            if unknown:
                names = ", ".join(f"`{n}`" for n in unknown)
                raise ConfigError(
                    f"{self._home / 'agents.toml'}: [agents.{entry.name}] skills: no skill "
                    f"named {names} (`raven-bot skills list` shows them)"
                )

    async def recover(self) -> None:
        waiting = await self.writer.catch_up()
        if waiting:
            log.info(
                "skills: revising from %d case(s) recorded while no model was available", waiting
            )
