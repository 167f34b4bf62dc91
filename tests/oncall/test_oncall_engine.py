"""Campaigns end to end on the local machine (real subprocesses in the real sandbox):
early wakes on finish, divergence, stall and crash, budget clamping, capacity, citations,
the report gate, and no model calls while waiting."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

import pytest

from bot.cli.campaigns import stop_campaign
from core.secret_names import SecretNames
from oncall.engine import CampaignError, EngineSettings
from oncall.model import Budget
from tests.oncall_kit import CONV, oncall_kit, spec

DECREASING = 'for v in 0.9 0.7 0.5 0.42; do echo "step loss=$v"; done'


async def test_a_job_printing_a_decreasing_loss_is_watched_woken_on_finish_and_reported(
    tmp_path: Path,
) -> None:
    async with oncall_kit(tmp_path) as kit:
        record = await kit.engine.start("U1", CONV, spec(DECREASING))
        final = await kit.until_final(record.id)
        assert final.state == "closed"
        values = [m.value for m in await kit.campaigns.measurements(record.id)]
        assert values == [0.9, 0.7, 0.5, 0.42]
        rounds = await kit.campaigns.rounds(record.id)
        assert [(r.state, r.exit_code, r.wake_reason) for r in rounds] == [("ended", 0, "finished")]
        wakes = await kit.campaigns.wakes(record.id)
        assert sorted((w.reason, w.state) for w in wakes) == [
            ("finished", "fired"),
            ("scheduled", "cancelled"),
        ]
        assert final.report is not None and "0.42" in final.report and "0.9" in final.report
        assert final.model_calls == 0
        # The round's news is edited into the campaign's status message; the report posts.
        assert any("Woke early" in t and "finished" in t for t in kit.notifier.news)
        (report,) = [t for t in kit.notifier.texts() if t.startswith("📋")]
        # Under the checked words, the record's rounds as a table.
        assert report.endswith(
            "Rounds:\n\n"
            "| Round | Ended | loss values | Best loss | Last loss |\n"
            "|---|---|---|---|---|\n"
            "| 1 | finished (exit code 0) | 4 | 0.42 | 0.42 |"
        ), report


async def test_nan_divergence_wakes_early_terminates_the_job_and_reports(tmp_path: Path) -> None:
    command = "echo loss=0.8; echo loss=0.6; echo loss=nan; sleep 60; echo loss=0.1"
    async with oncall_kit(tmp_path) as kit:
        record = await kit.engine.start("U1", CONV, spec(command))
        final = await kit.until_final(record.id)
        values = [m.value for m in await kit.campaigns.measurements(record.id)]
        assert values[:2] == [0.8, 0.6] and math.isnan(values[2]) and len(values) == 3
        (round_,) = await kit.campaigns.rounds(record.id)
        assert (
            round_.wake_reason == "diverged"
            or (await kit.campaigns.wakes(record.id))[-1].reason == "diverged"
        )
        actions = [d.action for d in await kit.campaigns.decisions(record.id)]
        assert actions[0] == "terminate"
        assert final.state in ("closed", "failed")
        assert round_.state == "ended"  # the sleeping job was terminated
        assert round_.exit_code is not None and round_.exit_code != 0  # and that is recorded
        assert final.compute_seconds > 0


async def test_a_stalled_job_is_terminated_resubmitted_once_then_reported(tmp_path: Path) -> None:
    async with oncall_kit(tmp_path) as kit:
        record = await kit.engine.start(
            "U1", CONV, spec("echo loss=0.5; sleep 60", stall_seconds=0.5)
        )
        final = await kit.until_final(record.id)
        rounds = await kit.campaigns.rounds(record.id)
        decisions = await kit.campaigns.decisions(record.id)
        assert len(rounds) == 2, (rounds, decisions)
        reasons = [w.reason for w in await kit.campaigns.wakes(record.id) if w.state == "fired"]
        assert reasons == ["stalled", "stalled"]
        assert final.state in ("closed", "failed")


async def test_a_crashed_job_is_resubmitted_once_then_the_campaign_fails(tmp_path: Path) -> None:
    async with oncall_kit(tmp_path) as kit:
        record = await kit.engine.start("U1", CONV, spec("echo loss=0.5; exit 3"))
        final = await kit.until_final(record.id)
        rounds = await kit.campaigns.rounds(record.id)
        assert [(r.exit_code, r.wake_reason) for r in rounds] == [(3, "died"), (3, "died")]
        assert final.state == "failed"
        decisions = await kit.campaigns.decisions(record.id)
        assert decisions[0].action == "resubmit"


async def test_a_round_time_limit_beyond_the_budget_is_clamped_with_a_note(tmp_path: Path) -> None:
    async with oncall_kit(tmp_path) as kit:
        record = await kit.engine.start(
            "U1",
            CONV,
            spec(
                "echo loss=0.5; sleep 60",
                budget=Budget(wall_seconds=120, rounds=1),
                round_time_limit_seconds=3 * 3600,
            ),
        )
        (round_,) = await kit.campaigns.rounds(record.id)
        assert round_.granted_seconds is not None and round_.granted_seconds <= 120
        assert round_.note is not None and "granted" in round_.note
        assert any("granted" in t for t in kit.notifier.texts())


async def test_one_slot_is_shared_across_two_campaigns(tmp_path: Path) -> None:
    async with oncall_kit(tmp_path, slots=1) as kit:
        first = await kit.engine.start("U1", CONV, spec("echo loss=0.5; sleep 60"))
        second = await kit.engine.start("U2", CONV, spec(DECREASING))
        assert (await kit.campaigns.get(second.id)).state == "planning"  # type: ignore[union-attr]
        assert any("waits for a free slot" in t for t in kit.notifier.texts())
        assert await kit.engine.stop(first.id, by="U1")
        final = await kit.until_final(second.id)
        assert final.state == "closed"


async def test_a_stop_from_another_process_frees_the_slot_for_the_next_campaign(
    tmp_path: Path,
) -> None:
    # `raven-bot campaigns stop` commits the cancel and ends the round from its own process:
    # the bot's engine saw a final campaign and stopped watching, but kept its slot, so the
    # campaign queued behind it never started.
    async with oncall_kit(tmp_path, slots=1) as kit:
        first = await kit.engine.start("U1", CONV, spec("echo loss=0.5; sleep 60"))
        second = await kit.engine.start("U2", CONV, spec(DECREASING))
        assert (await kit.campaigns.get(second.id)).state == "planning"  # type: ignore[union-attr]
        code, said = await stop_campaign(
            kit.campaigns, {"local": kit.machine}, first.id, by="cli", grace_seconds=1
        )
        assert code == 0, said
        final = await kit.until_final(second.id)
        assert final.state == "closed"


async def test_a_freed_slot_started_twice_at_once_submits_one_round(tmp_path: Path) -> None:
    # Two callers freeing slots at once both picked the oldest waiting campaign; the second
    # `acquire` said yes again (the slot was already its) and submitted a second round.
    async with oncall_kit(tmp_path, slots=1) as kit:
        first = await kit.engine.start("U1", CONV, spec("echo loss=0.5; sleep 60"))
        second = await kit.engine.start("U2", CONV, spec("echo loss=0.5; sleep 60"))
        # The slot frees (as when a campaign ends) and two callers start what waits for it.
        await kit.engine._core.deps.allocator.release("local", first.id)
        slots = kit.engine._rooms.slots
        await asyncio.gather(slots.start_queued("local"), slots.start_queued("local"))

        async def started() -> bool:
            record = await kit.campaigns.get(second.id)
            return record is not None and record.round >= 1

        await kit.until(started)
        assert (await kit.campaigns.get(second.id)).round == 1  # type: ignore[union-attr]


async def test_decisions_must_cite_the_newest_measurement(tmp_path: Path) -> None:
    command = "echo loss=0.9; echo loss=0.8; sleep 60"
    async with oncall_kit(tmp_path) as kit:
        record = await kit.engine.start("U1", CONV, spec(command))

        async def two_values() -> bool:
            return len(await kit.campaigns.measurements(record.id)) == 2

        await kit.until(two_values)
        old, new = await kit.campaigns.measurements(record.id)
        with pytest.raises(CampaignError, match=f"#{new.id}"):
            await kit.engine.wait(record.id, 60, old.id)
        with pytest.raises(CampaignError):
            await kit.engine.wait(record.id, 60, None)
        text = await kit.engine.wait(record.id, 60, new.id)
        assert "Waiting" in text


async def test_only_a_report_matching_the_measurements_closes_the_campaign(tmp_path: Path) -> None:
    async with oncall_kit(tmp_path) as kit:
        record = await kit.engine.start(
            "U1", CONV, spec("echo loss=0.9; echo loss=0.4; sleep 60", baseline=1.0)
        )

        async def two_values() -> bool:
            return len(await kit.campaigns.measurements(record.id)) == 2

        await kit.until(two_values)
        rejected = await kit.engine.report(record.id, "Loss went down to 0.35.")
        assert rejected.startswith("Report rejected")
        assert "baseline" in rejected.lower()
        assert (await kit.campaigns.get(record.id)).state != "closed"  # type: ignore[union-attr]
        accepted = await kit.engine.report(
            record.id, "Starting from the baseline loss of 1.0, the loss reached 0.4."
        )
        assert accepted.startswith("Report accepted")
        final = await kit.campaigns.get(record.id)
        assert final is not None and final.state == "closed"


async def test_a_scheduled_wake_fires_once_and_a_waiting_campaign_makes_no_model_calls(
    tmp_path: Path,
) -> None:
    async with oncall_kit(tmp_path) as kit:
        record = await kit.engine.start("U1", CONV, spec("echo loss=0.9; sleep 60"))

        async def one_value() -> bool:
            return len(await kit.campaigns.measurements(record.id)) == 1

        await kit.until(one_value)
        (wake_id,) = kit.scheduler.jobs
        await kit.engine.on_wake_job(record.id, kit.scheduler.jobs[wake_id][2]["wake_id"])  # type: ignore[arg-type]
        await kit.engine.on_wake_job(record.id, wake_id)  # a second firing: the ledger says no
        fired = [w for w in await kit.campaigns.wakes(record.id) if w.state == "fired"]
        assert [w.id for w in fired] == [wake_id]
        current = await kit.campaigns.get(record.id)
        assert current is not None and current.state == "waiting"
        assert current.model_calls == 0


async def test_an_unreachable_machine_is_a_recorded_and_reported_failure(tmp_path: Path) -> None:
    from oncall.machines.ssh import SshMachine
    from oncall.model import MachineSpec

    # Nothing listens on port 1 of the loopback: ssh fails at once, no network needed.
    spec_ = MachineSpec(name="local", kind="ssh", host="127.0.0.1", port=1, workdir="/tmp/x")
    machine = SshMachine(spec_, connect_timeout=2, secret_names=SecretNames())
    async with oncall_kit(tmp_path, machine=machine) as kit:
        record = await kit.engine.start("U1", CONV, spec("echo loss=1"))
        final = await kit.until_final(record.id)
        assert final.state == "failed"
        assert final.error is not None and "127.0.0.1" in final.error
        (round_,) = await kit.campaigns.rounds(record.id)
        assert round_.state == "failed" and round_.note is not None
        assert any("failed" in t and "127.0.0.1" in t for t in kit.notifier.texts())


async def test_a_wait_replaces_the_pending_wake_up_instead_of_adding_one(tmp_path: Path) -> None:
    now = time.time()  # frozen: two equal waits clamp to one due time
    async with oncall_kit(tmp_path, clock=lambda: now) as kit:
        record = await kit.engine.start("U1", CONV, spec("echo loss=0.9; sleep 60"))

        async def one_value() -> bool:
            return len(await kit.campaigns.measurements(record.id)) == 1

        await kit.until(one_value)
        (first,) = kit.scheduler.jobs
        (value,) = await kit.campaigns.measurements(record.id)
        await kit.engine.wait(record.id, 60, value.id)
        await kit.engine.wait(record.id, 60, value.id)  # the same due time again
        pending = [w for w in await kit.campaigns.wakes(record.id) if w.state == "pending"]
        assert len(pending) == 1, pending
        assert list(kit.scheduler.jobs) == [pending[0].id]
        assert first in kit.scheduler.cancelled
        await kit.fire_scheduled(record.id)
        fired = [w.id for w in await kit.campaigns.wakes(record.id) if w.state == "fired"]
        assert fired == [pending[0].id]


async def test_the_status_message_shows_the_rounds_last_value_when_it_ends(
    tmp_path: Path,
) -> None:
    command = 'for v in 0.9 0.8 0.7 0.6; do echo "loss=$v"; sleep 0.2; done'
    # Edits throttled to one an hour: only the first value and the round-end edit show.
    throttled = EngineSettings(status_edit_seconds=3600)
    async with oncall_kit(tmp_path, settings=throttled) as kit:
        record = await kit.engine.start("U1", CONV, spec(command))
        await kit.until_final(record.id)
        last = (await kit.campaigns.measurements(record.id))[-1]
        assert last.value == 0.6
        # One edit while it ran, then the round-end edit (and the wake-up it caused).
        running = [e for e in kit.notifier.edits if e.startswith("▶️")]
        assert len(running) == 1, kit.notifier.edits
        final = next(e for e in kit.notifier.edits if e.startswith("🏁"))
        assert final.startswith(f"🏁 Campaign `{record.id}` round 1/3 finished")
        assert f"loss=0.6 (#{last.id})" in final


async def test_a_round_is_clamped_to_the_remaining_compute_budget_per_cpu(tmp_path: Path) -> None:
    async with oncall_kit(tmp_path) as kit:
        record = await kit.engine.start(
            "U1",
            CONV,
            spec(
                "echo loss=0.5; sleep 60",
                budget=Budget(wall_seconds=600, compute_minutes=1, rounds=2),
                cpus=4,
            ),
        )
        (round_,) = await kit.campaigns.rounds(record.id)
        assert round_.granted_seconds == 15  # 1 cpu-minute over 4 cpus
        assert round_.note is not None and "compute budget" in round_.note
        (clamp,) = [d for d in await kit.campaigns.decisions(record.id) if d.action == "clamp"]
        assert clamp.reason == round_.note
        assert clamp.detail["granted_seconds"] == 15 and clamp.detail["requested_seconds"] > 15
        assert any("granted 15s" in t for t in kit.notifier.texts())


async def test_a_partition_on_a_machine_that_is_not_slurm_is_refused(tmp_path: Path) -> None:
    async with oncall_kit(tmp_path) as kit:
        with pytest.raises(CampaignError, match="partition `debug` is for Slurm machines"):
            await kit.engine.start("U1", CONV, spec("echo loss=1", partition="debug"))
        assert await kit.campaigns.recent() == []
