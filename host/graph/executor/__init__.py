"""Executes one admitted graph run: dependency-ready scheduling (paper Eq. 31), judging,
suspension on exceptions, skipping after failures, cancellation.

How a node moves (paper §3.2, Fig. 5a), room by room:

- `ready`: the ready set, incrementally — every node keeps a counter of in-graph predecessors
  not yet completed; a completed node decrements its children's counters once its state is
  committed (so a consumer never reads an unsettled output), and a child reaching zero is
  submitted at once — no scan of the graph on any wake-up.
- `scheduling`: submitting ready nodes, decision deadlines, and the conversation's slots (a
  node is `queued` while it waits for its instance or slot, `running` once it holds it; the
  slot is held for the agent call only).
- `attempts`: one attempt of one node — prompt, slot, agent call; `settle`: journal it,
  judge it, commit completed / exception / failed.
- `commits`: the node rows' group commit (one statement per batch); skipping after a
  failure walks the pending descendants only. `journal`: the run's files (one write and one
  fsync per batch, off the loop); a settling node waits for its journal lines to be on disk
  before its state is committed, and nothing is announced before it is committed.
- `announcements`: run events with frozen snapshots; progress is published by one task per
  run after commits, coalesced (a slow chat API delays the status message, never the run).
- `run`: `GraphRun`, the façade the rest of the host uses.
"""

from host.graph.executor.deps import (
    AgentAccess,
    DispatchAids,
    DispatchContext,
    NodeTools,
    PermitFactory,
    RunDeps,
    RunPolicy,
    WorkerPrompts,
)
from host.graph.executor.run import GraphRun
from host.graph.executor.scheduling import ConversationCapacity

__all__ = [
    "AgentAccess",
    "ConversationCapacity",
    "DispatchAids",
    "DispatchContext",
    "GraphRun",
    "NodeTools",
    "PermitFactory",
    "RunDeps",
    "RunPolicy",
    "WorkerPrompts",
]
