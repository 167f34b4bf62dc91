"""Approvals that wait well (issue 41), as a team meets them: the real `raven-bot run`
serving Slack (Socket Mode) against the loopback fake, with `RAVEN_PROMPT_ON_EXPIRY=hold`
and a short `RAVEN_PROMPT_EXPIRY_SECONDS`. Alice's command approval waits: she gets one
reminder by name before the deadline, the prompt is then held (its message says so, its
buttons stay), `status` lists it, and her click afterwards still runs the command."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from tests.acceptance.harness import WITHIN, project_dir, serving, slack_env
from tests.fakes.slack import FakeSlack, payloads
from tests.helpers import eventually

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

CHANNEL = "C0GENERAL"
ALICE = "U0AL1CE42"
EXPIRY_SECONDS = "6"
REMINDER = "⏰ alice, a question still waits for your answer"


def _blocks(args: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = args.get("blocks") or []
    return list(json.loads(blocks) if isinstance(blocks, str) else blocks)


def _buttons(args: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for b in _blocks(args) if b.get("type") == "actions" for e in b.get("elements", [])]


def _context(args: dict[str, Any]) -> str:
    return " ".join(
        str(e.get("text")) for b in _blocks(args) if b["type"] == "context" for e in b["elements"]
    )


@dataclass
class Bot:
    slack: FakeSlack

    async def mention(self, text: str) -> str:
        ts = self.slack.next_ts()
        event = payloads.app_mention(CHANNEL, ALICE, f"<@UBOT> {text}", ts)
        await self.slack.send_envelope("events_api", payloads.event_callback(event))
        return ts

    async def say(self, thread: str, text: str) -> None:
        event = payloads.thread_message(CHANNEL, ALICE, text, self.slack.next_ts(), thread)
        await self.slack.send_envelope("events_api", payloads.event_callback(event))

    def posts(self, thread: str) -> list[dict[str, Any]]:
        return [
            {**call.args, "ts": call.response.get("ts")}
            for call in self.slack.calls_to("chat.postMessage")
            if call.ok and call.args.get("thread_ts") == thread
        ]

    def updates(self, ts: str) -> list[dict[str, Any]]:
        return [c.args for c in self.slack.calls_to("chat.update") if c.ok and c.args["ts"] == ts]

    async def texts_with(self, thread: str, text: str) -> list[str]:
        def found() -> list[str]:
            return [str(p["text"]) for p in self.posts(thread) if text in str(p.get("text"))]

        await eventually(found, within=WITHIN, what=f"a post saying {text!r}")
        return found()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def bot(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Bot]:
    root = tmp_path_factory.mktemp("prompt-waiting")
    home = root / "raven-home"
    home.mkdir()
    project = project_dir(root / "project")
    async with FakeSlack() as slack:
        slack.add_user(ALICE, "alice", real_name="Alice Liddell", display_name="alice")
        env = slack_env(
            home,
            slack.api_url,
            RAVEN_PROMPT_EXPIRY_SECONDS=EXPIRY_SECONDS,
            RAVEN_PROMPT_ON_EXPIRY="hold",
        )
        async with serving(env, project, root / "raven-bot.log"):
            await slack.wait_connected(within=WITHIN)
            yield Bot(slack)


async def test_a_reminder_then_a_held_approval_that_still_runs(bot: Bot) -> None:
    thread = await bot.mention("h1: shell: echo held-and-approved")

    def prompts() -> list[dict[str, Any]]:
        return [p for p in bot.posts(thread) if _buttons(p)]

    await eventually(prompts, within=WITHIN, what="the command's approval prompt")
    (prompt,) = prompts()

    # One reminder, by display name (no ping), before the deadline.
    (reminder,) = await bot.texts_with(thread, REMINDER)
    assert "<@" not in reminder and "<!date^" in reminder
    assert "then it is held and the run keeps waiting" in reminder

    # At the deadline: held, not denied. The message says so and keeps its buttons.
    def held() -> list[dict[str, Any]]:
        return [u for u in bot.updates(prompt["ts"]) if "still waiting (held)" in _context(u)]

    await eventually(held, within=WITHIN, what="the prompt message to say it is held")
    assert _buttons(held()[-1]) == _buttons(prompt)
    assert not [p for p in bot.posts(thread) if "not approved" in str(p.get("text"))]

    await bot.say(thread, "status")
    (status,) = await bot.texts_with(thread, "held past its deadline")
    assert "waiting for an answer from alice since" in status

    approve = next(b for b in _buttons(prompt) if b["text"]["text"] == "Approve")
    body = payloads.block_actions(
        approve["action_id"],
        approve["value"],
        ALICE,
        CHANNEL,
        prompt["ts"],
        thread_ts=thread,
        response_url=bot.slack.response_url("click"),
    )
    await bot.slack.send_envelope("interactive", body)
    (report,) = await bot.texts_with(thread, "Nodes: 1 completed")
    assert "held-and-approved" in report
    assert len([p for p in bot.posts(thread) if REMINDER in str(p.get("text"))]) == 1
