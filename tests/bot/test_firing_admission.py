"""The bot's own timers obey the rules a live message obeys (issue 38, findings 1, 4 and 6).

A removed person's scheduled task does not run at its next firing; a check on a role-gated
machine does not outlive its owner's role; the work is paused (not deleted), the thread is
told once who may resume it, the refusal is audited, and resuming needs the owner to pass
again. Each runs the real assembled bot with its real Slack or Discord adapter against the
loopback fakes, restarted with the new access settings as an operator would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from host.features.oncall.feature import OncallFeature
from host.features.schedules.feature import SchedulesFeature
from host.features.schedules.store import ScheduledTask
from host.features.schedules.tasks import ScheduledTasks
from host.runtime.prompt_record import Prompt
from tests.discord_harness import BOB, DiscordBot, discord_bot, shared_fake
from tests.fakes.discord import FakeDiscord
from tests.fakes.slack import FakeSlack
from tests.helpers import eventually
from tests.slack_harness import SlackBot, slack_bot

pytestmark = pytest.mark.slow

# Its output, not its text (which the approval prompt shows), says that the command ran.
PLAN = "s1: shell: echo fired-for-bob-$((6*7))"
RAN = "fired-for-bob-42"


def _tasks(bot: SlackBot | DiscordBot) -> ScheduledTasks:
    return bot.runtime.feature(SchedulesFeature).tasks


async def _asked(bot: SlackBot | DiscordBot, what: str) -> Prompt:
    """The one prompt waiting in the bot, once it is asked (`what`: what it asks about)."""
    broker = bot.runtime.broker

    async def asked() -> bool:
        return bool(await broker.pending())

    await eventually(asked, 30, what=f"{what} was never asked")
    (prompt,) = await broker.pending()
    return prompt


async def _approve_task(bot: SlackBot | DiscordBot, by: str) -> ScheduledTask:
    """Approve the one pending schedule prompt as `by`; the task once it is active."""
    prompt = await _asked(bot, "the schedule's approval")
    assert prompt.purpose == "schedule_approval", prompt
    outcome = await bot.runtime.broker.answer(prompt.id, prompt.nonce, by, "Approve")
    assert outcome.status == "accepted", outcome.message
    (task,) = await _tasks(bot).store.listed()
    assert task.state == "active", task
    return task


async def _audit(bot: SlackBot | DiscordBot) -> list[dict[str, Any]]:
    rows = await bot.runtime.store.fetchall("SELECT * FROM admission_audit ORDER BY id")
    return [dict(r) for r in rows]


async def _fire(bot: SlackBot | DiscordBot, task_id: str) -> ScheduledTask:
    """Fire the task for its due time as its job would, and return it as stored after."""
    tasks = _tasks(bot)
    task = await tasks.store.get(task_id)
    assert task is not None and task.next_due is not None
    await tasks.fire(task.id, task.next_due)
    after = await tasks.store.get(task_id)
    assert after is not None
    return after


def _runs_of(fake: FakeSlack) -> list[str]:
    """Every text the bot posted to Slack."""
    return [str(c.args.get("text", "")) for c in fake.calls_to("chat.postMessage") if c.ok]


async def test_a_removed_persons_task_is_paused_at_its_next_firing_on_slack(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    fake = FakeSlack()
    await fake.start()
    try:
        allowed = {"RAVEN_ALLOWED_USERS": "U1,U2"}
        async with slack_bot(monkeypatch, env=allowed, fake=fake) as bot:
            thread, _ = await bot.mention(f"schedule: in 30m | {PLAN}", user="U2")
            task = await _approve_task(bot, "U2")
            await bot.settle(thread)
        # The operator removes Bob and restarts: his own mention is refused from now on...
        async with slack_bot(monkeypatch, env={"RAVEN_ALLOWED_USERS": "U1"}, fake=fake) as bot:
            after = await _fire(bot, task.id)
            await bot.settle(thread)
            # ...and so is the work the bot's timer would start on his behalf.
            assert after.state == "paused", after
            assert not any(RAN in t for t in _runs_of(fake))
            notices = [t for t in _runs_of(fake) if "is paused" in t]
            assert len(notices) == 1, notices
            assert "not among the allowed users" in notices[0], notices[0]
            assert "An admin can resume it" in notices[0], notices[0]
            # Paused, not deleted; a second due time says nothing more.
            assert await _tasks(bot).store.get(task.id) is not None
            (row,) = await _audit(bot)
            assert (row["origin"], row["owner"], row["outcome"]) == ("firing", "U2", "refused")
            # Bob himself may not resume it while refused, nor may an admin on his behalf.
            reply = await _tasks(bot).act(
                task.id, "resume", by="U2", conversation=bot.conversation(thread)
            )
            assert "stays paused" in reply, reply
            stored = await _tasks(bot).store.get(task.id)
            assert stored is not None and stored.state == "paused"
        # Admitted again: his task resumes, and fires his approved command.
        allowed_again = {"RAVEN_ALLOWED_USERS": "U1,U2"}
        async with slack_bot(monkeypatch, env=allowed_again, fake=fake) as bot:
            reply = await _tasks(bot).act(
                task.id, "resume", by="U2", conversation=bot.conversation(thread)
            )
            assert "is resumed" in reply, reply
            await _fire(bot, task.id)
            await eventually(lambda: any(RAN in t for t in _runs_of(fake)), 60)
    finally:
        await fake.stop()


async def test_run_now_passes_the_same_rule(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    fake = FakeSlack()
    await fake.start()
    try:
        async with slack_bot(monkeypatch, env={"RAVEN_ALLOWED_USERS": "U1,U2"}, fake=fake) as bot:
            thread, _ = await bot.mention(f"schedule: every 1h | {PLAN}", user="U2")
            task = await _approve_task(bot, "U2")
            await bot.settle(thread)
        async with slack_bot(monkeypatch, env={"RAVEN_ALLOWED_USERS": "U1"}, fake=fake) as bot:
            # The operator's `schedules run` or an admin's `schedule: run`: the owner must pass.
            reply = await _tasks(bot).act(task.id, "run", by="U1", conversation=None)
            await bot.settle(thread)
            assert "is paused" in reply, reply
            assert not any(RAN in t for t in _runs_of(fake))
            stored = await _tasks(bot).store.get(task.id)
            assert stored is not None and stored.state == "paused"
    finally:
        await fake.stop()


MACHINES = """
[machines.box]
kind = "local"
roles = ["{role}"]
"""
ALLOWED_ROLE = "900000000000000001"
BOX_ROLE = "900000000000000002"


@asynccontextmanager
async def _bob_admitted_by_role(
    monkeypatch: pytest.MonkeyPatch, fake: FakeDiscord
) -> AsyncIterator[DiscordBot]:
    """The bot on Discord admitting the members of one role, Bob among them."""
    fake.add_role(ALLOWED_ROLE, "raven-users")
    fake.add_user(BOB, "bob", global_name="Bob", roles=[ALLOWED_ROLE])
    env = {"RAVEN_DISCORD_ALLOWED_ROLES": ALLOWED_ROLE}
    async with discord_bot(monkeypatch, env=env, fake=fake) as bot:
        yield bot


async def _paused_once_roles_are_gone(
    bot: DiscordBot, fake: FakeDiscord, task: ScheduledTask
) -> list[str]:
    """Bob loses every role, then the task fires: it is paused; what the bot said."""
    fake.add_user(BOB, "bob", global_name="Bob", roles=[])
    after = await _fire(bot, task.id)
    await bot.settle(task.conversation.thread)
    assert after.state == "paused", after
    return bot.texts()


async def test_a_removed_role_pauses_a_task_on_discord(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    async with shared_fake() as fake, _bob_admitted_by_role(monkeypatch, fake) as bot:
        await bot.mention(f"schedule: in 30m | {PLAN}", user=BOB)
        task = await _approve_task(bot, BOB)
        # Bob loses the role that admitted him: nothing restarts, the firing asks Discord.
        texts = await _paused_once_roles_are_gone(bot, fake, task)
        assert not any(RAN in t for t in texts), texts
        assert sum("is paused" in t for t in texts) == 1, texts
        (row,) = await _audit(bot)
        assert row["outcome"] == "refused", row


async def test_a_check_on_a_role_gated_machine_does_not_outlive_the_role_on_discord(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    await asyncio.to_thread(isolated_env.mkdir, parents=True, exist_ok=True)
    await asyncio.to_thread(
        (isolated_env / "machines.toml").write_text, MACHINES.format(role=BOX_ROLE)
    )
    async with shared_fake() as fake:
        fake.add_role(BOX_ROLE, "box-users")
        fake.add_user(BOB, "bob", global_name="Bob", roles=[BOX_ROLE])
        async with discord_bot(monkeypatch, fake=fake) as bot:
            marker = "checked-for-bob-42"
            await bot.mention(
                "watch: every 30m | check: echo checked-for-bob-$((6*7)); exit 1 | machine: box",
                user=BOB,
            )
            task = await _approve_task(bot, BOB)
            # The machine's role is taken away after the check was approved.
            texts = await _paused_once_roles_are_gone(bot, fake, task)
            assert not any(marker in t for t in texts), texts
            (notice,) = [t for t in texts if "is paused" in t]
            assert "machine `box`" in notice, notice
            (row,) = await _audit(bot)
            assert (row["origin"], row["outcome"]) == ("check", "refused"), row


CAMPAIGN = (
    "campaign: watch the loss | machine: local | run: echo loss 0.5; sleep 600 | "
    "metric: loss min | budget: 2h | wake: 1h"
)


async def test_a_removed_persons_campaign_is_paused_at_its_next_wake_up_on_slack(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    fake = FakeSlack()
    await fake.start()
    try:
        async with slack_bot(monkeypatch, env={"RAVEN_ALLOWED_USERS": "U1,U2"}, fake=fake) as bot:
            thread, _ = await bot.mention(CAMPAIGN, user="U2")
            prompt = await _asked(bot, "the campaign's command")
            outcome = await bot.runtime.broker.answer(prompt.id, prompt.nonce, "U2", "Approve")
            assert outcome.status == "accepted", outcome.message
            engine = bot.runtime.feature(OncallFeature).engine

            async def running() -> bool:
                (record,) = await engine.store.recent()
                return record.state in ("running", "waiting")

            await eventually(running, 60, what="the campaign's round never started")
            await bot.settle(thread)
        async with slack_bot(monkeypatch, env={"RAVEN_ALLOWED_USERS": "U1"}, fake=fake) as bot:
            engine = bot.runtime.feature(OncallFeature).engine
            (record,) = await engine.store.recent()
            (wake,) = await engine.store.pending_wakes()
            wake_id = wake.id
            await engine.on_wake_job(record.id, wake_id)
            await bot.settle(thread)
            (after,) = await engine.store.recent()
            assert after.state == "paused", after
            notices = [t for t in _runs_of(fake) if "no longer passes" in t]
            assert len(notices) == 1, _runs_of(fake)
            assert f"campaign: resume {record.id}" in notices[0], notices[0]
            (row,) = await _audit(bot)
            assert (row["origin"], row["subject"], row["outcome"]) == (
                "wake-up",
                record.id,
                "refused",
            )
            # Nobody can resume it for him while he is refused; a restart keeps it paused.
            assert "stays paused" in await engine.resume(record.id)
        async with slack_bot(monkeypatch, env={"RAVEN_ALLOWED_USERS": "U1,U2"}, fake=fake) as bot:
            engine = bot.runtime.feature(OncallFeature).engine
            (kept,) = await engine.store.recent()
            assert kept.state == "paused", kept
            # Admitted again, he resumes it from its thread: its next round starts.
            await bot.mention(f"campaign: resume {record.id}", user="U2", thread_ts=thread)
            await bot.settle(thread)
            assert any("is resumed" in t for t in _runs_of(fake)), _runs_of(fake)

            async def next_round() -> bool:
                (now,) = await engine.store.recent()
                return now.round == 2 and now.state in ("running", "waiting")

            await eventually(next_round, 60, what="the resumed campaign's next round")
            await engine.stop(record.id, by="U2")
    finally:
        await fake.stop()


async def test_a_click_by_someone_the_rules_no_longer_admit_is_refused_on_discord(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    async with shared_fake() as fake, _bob_admitted_by_role(monkeypatch, fake) as bot:
        await bot.mention(PLAN, user=BOB)
        broker = bot.runtime.broker
        prompt = await _asked(bot, "the command's approval")
        # Bob loses the role that admitted him while his approval waits.
        fake.add_user(BOB, "bob", global_name="Bob", roles=[])
        outcome = await broker.answer(prompt.id, prompt.nonce, BOB, "Approve")
        assert outcome.status == "not_allowed", outcome
        assert "access rules" in outcome.message, outcome.message
        assert [p.id for p in await broker.pending()] == [prompt.id]
        (row,) = await _audit(bot)
        assert (row["origin"], row["owner"]) == ("click", BOB), row
