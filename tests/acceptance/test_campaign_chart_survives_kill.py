"""A campaign's chart reaches its thread as a PNG exactly once across a `kill -9`, through the
real `raven-bot run` against the loopback Slack and Discord fakes.

Offline, Alice starts a campaign of three quick rounds and approves its command by button.
When it ends, its final report is posted and its chart PNG follows as a file through the
outbox. The fake holds the upload (Slack: one step of its upload flow, its answer not its
effect; Discord: the multipart POST, before or after it takes effect) while the bot's database
shows the chart recorded and not yet sent; the bot is killed there, the fake lets go, and the
bot starts again on the same RAVEN_HOME. Either way the thread shows the chart once (a PNG of
the chart's size, not blank) and the final report once. On Slack the campaign's status message
also carries the native chart block of its rounds.
"""

from __future__ import annotations

import asyncio
import io
import re
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from oncall.chart import HEIGHT_PX, WIDTH_PX
from tests.acceptance.crash_kit import (
    ALICE,
    CHANNEL,
    DISCORD_ALICE,
    GENERAL,
    SCOPES,
    carries_files,
    discord_buttons,
    file_rows,
    slack_blocks,
    slack_buttons,
)
from tests.acceptance.harness import WITHIN, product_env, project_dir, serving, slack_env
from tests.fakes.discord import FakeDiscord
from tests.fakes.slack import FakeSlack, payloads
from tests.helpers import eventually

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

# Three rounds, each a second or so: the counter file `n` in the conversation's workspace
# makes each round's loss one lower.
THREE_ROUNDS = (
    "campaign: three quick rounds | machine: local | "
    'run: n=$(cat n 2>/dev/null); n=$((n+1)); echo $n > n; echo "loss $((100-n))" | '
    "metric: loss min | budget: 1h | rounds: 3 | baseline: 100 | poll: 1s"
)
CHART_NAME = re.compile(r"cmp_[0-9a-f]{10}-chart\.png")
REPORT = re.compile(r"Campaign `cmp_[0-9a-f]{10}` report")


def _the_chart_is(home: Path, delivery: str) -> bool:
    """Whether the one file recorded is the campaign's chart, in state `delivery`."""
    rows = file_rows(home)
    return (
        len(rows) == 1
        and rows[0][0] == delivery
        and CHART_NAME.fullmatch(rows[0][1].removeprefix("📎 ")) is not None
    )


def _assert_chart_png(data: bytes) -> None:
    image = Image.open(io.BytesIO(data))
    image.load()
    assert image.format == "PNG" and image.size == (WIDTH_PX, HEIGHT_PX)
    pixels = np.asarray(image.convert("RGB")).reshape(-1, 3)
    assert len(np.unique(pixels, axis=0)) > 50  # not blank


# -- Slack ------------------------------------------------------------------------------------


def _slack_posts(slack: FakeSlack, ts: str) -> list[dict[str, Any]]:
    """The bot's posts in the thread (arguments and Slack's ts)."""
    return [
        {**call.args, "ts": call.response.get("ts")}
        for call in slack.calls_to("chat.postMessage")
        if call.ok and call.args.get("thread_ts") == ts
    ]


def _slack_reports(slack: FakeSlack, ts: str) -> list[dict[str, Any]]:
    return [p for p in _slack_posts(slack, ts) if REPORT.search(str(p.get("text")))]


async def _slack_approve(slack: FakeSlack, ts: str) -> None:
    """Wait for the campaign's approval prompt; Alice clicks Approve."""

    def prompts() -> list[dict[str, Any]]:
        return [p for p in _slack_posts(slack, ts) if slack_buttons(p)]

    await eventually(lambda: bool(prompts()), within=WITHIN, what="the approval prompt")
    post = prompts()[0]
    button = next(b for b in slack_buttons(post) if b["text"]["text"] == "Approve")
    body = payloads.block_actions(
        button["action_id"],
        button["value"],
        ALICE,
        CHANNEL,
        post["ts"],
        thread_ts=ts,
        response_url=slack.response_url("click"),
    )
    await slack.send_envelope("interactive", body)


async def _slack_kill_while_held(tmp_path: Path, held_method: str) -> tuple[FakeSlack, str]:
    """Run the campaign, hold `held_method`'s answer for the chart's upload, kill -9 the bot
    while the chart is recorded as pending, let the fake go, start the bot again and wait
    until the chart is sent."""
    home = tmp_path / "home"
    home.mkdir()
    project = project_dir(tmp_path / "project")
    async with FakeSlack(scopes=SCOPES) as slack:
        slack.add_user(ALICE, "alice", real_name="Alice Liddell", display_name="alice")
        env = slack_env(home, slack.api_url)
        hold = slack.hold(held_method)
        async with serving(env, project, tmp_path / "before-kill.log") as proc:
            await slack.wait_connected(within=WITHIN)
            ts = slack.next_ts()
            mention = payloads.app_mention(CHANNEL, ALICE, f"<@UBOT> {THREE_ROUNDS}", ts)
            await slack.send_envelope("events_api", payloads.event_callback(mention))
            await _slack_approve(slack, ts)
            await hold.wait_held(within=WITHIN)
            # Between record and send: the chart is in the database, not marked sent.
            assert _the_chart_is(home, "pending"), file_rows(home)
            assert len(_slack_reports(slack, ts)) == 1, _slack_posts(slack, ts)
            proc.send_signal(signal.SIGKILL)  # kill -9 the bot alone
            await asyncio.wait_for(proc.wait(), WITHIN)
        await eventually(lambda: slack.open_connections == 0, within=WITHIN)
        hold.release()
        async with serving(env, project, tmp_path / "after-restart.log"):
            await slack.wait_connected(within=WITHIN)
            await eventually(
                lambda: _the_chart_is(home, "sent"),
                within=WITHIN,
                what=lambda: f"the chart marked sent, got {file_rows(home)}",
                every=0.2,
            )
        return slack, ts


def _assert_slack_chart_once(slack: FakeSlack, ts: str) -> None:
    (shared,) = slack.files_in(CHANNEL, ts)
    assert CHART_NAME.fullmatch(shared.name), shared.name
    _assert_chart_png(shared.data)
    assert len(slack.shared_files) == 1, slack.shared_files
    shares = [m for m in slack.thread(CHANNEL, ts) if m.get("files")]
    assert len(shares) == 1, shares
    (report,) = _slack_reports(slack, ts)
    # The report and the live status message draw the rounds natively too.
    assert any(b["type"] == "data_visualization" for b in slack_blocks(report))
    (status,) = [m for m in slack.thread(CHANNEL, ts) if "round 3/3 finished" in str(m.get("text"))]
    (chart,) = [b for b in slack_blocks(status) if b["type"] == "data_visualization"]
    best = chart["chart"]["series"][0]
    assert [p["label"] for p in best["data"]] == ["r1", "r2", "r3"]
    assert best["data"][-1]["value"] == 97


async def test_a_campaign_chart_slack_never_got_is_uploaded_once_after_a_kill_9(
    tmp_path: Path,
) -> None:
    slack, ts = await _slack_kill_while_held(tmp_path, "files.getUploadURLExternal")
    _assert_slack_chart_once(slack, ts)
    # Asked for an upload URL before the kill and again after it; completed once.
    assert len(slack.calls_to("files.getUploadURLExternal")) == 2
    assert len([c for c in slack.calls_to("files.completeUploadExternal") if c.ok]) == 1


async def test_a_campaign_chart_slack_shared_before_the_kill_9_is_not_shared_again(
    tmp_path: Path,
) -> None:
    slack, ts = await _slack_kill_while_held(tmp_path, "files.completeUploadExternal")
    _assert_slack_chart_once(slack, ts)
    # The restarted bot found the share in the thread: it never started a second upload.
    assert len(slack.calls_to("files.getUploadURLExternal")) == 1
    assert len(slack.calls_to("files.completeUploadExternal")) == 1


# -- Discord ----------------------------------------------------------------------------------


def _discord_reports(discord: FakeDiscord, thread: str) -> list[dict[str, Any]]:
    return [m for m in discord.bot_messages(thread) if REPORT.search(str(m.get("content")))]


async def _discord_kill_while_held(tmp_path: Path, *, served: bool) -> tuple[FakeDiscord, str]:
    """As `_slack_kill_while_held`, on Discord: the chart's POST is held `served` or not."""
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
                GENERAL, DISCORD_ALICE, f"<@{discord.bot_id}> {THREE_ROUNDS}", mention_bot=True
            )
            thread = str(root["id"])

            def prompts() -> list[dict[str, Any]]:
                return [m for m in discord.bot_messages(thread) if discord_buttons(m)]

            await discord.wait_for(lambda: bool(prompts()), timeout=WITHIN)
            prompt = prompts()[0]
            approve = next(b for b in discord_buttons(prompt) if b.get("label") == "Approve")
            await discord.click(thread, prompt["id"], approve["custom_id"], DISCORD_ALICE)
            await hold.wait_held(within=WITHIN)
            assert _the_chart_is(home, "pending"), file_rows(home)
            assert len(_discord_reports(discord, thread)) == 1, discord.bot_messages(thread)
            proc.send_signal(signal.SIGKILL)
            await asyncio.wait_for(proc.wait(), WITHIN)
        await discord.wait_for(lambda: discord.open_connections == 0, timeout=WITHIN)
        hold.release()
        async with serving(env, project, tmp_path / "after-restart.log"):
            await eventually(
                lambda: _the_chart_is(home, "sent"),
                within=WITHIN,
                what=lambda: f"the chart marked sent, got {file_rows(home)}",
                every=0.2,
            )
        return discord, thread


def _assert_discord_chart_once(discord: FakeDiscord, thread: str) -> None:
    (stored,) = discord.attachments_in(thread)
    assert CHART_NAME.fullmatch(stored.filename), stored.filename
    _assert_chart_png(stored.data)
    attached = [m for m in discord.bot_messages() if m.get("attachments")]
    assert len(attached) == 1, attached
    assert len(_discord_reports(discord, thread)) == 1, discord.bot_messages(thread)


async def test_a_campaign_chart_discord_never_got_is_attached_once_after_a_kill_9(
    tmp_path: Path,
) -> None:
    discord, thread = await _discord_kill_while_held(tmp_path, served=False)
    _assert_discord_chart_once(discord, thread)
    # Posted before the kill (dropped) and again after it.
    uploads = [r for r in discord.requests_to("POST", "/channels/{id}/messages") if r.files]
    assert len(uploads) >= 2, uploads


async def test_a_campaign_chart_discord_showed_before_the_kill_9_is_not_attached_again(
    tmp_path: Path,
) -> None:
    discord, thread = await _discord_kill_while_held(tmp_path, served=True)
    _assert_discord_chart_once(discord, thread)
    # The restarted bot found the attachment in the thread's history: no second upload.
    uploads = [r for r in discord.requests_to("POST", "/channels/{id}/messages") if r.files]
    assert len(uploads) == 1, uploads
