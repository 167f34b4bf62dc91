"""`raven-bot run` as deployed, serving Slack (Socket Mode) and Discord at once, against the
loopback fakes: the README's in-thread examples typed by a person in each, approvals by
button and by typed number, `help` and `stop`; what people read there stays clean."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.acceptance.harness import RAVEN, WITHIN, noise, product_env, project_dir
from tests.fakes.discord import FakeDiscord
from tests.fakes.slack import FakeSlack, payloads
from tests.helpers import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")

README_EXAMPLES = [
    "raven-bot run",
    's1: shell: echo "hello from the sandbox" && uname -a\nconfirm',
    "help",
    "stop",
]

SHELL_PLAN = 's1: shell: echo "hello from the sandbox" && uname -a\nconfirm'
SHELL_COMMAND = 'echo "hello from the sandbox" && uname -a'
CHANNEL = "C0GENERAL"
SLACK_ALICE = "U0AL1CE42"
GENERAL = "700000000000000001"
DISCORD_ALICE = "100000000000000001"


def _texts(value: Any) -> list[str]:
    """Every `text` string inside a Slack payload (its fallback text and its blocks)."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return _texts(json.loads(value)) if value[:1] in "[{" else []
        return []
    if isinstance(value, dict):
        found = [value["text"]] if isinstance(value.get("text"), str) else []
        return found + [t for k, v in value.items() if k != "text" for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []


def _buttons(args: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = args.get("blocks") or []
    blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
    return [e for b in blocks if b.get("type") == "actions" for e in b.get("elements", [])]


def _code_blocks(text: str) -> list[str]:
    return [block.strip("\n") for block in re.findall(r"```[^\n]*\n(.*?)```", text, re.DOTALL)]


def _sleepers(seconds: str) -> bool:
    """Whether a process runs exactly `sleep <seconds>`."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if argv[:2] == [b"sleep", seconds.encode()]:
                return True
    return False


@dataclass
class Deployed:
    """The bot process and the two fakes it serves."""

    slack: FakeSlack
    discord: FakeDiscord
    proc: asyncio.subprocess.Process
    log: Path

    # -- Slack, as Alice in #general ---------------------------------------------------------

    async def slack_mention(self, text: str) -> str:
        """Alice mentions the bot in the channel; the thread's ts."""
        ts = self.slack.next_ts()
        event = payloads.app_mention(CHANNEL, SLACK_ALICE, f"<@UBOT> {text}", ts)
        await self.slack.send_envelope("events_api", payloads.event_callback(event))
        return ts

    async def slack_reply(self, thread: str, text: str) -> None:
        """Alice answers in the thread (no mention)."""
        event = payloads.thread_message(CHANNEL, SLACK_ALICE, text, self.slack.next_ts(), thread)
        await self.slack.send_envelope("events_api", payloads.event_callback(event))

    def slack_posts(self, thread: str) -> list[dict[str, Any]]:
        """What the bot posted in a thread: each post's arguments and Slack's answer."""
        return [
            {**call.args, "ts": call.response.get("ts")}
            for call in self.slack.calls_to("chat.postMessage")
            if call.ok and call.args.get("thread_ts") == thread
        ]

    async def slack_post(self, thread: str, cond: Callable[[dict[str, Any]], bool], n: int = 1):
        """Wait for the `n`th post in a thread that satisfies `cond`; return it."""
        await eventually(
            lambda: len([p for p in self.slack_posts(thread) if cond(p)]) >= n, within=WITHIN
        )
        return [p for p in self.slack_posts(thread) if cond(p)][n - 1]

    async def slack_click(self, thread: str, post: dict[str, Any], label: str) -> None:
        """Alice clicks the button `label` on a post."""
        button = next(b for b in _buttons(post) if b["text"]["text"] == label)
        body = payloads.block_actions(
            button["action_id"],
            button["value"],
            SLACK_ALICE,
            CHANNEL,
            post["ts"],
            thread_ts=thread,
            response_url=self.slack.response_url("click"),
        )
        await self.slack.send_envelope("interactive", body)

    def slack_read(self) -> list[str]:
        """Everything people read in Slack: posts, edits and private notes."""
        methods = ("chat.postMessage", "chat.update", "chat.postEphemeral")
        return [
            text
            for call in self.slack.calls
            if call.method in methods and call.ok
            for text in _texts(call.args)
        ] + [t for post in self.slack.response_url_posts for t in _texts(post.json)]

    # -- Discord, as Alice in #general -------------------------------------------------------

    async def discord_mention(self, text: str) -> str:
        """Alice mentions the bot in #general; the thread started from it (its id)."""
        root = await self.discord.send_message(
            GENERAL, DISCORD_ALICE, f"<@{self.discord.bot_id}> {text}", mention_bot=True
        )
        return str(root["id"])

    async def discord_message(self, thread: str, cond: Callable[[dict[str, Any]], bool], n=1):
        """Wait for the `n`th bot message in `thread` that satisfies `cond`; return it."""

        def matching() -> list[dict[str, Any]]:
            return [m for m in self.discord.bot_messages(thread) if cond(m)]

        await self.discord.wait_for(lambda: len(matching()) >= n, timeout=WITHIN)
        return matching()[n - 1]

    def discord_read(self) -> list[str]:
        """Everything people read in Discord: the bot's messages and its private answers."""
        contents = [m.get("content") or "" for m in self.discord.bot_messages()]
        answers = [c.get("data") or {} for c in self.discord.interaction_callbacks]
        answers += [f.get("message") or {} for f in self.discord.followups]
        return contents + [str(a.get("content") or "") for a in answers]


def _buttons_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for row in message.get("components") or [] for c in row.get("components", [])]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def bot(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Deployed]:
    root = tmp_path_factory.mktemp("readme-platforms")
    project = project_dir(root / "project")
    async with FakeSlack() as slack, FakeDiscord() as discord:
        slack.add_user(SLACK_ALICE, "alice", real_name="Alice Liddell", display_name="alice")
        discord.add_user(DISCORD_ALICE, "alice", global_name="Alice")
        env = product_env(
            root / "raven-home",
            SLACK_BOT_TOKEN="xoxb-0000-1111-acceptance",
            SLACK_APP_TOKEN="xapp-1-A1-0000-acceptance",
            RAVEN_SLACK_API_URL=slack.api_url,
            DISCORD_TOKEN="discord-acceptance-token.abcdefghijklmnop",
            RAVEN_DISCORD_API_URL=discord.base_url,
            RAVEN_DISCORD_GATEWAY_URL=discord.gateway_url,
        )
        log = root / "raven-bot.log"
        with log.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                RAVEN,
                "run",
                cwd=project,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        deployed = Deployed(slack, discord, proc, log)
        try:
            await slack.wait_connected(within=WITHIN)
            await discord.wait_ready(timeout=WITHIN)
            yield deployed
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await asyncio.wait_for(proc.wait(), WITHIN)


def _is_prompt(post: dict[str, Any]) -> bool:
    return bool(_buttons(post))


async def test_slack_shell_plan_approved_by_button_then_by_typed_number(bot: Deployed) -> None:
    thread = await bot.slack_mention(SHELL_PLAN)
    plan = await bot.slack_post(thread, _is_prompt)
    assert SHELL_COMMAND in "\n".join(_texts(plan)), plan
    await bot.slack_click(thread, plan, "Approve")
    command = await bot.slack_post(thread, _is_prompt, n=2)
    # "the command is shown exactly, in a code block"
    assert SHELL_COMMAND in _code_blocks("\n".join(_texts(command))), command
    # "typing the option number in the thread works too"
    await bot.slack_reply(thread, "1")
    report = await bot.slack_post(thread, lambda p: "hello from the sandbox\n" in p["text"])
    assert "Linux" in report["text"], report["text"]


async def test_slack_help(bot: Deployed) -> None:
    thread = await bot.slack_mention("help")
    shown = (await bot.slack_post(thread, lambda p: True))["text"]
    for word in ("stop", "status", "id: agent: task", "confirm", "campaign:", "remember"):
        assert word in shown, (word, shown)


async def test_slack_stop_during_a_running_plan(bot: Deployed) -> None:
    thread = await bot.slack_mention("w1: shell: sleep 619")
    command = await bot.slack_post(thread, _is_prompt)
    assert "sleep 619" in _code_blocks("\n".join(_texts(command))), command
    await bot.slack_click(thread, command, "Approve")
    await eventually(lambda: _sleepers("619"), within=WITHIN)
    await bot.slack_reply(thread, "stop")
    stopped = (await bot.slack_post(thread, lambda p: "Stopped" in p["text"]))["text"]
    assert "nothing" not in stopped, stopped
    assert re.search(r"run `?run_\w+`? \(w1 cancelled\)", stopped), stopped
    await eventually(lambda: not _sleepers("619"), within=WITHIN)


async def test_discord_shell_plan_approved_by_typed_number_then_by_button(bot: Deployed) -> None:
    thread = await bot.discord_mention(SHELL_PLAN)
    plan = await bot.discord_message(thread, lambda m: bool(_buttons_of(m)))
    assert SHELL_COMMAND in plan["content"], plan
    await bot.discord.send_message(thread, DISCORD_ALICE, "1")
    command = await bot.discord_message(thread, lambda m: bool(_buttons_of(m)), n=2)
    assert SHELL_COMMAND in _code_blocks(command["content"]), command["content"]
    approve = next(b for b in _buttons_of(command) if b.get("label") == "Approve")
    await bot.discord.click(thread, command["id"], approve["custom_id"], DISCORD_ALICE)
    report = await bot.discord_message(
        thread, lambda m: "hello from the sandbox\n" in (m.get("content") or "")
    )
    assert "Linux" in report["content"], report["content"]
    # "a decided prompt's message shows the outcome with its buttons disabled"
    for prompt in (plan, command):
        decided = await bot.discord_message(
            thread, lambda m, id=prompt["id"]: m["id"] == id and "Approve" in m["content"]
        )
        assert all(b.get("disabled") for b in _buttons_of(decided)), decided


async def test_discord_help(bot: Deployed) -> None:
    thread = await bot.discord_mention("help")
    shown = (await bot.discord_message(thread, lambda m: "stop" in (m.get("content") or "")))[
        "content"
    ]
    for word in ("stop", "status", "id: agent: task", "confirm", "campaign:", "remember"):
        assert word in shown, (word, shown)


@pytest.mark.parametrize("platform", ["slack", "discord"])
async def test_what_people_read_is_clean(bot: Deployed, platform: str) -> None:
    read = bot.slack_read() if platform == "slack" else bot.discord_read()
    assert read, "nothing was read"
    raw = (SLACK_ALICE,) if platform == "slack" else (DISCORD_ALICE,)
    found = [line for text in read for line in noise(text, raw)]
    assert not found, "\n".join(found[:20])
