"""What every room of the engine shares: its errors, its dependency and config records, the
in-memory state of a monitored round, and the small texts several rooms write."""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from core.ids import ConversationRef
from oncall.access import CampaignLimits
from oncall.machines.registry import Allocator
from oncall.model import JobHandle, Machine
from oncall.monitor import RoundWatch
from oncall.policy import Decision, DecisionContext
from oncall.ports import CampaignNotifier, CommandApprovals, OwnerAccess, WakeScheduler
from oncall.store import CampaignStore
from oncall.workdirs import BotPaths


class CampaignError(ValueError):
    """A campaign operation was refused; the message says why and what to do."""


class Decider(Protocol):
    """Chooses what a woken campaign does next (rule-based offline, a model online)."""

    @property
    def model_backed(self) -> bool:
        """True when deciding spends model calls."""
        ...

    async def decide(self, context: DecisionContext) -> Decision:
        """One decision for the campaign in `context`."""
        ...


@dataclass(frozen=True)
class EngineSettings:
    """Tunables of the engine."""

    report_tolerance: float = 1e-3
    terminate_grace_seconds: float = 10.0
    status_edit_seconds: float = 5.0  # at most one status edit per round this often
    limits: CampaignLimits = field(default_factory=CampaignLimits)


@dataclass(frozen=True)
class EngineDeps:
    """What the engine runs on: the campaign records and the ports to the outside."""

    store: CampaignStore
    machines: Mapping[str, Machine]
    allocator: Allocator
    scheduler: WakeScheduler
    notifier: CampaignNotifier
    decider: Decider
    # None (`raven-bot campaigns run`): the operator typed the command in their own shell,
    # which is the approval, and a changed command cannot be asked about.
    approvals: CommandApprovals | None = None
    # None (`campaigns run`): the operator acting directly; else the bot's access rules,
    # which the owner must still pass at each wake-up and resubmit.
    owners: OwnerAccess | None = None


def _new_campaign_id() -> str:
    return "cmp_" + uuid.uuid4().hex[:10]


@dataclass(frozen=True)
class EngineConfig:
    """Where campaigns run and the engine's tunables, clock and id maker."""

    root: Path  # one directory per campaign, one per round inside it
    settings: EngineSettings = field(default_factory=EngineSettings)
    # A conversation's workspace (created on use), where a chat campaign runs when its
    # machine has no `workdir`.
    workspace: Callable[[ConversationRef], Path] | None = None
    # RAVEN_HOME and the bot's working directory, which no campaign may run in (default:
    # `root`'s parent and the current directory).
    bot_paths: BotPaths | None = None
    clock: Callable[[], float] = time.time
    new_id: Callable[[], str] = _new_campaign_id


@dataclass
class LiveRound:
    """In-memory state of one monitored round (the durable state is in the store)."""

    watch: RoundWatch
    handle: JobHandle
    granted_seconds: float | None = None  # the round's time limit (read once, not per poll)
    last_edit: float = -math.inf
    unreachable_told: bool = False
    final_shown: bool = False  # the round-end status edit was made (by the monitor)
    task: asyncio.Task[None] | None = field(default=None, repr=False)


CRASHES: frozenset[str | None] = frozenset({"died", "vanished"})
REASON_TEXT: Mapping[str, str] = {
    "scheduled": "reached its scheduled wake-up",
    "finished": "finished (exit code 0)",
    "died": "died (non-zero exit code)",
    "stalled": "stalled (no new output)",
    "diverged": "diverged",
    "vanished": "vanished (its process is gone without an exit code)",
    "budget": "used up its time budget",
}


def cites(cite: int | None, template: str) -> str:
    """`template` filled with the cited measurement id; nothing when no measurement is cited
    (a round that died before printing a value)."""
    return "" if cite is None else template.format(cite)


async def drain(machine: Machine, handle: JobHandle, offset: int) -> bytes:
    """The rest of an ended round's log (read_log returns bounded chunks)."""
    out = b""
    while True:
        chunk = await machine.read_log(handle, offset + len(out))
        if not chunk:
            return out
        out += chunk
