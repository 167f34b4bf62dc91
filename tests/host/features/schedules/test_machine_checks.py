"""Standing checks on the machines of machines.toml, through the campaign machinery: a
detached round polled to its end (its directory removed after), only for an owner the
machine admits; and checks on a metric's last printed value."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.home import workspace_for
from host.features.schedules.feature import SchedulesFeature
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import eventually
from tests.host.features.schedules.kit import CONV, Bot, FakeClock
from tests.runtime_kit import chat_runtime
from tests.slurm_cluster import SlurmCluster

MACHINES = """
[machines.box]
kind = "local"
slots = 2

[machines.far]
kind = "ssh"
host = "far.example"
"""


async def _bot(home: Path, machines: str) -> AsyncIterator[Bot]:
    await asyncio.to_thread(home.mkdir, parents=True, exist_ok=True)
    await asyncio.to_thread((home / "machines.toml").write_text, machines)
    chat = FakeChatAdapter()
    async with chat_runtime(chat, serving=True) as rt:
        clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
        rt.feature(SchedulesFeature).tasks.clock = clock
        yield Bot(rt, chat, clock)


@pytest.fixture
async def bot(isolated_env: Path) -> AsyncIterator[Bot]:
    async for bot in _bot(isolated_env, MACHINES):
        yield bot


async def _watching(bot: Bot, line: str) -> str:
    reply = await bot.say(line)
    assert "waits for approval" in reply, reply
    question = bot.chat.shown[-1].question
    await bot.approve()
    await eventually(lambda: any("is scheduled:" in t for t in bot.chat.texts))
    return question


async def _fire(bot: Bot) -> list[str]:
    before = len(bot.chat.texts)
    bot.clock.advance(minutes=30)
    await bot.fire_due()
    return bot.chat.texts[before:]


async def test_a_metric_check_runs_on_a_registered_machine_as_a_round(bot: Bot) -> None:
    question = await _watching(
        bot, "watch: every 30m | check: cat gauge.txt | machine: box | when: temp > 85"
    )
    assert "on machine `box`, as a campaign round runs" in question, question
    assert "the last `temp` it prints is > 85" in question, question
    gauge = workspace_for(bot.rt.settings.home)(CONV) / "gauge.txt"
    gauge.write_text("temp 70\ntemp 80\n")
    assert await _fire(bot) == []
    gauge.write_text("temp 80\ntemp 91.5\n")
    (tripped,) = await _fire(bot)
    assert "tripped: temp is 91.5 (temp > 85)" in tripped, tripped
    gauge.write_text("no reading\n")
    assert await _fire(bot) == []  # still tripped (no value now): said once
    gauge.write_text("temp 60\n")
    assert [t for t in await _fire(bot) if "passes again" in t]
    # Each firing's round directory is gone once it was read.
    (task,) = await bot.tasks.store.active()
    rounds = bot.rt.settings.home / "campaigns" / f"check_{task.id}"
    assert not rounds.exists() or list(rounds.iterdir()) == []


async def test_a_check_where_its_owner_may_not_run_is_refused(bot: Bot) -> None:
    reply = await bot.say("watch: every 30m | check: uptime | machine: far")
    assert "open only to admins" in reply and "[machines.far]" in reply, reply
    reply = await bot.say("watch: every 30m | check: uptime | machine: nowhere")
    assert "`nowhere` is not a machine of machines.toml (known: `box`, `far`)" in reply, reply
    assert await bot.tasks.store.listed(live_only=False) == []


@pytest.mark.slow
async def test_a_check_runs_on_the_real_slurm(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch, slurm_cluster: SlurmCluster
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    project = isolated_env.with_name(f"{isolated_env.name}-cluster")
    await asyncio.to_thread(project.mkdir)
    machines = f'[machines.cluster]\nkind = "slurm"\nworkdir = "{project}"\nusers = ["U1"]\n'
    async for bot in _bot(isolated_env, machines):
        await _watching(
            bot, "watch: every 30m | check: echo load 3.5 | machine: cluster | when: load > 2"
        )
        (tripped,) = await _fire(bot)
        assert "tripped: load is 3.5 (load > 2)" in tripped, (tripped, slurm_cluster.log_tail())
