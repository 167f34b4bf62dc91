"""The real bot process on Discord against the loopback fake: after a scheduled task fired,
a restart still reads back and answers a mention sent while the bot was down (issue 38: the
firing's key in the log once stopped the whole read-back)."""

from __future__ import annotations

import re
from asyncio.subprocess import Process
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from tests.bot_process import bot_process
from tests.discord_harness import ALICE, BOB, GENERAL, TOKEN
from tests.fakes.discord import FakeDiscord
from tests.helpers import write_agents

pytestmark = pytest.mark.slow

AGENTS = """
[agents.echo]
backend = "cli"
description = "Echoes its prompt (test agent)."
command = ["cat"]
"""


def _buttons(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for row in message.get("components") or [] for c in row.get("components", [])]


def _bot_process(fake: FakeDiscord, home: Path) -> AbstractAsyncContextManager[Process]:
    return bot_process(
        home,
        DISCORD_TOKEN=TOKEN,
        RAVEN_DISCORD_API_URL=fake.base_url,
        RAVEN_DISCORD_GATEWAY_URL=fake.gateway_url,
    )


def _texts(fake: FakeDiscord, channel: str) -> list[str]:
    return [m.get("content", "") for m in fake.bot_messages(channel)]


async def test_a_downtime_mention_is_answered_after_a_restart_that_follows_a_firing(
    isolated_env: Path,
) -> None:
    write_agents(isolated_env, AGENTS)
    async with FakeDiscord() as fake:
        fake.add_user(ALICE, "alice", global_name="Alice")
        fake.add_user(BOB, "bob", global_name="Bob")
        async with _bot_process(fake, isolated_env):
            await fake.wait_ready(timeout=60)
            root = await fake.send_message(
                GENERAL, ALICE, "schedule: every 1h | s1: echo: hi", mention_bot=True
            )
            thread = str(root["id"])
            await fake.wait_for(
                lambda: any(_buttons(m) for m in fake.bot_messages(thread)), timeout=60
            )
            (prompt,) = [m for m in fake.bot_messages(thread) if _buttons(m)]
            await fake.click(thread, prompt["id"], _buttons(prompt)[0]["custom_id"], ALICE)
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
        async with _bot_process(fake, isolated_env):
            await fake.wait_for(lambda: bool(_texts(fake, str(mention["id"]))), timeout=60)
        assert "Status" in _texts(fake, str(mention["id"]))[0]
