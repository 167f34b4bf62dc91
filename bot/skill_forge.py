"""Skill Forge from settings: the sources (bundled + user SKILL.md catalog, experience skills
in SQLite, an optional hub) and the router, as the bot and `raven-bot skills` use them."""

from __future__ import annotations

from agents.models.provider import ModelProvider
from bot.settings import Settings
from host.features.skills.completer import ProviderCompleter
from host.features.skills.store import ExperienceSkillSource, ExperienceStore
from skills.catalog import LocalCatalog
from skills.hub import HubSource
from skills.model import SkillSource
from skills.router import RouterSettings, SkillRouter

USER_SKILLS_DIR = "skills"


def local_catalog(settings: Settings) -> LocalCatalog:
    """Bundled skills overlaid by `RAVEN_HOME/skills/` (hot-reloaded)."""
    return LocalCatalog(settings.home / USER_SKILLS_DIR)


def skill_sources(
    settings: Settings, experience: ExperienceStore, catalog: LocalCatalog | None = None
) -> list[SkillSource]:
    """Local catalog, experience skills, and the hub when a URL is configured."""
    sources: list[SkillSource] = [
        catalog or local_catalog(settings),
        ExperienceSkillSource(experience),
    ]
    if settings.skills_hub_url:
        token = settings.skills_hub_token
        sources.append(
            HubSource(
                settings.skills_hub_url,
                token=token.get_secret_value() if token is not None else None,
            )
        )
    return sources


def skill_router(
    settings: Settings,
    experience: ExperienceStore,
    provider: ModelProvider | None,
    catalog: LocalCatalog | None = None,
) -> SkillRouter:
    """The router; its gate needs a model (offline the fused pool is used as is)."""
    completer = (
        ProviderCompleter(provider) if provider is not None and not provider.offline else None
    )
    return SkillRouter(
        skill_sources(settings, experience, catalog),
        completer=completer,
        settings=RouterSettings(
            gate_enabled=settings.skills_gate,
            rewriter_enabled=settings.skills_rewriter,
            blocked_names=frozenset(settings.skills_blocked),
        ),
    )
