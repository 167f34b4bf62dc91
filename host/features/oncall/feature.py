"""Oncall installed into a runtime: the campaign engine, its Host tools, its approvals,
wake-ups and `stop`, with notices posted in the conversation's lane."""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import ClassVar

from agents.tools import Tool, ToolSource
from core.ids import ConversationRef
from host.conversation.service import CommandHandler
from host.features.feature import BaseFeature, DoctorCheck, DoctorParts, HostParts, StatusSource
from host.features.oncall.approval import (
    CAMPAIGN_COMMAND,
    PromptCommandApprovals,
    handle_campaign_command,
)
from host.features.oncall.charts import ChartedNotices
from host.features.oncall.commands import CampaignCommands
from host.features.oncall.decider import ModelDecider
from host.features.oncall.doctor import check_machines
from host.features.oncall.migrations import MIGRATIONS
from host.features.oncall.owners import CampaignOwners
from host.features.oncall.site import CampaignSite, Wiring
from host.features.oncall.tools import CampaignFollowUps, CampaignTools, start_campaign_tool
from host.nudges.held import HELD_POST_RELEASE, HeldPosts
from host.nudges.notices import LaneNotifier
from host.runtime.events import (
    ConversationStopped,
    EventBus,
    StoppedItem,
    subscribe_decision,
    subscribe_job,
)
from host.runtime.people import People
from host.runtime.scheduling import FiredJob
from host.runtime.turn import TurnContext
from oncall.access import CampaignLimits
from oncall.engine import CampaignEngine, EngineSettings
from oncall.model import FINAL_STATES
from oncall.ports import CAMPAIGN_WAKE
from oncall.store import CampaignStore


@dataclass(frozen=True)
class OncallSection:
    """The campaign settings (named as in Settings)."""

    campaign_report_tolerance: float
    campaign_max_budget_hours: float
    campaign_max_per_user: int


class OncallFeature(BaseFeature):
    """Campaigns started from chat, run on the machines of RAVEN_HOME/machines.toml."""

    Section: ClassVar[type[OncallSection]] = OncallSection
    # The campaign engine's tables (oncall/).
    migrations = MIGRATIONS

    @classmethod
    async def doctor(cls, parts: DoctorParts, section: OncallSection) -> Sequence[DoctorCheck]:
        return (await check_machines(parts),)

    def __init__(self, parts: HostParts, section: OncallSection) -> None:
        # The serving bot's site: its own directory is never a workdir.
        site = CampaignSite(
            parts.home, parts.cwd, False, parts.sandbox, parts.hidden, parts.unsandboxed
        )
        self._parts = parts
        # Notices are system work in the conversation's lane, recorded before they post;
        # routine ones pass the nudge policy (quiet hours hold them until they end).
        self.notifier = LaneNotifier(
            parts.conversation_log,
            parts.outbox,
            parts.lanes,
            nudges=parts.nudges,
            held=HeldPosts(parts.store, parts.scheduler),
            admission=parts.admission,
        )
        store = CampaignStore(parts.store)
        # A final report's chart follows it into the thread as a PNG.
        self.charts = ChartedNotices(
            self.notifier,
            store,
            parts.outbox,
            parts.home / "campaigns",
            log=parts.conversation_log,
            links=parts.links,
        )
        self.engine = site.engine(
            {name: machine.spec for name, machine in parts.machines.items()},
            Wiring(
                store,
                parts.scheduler,
                self.charts,
                ModelDecider(parts.models.named("oncall"), spend=parts.spend),
                PromptCommandApprovals(parts.broker),
                CampaignOwners(parts.admission, admins=parts.roles.admins),
            ),
            EngineSettings(
                report_tolerance=section.campaign_report_tolerance,
                limits=CampaignLimits(
                    max_budget_seconds=section.campaign_max_budget_hours * 3600,
                    max_active_per_user=section.campaign_max_per_user,
                ),
            ),
            # A chat campaign without a machine `workdir` runs in the conversation's
            # workspace (where its attachments land).
            workspace=parts.workspace,
            machines=parts.machines,
        )

    def _tools(self) -> CampaignTools:
        p = self._parts
        return CampaignTools(
            self.engine, roles=p.roles, private=p.broker.notify_private, people=p.people
        )

    def host_tools(self) -> Sequence[Tool[TurnContext]]:
        return (start_campaign_tool(self._tools()),)

    def tool_source(self) -> ToolSource[TurnContext] | None:
        # Reading and deciding on a campaign: offered where one exists.
        return CampaignFollowUps(self._tools())

    def status_sources(self) -> Sequence[StatusSource]:
        return (self.engine.status,)

    def commands(self) -> CommandHandler | None:
        return CampaignCommands(self.engine, self._parts.roles)

    def subscribe(self, bus: EventBus) -> None:
        p = self._parts
        subscribe_decision(
            bus,
            CAMPAIGN_COMMAND,
            functools.partial(
                handle_campaign_command,
                engine=self.engine,
                broker=p.broker,
                admins=p.roles.admins,
                people=p.people,
            ),
        )
        bus.subscribe(
            ConversationStopped, functools.partial(stop_campaigns, self.engine, people=p.people)
        )
        subscribe_job(bus, CAMPAIGN_WAKE, functools.partial(on_campaign_wake, self.engine))
        subscribe_job(bus, HELD_POST_RELEASE, self.notifier.release)

    async def start(self, stack: AsyncExitStack) -> None:
        # Notices quiet hours held past their end post now; monitors re-attach to rounds
        # still running; overdue wake-ups fire once.
        await self.notifier.recover()
        await self.engine.recover()
        # Charts owed to reports posted just before the process died.
        await self.charts.recover(now=time.time())
        stack.push_async_callback(self.engine.close)


async def on_campaign_wake(campaigns: CampaignEngine, job: FiredJob) -> None:
    """A campaign's scheduled wake-up fired."""
    await campaigns.on_wake_job(str(job.payload["campaign_id"]), str(job.payload["wake_id"]))


async def stop_campaigns(
    campaigns: CampaignEngine, event: ConversationStopped, *, people: People | None = None
) -> None:
    """`stop` hook for campaigns: the engine cancels those the stopper may act on and
    returns the rest; both go into the stop's tally. Notices name the stopper by display
    name (`people`)."""
    active = [
        record
        for record in await campaigns.store.of_conversation(event.conversation_id)
        if record.state not in FINAL_STATES
    ]
    conv = ConversationRef.parse(event.conversation_id)
    left = await campaigns.stop_conversation(
        event.conversation_id,
        by=event.by,
        privileged=event.privileged,
        by_name=await (people or People()).name(conv, event.by),
    )
    kept = {record.id for record in left}
    for record in active:
        if record.id not in kept:
            event.tally.record(StoppedItem("campaign", record.id, record.owner), cancelled=True)
    for record in left:
        event.tally.record(StoppedItem("campaign", record.id, record.owner), cancelled=False)
