"""Skill Forge in the Host's turn (paper §6.2): the router selects procedures for the
request from every configured source; the selected bodies enter the system prompt fenced as
untrusted data, with their resource paths, and the injected ids are recorded per turn."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from core.fence import fence, new_marker, untrusted_preface
from host.features.skills.store import ExperienceStore
from host.runtime.turn import TurnContext
from skills.router import SkillRouter, render_selected

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
        marker = new_marker()
        block = render_selected(
            selection.selected, lambda text, source: fence(text, source=source, marker=marker)
        )
        return f"{untrusted_preface(marker)}\n{block}"
