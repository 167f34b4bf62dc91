"""What a dispatched node gets after its task: its specialist's default skills and the
skills the router selects for the task (fenced, with resource paths), and any other
dispatch context (group memory), joined in order."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from core.fence import fence, new_marker, untrusted_preface
from host.features.skills.store import ExperienceStore
from host.graph.executor import DispatchContext
from host.graph.run_store import RunRecord
from skills.catalog import LocalCatalog
from skills.model import SkillHit
from skills.names import name_key
from skills.router import SkillRouter, render_selected

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeSkills:
    """The node's specialist's default skills plus, when a router is given, the skills it
    selects for the node's task with that agent's tool roster (paper §6.2, per agent)."""

    catalog: LocalCatalog
    by_agent: Mapping[str, Sequence[str]]
    router: SkillRouter | None = None
    tools_by_agent: Mapping[str, Sequence[str]] = field(default_factory=dict)
    store: ExperienceStore | None = None

    async def for_node(
        self,
        run: RunRecord,
        agent: str,
        task: str,
        *,
        node_id: str = "",
        skills: Sequence[str] | None = None,
    ) -> str:
        """Default and selected skills, or exactly the node's `skills` override ("" when
        there are none)."""
        hits = []
        for name in self.by_agent.get(agent, ()) if skills is None else skills:
            skill = await self.catalog.get(name)
            if skill is not None:
                hits.append(SkillHit("local", skill, 1.0))
        if skills is None:  # an override is the whole set: the router adds nothing to it
            hits += await self._selected(agent, task, {h.name for h in hits})
        if not hits:
            return ""
        if self.store is not None:
            # A node's "turn" in the injection record: its run and node id.
            await self.store.record_injection(
                f"{run.id}:{node_id or agent}", run.conversation.id, hits
            )
        marker = new_marker()
        block = render_selected(
            hits, lambda text, source: fence(text, source=source, marker=marker)
        )
        return f"{untrusted_preface(marker)}\n{block}"

    async def _selected(self, agent: str, task: str, have: set[str]) -> list[SkillHit]:
        if self.router is None:
            return []
        try:
            selection = await self.router.select(
                task[:4000], tools=self.tools_by_agent.get(agent, ())
            )
        except Exception:
            log.exception("skill selection for a %s node failed", agent)
            return []  # skills help; they never fail a node
        # A default skill is not repeated under a name that reads alike.
        have_keys = {name_key(name) for name in have}
        return [h for h in selection.selected if name_key(h.name) not in have_keys]


@dataclass(frozen=True)
class DispatchContexts:
    """Several dispatch contexts as one (the graph runtime takes one)."""

    parts: Sequence[DispatchContext]

    async def for_node(
        self,
        run: RunRecord,
        agent: str,
        task: str,
        *,
        node_id: str = "",
        skills: Sequence[str] | None = None,
    ) -> str:
        """Every part's block, in order, blank ones left out."""
        blocks = [
            await part.for_node(run, agent, task, node_id=node_id, skills=skills)
            for part in self.parts
        ]
        return "\n\n".join(b for b in blocks if b)
