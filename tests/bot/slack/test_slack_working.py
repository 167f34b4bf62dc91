"""Slack's thread status while the bot works: `assistant.threads.setStatus` through the real
slack_sdk client against the fake Slack, directly and through the assembled bot."""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.normalize import DM_THREAD
from bot.slack.working import REFRESH_SECONDS, SlackWorking
from core.ids import ConversationRef
from host.conversation.working import THINKING
from tests.fakes.slack import FakeSlack
from tests.fakes.slack.status import STATUS_TIMEOUT_S
from tests.helpers import eventually
from tests.slack_harness import BOT_TOKEN, CHANNEL, buttons, slack_bot

THREAD = "1700000000.000100"


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        yield server


def _working(fake: FakeSlack, refresh: float = REFRESH_SECONDS) -> SlackWorking:
    client = AsyncWebClient(base_url=fake.api_url, token=BOT_TOKEN)
    return SlackWorking(client, refresh_seconds=refresh)


def _conv(fake: FakeSlack, thread: str = THREAD, channel: str = CHANNEL) -> ConversationRef:
    return ConversationRef("slack", fake.team_id, channel, thread)


async def test_a_status_is_refreshed_before_it_expires_and_cleared(fake: FakeSlack) -> None:
    assert REFRESH_SECONDS < STATUS_TIMEOUT_S  # the product's interval beats Slack's expiry
    working = _working(fake, refresh=0.02)  # the same loop, on a short interval
    conv = _conv(fake)
    await working.show(conv, "is running `s2` (shell): pytest -q")
    await eventually(lambda: len(fake.status_texts(CHANNEL, THREAD)) >= 3)
    assert set(fake.status_texts(CHANNEL, THREAD)) == {"is running `s2` (shell): pytest -q"}
    assert working.refreshing(conv)
    await working.clear(conv)
    assert not working.refreshing(conv)
    assert fake.status_texts(CHANNEL, THREAD)[-1] == ""
    assert fake.current_status(CHANNEL, THREAD) == ""
    await working.close()


async def test_a_new_text_replaces_the_refreshed_one(fake: FakeSlack) -> None:
    working = _working(fake)
    conv = _conv(fake)
    await working.show(conv, THINKING)
    await working.show(conv, "is running `s1` (shell): make")
    assert fake.status_texts(CHANNEL, THREAD) == [THINKING, "is running `s1` (shell): make"]
    assert fake.current_status(CHANNEL, THREAD) == "is running `s1` (shell): make"
    await working.close()
    assert not working.refreshing(conv)


async def test_a_dm_without_a_thread_gets_no_status(fake: FakeSlack) -> None:
    working = _working(fake)
    await working.show(_conv(fake, thread=DM_THREAD, channel="D0DM"), THINKING)
    await working.clear(_conv(fake, thread=DM_THREAD, channel="D0DM"))
    assert fake.calls_to("assistant.threads.setStatus") == []


async def test_missing_scope_turns_statuses_off_for_the_workspace_once(
    fake: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    fake.scopes = ["app_mentions:read"]
    working = _working(fake)
    with caplog.at_level(logging.WARNING, logger="bot.slack.working"):
        await working.show(_conv(fake), THINKING)  # refused: no exception for the turn
        await working.show(_conv(fake, thread="1700000000.000200"), THINKING)
        await working.clear(_conv(fake))
    assert len(fake.calls_to("assistant.threads.setStatus")) == 1  # off after the refusal
    (line,) = [r.getMessage() for r in caplog.records]
    assert "missing_scope" in line and "chat:write" in line
    assert not working.refreshing(_conv(fake))


async def test_a_passing_failure_does_not_turn_statuses_off(fake: FakeSlack) -> None:
    fake.fail_next("assistant.threads.setStatus", "ok_false", error="internal_error")
    working = _working(fake)
    await working.show(_conv(fake), THINKING)  # failed, logged at debug
    await working.show(_conv(fake), "is running `s1` (shell): make")
    assert fake.status_texts(CHANNEL, THREAD) == ["is running `s1` (shell): make"]
    await working.close()


# -- through the assembled bot ----------------------------------------------------------------


async def test_a_turn_shows_thinking_in_its_thread_and_clears_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with slack_bot(monkeypatch) as bot:
        ts, _ = await bot.mention("hello")
        await bot.replies_in(ts)
        await bot.settle(ts)
        await eventually(lambda: bot.fake.status_texts(CHANNEL, ts)[-1:] == [""])
        # The reply hides the status and the bot may set it again before the turn clears
        # it: the same text once or twice, then cleared.
        shown = [text for text, _ in itertools.groupby(bot.fake.status_texts(CHANNEL, ts))]
        assert shown == [THINKING, ""]
        (first, *_) = bot.fake.status_history(CHANNEL, ts)
        assert (first.channel_id, first.thread_ts) == (CHANNEL, ts)


async def test_a_running_node_names_itself_and_its_command_without_the_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bot token is a configured secret: a command that echoes it shows `[redacted]`."""
    async with slack_bot(monkeypatch) as bot:
        ts, _ = await bot.mention(f"s2: shell: echo {BOT_TOKEN}; sleep 1")
        await eventually(lambda: any(p.get("blocks") for p in bot.posts(ts)))
        prompt = next(p for p in bot.posts(ts) if p.get("blocks"))
        prompt_ts = next(
            c.response["ts"]
            for c in bot.fake.calls_to("chat.postMessage")
            if c.ok and c.args.get("blocks") and c.args.get("thread_ts") == ts
        )
        await bot.click(buttons(prompt)[0], "U1", ts, prompt_ts)

        def node_statuses() -> list[str]:
            return [t for t in bot.fake.status_texts(CHANNEL, ts) if t.startswith("is running")]

        await eventually(node_statuses, within=30)
        assert node_statuses()[0] == "is running `s2` (shell): echo [redacted]; sleep 1"
        await bot.settle(ts)
        await eventually(lambda: bot.fake.status_texts(CHANNEL, ts)[-1:] == [""])
        assert not any(BOT_TOKEN in t for t in bot.fake.status_texts(CHANNEL, ts))


async def test_a_post_in_the_thread_shows_the_kept_status_again(fake: FakeSlack) -> None:
    # Slack hides a thread's status when the app posts there: the bot sets it again at once
    # rather than leaving the thread blank until the next refresh.
    working = _working(fake)  # the product's 90 s refresh: only `posted` can bring it back
    client = AsyncWebClient(base_url=fake.api_url, token=BOT_TOKEN)
    thread = (await client.chat_postMessage(channel=CHANNEL, text="go"))["ts"]
    conv = _conv(fake, thread=thread)
    await working.show(conv, "is running `s1` (shell): make")
    await client.chat_postMessage(channel=CHANNEL, thread_ts=thread, text="status update")
    assert fake.current_status(CHANNEL, thread) == ""
    working.posted(conv)
    await eventually(
        lambda: fake.current_status(CHANNEL, thread) == "is running `s1` (shell): make"
    )
    await working.clear(conv)
    assert fake.current_status(CHANNEL, thread) == ""
    # Nothing kept after the clear: a later post leaves the thread without a status.
    working.posted(conv)
    assert not working.refreshing(conv)
    await working.close()
