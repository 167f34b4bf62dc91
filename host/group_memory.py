"""Group memory in the Host (paper §3.4): after every finished run (stopped runs excluded)
the deterministic round summary goes to the submitter's host library and one close verdict
per agent to that agent's library; before orchestration the author's host library and the
agents' libraries are recalled, fenced, within a budget (Eq. 33). User libraries never enter."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from host.events import EventBus, RunFinished
from host.graph.render import fence, new_marker, untrusted_preface
from host.memory import owner_of
from host.turn import TurnContext
from memory.group import RoundNode, agent_outcomes, close_verdicts, round_summary
from memory.group_store import GroupStore, agent_library, host_library
from memory.index import Doc
from memory.service import MemoryService

log = logging.getLogger(__name__)


class GroupMemoryWriter:
    """Deposits a round summary and close verdicts when a run finishes."""

    def __init__(self, store: GroupStore, memory: MemoryService) -> None:
        self._store = store
        self._memory = memory  # its index is replaced when loaded: read it at use

    def subscribe(self, bus: EventBus) -> None:
        """Hear finished runs."""
        bus.subscribe(RunFinished, self._on_finished)

    async def _on_finished(self, event: RunFinished) -> None:
        run = event.run
        if run.record.state == "cancelled":
            return  # a stop decided the statuses: not evidence about the agents
        nodes = [
            RoundNode(n.node_id, n.agent, n.state, tuple(n.deps), n.summary or n.template)
            for n in run.nodes.values()
        ]
        outcomes = agent_outcomes(nodes)
        summary = round_summary(run.id, nodes, outcomes)
        # The attribution blocks of the Host's report are not collected yet: fallback verdicts.
        verdicts = close_verdicts(run.id, nodes, outcomes, {})
        stored = await self._store.deposit_round(
            run.id, run.record.conversation.id, outcomes, summary, verdicts
        )
        if stored is None:
            return
        summary_id, verdict_ids = stored
        library = host_library(owner_of(run.record.conversation, run.record.submitted_by))
        docs = [Doc(f"round:{summary_id}", library, "note", summary)]
        docs += [
            Doc(f"verdict:{i}", agent_library(v.agent), "verdict", f"{v.header()} {v.body}")
            for i, v in zip(verdict_ids, verdicts, strict=True)
        ]
        await self._memory.index.add(docs)
        await self._memory.index.save()


@dataclass(frozen=True)
class GroupContext:
    """Context source (Eq. 33): the author's host library and the agents' libraries."""

    memory: MemoryService
    agents: Sequence[str]
    k_group: int = 2
    budget_chars: int = 1500

    async def context(self, ctx: TurnContext) -> str:
        """Recalled round summaries and verdicts for this request ("" when none)."""
        if ctx.origin != "user" or not ctx.text.strip() or self.k_group <= 0:
            return ""
        libraries = [host_library(owner_of(ctx.conversation, ctx.author_id))]
        libraries += [agent_library(a) for a in self.agents]
        lines: list[str] = []
        for library in libraries:
            for hit in await self.memory.index.search(library, ctx.text, self.k_group):
                line = f"[{library.split(':', 1)[0]}] {hit.doc.text}"
                if line not in lines:
                    lines.append(line)
        body, used = [], 0
        for line in lines:
            if used + len(line) > self.budget_chars:
                break
            body.append(line)
            used += len(line) + 1
        if not body:
            return ""
        marker = new_marker()
        return (
            "## Experience from earlier rounds (summaries and verdicts about agents)\n"
            f"{untrusted_preface(marker)}\n"
            + fence("\n".join(body), source="group memory", marker=marker)
        )
