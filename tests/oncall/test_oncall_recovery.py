"""Restarting the campaign engine on the same store (real subprocesses, real SQLite): a round
that ended or vanished while no engine watched it is detected; a wake-up fired late says so;
decisions are announced; the Host's tools refuse with the reason."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

from core.ids import ConversationRef
from host.features.oncall.tools import CampaignTools, StartCampaignInput, WaitInput
from host.runtime.turn import TurnContext
from oncall.machines.common import split_job_id
from oncall.model import Budget
from oncall.store import CampaignRecord, RoundRecord
from tests.helpers import processes_with
from tests.oncall_kit import CONV, OncallKit, oncall_kit, spec

# Prints one value, then waits for a file in its round directory before printing the last.
GATED = "echo loss=0.9; while [ ! -e go ]; do sleep 0.05; done; echo loss=0.5"


async def _first_round(kit: OncallKit, record: CampaignRecord) -> RoundRecord:
    """Round 1 once it runs and has its first measurement."""

    async def measured() -> bool:
        return len(await kit.campaigns.measurements(record.id)) >= 1

    await kit.until(measured)
    round_ = await kit.campaigns.round(record.id, 1)
    assert round_ is not None and round_.handle is not None and round_.state == "running"
    return round_


async def test_a_round_that_ended_while_no_engine_watched_is_detected_at_recovery(
    tmp_path: Path,
) -> None:
    async with oncall_kit(tmp_path) as kit:
        record = await kit.engine.start("U1", CONV, spec(GATED))
        round_ = await _first_round(kit, record)
        assert round_.handle is not None
        await kit.engine.close()  # the bot is down; the detached round keeps running
        (kit.root / record.id / "round-1" / "work" / "go").touch()
        exit_file = Path(round_.handle.exit_path)
        await kit.until(_exists(exit_file))
        assert (await kit.campaigns.get(record.id)).state == "running"  # type: ignore[union-attr]
        await kit.restart()
        final = await kit.until_final(record.id)
        assert final.state == "closed"
        assert [m.value for m in await kit.campaigns.measurements(record.id)] == [0.9, 0.5]
        (ended,) = await kit.campaigns.rounds(record.id)
        assert (ended.state, ended.exit_code, ended.wake_reason) == ("ended", 0, "finished")
        assert any("Woke early" in t and "finished" in t for t in kit.notifier.news)


async def test_a_round_that_vanished_while_no_engine_watched_is_detected_at_recovery(
    tmp_path: Path,
) -> None:
    async with oncall_kit(tmp_path) as kit:
        record = await kit.engine.start("U1", CONV, spec("echo loss=0.9; sleep 600"))
        round_ = await _first_round(kit, record)
        assert round_.handle is not None
        await kit.engine.close()
        # The round's whole process group, leader included, dies: no exit code is written.
        pid, _ = split_job_id(round_.handle.job_id)
        os.killpg(pid, signal.SIGKILL)
        await kit.until(_gone(pid))
        # The sandboxed command dies with its leader: nothing of the round runs on unwatched.
        await kit.until(_nothing_runs_in(kit.root / record.id / "round-1"))
        await kit.restart()

        async def woke() -> bool:
            wakes = await kit.campaigns.wakes(record.id)
            return ("vanished", "fired") in [(w.reason, w.state) for w in wakes]

        await kit.until(woke)
        assert any("vanished" in t and "Woke early" in t for t in kit.notifier.news)
        first = (await kit.campaigns.rounds(record.id))[0]
        assert (first.state, first.exit_code, first.wake_reason) == ("ended", None, "vanished")

        async def decided() -> bool:
            return bool(await kit.campaigns.decisions(record.id))

        await kit.until(decided)  # a lost round is resubmitted once, like a crash
        assert (await kit.campaigns.decisions(record.id))[0].action == "resubmit"


async def test_a_wake_up_that_fires_late_is_announced_with_its_lateness(tmp_path: Path) -> None:
    now = [time.time()]
    async with oncall_kit(tmp_path, clock=lambda: now[0]) as kit:
        record = await kit.engine.start(
            "U1",
            CONV,
            spec(
                "echo loss=0.9; sleep 600",
                budget=Budget(wall_seconds=4 * 3600, rounds=2),
                stall_seconds=24 * 3600,  # the clock jump below must not look like a stall
            ),
        )
        await _first_round(kit, record)
        ((due, _, _),) = kit.scheduler.jobs.values()
        now[0] = due.timestamp() + 150  # the bot was down past the wake-up's due time
        await kit.fire_scheduled(record.id)
        # Said in the campaign's status message, edited (the decision it led to follows).
        late = kit.notifier.edits[-1]
        assert f"`{record.id}`" in late and "\n⏰ A wake-up fired 2m30s late" in late
        (fired,) = [w for w in await kit.campaigns.wakes(record.id) if w.state == "fired"]
        assert fired.lateness is not None and abs(fired.lateness - 150) < 1


async def test_decisions_are_announced_in_the_thread_with_their_citation(tmp_path: Path) -> None:
    async with oncall_kit(tmp_path) as kit:
        crashed = await kit.engine.start("U1", CONV, spec("echo loss=0.5; exit 3"))
        await kit.until_final(crashed.id)
        first = (await kit.campaigns.measurements(crashed.id))[0]
        assert any(
            t.startswith(f"▶️ Campaign `{crashed.id}` round 2/3")
            and "🔁 Resubmitting: " in t
            and f"cites #{first.id}" in t
            for t in kit.notifier.news
        ), kit.notifier.news
        diverged = await kit.engine.start(
            "U1", CONV, spec("echo loss=0.8; echo loss=nan; sleep 60")
        )
        await kit.until_final(diverged.id)
        assert any(
            t.startswith(f"🏁 Campaign `{diverged.id}` round 1/3") and "\n⏹️ Round 1 terminated" in t
            for t in kit.notifier.news
        ), kit.notifier.news
        waiting = await kit.engine.start("U1", CONV, spec("echo loss=0.7; sleep 60"))
        await _first_round(kit, waiting)
        (value,) = await kit.campaigns.measurements(waiting.id)
        await kit.engine.wait(waiting.id, 120, value.id, "more output to come")
        assert any(
            t.startswith(f"▶️ Campaign `{waiting.id}` round 1/3")
            and "\n⏸️ Waiting 2m" in t
            and f"cites #{value.id}" in t
            for t in kit.notifier.news
        ), kit.notifier.news
        texts = kit.notifier.texts()
        assert any(t.startswith(f"📋 Campaign `{crashed.id}` report") for t in texts), texts


async def test_the_campaign_tools_refuse_with_the_reason_instead_of_raising(
    tmp_path: Path,
) -> None:
    async with oncall_kit(tmp_path) as kit:
        tools = CampaignTools(kit.engine)
        ctx = TurnContext(CONV, "turn-1", "U1", "alice")
        refused = await tools.start_campaign(ctx, StartCampaignInput(goal="x", metric="loss"))
        assert refused.startswith("The campaign was not started") and "`run:`" in refused
        record = await kit.engine.start("U1", CONV, spec("echo loss=0.9; echo loss=0.8; sleep 60"))

        async def two_values() -> bool:
            return len(await kit.campaigns.measurements(record.id)) == 2

        await kit.until(two_values)
        old, new = await kit.campaigns.measurements(record.id)
        stale = WaitInput(campaign_id=record.id, until="10m", cite=old.id)
        answer = await tools.campaign_wait(ctx, stale)
        assert answer.startswith("Refused:") and f"#{new.id}" in answer
        bad_duration = WaitInput(campaign_id=record.id, until="soon", cite=new.id)
        assert (await tools.campaign_wait(ctx, bad_duration)).startswith("Refused:")
        other = TurnContext(ConversationRef("test", "W", "C", "other"), "turn-2", "U1", "alice")
        unknown = WaitInput(campaign_id="cmp_nope", until="10m", cite=new.id)
        assert "No campaign `cmp_nope`" in await tools.campaign_wait(other, unknown)
        pending = [w for w in await kit.campaigns.wakes(record.id) if w.state == "pending"]
        assert len(pending) == 1  # nothing refused was scheduled


def _exists(path: Path) -> object:
    async def check() -> bool:
        return await asyncio.to_thread(path.exists)

    return check


def _nothing_runs_in(directory: Path) -> object:
    """No process names `directory` on its command line (the sandbox binds it by path)."""

    async def check() -> bool:
        return not await asyncio.to_thread(processes_with, str(directory))

    return check


def _gone(pid: int) -> object:
    async def check() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    return check
