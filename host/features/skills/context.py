"""Skill Forge in the Host's turn (paper §6.2): the router selects procedures for the
request from every configured source; each selected skill's id, name and description enter
the system prompt fenced as untrusted data, with its resource paths, and the injected ids are
recorded per turn. The bodies are left to the agents: the Host runs no procedure itself, and
a dispatched node gets the skills that fit its own task in full (`prefetch.NodeSkills`), so
the Host's every call does not pay for a procedure twice."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.fence import fence, new_marker, untrusted_preface
from host.features.skills.store import ExperienceStore
from host.runtime.turn import TurnContext
from skills.model import SkillHit
from skills.prompts import SOURCE_LABELS, excerpt, shown_id
from skills.router import SkillRouter

HEADING = (
    "## Skills for this request\n"
    "Procedures, not agents: the agents you give the work to get the ones that fit their "
    "task."
)
DESCRIPTION_CHARS = 200

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SkillContext:
    """Context source: the skills selected for a user's request ("" when none)."""

    router: SkillRouter
    store: ExperienceStore
    tools: Sequence[str]
    specialists: Sequence[str]

    async def context(self, ctx: TurnContext) -> str:
        """Select, record, render."""
        if ctx.origin != "user" or not ctx.text.strip():
            return ""
        try:
            selection = await self.router.select(
                ctx.text, tools=self.tools, specialists=self.specialists
            )
        except Exception:
            # Skills help; they never fail a turn.
            log.exception("skill selection failed for turn %s", ctx.turn_id)
            return ""
        for source, error in selection.source_errors.items():
            log.warning("skill source %s failed: %s", source, error)
        if not selection.selected:
            return ""
        await self.store.record_injection(ctx.turn_id, ctx.conversation.id, selection.selected)
        return host_block(selection.selected, new_marker())


def host_block(selected: Sequence[SkillHit], marker: str) -> str:
    """The Host's block for the selected skills (a repeated id once); "" for none."""
    unique = list({hit.qid: hit for hit in selected}.values())
    if not unique:
        return ""
    blocks = [_render(n, hit, marker) for n, hit in enumerate(unique, start=1)]
    return "\n".join([untrusted_preface(marker), HEADING, *blocks])


def _render(number: int, hit: SkillHit, marker: str) -> str:
    """One skill as the Host sees it: the bot's numbering and source label outside the
    fence, the source's id, name and description inside, then its resource paths."""
    lines = [f"### Skill {number} (from the {SOURCE_LABELS.get(hit.source, 'skill source')})"]
    if hit.skill.directory is not None:
        lines.append(f"Directory: {hit.skill.directory}")
    content = "\n".join(
        [
            f"id: {shown_id(hit)}",
            f"name: {excerpt(hit.skill.name, 120)}",
            f"description: {excerpt(hit.skill.description, DESCRIPTION_CHARS)}",
        ]
    )
    lines.append(fence(content, source=f"skill {number}", marker=marker))
    if resources := _resources(hit):
        lines += ["Resources:", *(f"- {path}" for path in resources)]
    return "\n".join(lines)


def _resources(hit: SkillHit) -> list[Path]:
    """The skill's bundled files that exist inside its directory (a path escaping it never
    counts, so a hostile manifest cannot point an agent elsewhere)."""
    directory = hit.skill.directory
    if directory is None:
        return []
    root = directory.resolve()
    return [
        real
        for path in hit.skill.resources()
        if (real := path.resolve()).is_relative_to(root) and real.exists()
    ]
