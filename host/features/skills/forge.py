"""Skill Forge from the skills settings: the sources (bundled + user SKILL.md catalog,
experience skills in SQLite, an optional hub) and the router, as the bot and
`raven-bot skills` use them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from agents.models.provider import ModelProvider
from host.features.skills.completer import ProviderCompleter
from host.features.skills.store import ExperienceSkillSource, ExperienceStore
from skills.catalog import LocalCatalog
from skills.hub import HubSource
from skills.model import SkillSource
from skills.router import RouterSettings, SkillRouter

USER_SKILLS_DIR = "skills"


@dataclass(frozen=True)
class SkillsSection:
    """The skills settings (named as in Settings)."""

    skills: bool
    skills_gate: bool
    skills_rewriter: bool
    skills_blocked: list[str]
    skills_hub_url: str | None
    skills_hub_token: SecretStr | None
    skills_hub_allow_unscored: bool


def local_catalog(home: Path) -> LocalCatalog:
    """Bundled skills overlaid by `RAVEN_HOME/skills/` (hot-reloaded)."""
    return LocalCatalog(home / USER_SKILLS_DIR)


def skill_sources(
    section: SkillsSection, experience: ExperienceStore, catalog: LocalCatalog
) -> list[SkillSource]:
    """Local catalog, experience skills, and the hub when a URL is configured."""
    sources: list[SkillSource] = [catalog, ExperienceSkillSource(experience)]
    if section.skills_hub_url:
        token = section.skills_hub_token
        sources.append(
            HubSource(
                section.skills_hub_url,
                token=token.get_secret_value() if token is not None else None,
            )
        )
    return sources


def skill_router(
    section: SkillsSection,
    experience: ExperienceStore,
    provider: ModelProvider | None,
    catalog: LocalCatalog,
) -> SkillRouter:
    """The router; its gate needs a model (offline the fused pool is used as is)."""
    completer = (
        ProviderCompleter(provider) if provider is not None and not provider.offline else None
    )
    return SkillRouter(
        skill_sources(section, experience, catalog),
        completer=completer,
        settings=RouterSettings(
            gate_enabled=section.skills_gate,
            rewriter_enabled=section.skills_rewriter,
            blocked_names=frozenset(section.skills_blocked),
            allow_unscored_hub=section.skills_hub_allow_unscored,
        ),
    )
