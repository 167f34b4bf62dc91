"""Group memory in the Host (paper §3.4).

- A finished run (stopped runs excluded) deposits its deterministic round summary in the
  submitter's host library and waits for its close.
- The Host's next reply in that conversation closes it: one close verdict per agent from the
  attribution blocks the Host was asked to append (stripped before anyone sees the reply),
  or a deterministic fallback. The next user turn reassesses it once (Eq. 38).
- Before a turn the author's host library and the agents' libraries are recalled (Eq. 33);
  a dispatched node gets its host library's closest records and the most recent verdicts
  about its agent (Eq. 34). User libraries never enter.

Scopes: a round that ran in a DM lives in the DM partition of its submitter's host library,
recalled only in that person's DMs. A verdict's body (the Host's prose, which may quote the
task) reaches only turns and nodes of the conversation its round ran in; everywhere else a
verdict is its header: agent, round and outcome label, never one user's text.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from core.fence import fence, new_marker, untrusted_preface
from host.features.memory.personal import owner_of
from host.graph.run_store import RunRecord
from host.runtime.events import EventBus, RunFinished, TurnCompleted
from host.runtime.turn import TurnContext
from memory.group import (
    Attribution,
    RoundNode,
    Verdict,
    agent_outcomes,
    blocks_for_round,
    close_verdicts,
    feedback_verdicts,
    outcome_entry,
    round_summary,
)
from memory.group_store import (
    GroupStore,
    PendingRound,
    agent_library,
    audience_library,
    host_library,
    verdict_docs,
)
from memory.index import Doc
from memory.service import MemoryService

log = logging.getLogger(__name__)

LABEL_LIST = "adopted, partially_adopted, rejected, failed, cancelled"


def close_request(run_id: str, agents: Sequence[str]) -> str:
    """What the Host is asked to append when round `run_id` closes."""
    names = ", ".join(agents)
    return (
        f"Round `{run_id}` has closed (agents: {names}). After your reply, append one block per "
        f'agent, exactly `<attribution run="{run_id}" agent="NAME">…</attribution>`, '
        "addressing the agent directly: its responsibility, the work it delivered, strengths, "
        "failures and their causes, and instructions for future tasks. Ground it in what you "
        "observed; statuses come from the run record. The blocks are removed before anyone "
        "sees your reply; do not mention them."
    )


def feedback_request(rounds: Sequence[PendingRound]) -> str:
    """What the Host is asked on the user turn after rounds closed."""
    lines = [
        "Reassessment: if this message tells you how the work of a recent round was "
        "received, append after your reply, for each agent you reassess, "
        '`<attribution run="RUN" agent="NAME" outcome="LABEL">…</attribution>` with LABEL one '
        f"of {LABEL_LIST} and what the agent should do differently. Otherwise append nothing. "
        "The blocks are removed before anyone sees your reply. Rounds:"
    ]
    for r in rounds:
        lines.append(f"- `{r.run_id}`: " + ", ".join(f"{a} {o}" for a, o in r.outcomes.items()))
    return "\n".join(lines)


def fenced_block(title: str, lines: Sequence[str], budget_chars: int, source: str) -> str:
    """Merge (dedup lines, keep order), keep what fits the budget, fence as untrusted."""
    body: list[str] = []
    used = 0
    for line in dict.fromkeys(lines):
        room = budget_chars - used
        if len(line) > room:
            if room >= 80:  # a long record is cut to the room left rather than dropped
                body.append(line[: room - 1] + "…")
            break
        body.append(line)
        used += len(line) + 1
    if not body:
        return ""
    marker = new_marker()
    return f"{title}\n{untrusted_preface(marker)}\n" + fence(
        "\n".join(body), source=source, marker=marker
    )


class GroupMemoryWriter:
    """Deposits rounds when runs finish, closes and reassesses them after Host replies."""

    def __init__(self, store: GroupStore, memory: MemoryService) -> None:
        self._store = store
        self._memory = memory  # its index is replaced when loaded: read it at use

    def subscribe(self, bus: EventBus) -> None:
        """Hear finished runs and completed turns."""
        bus.subscribe(RunFinished, self._on_finished)
        bus.subscribe(TurnCompleted, self._on_turn)

    async def _on_finished(self, event: RunFinished) -> None:
        run = event.run
        if run.state in ("cancelled", "superseded"):
            return  # a stop or a replan decided the statuses: not evidence about the agents
        nodes = [
            RoundNode(n.node_id, n.agent, n.state, n.deps, n.summary or n.template)
            for n in run.nodes
        ]
        outcomes = agent_outcomes(nodes)
        conv = run.conversation
        scope = await self._store.conversation_scope(conv.id)
        library = host_library(owner_of(conv, run.submitted_by), scope)
        summary = round_summary(run.id, nodes, outcomes)
        summary_id = await self._store.deposit_round(
            run.id, conv.id, library, nodes, outcomes, summary, scope
        )
        if summary_id is not None:
            await self._index([Doc(f"round:{summary_id}", library, "note", summary)])

    async def _on_turn(self, event: TurnCompleted) -> None:
        conv = event.conversation.id
        # Reassess what earlier turns closed first: a round closed now waits for the next.
        reassess = (
            await self._store.pending(conv, "awaiting_feedback") if event.origin == "user" else []
        )
        closing = await self._store.pending(conv, "awaiting_close")
        sole = len(reassess) + len(closing) == 1
        for r in reassess:
            blocks = blocks_for_round(event.attributions, r.run_id, sole_round=sole)
            await self._reassess(r, blocks, conv)
        for r in closing:
            blocks = blocks_for_round(event.attributions, r.run_id, sole_round=sole)
            await self._close(r, blocks, conv)

    async def _close(self, r: PendingRound, blocks: dict[str, Attribution], conv: str) -> None:
        verdicts = close_verdicts(r.run_id, r.nodes, r.outcomes, blocks)
        ids = await self._store.close_round(r.run_id, verdicts)
        if ids is not None:
            await self._index(_docs(ids, verdicts, conv))

    async def _reassess(self, r: PendingRound, blocks: dict[str, Attribution], conv: str) -> None:
        verdicts = feedback_verdicts(r.run_id, r.nodes, r.outcomes, blocks)
        ids = await self._store.reassess_round(r.run_id, verdicts, r.outcomes)
        if ids is None or not verdicts:
            return  # released without a reassessment: only the close verdicts remain
        labels = [(v.agent, v.outcome, r.outcomes[v.agent]) for v in verdicts]
        docs = _docs(ids, verdicts, conv)
        if r.library:  # empty once its user said `forget everything`
            entry = outcome_entry(r.run_id, labels)
            docs.append(Doc(f"outcome:{r.run_id}", r.library, "note", entry))
        await self._index(docs)

    async def _index(self, docs: list[Doc]) -> None:
        await self._memory.index.add(docs)
        await self._memory.index.save()


def _docs(ids: Sequence[int], verdicts: Sequence[Verdict], conversation_id: str) -> list[Doc]:
    return [
        doc
        for i, v in zip(ids, verdicts, strict=True)
        for doc in verdict_docs(i, v, conversation_id)
    ]


@dataclass(frozen=True)
class AssessmentRequest:
    """Context source: asks the Host for attribution blocks while rounds of this
    conversation wait for their close, and (on user turns) for their reassessment."""

    store: GroupStore

    async def context(self, ctx: TurnContext) -> str:
        """The requests for this turn ("" when no round waits)."""
        conv = ctx.conversation.id
        parts = [
            close_request(r.run_id, list(r.outcomes))
            for r in await self.store.pending(conv, "awaiting_close")
        ]
        if ctx.origin == "user":
            reassess = await self.store.pending(conv, "awaiting_feedback")
            if reassess:
                parts.append(feedback_request(reassess))
        return "\n\n".join(parts)


@dataclass(frozen=True)
class GroupContext:
    """Context source (Eq. 33): the author's host library (its DM partition only in a DM),
    the agents' libraries (verdict headers) and this conversation's own full verdicts."""

    memory: MemoryService
    agents: Sequence[str]
    k_group: int = 2
    budget_chars: int = 1500

    async def context(self, ctx: TurnContext) -> str:
        """Recalled round summaries and verdicts for this request ("" when none)."""
        if ctx.origin != "user" or not ctx.text.strip():
            return ""
        owner = owner_of(ctx.conversation, ctx.author_id)
        libraries = [host_library(owner)]
        if ctx.is_dm:
            libraries.append(host_library(owner, "dm"))
        libraries.append(audience_library(ctx.conversation.id))
        libraries += [agent_library(a) for a in self.agents]
        lines: list[str] = []
        for library in libraries:
            for hit in await self.memory.index.search(library, ctx.text, self.k_group):
                lines.append(f"[{library.split(':', 1)[0]}] {hit.doc.text}")
        return fenced_block(
            "## Experience from earlier rounds (summaries and verdicts about agents)",
            lines,
            self.budget_chars,
            "group memory",
        )


@dataclass(frozen=True)
class GroupPrefetch:
    """Dispatch prefetch (Eq. 34): for a node, the submitter's host library records closest
    to its task (the DM partition too when the run is in a DM) and the most recent verdicts
    about its agent (whole only when from this run's conversation), fenced within a budget."""

    memory: MemoryService
    store: GroupStore
    k_group: int = 2
    k_verdict: int = 3
    budget_chars: int = 1500

    async def for_node(
        self,
        run: RunRecord,
        agent: str,
        task: str,
        *,
        node_id: str = "",
        skills: Sequence[str] | None = None,
    ) -> str:
        """The block appended to the node's task ("" when there is nothing to add; a skills
        override does not concern group memory)."""
        owner = owner_of(run.conversation, run.submitted_by)
        libraries = [host_library(owner)]
        if await self.store.conversation_scope(run.conversation.id) == "dm":
            libraries.append(host_library(owner, "dm"))
        lines = [
            f"[host] {hit.doc.text}"
            for library in libraries
            for hit in await self.memory.index.search(library, task[:2000], self.k_group)
        ]
        conv = run.conversation.id
        lines += [
            f"[verdict] {v.text_for(conv)}"
            for v in await self.store.recent_verdicts(agent, self.k_verdict)
        ]
        return fenced_block(
            "## Experience from earlier rounds (the Host's notes and its verdicts on you)",
            lines,
            self.budget_chars,
            "group memory",
        )
