"""An ACP agent's permission request in a Slack thread (issue 38): a bystander clicking
*Allow* on someone else's prompt is refused privately, the agent keeps waiting and hears no
yes; the requester's click then allows the call. The real assembled bot, the loopback fake
Slack, and the loopback ACP agent (tests/fakes/acp_agent.py) in the real sandbox."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import eventually, write_agents
from tests.slack_harness import SlackBot, buttons, slack_bot

FAKE_AGENT = Path(__file__).resolve().parents[2] / "fakes" / "acp_agent.py"
# Redirected, so smart mode asks before it runs.
WRITE = "echo hi from the agent > hello.txt"


def _agents_toml() -> str:
    """The `claude-acp` preset pointed at the loopback agent (passed with `-c`: the sandbox
    shows it nothing but the interpreter)."""
    source = FAKE_AGENT.read_text(encoding="utf-8")
    assert "'''" not in source  # it goes into a TOML literal string
    return f"[agents.claude-acp]\ncommand = ['{sys.executable}', '-c', '''{source}''']\n"


def _written(home: Path) -> list[str]:
    """What the agent wrote, in any workspace."""
    return [path.read_text() for path in home.glob("workspaces/*/hello.txt")]


def _prompt(bot: SlackBot, thread: str) -> tuple[dict[str, Any], str] | None:
    """The thread's permission prompt (its post and ts), once posted."""
    for call in bot.fake.calls_to("chat.postMessage"):
        if call.ok and call.args.get("thread_ts") == thread and buttons(call.args):
            return call.args, str(call.response["ts"])
    return None


async def _click(bot: SlackBot, thread: str, label: str, user: str) -> None:
    found = _prompt(bot, thread)
    assert found is not None
    post, prompt_ts = found
    button = next(b for b in buttons(post) if b["text"]["text"] == label)
    await bot.click(button, user, thread, prompt_ts)


async def test_a_bystanders_allow_on_an_acp_permission_prompt_is_refused(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, _agents_toml())
    async with slack_bot(monkeypatch) as bot:
        thread, _ = await bot.mention(f"a1: claude-acp: run {WRITE}", user="U1")  # alice
        await eventually(lambda: _prompt(bot, thread) is not None, within=60)
        (pending,) = await bot.runtime.broker.pending()
        assert pending.requester == "U1" and WRITE in json.dumps(pending.payload) + pending.question

        found = _prompt(bot, thread)
        assert found is not None
        prompt_ts = found[1]
        await _click(bot, thread, "Allow once", "U2")  # bob, a bystander
        (note,) = await bot.fake.wait_for_call("chat.postEphemeral")
        assert note.args["user"] == "U2" and "can answer" in note.args["text"]
        await bot.adapter.idle()  # the click's after-ack work is done
        # The prompt still waits for alice; the agent heard no yes and ran nothing.
        assert [p.id for p in await bot.runtime.broker.pending()] == [pending.id]
        # The prompt's buttons were not edited away (the run's status message may be).
        assert [c for c in bot.fake.calls_to("chat.update") if c.args["ts"] == prompt_ts] == []
        assert await asyncio.to_thread(_written, isolated_env) == []
        assert not any("ran " in str(p.get("text")) for p in bot.posts(thread))

        await _click(bot, thread, "Allow once", "U1")  # alice: the agent was still waiting
        said = f"ran {WRITE}".replace(">", "&gt;")
        await eventually(lambda: any(said in str(p.get("text")) for p in bot.posts(thread)), 60)
        assert await asyncio.to_thread(_written, isolated_env) == ["hi from the agent\n"]
