"""What a run is given: its collaborators (grouped by what they are for) and the ports
through which its nodes reach people and context."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from agents.backends.base import AgentBackend, NodeToolset, Permit
from agents.models.metered import UsageRecorder
from agents.registry import AgentEntry
from core.ids import ConversationRef
from host.graph.judge import CompletionJudge
from host.graph.records import RunFiles
from host.graph.run_store import RunRecord, RunStore
from host.runtime.events import EventBus
from host.runtime.spending import SpendGate


class WorkerPrompts(Protocol):
    """How a running node reaches a person: clarifying questions and command approvals."""

    async def answer_for_worker(
        self, conv: ConversationRef, requester: str, question: str, *, node_id: str
    ) -> str:
        """An answer to a worker's question (from the conversation or the requester)."""
        ...

    async def approve_command(
        self,
        conv: ConversationRef,
        requester: str,
        command: str,
        *,
        node_id: str,
        for_task: str | None = None,
    ) -> bool:
        """Whether a person approved running `command` (False unless approved); a run for a
        scheduled task (`for_task`) runs the commands approved with it without asking."""
        ...

    async def ask_permission(
        self, conv: ConversationRef, requester: str, question: str, *, node_id: str
    ) -> str:
        """A person's answer to a permission question (`allow_once`, `allow_conversation`,
        `deny`)."""
        ...


class PermitFactory(Protocol):
    """Builds the permission gate one node's tool calls pass (host-provided)."""

    def __call__(
        self,
        conv: ConversationRef,
        requester: str,
        ask: Callable[[str], Awaitable[str]] | None,
    ) -> Permit:
        """The gate for one task; `ask` is None for an unattended run (it cannot ask)."""
        ...


class DispatchContext(Protocol):
    """Adds context to a node's task at dispatch (group memory's prefetch, Eq. 34)."""

    async def for_node(
        self,
        run: RunRecord,
        agent: str,
        task: str,
        *,
        node_id: str = "",
        skills: Sequence[str] | None = None,
    ) -> str:
        """The block appended after the task ("" for nothing). `skills`: the node's override
        (None: the agent's own configuration; empty: none; names: exactly those)."""
        ...


class NodeTools(Protocol):
    """The team's tools (MCP servers) a node's task is granted (host-provided)."""

    def open(
        self,
        run: RunRecord,
        entry: AgentEntry,
        granted: Sequence[str] | None,
        permit: Permit | None,
    ) -> AbstractAsyncContextManager[NodeToolset]:
        """The node's toolset while its agent runs (closed when the call returns).
        `granted`: the node's `mcp` override (None: the agent's own configuration; empty:
        none; names: exactly those servers); every call passes `permit` (None: refused)."""
        ...


@dataclass(frozen=True)
class AgentAccess:
    """How a run reaches its agents: by name, through their backend, in which workspace."""

    agent: Callable[[str], AgentEntry | None]
    backend: Callable[[AgentEntry], AgentBackend]
    workspace: Path


@dataclass(frozen=True)
class RunPolicy:
    """How a run treats an attempt judged not accomplished, and its clock."""

    # False: nobody can decide, so a node that is not accomplished fails at once.
    host_reachable: bool
    # How long a suspended node waits for the Host's decision.
    decision_seconds: float
    clock: Callable[[], float] = time.time


@dataclass(frozen=True)
class DispatchAids:
    """What a node may get at dispatch beyond its task (each optional)."""

    # None: nobody to ask, and no command can be approved.
    prompts: WorkerPrompts | None = None
    # None: nodes get their task alone (group memory off).
    prefetch: DispatchContext | None = None
    # None: tool calls pass no permission gate (only the tools' own rules apply).
    gates: PermitFactory | None = None
    # None: nodes get their agent's own tools only (no tool servers configured).
    tools: NodeTools | None = None
    # None: no budgets; else asked before each node is dispatched.
    spend: SpendGate | None = None
    # None: not counted; else where the usage agents report with their outcome is recorded.
    usage: UsageRecorder | None = None


@dataclass(frozen=True)
class RunDeps:
    """The collaborators a run needs (injected by the run manager)."""

    store: RunStore
    files: RunFiles
    judge: CompletionJudge
    bus: EventBus
    agents: AgentAccess
    policy: RunPolicy
    aids: DispatchAids = DispatchAids()
