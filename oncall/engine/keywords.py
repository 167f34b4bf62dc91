"""The engine's keyword form (every dependency and setting as one keyword), kept for the
assembly code that builds it that way (bot/app.py, `raven-bot campaigns run`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NotRequired, Required, TypedDict

from core.ids import ConversationRef
from oncall.engine.parts import Decider, EngineConfig, EngineDeps, EngineSettings
from oncall.machines.registry import Allocator
from oncall.model import Machine
from oncall.ports import CampaignNotifier, CommandApprovals, WakeScheduler
from oncall.store import CampaignStore
from oncall.workdirs import BotPaths


class EngineKeywords(TypedDict, total=False):
    """The fields of `EngineDeps` and `EngineConfig`, flat."""

    store: Required[CampaignStore]
    machines: Required[Mapping[str, Machine]]
    allocator: Required[Allocator]
    scheduler: Required[WakeScheduler]
    notifier: Required[CampaignNotifier]
    decider: Required[Decider]
    root: Required[Path]
    settings: NotRequired[EngineSettings]
    clock: NotRequired[Callable[[], float]]
    new_id: NotRequired[Callable[[], str]]
    approvals: NotRequired[CommandApprovals | None]
    workspace: NotRequired[Callable[[ConversationRef], Path] | None]
    bot_paths: NotRequired[BotPaths | None]


def grouped(keywords: EngineKeywords) -> tuple[EngineDeps, EngineConfig]:
    """The keyword form as the engine's two records (defaults where a keyword is left out)."""
    deps = EngineDeps(
        store=keywords["store"],
        machines=keywords["machines"],
        allocator=keywords["allocator"],
        scheduler=keywords["scheduler"],
        notifier=keywords["notifier"],
        decider=keywords["decider"],
        approvals=keywords.get("approvals"),
    )
    defaults = EngineConfig(root=keywords["root"])
    config = EngineConfig(
        root=keywords["root"],
        settings=keywords.get("settings", defaults.settings),
        workspace=keywords.get("workspace"),
        bot_paths=keywords.get("bot_paths"),
        clock=keywords.get("clock", defaults.clock),
        new_id=keywords.get("new_id", defaults.new_id),
    )
    return deps, config
