"""The real bot process on Discord (`raven-bot run` with DISCORD_TOKEN) against the loopback
fake: an approval prompt shown before a kill -9 is answered with its button after the
restart (the persistent view comes back), and the turn is neither lost nor repeated."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.discord_harness import ALICE, ECHO_AGENT, GENERAL, buttons, discord_bot_process
from tests.fakes.discord import FakeDiscord
from tests.helpers import write_agents

# Real processes (the raven-bot CLI, a pty, Slurm, ssh, restarts): `-m "not slow"` skips them.
pytestmark = pytest.mark.slow


async def test_a_prompt_survives_kill_9_and_its_button_still_works(isolated_env: Path) -> None:
    write_agents(isolated_env, ECHO_AGENT)
    async with FakeDiscord() as fake:
        fake.add_user(ALICE, "alice", global_name="Alice")
        connected = 0
        async with discord_bot_process(fake, isolated_env) as proc:
            await fake.wait_ready(timeout=60)
            connected = fake.identifies
            root = await fake.send_message(
                GENERAL, ALICE, "a: echo: survive\nconfirm", mention_bot=True
            )
            thread = str(root["id"])
            await fake.wait_for(
                lambda: any(buttons(m) for m in fake.bot_messages(thread)), timeout=60
            )
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        (prompt_message,) = [m for m in fake.bot_messages(thread) if buttons(m)]
        approve = buttons(prompt_message)[0]["custom_id"]
        async with discord_bot_process(fake, isolated_env):
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
        prompts = [m for m in fake.bot_messages(thread) if buttons(m)]
        assert len(prompts) == 1  # the plan was not asked twice
        assert all(b.get("disabled") for b in buttons(prompts[0]))
