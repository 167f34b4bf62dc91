"""Skill Forge from settings, as the bot and `raven-bot skills` use it."""

from __future__ import annotations

from agents.models.provider import ModelProvider
from bot.settings import Settings
from host.features.skills.forge import USER_SKILLS_DIR, SkillsSection
from host.features.skills.forge import local_catalog as catalog_in
from host.features.skills.forge import skill_router as router_for
from host.features.skills.store import ExperienceStore
from skills.catalog import LocalCatalog
from skills.router import SkillRouter

__all__ = ["USER_SKILLS_DIR", "local_catalog", "skill_router"]


def local_catalog(settings: Settings) -> LocalCatalog:
    """Bundled skills overlaid by `RAVEN_HOME/skills/` (hot-reloaded)."""
    return catalog_in(settings.home)


def skill_router(
    settings: Settings,
    experience: ExperienceStore,
    provider: ModelProvider | None,
    catalog: LocalCatalog | None = None,
) -> SkillRouter:
    """The router the bot uses; its gate needs a model."""
    return router_for(
        settings.section(SkillsSection),
        experience,
        provider,
        catalog or local_catalog(settings),
    )
