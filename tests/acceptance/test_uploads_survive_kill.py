"""A run's deliverable reaches its thread as a file exactly once across a `kill -9`, through
the real `raven-bot run` against the loopback Slack and Discord fakes.

Offline, a one-node plan approved by button writes `report.md` into the conversation's
workspace; the run's report names it and the file follows the report's reply. The fake holds
one step of Slack's upload flow (its answer, not its effect) while the bot's database shows
the file recorded and not yet sent; the bot is killed there, the fake lets go, and the bot
starts again on the same RAVEN_HOME:

- held at `files.getUploadURLExternal`: Slack never got the file, so the restarted bot
  uploads it;
- held at `files.completeUploadExternal`: Slack shared the file but the bot never heard, so
  the restarted bot finds the share in the thread and does not upload it again.

On Discord a file is one multipart POST: held before it takes effect (Discord never got it,
dropped when released) or after (Discord shows it, the bot never heard).

Either way the thread shows the file once (its name and bytes) and the report's reply once.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.crash_kit import (
    ALICE,
    CHANNEL,
    DISCORD_ALICE,
    GENERAL,
    SCOPES,
    carries_files,
    discord_buttons,
    file_rows,
    slack_buttons,
)
from tests.acceptance.harness import WITHIN, product_env, project_dir, serving, slack_env
from tests.fakes.discord import FakeDiscord
from tests.fakes.slack import FakeSlack, payloads
from tests.helpers import eventually

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

DELIVERABLE = "report.md"
CONTENT = b"the toy loss fell to 0.4\n"
PLAN = f"r1: shell: echo the toy loss fell to 0.4 > {DELIVERABLE}"
ATTACHED_LINE = f"Attached to this thread: `{DELIVERABLE}`"


@dataclass
class Thread:
    """Alice's thread with the bot in #general."""

    slack: FakeSlack
    ts: str

    def posts(self) -> list[dict[str, Any]]:
        """The bot's posts in the thread (arguments and Slack's ts)."""
        return [
            {**call.args, "ts": call.response.get("ts")}
            for call in self.slack.calls_to("chat.postMessage")
            if call.ok and call.args.get("thread_ts") == self.ts
        ]

    def reports(self) -> list[dict[str, Any]]:
        """The run report's replies: the ones naming the attached file."""
        return [p for p in self.posts() if ATTACHED_LINE in str(p.get("text"))]

    async def approve_the_command(self) -> None:
        """Wait for the command's approval prompt; Alice clicks Approve."""

        def prompts() -> list[dict[str, Any]]:
            return [p for p in self.posts() if slack_buttons(p)]

        await eventually(lambda: bool(prompts()), within=WITHIN, what="the approval prompt")
        post = prompts()[0]
        button = next(b for b in slack_buttons(post) if b["text"]["text"] == "Approve")
        body = payloads.block_actions(
            button["action_id"],
            button["value"],
            ALICE,
            CHANNEL,
            post["ts"],
            thread_ts=self.ts,
            response_url=self.slack.response_url("click"),
        )
        await self.slack.send_envelope("interactive", body)


@contextlib.asynccontextmanager
async def _workspace() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(scopes=SCOPES) as slack:
        slack.add_user(ALICE, "alice", real_name="Alice Liddell", display_name="alice")
        yield slack


async def _kill_while_held(tmp_path: Path, held_method: str) -> tuple[FakeSlack, Thread, Path]:
    """Run the plan, hold `held_method`'s answer, kill -9 the bot while the file is recorded
    as pending, let the fake go, start the bot again and wait until the file is sent."""
    home = tmp_path / "home"
    home.mkdir()
    project = project_dir(tmp_path / "project")
    async with _workspace() as slack:
        env = slack_env(home, slack.api_url)
        hold = slack.hold(held_method)
        async with serving(env, project, tmp_path / "before-kill.log") as proc:
            await slack.wait_connected(within=WITHIN)
            ts = slack.next_ts()
            mention = payloads.app_mention(CHANNEL, ALICE, f"<@UBOT> {PLAN}", ts)
            await slack.send_envelope("events_api", payloads.event_callback(mention))
            thread = Thread(slack, ts)
            await thread.approve_the_command()
            await hold.wait_held(within=WITHIN)
            # Between record and send: the file is in the database, not marked sent.
            assert file_rows(home) == [("pending", f"📎 {DELIVERABLE}")]
            assert len(thread.reports()) == 1, thread.posts()
            proc.send_signal(signal.SIGKILL)  # kill -9 the bot alone
            await asyncio.wait_for(proc.wait(), WITHIN)
        await eventually(lambda: slack.open_connections == 0, within=WITHIN)
        hold.release()
        async with serving(env, project, tmp_path / "after-restart.log"):
            await slack.wait_connected(within=WITHIN)
            await eventually(
                lambda: file_rows(home) == [("sent", f"📎 {DELIVERABLE}")],
                within=WITHIN,
                what=lambda: f"the file marked sent, got {file_rows(home)}",
                every=0.2,
            )
        return slack, thread, home


def _assert_shown_once(slack: FakeSlack, thread: Thread) -> None:
    (shared,) = slack.files_in(CHANNEL, thread.ts)
    assert (shared.name, shared.data) == (DELIVERABLE, CONTENT)
    assert len(slack.shared_files) == 1, slack.shared_files
    shares = [m for m in slack.thread(CHANNEL, thread.ts) if m.get("files")]
    assert len(shares) == 1, shares
    assert len(thread.reports()) == 1, thread.posts()


async def test_a_file_slack_never_got_is_uploaded_once_after_a_kill_9(tmp_path: Path) -> None:
    slack, thread, _ = await _kill_while_held(tmp_path, "files.getUploadURLExternal")
    _assert_shown_once(slack, thread)
    # Asked for an upload URL before the kill and again after it; completed once.
    assert len(slack.calls_to("files.getUploadURLExternal")) == 2
    assert len([c for c in slack.calls_to("files.completeUploadExternal") if c.ok]) == 1


async def test_a_file_slack_shared_before_the_kill_9_is_not_shared_again(tmp_path: Path) -> None:
    slack, thread, _ = await _kill_while_held(tmp_path, "files.completeUploadExternal")
    _assert_shown_once(slack, thread)
    # The restarted bot found the share in the thread: it never started a second upload.
    assert len(slack.calls_to("files.getUploadURLExternal")) == 1
    assert len(slack.calls_to("files.completeUploadExternal")) == 1


# -- Discord ----------------------------------------------------------------------------------


async def _discord_kill_while_held(tmp_path: Path, *, served: bool) -> tuple[FakeDiscord, str]:
    """As `_kill_while_held`, on Discord: the file's POST is held `served` or not."""
    home = tmp_path / "home"
    home.mkdir()
    project = project_dir(tmp_path / "project")
    async with FakeDiscord() as discord:
        discord.add_user(DISCORD_ALICE, "alice", global_name="Alice")
        env = product_env(
            home,
            DISCORD_TOKEN="discord-acceptance-token.abcdefghijklmnop",
            RAVEN_DISCORD_API_URL=discord.base_url,
            RAVEN_DISCORD_GATEWAY_URL=discord.gateway_url,
        )
        hold = discord.hold("POST", "/channels/{id}/messages", served=served, when=carries_files)
        async with serving(env, project, tmp_path / "before-kill.log") as proc:
            await discord.wait_ready(timeout=WITHIN)
            root = await discord.send_message(
                GENERAL, DISCORD_ALICE, f"<@{discord.bot_id}> {PLAN}", mention_bot=True
            )
            thread = str(root["id"])

            def prompts() -> list[dict[str, Any]]:
                return [m for m in discord.bot_messages(thread) if discord_buttons(m)]

            await discord.wait_for(lambda: bool(prompts()), timeout=WITHIN)
            prompt = prompts()[0]
            approve = next(b for b in discord_buttons(prompt) if b.get("label") == "Approve")
            await discord.click(thread, prompt["id"], approve["custom_id"], DISCORD_ALICE)
            await hold.wait_held(within=WITHIN)
            assert file_rows(home) == [("pending", f"📎 {DELIVERABLE}")]
            assert len(_discord_reports(discord, thread)) == 1, discord.bot_messages(thread)
            proc.send_signal(signal.SIGKILL)
            await asyncio.wait_for(proc.wait(), WITHIN)
        await discord.wait_for(lambda: discord.open_connections == 0, timeout=WITHIN)
        hold.release()
        async with serving(env, project, tmp_path / "after-restart.log"):
            await eventually(
                lambda: file_rows(home) == [("sent", f"📎 {DELIVERABLE}")],
                within=WITHIN,
                what=lambda: f"the file marked sent, got {file_rows(home)}",
                every=0.2,
            )
        return discord, thread


def _discord_reports(discord: FakeDiscord, thread: str) -> list[dict[str, Any]]:
    return [
        m
        for m in discord.bot_messages(thread)
        if "Attached to this thread" in str(m.get("content")) and DELIVERABLE in m["content"]
    ]


def _assert_attached_once(discord: FakeDiscord, thread: str) -> None:
    (stored,) = discord.attachments_in(thread)
    assert (stored.filename, stored.data) == (DELIVERABLE, CONTENT)
    attached = [m for m in discord.bot_messages() if m.get("attachments")]
    assert len(attached) == 1, attached
    assert len(_discord_reports(discord, thread)) == 1, discord.bot_messages(thread)


async def test_a_file_discord_never_got_is_attached_once_after_a_kill_9(tmp_path: Path) -> None:
    discord, thread = await _discord_kill_while_held(tmp_path, served=False)
    _assert_attached_once(discord, thread)
    # Posted before the kill (dropped) and again after it.
    assert len(discord.requests_to("POST", "/channels/{id}/messages")) >= 2


async def test_a_file_discord_showed_before_the_kill_9_is_not_attached_again(
    tmp_path: Path,
) -> None:
    discord, thread = await _discord_kill_while_held(tmp_path, served=True)
    _assert_attached_once(discord, thread)
    # The restarted bot found the attachment in the thread's history: no second upload.
    uploads = [r for r in discord.requests_to("POST", "/channels/{id}/messages") if r.files]
    assert len(uploads) == 1, uploads
