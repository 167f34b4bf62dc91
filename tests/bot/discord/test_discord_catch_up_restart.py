"""The real bot process on Discord against the loopback fake: after a scheduled task fired,
a restart still reads back and answers a mention sent while the bot was down (issue 38: the
firing's key in the log once stopped the whole read-back)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.discord_harness import (
    ALICE,
    BOB,
    ECHO_AGENT,
    GENERAL,
    buttons,
    discord_bot_process,
)
from tests.fakes.discord import FakeDiscord
from tests.helpers import write_agents

pytestmark = pytest.mark.slow


def _texts(fake: FakeDiscord, channel: str) -> list[str]:
    return [m.get("content", "") for m in fake.bot_messages(channel)]


async def test_a_downtime_mention_is_answered_after_a_restart_that_follows_a_firing(
    isolated_env: Path,
) -> None:
    write_agents(isolated_env, ECHO_AGENT)
    async with FakeDiscord() as fake:
        fake.add_user(ALICE, "alice", global_name="Alice")
        fake.add_user(BOB, "bob", global_name="Bob")
        async with discord_bot_process(fake, isolated_env):
            await fake.wait_ready(timeout=60)
            root = await fake.send_message(
                GENERAL, ALICE, "schedule: every 1h | s1: echo: hi", mention_bot=True
            )
            thread = str(root["id"])
            await fake.wait_for(
                lambda: any(buttons(m) for m in fake.bot_messages(thread)), timeout=60
            )
            (prompt,) = [m for m in fake.bot_messages(thread) if buttons(m)]
            await fake.click(thread, prompt["id"], buttons(prompt)[0]["custom_id"], ALICE)
            await fake.wait_for(
                lambda: any("is scheduled: every" in t for t in _texts(fake, thread)), timeout=60
            )
            (task,) = {m for t in _texts(fake, thread) for m in re.findall(r"\bt_\w+", t)}
            await fake.send_message(thread, ALICE, f"schedule: run {task}")
            # The firing's plan runs under node ids of its own (`s1_…`) and says its result.
            await fake.wait_for(
                lambda: any("completed" in t and "s1_" in t for t in _texts(fake, thread)),
                timeout=60,
            )
        # Down: a new mention nobody delivers.
        mention = fake.build_message(GENERAL, BOB, f"<@{fake.bot_id}> status", mention_bot=True)
        async with discord_bot_process(fake, isolated_env):
            await fake.wait_for(lambda: bool(_texts(fake, str(mention["id"]))), timeout=60)
        assert "Status" in _texts(fake, str(mention["id"]))[0]
