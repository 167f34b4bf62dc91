"""The real bot process on Discord (`raven-bot run` with DISCORD_TOKEN) against the loopback
fake: an approval prompt shown before a kill -9 is answered with its button after the
restart (the persistent view comes back), and the turn is neither lost nor repeated."""

from __future__ import annotations

import signal
from asyncio.subprocess import Process
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from tests.bot_process import bot_process
from tests.discord_harness import ALICE, GENERAL, TOKEN
from tests.fakes.discord import FakeDiscord
from tests.helpers import write_agents

# Real processes (the raven-bot CLI, a pty, Slurm, ssh, restarts): `-m "not slow"` skips them.
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


async def test_a_prompt_survives_kill_9_and_its_button_still_works(isolated_env: Path) -> None:
    write_agents(isolated_env, AGENTS)
    async with FakeDiscord() as fake:
        fake.add_user(ALICE, "alice", global_name="Alice")
        connected = 0
        async with _bot_process(fake, isolated_env) as proc:
            await fake.wait_ready(timeout=60)
            connected = fake.identifies
            root = await fake.send_message(
                GENERAL, ALICE, "a: echo: survive\nconfirm", mention_bot=True
            )
            thread = str(root["id"])
            await fake.wait_for(
                lambda: any(_buttons(m) for m in fake.bot_messages(thread)), timeout=60
            )
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        (prompt_message,) = [m for m in fake.bot_messages(thread) if _buttons(m)]
        approve = _buttons(prompt_message)[0]["custom_id"]
        async with _bot_process(fake, isolated_env):
            await fake.wait_for(lambda: fake.identifies > connected, timeout=60)
            await fake.wait_ready(timeout=60)
            # the same MESSAGE_CREATE again (a client reconnecting may see it): no new turn
            await fake.dispatch("MESSAGE_CREATE", root)
            await fake.click(thread, prompt_message["id"], approve, ALICE)
            await fake.wait_for(
                lambda: any(
                    "completed** — Explicit plan" in m.get("content", "")
                    for m in fake.bot_messages(thread)
                ),
                timeout=60,
            )
        prompts = [m for m in fake.bot_messages(thread) if _buttons(m)]
        assert len(prompts) == 1  # the plan was not asked twice
        assert all(b.get("disabled") for b in _buttons(prompts[0]))
