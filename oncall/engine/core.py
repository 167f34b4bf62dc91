"""The engine's shared state: its records, per-campaign locks, the rounds it monitors, and
the few reads and notices every room needs."""

from __future__ import annotations

import asyncio
import logging

from core.keyed import KeyedLocks
from oncall.engine.parts import CampaignError, EngineConfig, EngineDeps, LiveRound, drain
from oncall.model import FINAL_STATES, MachineUnavailable
from oncall.output_tail import TAIL_BYTES, last_lines
from oncall.policy import RoundSummary
from oncall.ports import PostedHook
from oncall.store import CampaignRecord
from oncall.workdirs import BotPaths

log = logging.getLogger(__name__)


class EngineCore:
    """State shared by the rooms; the durable state is in the store, this is the rest."""

    def __init__(self, deps: EngineDeps, config: EngineConfig) -> None:
        self.deps = deps
        self.config = config
        self.settings = config.settings
        self.store = deps.store
        self.bot_paths = config.bot_paths or BotPaths.of(config.root.parent)
        self.locks = KeyedLocks()
        self.live: dict[str, LiveRound] = {}
        self.closed = False
        # Set whenever a campaign reaches a final state (waiters re-check their condition).
        self.changed = asyncio.Event()

    def now(self) -> float:
        """The engine's clock."""
        return self.config.clock()

    def signal_changed(self) -> None:
        """Wake the waiters of `changed`, and give later waiters a fresh event."""
        self.changed.set()
        self.changed = asyncio.Event()

    async def active(self, campaign_id: str) -> CampaignRecord:
        """The campaign, which must exist and not have ended (`CampaignError` otherwise)."""
        record = await self.store.get(campaign_id)
        if record is None:
            raise CampaignError(
                f"No campaign `{campaign_id}`; `raven-bot campaigns list` shows them."
            )
        if record.state in FINAL_STATES:
            raise CampaignError(
                f"Campaign `{campaign_id}` is {record.state}; nothing more can be done."
            )
        return record

    async def fresh(self, record: CampaignRecord) -> CampaignRecord:
        """The record as the store has it now."""
        current = await self.store.get(record.id)
        assert current is not None
        return current

    def deadline(self, record: CampaignRecord) -> float:
        """When the campaign's wall-clock budget ends."""
        return record.created_at + record.spec.budget.wall_seconds

    def remaining_wall(self, record: CampaignRecord) -> float:
        """The wall clock left in the campaign's budget."""
        return max(0.0, self.deadline(record) - self.now())

    async def summaries(self, record: CampaignRecord) -> list[RoundSummary]:
        """The campaign's rounds as the policy and the report see them."""
        return [
            RoundSummary(
                round=r.round, wake_reason=r.wake_reason, exit_code=r.exit_code, state=r.state
            )
            for r in await self.store.rounds(record.id)
        ]

    async def output_tail(self, record: CampaignRecord, round_no: int) -> str:
        """The last lines of the round's log (read from the machine, never through a link);
        empty when there are none or the machine cannot be read."""
        current = await self.store.round(record.id, round_no)
        machine = self.deps.machines.get(record.spec.machine)
        if current is None or current.handle is None or machine is None:
            return ""
        read = int((current.watch or {}).get("offset", 0))
        try:
            data = await drain(machine, current.handle, max(0, read - TAIL_BYTES))
        except MachineUnavailable:
            return ""
        return last_lines(data[-TAIL_BYTES:])

    async def notify(
        self,
        record: CampaignRecord,
        text: str,
        *,
        key: str,
        on_posted: PostedHook | None = None,
        essential: bool = False,
    ) -> None:
        """Post a notice in the campaign's conversation; a failure is logged, not raised.
        Only `essential` notices (final reports, failures, answers to a person's action)
        bypass the nudge policy."""
        try:
            await self.deps.notifier.send(
                record.conversation,
                text,
                idempotency_key=key,
                on_posted=on_posted,
                recipient=record.owner,
                essential=essential,
            )
        except Exception:
            # The campaign's state is committed already; a notice must not undo it.
            log.warning("campaign %s: notice %s was not recorded", record.id, key, exc_info=True)
