"""Memory installed into a runtime: each person's memory, and the group's when turned on."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import ClassVar, Literal

from host.agent.host_agent import ContextSource
from host.conversation.service import CommandHandler
from host.features.feature import BaseFeature, HostParts
from host.features.memory.episode_former import ModelFormer
from host.features.memory.group import (
    AssessmentRequest,
    GroupContext,
    GroupMemoryWriter,
    GroupPrefetch,
)
from host.features.memory.migrations import MIGRATIONS
from host.features.memory.personal import MemoryCommands, MemoryContext, MemoryWriter
from host.graph.executor import DispatchContext
from host.runtime.events import EventBus
from memory.archive import Archive
from memory.episodes import RuleFormer
from memory.erasure import UserErasure
from memory.group_store import GroupStore
from memory.index import HybridIndex
from memory.service import MemoryService

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemorySection:
    """The memory settings (named as in Settings)."""

    memory_episodes: Literal["model", "rule"]
    memory_recall_k: int
    memory_budget_chars: int
    group_memory: bool
    group_recall_k: int
    group_verdicts_k: int
    group_budget_chars: int


class MemoryFeature(BaseFeature):
    """Recall for a turn's author, episodes from completed turns, the memory commands; with
    group memory, what the team learned about its agents, before turns and dispatches."""

    Section: ClassVar[type[MemorySection]] = MemorySection
    # The capability's own tables (memory/); its scope migration reads the conversation
    # log's `messages`, which the Host's own migrations create before any feature's.
    migrations = MIGRATIONS

    def __init__(self, parts: HostParts, section: MemorySection) -> None:
        self._section = section
        self._agents = [e.name for e in parts.registry.entries()]
        self.group_store = GroupStore(parts.store)
        self.memory = MemoryService(
            Archive(parts.store),
            HybridIndex(parts.embedder, parts.home / "index"),
            sources=(self.group_store,) if section.group_memory else (),
            # The episode former's own model (RAVEN_MODEL_EPISODES, else the Host's).
            former=ModelFormer(parts.models.episodes)
            if section.memory_episodes == "model" and not parts.models.episodes.offline
            else RuleFormer(),
            erasure=UserErasure(parts.store, runs_root=parts.home / "runs"),
        )
        self.writer = MemoryWriter(self.memory, parts.conversation_log)
        self._commands = MemoryCommands(self.memory, parts.broker, parts.outbox, parts.people)
        self._group_writer = GroupMemoryWriter(self.group_store, self.memory)

    def context_sources(self, host_tools: Sequence[str]) -> Sequence[ContextSource]:
        s = self._section
        personal = MemoryContext(
            self.memory, k=s.memory_recall_k, budget_chars=s.memory_budget_chars
        )
        if not s.group_memory:
            return (personal,)
        group = GroupContext(
            self.memory,
            agents=self._agents,
            k_group=s.group_recall_k,
            budget_chars=s.group_budget_chars,
        )
        return (personal, group, AssessmentRequest(self.group_store))

    def dispatch_contexts(self) -> Sequence[DispatchContext]:
        s = self._section
        if not s.group_memory:
            return ()
        return (
            GroupPrefetch(
                self.memory,
                self.group_store,
                k_group=s.group_recall_k,
                k_verdict=s.group_verdicts_k,
                budget_chars=s.group_budget_chars,
            ),
        )

    def commands(self) -> CommandHandler | None:
        return self._commands

    def subscribe(self, bus: EventBus) -> None:
        # Group memory hears a finished run before its report becomes a turn that may close
        # the round (the run announcer subscribes after every feature).
        if self._section.group_memory:
            self._group_writer.subscribe(bus)
        self.writer.subscribe(bus)
        self._commands.subscribe(bus)

    async def open(self, stack: AsyncExitStack) -> None:
        # The recall index is derived: loaded (or rebuilt) from SQLite, saved at shutdown.
        await self.memory.load_index()
        stack.push_async_callback(self.memory.save_index)
        stack.push_async_callback(self.writer.close)

    async def recover(self) -> None:
        caught_up = await self.writer.recover()
        if caught_up:
            log.info("memory: taking in %d turn(s) completed before a crash", caught_up)

    async def start(self, stack: AsyncExitStack) -> None:
        await self.memory.warm_up()
