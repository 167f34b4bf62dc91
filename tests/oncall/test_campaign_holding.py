"""A campaign whose owner no longer passes the access rules is paused at its next wake-up
(its round stopped, nothing deleted), stays paused across a restart, and resumes once they
pass again: its next round, or its report when its budget is spent."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from core.ids import ConversationRef
from oncall.model import MachineSpec
from oncall.store import CampaignRecord
from tests.oncall_kit import OncallKit, oncall_kit, spec

CONV = ConversationRef("test", "W", "C", "T")
# Prints a value, then runs until stopped.
JOB = "echo 'loss 0.5'; sleep 600"
REFUSED = "not among the allowed users or roles"


@dataclass
class Owners:
    """The bot's access rules as the engine's port sees them: refusing while `why` is set."""

    why: str | None = None

    async def refusal(
        self,
        campaign_id: str,
        owner: str,
        conversation: ConversationRef,
        machine: MachineSpec,
        origin: Literal["wake-up", "resubmit", "resume"],
    ) -> str | None:
        return self.why


async def _running(kit: OncallKit, campaign_id: str, round_no: int) -> None:
    async def running() -> bool:
        record = await kit.campaigns.get(campaign_id)
        current = await kit.campaigns.round(campaign_id, round_no)
        return (
            record is not None
            and record.round == round_no
            and current is not None
            and current.state == "running"
            and any(m.round == round_no for m in await kit.campaigns.measurements(campaign_id))
        )

    await kit.until(running)


async def _state(kit: OncallKit, campaign_id: str) -> CampaignRecord:
    record = await kit.campaigns.get(campaign_id)
    assert record is not None
    return record


async def test_a_refused_owners_campaign_is_paused_kept_and_resumed(tmp_path: Path) -> None:
    owners = Owners()
    async with oncall_kit(tmp_path, owners=owners) as kit:
        record = await kit.engine.start("U2", CONV, spec(JOB))
        await _running(kit, record.id, 1)
        owners.why = REFUSED
        await kit.fire_scheduled(record.id)
        assert (await _state(kit, record.id)).state == "paused"
        first = await kit.campaigns.round(record.id, 1)
        assert first is not None and first.state != "running", first  # its job was ended
        (notice,) = [t for t in kit.notifier.texts() if "is paused" in t]
        assert REFUSED in notice and f"campaign: resume {record.id}" in notice, notice
        assert kit.scheduler.jobs == {}  # no wake-up left

        await kit.restart()
        assert (await _state(kit, record.id)).state == "paused"
        assert "stays paused" in await kit.engine.resume(record.id)

        owners.why = None
        assert "is resumed" in await kit.engine.resume(record.id)
        await _running(kit, record.id, 2)
        # Its slot was freed when it paused and taken again: a second resume does nothing.
        assert "only a paused campaign" in await kit.engine.resume(record.id)


async def test_a_campaign_resumed_with_its_budget_spent_reports(tmp_path: Path) -> None:
    owners = Owners()
    async with oncall_kit(tmp_path, owners=owners) as kit:
        record = await kit.engine.start(
            "U2", CONV, spec(JOB, budget={"wall_seconds": 600, "rounds": 1})
        )
        await _running(kit, record.id, 1)
        owners.why = REFUSED
        await kit.fire_scheduled(record.id)
        assert (await _state(kit, record.id)).state == "paused"
        owners.why = None
        assert "reports instead" in await kit.engine.resume(record.id)
        closed = await kit.until_final(record.id)
        assert closed.state == "closed", closed
        assert closed.report, closed
