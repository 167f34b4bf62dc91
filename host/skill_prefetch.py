"""What a dispatched node gets after its task: its specialist's default skills (fenced,
with resource paths) and any other dispatch context (group memory), joined in order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from host.graph.executor import DispatchContext
from host.graph.render import fence, new_marker, untrusted_preface
from host.graph.run_store import RunRecord
from skills.catalog import LocalCatalog
from skills.model import SkillHit
from skills.router import render_selected


@dataclass(frozen=True)
class DefaultSkills:
    """The named skills of each agent's specialist, from the local catalog."""

    catalog: LocalCatalog
    by_agent: Mapping[str, Sequence[str]]

    async def for_node(self, run: RunRecord, agent: str, task: str) -> str:
        """The agent's default skills ("" when it has none, or none is in the catalog)."""
        hits = []
        for name in self.by_agent.get(agent, ()):
            skill = await self.catalog.get(name)
            if skill is not None:
                hits.append(SkillHit("local", skill, 1.0))
        if not hits:
            return ""
        marker = new_marker()
        block = render_selected(
            hits, lambda text, source: fence(text, source=source, marker=marker)
        )
        return f"{untrusted_preface(marker)}\n{block}"


@dataclass(frozen=True)
class DispatchContexts:
    """Several dispatch contexts as one (the graph runtime takes one)."""

    parts: Sequence[DispatchContext]

    async def for_node(self, run: RunRecord, agent: str, task: str) -> str:
        """Every part's block, in order, blank ones left out."""
        blocks = [await part.for_node(run, agent, task) for part in self.parts]
        return "\n\n".join(b for b in blocks if b)
