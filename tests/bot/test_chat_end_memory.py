"""`chat` at the end of its input finishes the last turn's memory write (its model call)
before it exits, through the real process and the real SDK against the fake model."""

from __future__ import annotations

import getpass
from pathlib import Path

from tests.bot.cli.test_cli_end_to_end import _env, _run
from tests.fakes.anthropic_server import SKILL_GATE, FakeAnthropic

KEY = "sk-ant-test-key-0123456789"
NARRATIVE = "Formed by the model: Ana keeps her notes in Obsidian."


async def test_the_last_turns_memory_call_finishes_before_chat_exits(isolated_env: Path) -> None:
    # The episode former's call is scripted (not answered aside) and slow, so it is still
    # in flight when the input ends and the bot starts shutting down.
    async with FakeAnthropic(api_key=KEY, side_calls=(SKILL_GATE,)) as fake:
        fake.queue_text("Noted.")
        fake.queue_delay(1.5)
        fake.queue_tool_use(
            "record_episode", {"same_topic": False, "narrative": NARRATIVE, "facts": []}
        )
        env = _env(isolated_env, ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=fake.base_url)
        code, out, err = await _run("chat", stdin=b"I keep my notes in Obsidian\n", env=env)
        assert code == 0, err
        assert "Noted." in out
        assert len(fake.requests) == 2, [r["json"].get("tools") for r in fake.requests]
    code, shown, err = await _run("memory", "show", "--user", getpass.getuser(), env=env)
    assert code == 0, shown + err
    episodes = [line for line in shown.splitlines() if line.startswith("- episode")]
    assert len(episodes) == 1 and NARRATIVE in episodes[0], shown
    assert "episode formation by the model failed" not in err
