"""The real slack-bolt adapter against the loopback fake Slack, through the assembled bot."""

from __future__ import annotations

import asyncio
import functools
import html
import json
import logging
import re
import socket
import sqlite3
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bot.access import AccessPolicy
from bot.app import build_runtime, serve
from bot.channel import Ingress
from bot.settings import load_settings
from bot.slack.adapter import SlackAdapter, SlackConfig
from bot.slack.connection import WEB_API_CONNECTIONS
from bot.slack.doctor import check_slack, required_scopes
from bot.slack.factory import slack_adapter
from bot.slack.normalize import plain_text
from core.ids import ConversationRef
from host.runtime.events import TurnRequested
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.slack import FakeSlack, form_body, json_body, payloads, sign
from tests.helpers import db_rows, eventually, write_agents
from tests.slack_harness import APP_TOKEN, BOT_TOKEN, CHANNEL, SECRET, SlackBot, buttons, slack_bot

ECHO_AGENTS = """
[agents.echo]
backend = "cli"
description = "Echoes its prompt (test agent)."
command = ["cat"]

[agents.sleeper]
backend = "cli"
description = "Sleeps (test agent)."
command = ["sh", "-c", "sleep 60"]
"""


def _read(path: Path) -> bytes:
    return path.read_bytes()


def _user_texts(fake: FakeAnthropic) -> list[str]:
    texts = []
    for request in fake.requests:
        last = request["json"]["messages"][-1]
        content = last["content"]
        texts.append(
            content
            if isinstance(content, str)
            else "\n".join(b.get("text", "") for b in content if b.get("type") == "text")
        )
    return texts


async def _online(monkeypatch: pytest.MonkeyPatch, fake: FakeAnthropic) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
    monkeypatch.setenv("RAVEN_MODEL_MAX_RETRIES", "0")


def _prompt_post(bot: SlackBot, thread: str) -> dict[str, Any]:
    posts = [p for p in bot.posts(thread) if p.get("blocks")]
    assert posts, "no prompt was posted"
    return posts[-1]


async def _click(
    bot: SlackBot, post: dict[str, Any], index: int, user: str, thread: str, prompt_ts: str
) -> None:
    await bot.click(buttons(post)[index], user, thread, prompt_ts)


async def _plan(bot: SlackBot, plan: str) -> tuple[str, dict[str, Any], str]:
    """Mention with a plan that needs approval; return (thread, prompt post, prompt ts)."""
    ts, _ = await bot.mention(plan)
    await eventually(lambda: any(p.get("blocks") for p in bot.posts(ts)))
    post = _prompt_post(bot, ts)
    prompt_ts = next(
        c.response["ts"]
        for c in bot.fake.calls_to("chat.postMessage")
        if c.ok and c.args.get("blocks") and c.args.get("thread_ts") == ts
    )
    return ts, post, prompt_ts


# -- transports and ingress ------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["http", "socket"])
async def test_mention_gets_threaded_reply(monkeypatch: pytest.MonkeyPatch, transport: str) -> None:
    async with slack_bot(monkeypatch, transport=transport) as bot:
        ts, _ = await bot.mention("hello")
        (reply,) = await bot.replies_in(ts)
        assert reply["channel"] == CHANNEL
        assert "offline mode" in reply["text"]
        assert reply["unfurl_links"] in (False, "false", "0", 0)
        # Identity comes from the startup auth.test: no event waits on one before its ack.
        assert len(bot.fake.calls_to("auth.test")) == 1


async def test_web_api_calls_share_one_keep_alive_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Without the adapter's session the SDK opened a connection per call (in production a
    # TLS handshake per reply): five threads cost at least six connections.
    async with slack_bot(monkeypatch) as bot:
        for n in range(5):
            ts, _ = await bot.mention(f"hello {n}")
            await bot.replies_in(ts)
        calls = len(bot.fake.calls)
        assert calls >= 6
        # Concurrent calls (a reply beside the thread's working status, set and cleared in
        # the background) may open a few connections, never more than the pool allows.
        peers = len(bot.fake.api_peers)
        assert peers <= WEB_API_CONNECTIONS < calls, (peers, calls)


@pytest.mark.parametrize("transport", ["http", "socket"])
async def test_online_reply_from_fake_model(
    monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    async with FakeAnthropic() as model:
        model.queue_text("**Hi** there, see [docs](https://example.com/a_b).")
        await _online(monkeypatch, model)
        async with slack_bot(monkeypatch, transport=transport) as bot:
            ts, _ = await bot.mention("hello")
            (reply,) = await bot.replies_in(ts)
            assert reply["text"] == "*Hi* there, see <https://example.com/a_b|docs>."


async def test_bad_signature_is_refused_and_not_processed(monkeypatch: pytest.MonkeyPatch) -> None:
    async with slack_bot(monkeypatch) as bot:
        event = payloads.app_mention(CHANNEL, "U1", "<@UBOT> hi", bot.ts())
        body = json_body(payloads.event_callback(event))
        headers = {**sign("wrong-secret", body), "Content-Type": "application/json"}
        startup_calls = len(bot.fake.calls)  # auth.test
        status, _ = await bot.post_raw(body, headers)
        assert status == 401
        # A valid event after it is processed in full: the refused one left no trace.
        sentinel, _ = await bot.mention("help")
        await bot.replies_in(sentinel)
        await bot.settle(sentinel)
        later = bot.fake.calls[startup_calls:]
        assert [c.args.get("thread_ts") for c in later if c.method == "chat.postMessage"] == [
            sentinel
        ]
        assert db_rows(
            bot.runtime.settings.home, "SELECT COUNT(*) FROM messages WHERE direction = 'in'"
        ) == [(1,)]


async def test_stale_timestamp_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async with slack_bot(monkeypatch) as bot:
        event = payloads.app_mention(CHANNEL, "U1", "<@UBOT> hi", bot.ts())
        body = json_body(payloads.event_callback(event))
        headers = {**sign(SECRET, body, int(time.time()) - 400), "Content-Type": "application/json"}
        startup_calls = len(bot.fake.calls)  # auth.test
        status, _ = await bot.post_raw(body, headers)
        assert status == 401
        assert bot.fake.calls[startup_calls:] == []


async def test_url_verification(monkeypatch: pytest.MonkeyPatch) -> None:
    async with slack_bot(monkeypatch) as bot:
        body = json_body(payloads.url_verification("chal-123"))
        status, text = await bot.post_raw(
            body, {**sign(SECRET, body), "Content-Type": "application/json"}
        )
        assert status == 200 and "chal-123" in text


@pytest.mark.parametrize("transport", ["http", "socket"])
async def test_retries_never_produce_a_second_turn(
    monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    async with slack_bot(monkeypatch, transport=transport) as bot:
        ts, body = await bot.mention("hello", event_id="EvRETRY1")
        await bot.replies_in(ts)
        for attempt in (1, 2):
            assert await bot.send(body, retry_num=attempt) == 200
        await bot.settle(ts)
        assert len(bot.posts(ts)) == 1


async def test_concurrent_duplicates_give_one_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    async with slack_bot(monkeypatch) as bot:
        ts = bot.ts()
        event = payloads.app_mention(CHANNEL, "U1", "<@UBOT> hi", ts)
        body = payloads.event_callback(event, event_id="EvDUP")
        statuses = await asyncio.gather(*(bot.send(body) for _ in range(5)))
        assert statuses == [200] * 5
        await bot.replies_in(ts)
        await bot.settle(ts)
        assert len(bot.posts(ts)) == 1


async def test_mention_and_message_event_for_one_message_give_one_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with slack_bot(monkeypatch) as bot:
        root, _ = await bot.mention("start")
        await bot.replies_in(root)
        ts = bot.ts()
        mention = payloads.app_mention(CHANNEL, "U1", "<@UBOT> again", ts, thread_ts=root)
        message = payloads.thread_message(CHANNEL, "U1", "<@UBOT> again", ts, root)
        await bot.send(payloads.event_callback(message))
        await bot.send(payloads.event_callback(mention))
        await bot.replies_in(root, 2)
        await bot.settle(root)
        assert len(bot.posts(root)) == 2


async def test_restart_does_not_repeat_a_turn(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    async with FakeSlack() as fake:
        async with slack_bot(monkeypatch, fake=fake) as bot:
            ts, body = await bot.mention("hello", event_id="EvRESTART")
            await bot.replies_in(ts)
        async with slack_bot(monkeypatch, fake=fake) as bot:
            assert await bot.send(body, retry_num=1) == 200
            await bot.settle(ts)
            assert len(bot.posts(ts)) == 1


async def test_bot_messages_and_edits_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    async with slack_bot(monkeypatch) as bot:
        root, _ = await bot.mention("start")
        await bot.replies_in(root)
        other_bot = payloads.bot_message(
            CHANNEL, "BOTHER", "<@UBOT> hi from a bot", bot.ts(), thread_ts=root
        )
        own = payloads.thread_message(CHANNEL, "UBOT", "my own words", bot.ts(), root)
        edited = payloads.message_changed(
            CHANNEL, "U1", bot.ts(), "<@UBOT> edited text", "old text", thread_ts=root
        )
        for event in (other_bot, own, edited):
            assert await bot.send(payloads.event_callback(event)) == 200
        await bot.settle(root)
        assert len(bot.posts(root)) == 1


async def test_other_bots_allowed_when_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    async with slack_bot(monkeypatch, env={"RAVEN_SLACK_ALLOW_BOTS": "true"}) as bot:
        ts = bot.ts()
        event = payloads.app_mention(CHANNEL, "U1", "<@UBOT> hi", ts)
        event["bot_id"] = "BOTHER"
        await bot.send(payloads.event_callback(event))
        await bot.replies_in(ts)


async def test_thread_reply_without_mention_in_known_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with slack_bot(monkeypatch) as bot:
        root, _ = await bot.mention("start")
        await bot.replies_in(root)
        # The requester's follow-up; a bystander's gets nothing (test_thread_replies.py).
        reply = payloads.thread_message(CHANNEL, "U1", "follow-up question", bot.ts(), root)
        await bot.send(payloads.event_callback(reply))
        await bot.replies_in(root, 2)
        # A thread the bot is not part of stays quiet.
        stranger_root = bot.ts()
        other = payloads.thread_message(CHANNEL, "U2", "unrelated", bot.ts(), stranger_root)
        await bot.send(payloads.event_callback(other))
        await bot.settle(stranger_root)
        assert bot.posts(stranger_root) == []


async def test_thread_replies_can_require_a_mention(monkeypatch: pytest.MonkeyPatch) -> None:
    async with slack_bot(monkeypatch, env={"RAVEN_SLACK_THREAD_REPLIES": "false"}) as bot:
        root, _ = await bot.mention("start")
        await bot.replies_in(root)
        reply = payloads.thread_message(CHANNEL, "U2", "follow-up", bot.ts(), root)
        await bot.send(payloads.event_callback(reply))
        await bot.settle(root)
        assert len(bot.posts(root)) == 1


async def test_thread_reread_labels_other_authors(monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeAnthropic() as model:
        model.queue_text("first")
        model.queue_text("second")
        await _online(monkeypatch, model)
        async with slack_bot(monkeypatch) as bot:
            root, _ = await bot.mention("start")
            await bot.replies_in(root)
            bot.fake.add_thread_message(CHANNEL, root, "U2", "I think we should use <@U1>'s data")
            bot.fake.add_thread_message(CHANNEL, root, "U1", "agreed, the CSV one")
            await bot.mention("what do you think?", thread_ts=root, user="U1")
            await bot.replies_in(root, 2)
            text = _user_texts(model)[-1]
            assert "bob (U2): I think we should use @alice's data" in text
            assert "alice (U1): agreed, the CSV one" in text
            assert text.rstrip().endswith("what do you think?")
            assert "alice (U1):" in text


async def test_mentions_resolved_to_names(monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeAnthropic() as model:
        model.queue_text("ok")
        await _online(monkeypatch, model)
        async with slack_bot(monkeypatch) as bot:
            ts, _ = await bot.mention("ask <@U2> about it")
            await bot.replies_in(ts)
            assert "ask @bob about it" in _user_texts(model)[-1]
            assert "<@UBOT>" not in _user_texts(model)[-1]


async def test_attachment_downloaded_into_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeAnthropic() as model:
        model.queue_text("got it")
        await _online(monkeypatch, model)
        async with slack_bot(monkeypatch) as bot:
            bot.fake.add_file("F1", "data.csv", b"a,b\n1,2\n", "text/csv")
            ts, _ = await bot.mention("look at this", files=[bot.fake.file_object("F1")])
            await bot.replies_in(ts)
            text = _user_texts(model)[-1]
            assert "data.csv (8 bytes):" in text
            path = Path(text.split("data.csv (8 bytes): ")[1].splitlines()[0].strip())
            assert _read(path) == b"a,b\n1,2\n"
            assert bot.fake.file_downloads == [("F1", 200)]


async def test_oversized_attachment_is_not_downloaded(monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeAnthropic() as model:
        model.queue_text("ok")
        await _online(monkeypatch, model)
        async with slack_bot(monkeypatch, env={"RAVEN_ATTACHMENT_MAX_BYTES": "4"}) as bot:
            bot.fake.add_file("F2", "big.bin", b"0123456789", "application/octet-stream")
            ts, _ = await bot.mention("big file", files=[bot.fake.file_object("F2")])
            await bot.replies_in(ts)
            assert "big.bin: not downloaded" in _user_texts(model)[-1]
            assert bot.fake.file_downloads == []


async def test_direct_message_answered_without_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    async with slack_bot(monkeypatch) as bot:
        event = payloads.message_im("D0DM", "U1", "hello there", bot.ts())
        await bot.send(payloads.event_callback(event))
        await eventually(lambda: bool(bot.fake.posted_texts("D0DM")))
        post = bot.fake.posted_messages("D0DM")[0]
        assert "thread_ts" not in post or post.get("thread_ts") in (None, "")


async def test_direct_messages_can_be_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async with slack_bot(monkeypatch, env={"RAVEN_DM_ENABLED": "false"}) as bot:
        event = payloads.message_im("D0DM", "U1", "hello there", bot.ts())
        await bot.send(payloads.event_callback(event))
        (call,) = await bot.fake.wait_for_call("chat.postEphemeral")
        assert "direct messages" in call.args["text"]
        assert bot.fake.posted_texts("D0DM") == []


async def test_refused_user_gets_ephemeral_explanation(monkeypatch: pytest.MonkeyPatch) -> None:
    async with slack_bot(monkeypatch, env={"RAVEN_ALLOWED_USERS": "U1"}) as bot:
        ts, _ = await bot.mention("let me in", user="U2")
        (call,) = await bot.fake.wait_for_call("chat.postEphemeral")
        assert call.args["user"] == "U2" and "allowed users" in call.args["text"]
        await bot.settle(ts)
        assert bot.posts(ts) == []


async def test_disallowed_channel_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async with slack_bot(monkeypatch, env={"RAVEN_ALLOWED_CHANNELS": "C0OTHER"}) as bot:
        await bot.mention("hi")
        (call,) = await bot.fake.wait_for_call("chat.postEphemeral")
        assert "not enabled in this channel" in call.args["text"]


# -- egress ----------------------------------------------------------------------------------


async def test_rate_limited_post_is_retried_once_delivered(monkeypatch: pytest.MonkeyPatch) -> None:
    async with slack_bot(monkeypatch) as bot:
        bot.fake.fail_next("chat.postMessage", "http429", retry_after=0)
        ts, _ = await bot.mention("hello")
        (reply,) = await bot.replies_in(ts)
        statuses = [c.status for c in bot.fake.calls_to("chat.postMessage")]
        assert statuses == [429, 200]
        assert "offline mode" in reply["text"]


async def test_ok_false_is_an_error_recorded_not_silent(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    async with slack_bot(monkeypatch) as bot:
        bot.fake.fail_next("chat.postMessage", "ok_false", error="channel_not_found")
        ts, _ = await bot.mention("hello")
        await bot.fake.wait_for_call("chat.postMessage")
        home = bot.runtime.settings.home
        await eventually(
            lambda: (
                db_rows(home, "SELECT delivery FROM messages WHERE direction = 'out'")
                == [("failed",)]
            )
        )
        # Recorded first, then logged: the log line may come a loop step after the commit.
        await eventually(lambda: any("channel_not_found" in r.getMessage() for r in caplog.records))
        await bot.settle(ts)
        assert bot.posts(ts) == []
        # A permanent refusal is not retried: `status` lists it, with nothing being retried.
        await bot.mention("status", thread_ts=ts)
        (status,) = await bot.replies_in(ts)
        assert "1 message(s) here could not be delivered;" in status["text"]
        assert len(bot.fake.calls_to("chat.postMessage")) == 2


async def test_long_reply_split_without_breaking_code(monkeypatch: pytest.MonkeyPatch) -> None:
    code = "```python\n" + "\n".join(f"x_{i} = {i}" for i in range(40)) + "\n```"
    long_text = "\n\n".join(["word " * 150] * 12 + [code] + ["tail " * 100])
    async with FakeAnthropic() as model:
        model.queue_text(long_text)
        await _online(monkeypatch, model)
        async with slack_bot(monkeypatch) as bot:
            ts, _ = await bot.mention("write a lot")
            await eventually(lambda: len(bot.posts(ts)) >= 3)
            await bot.settle(ts)
            parts = [p["text"] for p in bot.posts(ts)]
            assert all(len(p) <= 3500 for p in parts)
            assert sum(p.count("```") for p in parts) % 2 == 0
            assert all(p.count("```") % 2 == 0 for p in parts)
            assert "".join(parts).count("x_39 = 39") == 1
            # One turn, one reply record (its parts carry the same idempotency key).
            keys = {
                json.dumps(p["metadata"]) and p["metadata"]["event_payload"]["key"]
                for p in bot.posts(ts)
            }
            assert len(keys) == 1


async def test_model_output_cannot_ping_everyone(monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeAnthropic() as model:
        model.queue_text("Hey <!channel> and <!here|here> and @everyone, ping <!subteam^S1|@devs>")
        await _online(monkeypatch, model)
        async with slack_bot(monkeypatch) as bot:
            ts, _ = await bot.mention("shout")
            (reply,) = await bot.replies_in(ts)
            text = reply["text"]
            assert "<!" not in text
            assert "@everyone" not in text
            assert "channel" in text


async def test_redelivery_after_crash_does_not_post_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeSlack() as fake:
        async with slack_bot(monkeypatch, fake=fake) as bot:
            ts, _ = await bot.mention("hello")
            await bot.replies_in(ts)
            home = bot.runtime.settings.home
        # Simulate a crash after Slack accepted the post but before it was marked sent.
        with sqlite3.connect(home / "raven.db") as conn:
            conn.execute("UPDATE messages SET delivery = 'pending' WHERE direction = 'out'")
        async with slack_bot(monkeypatch, fake=fake) as bot:
            # Recovery resolves the pending record (found in the thread, so not re-posted).
            await eventually(
                lambda: (
                    db_rows(home, "SELECT delivery FROM messages WHERE direction = 'out'")
                    == [("sent",)]
                )
            )
            await bot.settle(ts)
            assert len(bot.posts(ts)) == 1


async def test_redelivery_in_a_dm_after_crash_does_not_post_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Regression: a DM has no thread, and the check for an earlier post looked nowhere.
    async with FakeSlack() as fake:
        async with slack_bot(monkeypatch, fake=fake) as bot:
            event = payloads.message_im("D0DM", "U1", "hello there", bot.ts())
            await bot.send(payloads.event_callback(event))
            await eventually(lambda: bool(bot.fake.posted_texts("D0DM")))
            home = bot.runtime.settings.home
        with sqlite3.connect(home / "raven.db") as conn:
            conn.execute("UPDATE messages SET delivery = 'pending' WHERE direction = 'out'")
        async with slack_bot(monkeypatch, fake=fake) as bot:
            await eventually(
                lambda: (
                    db_rows(home, "SELECT delivery FROM messages WHERE direction = 'out'")
                    == [("sent",)]
                )
            )
            assert len(bot.fake.posted_texts("D0DM")) == 1


async def test_pending_reply_is_delivered_after_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeSlack() as fake:
        async with slack_bot(monkeypatch, fake=fake) as bot:
            ts, _ = await bot.mention("hello")
            await bot.replies_in(ts)
            home = bot.runtime.settings.home
        with sqlite3.connect(home / "raven.db") as conn:
            conn.execute("UPDATE messages SET delivery = 'pending' WHERE direction = 'out'")
        # Slack lost it (e.g. the crash came before the call): the thread has no such post.
        fake._messages.clear()
        async with slack_bot(monkeypatch, fake=fake) as bot:
            await eventually(lambda: len(bot.posts(ts)) == 2)


# -- control words, prompts and graphs -------------------------------------------------------


async def test_help_and_status(monkeypatch: pytest.MonkeyPatch) -> None:
    async with slack_bot(monkeypatch) as bot:
        ts, _ = await bot.mention("help")
        (reply,) = await bot.replies_in(ts)
        assert "`stop`" in reply["text"]
        await bot.mention("status", thread_ts=ts)
        replies = await bot.replies_in(ts, 2)
        assert "*Status*" in replies[-1]["text"]


async def test_approval_by_requester_starts_the_graph(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, ECHO_AGENTS)
    async with slack_bot(monkeypatch) as bot:
        thread, post, prompt_ts = await _plan(bot, "a: echo: hello world\nconfirm")
        labels = [b["text"]["text"] for b in buttons(post)]
        assert labels == ["Approve", "Deny"]
        await _click(bot, post, 0, "U1", thread, prompt_ts)
        update = (await bot.fake.wait_for_call("chat.update"))[0]
        assert update.args["ts"] == prompt_ts
        blocks = update.args["blocks"]
        blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
        assert not any(b["type"] == "actions" for b in blocks)
        assert "answered by alice" in json.dumps(blocks)
        await eventually(
            lambda: any("completed* — Explicit plan" in p["text"] for p in bot.posts(thread))
        )


async def test_a_command_runs_as_typed_not_as_slack_escaped_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Slack sends `&`, `<` and `>` as entities and auto-links what looks like a URL: the
    command approved and run is the one the person typed."""
    typed = 'echo "a & b <c>" https://example.com | tr a-z A-Z'
    sent = 'echo "a &amp; b &lt;c&gt;" <https://example.com> | tr a-z A-Z'
    async with slack_bot(monkeypatch) as bot:
        thread, post, prompt_ts = await _plan(bot, f"s1: shell: {sent}")
        (pending,) = await bot.runtime.broker.pending()
        assert pending.payload["command"] == typed
        await _click(bot, post, 0, "U1", thread, prompt_ts)
        await eventually(
            lambda: any(
                "A & B <C> HTTPS://EXAMPLE.COM" in html.unescape(p["text"])
                for p in bot.posts(thread)
            )
        )


def test_slack_text_becomes_what_its_author_typed() -> None:
    names = {"U1": "alice"}
    assert plain_text("hi <@U1> and <@U9|bob>", names) == "hi @alice and @U9"
    assert plain_text("see <#C1|dev> <!here> <!subteam^S1|@ops>", names) == "see #dev @here @ops"
    assert plain_text("<https://x.io|x.io> <mailto:a@b.io|a@b.io> <http://y>", names) == (
        "x.io a@b.io http://y"
    )
    # One pass: an escaped mention the author typed stays literal text.
    assert plain_text("a &lt;@U1&gt; &amp;lt; b", names) == "a <@U1> &lt; b"


async def test_stranger_click_refused_ephemerally(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, ECHO_AGENTS)
    async with slack_bot(monkeypatch) as bot:
        thread, post, prompt_ts = await _plan(bot, "a: echo: hi\nconfirm")
        await _click(bot, post, 0, "U2", thread, prompt_ts)
        (call,) = await bot.fake.wait_for_call("chat.postEphemeral")
        assert call.args["user"] == "U2" and "can answer" in call.args["text"]
        await bot.settle(thread)
        assert len(await bot.runtime.broker.pending()) == 1
        assert bot.fake.calls_to("chat.update") == []


async def test_approver_may_answer(monkeypatch: pytest.MonkeyPatch, isolated_env: Path) -> None:
    write_agents(isolated_env, ECHO_AGENTS)
    async with slack_bot(monkeypatch, env={"RAVEN_APPROVERS": "U2"}) as bot:
        thread, post, prompt_ts = await _plan(bot, "a: echo: hi\nconfirm")
        await _click(bot, post, 1, "U2", thread, prompt_ts)
        await eventually(
            lambda: any("not approved (denied by bob)" in p["text"] for p in bot.posts(thread))
        )


async def test_second_click_is_a_friendly_no_op(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, ECHO_AGENTS)
    async with slack_bot(monkeypatch) as bot:
        thread, post, prompt_ts = await _plan(bot, "a: echo: hi\nconfirm")
        await _click(bot, post, 0, "U1", thread, prompt_ts)
        await bot.fake.wait_for_call("chat.update")
        await _click(bot, post, 1, "U1", thread, prompt_ts)
        (call,) = await bot.fake.wait_for_call("chat.postEphemeral")
        assert "Already answered" in call.args["text"]
        # Both clicks were handled after their acks: wait for that work, then count.
        await bot.settle(thread)
        rows = db_rows(bot.runtime.settings.home, "SELECT COUNT(*) FROM graph_runs")
        assert rows == [(1,)]


async def test_click_after_expiry_says_expired_and_denies(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, ECHO_AGENTS)
    async with slack_bot(monkeypatch, env={"RAVEN_PROMPT_EXPIRY_SECONDS": "0.5"}) as bot:
        thread, post, prompt_ts = await _plan(bot, "a: echo: hi\nconfirm")
        (prompt,) = await bot.runtime.broker.pending()
        await eventually(lambda: time.time() > prompt.expires_at)  # its deadline has passed
        await _click(bot, post, 0, "U1", thread, prompt_ts)
        (call,) = await bot.fake.wait_for_call("chat.postEphemeral")
        assert "expired" in call.args["text"].lower()
        await eventually(
            lambda: any("not approved (expired" in p["text"] for p in bot.posts(thread))
        )
        await bot.settle(thread)
        assert db_rows(bot.runtime.settings.home, "SELECT COUNT(*) FROM graph_runs") == [(0,)]


async def test_click_after_restart_still_works(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, ECHO_AGENTS)
    async with FakeSlack() as fake:
        async with slack_bot(monkeypatch, fake=fake) as bot:
            thread, post, prompt_ts = await _plan(bot, "a: echo: hi\nconfirm")
        async with slack_bot(monkeypatch, fake=fake) as bot:
            await _click(bot, post, 0, "U1", thread, prompt_ts)
            await eventually(
                lambda: any("completed* — Explicit plan" in p["text"] for p in bot.posts(thread))
            )


async def test_typed_answer_in_thread(monkeypatch: pytest.MonkeyPatch, isolated_env: Path) -> None:
    write_agents(isolated_env, ECHO_AGENTS)
    async with slack_bot(monkeypatch) as bot:
        thread, _, prompt_ts = await _plan(bot, "a: echo: hi\nconfirm")
        reply = payloads.thread_message(CHANNEL, "U1", "1", bot.ts(), thread)
        await bot.send(payloads.event_callback(reply))
        update = (await bot.fake.wait_for_call("chat.update"))[0]
        assert update.args["ts"] == prompt_ts
        await eventually(
            lambda: any("completed* — Explicit plan" in p["text"] for p in bot.posts(thread))
        )


async def test_free_text_answer_through_modal(monkeypatch: pytest.MonkeyPatch) -> None:
    async with slack_bot(monkeypatch) as bot:
        root, _ = await bot.mention("start")
        await bot.replies_in(root)
        conv = (await bot.runtime.conversation_log.history(f"slack:T1:{CHANNEL}:{root}", limit=1))[
            0
        ].conversation_id
        from core.ids import ConversationRef

        prompt = await bot.runtime.broker.create(
            conversation=ConversationRef.parse(conv),
            kind="free_text",
            question="Which dataset?",
            requester="U1",
            purpose="clarification",
        )
        post = _prompt_post(bot, root)
        (button,) = buttons(post)
        assert button["text"]["text"] == "Answer…"
        await bot.send(
            payloads.block_actions(
                button["action_id"],
                button["value"],
                "U1",
                CHANNEL,
                prompt.message_id or "",
                thread_ts=root,
                response_url=bot.fake.response_url("r2"),
                trigger_id="trig-1",
            ),
            form=True,
        )
        (opened,) = await bot.fake.wait_for_call("views.open")
        view = opened.args["view"]
        view = json.loads(view) if isinstance(view, str) else view
        submission = payloads.view_submission(
            view["callback_id"],
            view["private_metadata"],
            "U1",
            {"answer": {"text": "the public one"}},
        )
        assert await bot.send(submission, form=True) == 200
        decided = await asyncio.wait_for(bot.runtime.broker.wait(prompt.id), 5)
        assert decided.answer == "the public one" and decided.answered_by == "U1"


async def test_stop_cancels_a_running_graph(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, ECHO_AGENTS)
    async with slack_bot(monkeypatch) as bot:
        ts, _ = await bot.mention("s: sleeper: wait a minute")
        home = bot.runtime.settings.home
        await eventually(
            lambda: (
                db_rows(home, "SELECT state FROM graph_nodes WHERE node_id = 's'") == [("running",)]
            )
        )
        stop = payloads.thread_message(CHANNEL, "U1", "<@UBOT> stop", bot.ts(), ts)
        await bot.send(
            payloads.event_callback(
                payloads.app_mention(CHANNEL, "U1", "<@UBOT> stop", stop["ts"], thread_ts=ts)
            )
        )
        await eventually(
            lambda: (
                db_rows(home, "SELECT state FROM graph_nodes WHERE node_id = 's'")
                == [("cancelled",)]
            )
        )
        await eventually(lambda: any("Stopped" in p["text"] for p in bot.posts(ts)))


async def test_background_run_status_message_is_edited_in_place(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, ECHO_AGENTS)
    async with slack_bot(monkeypatch) as bot:
        ts, _ = await bot.mention("a: echo: one\nb: echo: two [after a]")
        await eventually(
            lambda: any("completed* — Explicit plan" in p["text"] for p in bot.posts(ts))
        )
        status_posts = [p for p in bot.posts(ts) if "settled" in p["text"]]
        assert len(status_posts) == 1
        assert bot.fake.calls_to("chat.update")


# -- doctor ----------------------------------------------------------------------------------


async def test_doctor_checks_token_and_scopes() -> None:
    async with FakeSlack(scopes=tuple(required_scopes())) as fake:
        ok, detail = await check_slack(BOT_TOKEN, fake.api_url)
        assert ok, detail
        assert "Fake Team" in detail
    async with FakeSlack(scopes=("chat:write",)) as fake:
        ok, detail = await check_slack(BOT_TOKEN, fake.api_url)
        assert not ok and "missing scopes" in detail and "app_mentions:read" in detail
    async with FakeSlack() as fake:
        ok, detail = await check_slack("not-a-token", fake.api_url)
        assert not ok and "SLACK_BOT_TOKEN" in detail


# -- races, acks and pings (issue #7: 3, 4, 10) ----------------------------------------------


def _hasbuttons(blocks: Any) -> bool:
    blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
    return any(b["type"] == "actions" for b in blocks or [])


def _completed(bot: SlackBot, thread: str) -> bool:
    return any("completed* — Explicit plan" in p["text"] for p in bot.posts(thread))


def _with_blocks(args: dict[str, Any]) -> bool:
    return bool(args.get("blocks"))


async def test_click_before_the_prompt_post_returns_closes_the_clicked_message(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, ECHO_AGENTS)
    async with slack_bot(monkeypatch) as bot:
        # The prompt is posted, but the bot does not see Slack's reply (its ts) yet.
        held = bot.fake.hold("chat.postMessage", when=_with_blocks)
        thread, _ = await bot.mention("a: echo: hello\nconfirm")
        (call,) = await held.wait_held()
        prompt_ts = str(call.response["ts"])
        (prompt,) = await bot.runtime.broker.pending()
        assert prompt.message_id is None

        await _click(bot, call.args, 0, "U1", thread, prompt_ts)

        # Closed through the click's own message reference, while the post is still held.
        update = (await bot.fake.wait_for_call("chat.update"))[0]
        assert not held.released
        assert update.args["ts"] == prompt_ts and update.args["channel"] == CHANNEL
        assert not _hasbuttons(update.args["blocks"])
        assert "answered by alice" in json.dumps(update.args["blocks"])
        held.release()
        await eventually(lambda: _completed(bot, thread))
        await bot.settle(thread)
        (message,) = [m for m in bot.fake.thread(CHANNEL, thread) if m["ts"] == prompt_ts]
        assert not _hasbuttons(message["blocks"])
        stored = await bot.runtime.broker.get(prompt.id)
        assert stored is not None and stored.message_id == prompt_ts


async def test_typed_answer_before_the_prompt_post_returns_still_closes_it(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    write_agents(isolated_env, ECHO_AGENTS)
    async with slack_bot(monkeypatch) as bot:
        held = bot.fake.hold("chat.postMessage", when=_with_blocks)
        thread, _ = await bot.mention("a: echo: hello\nconfirm")
        (call,) = await held.wait_held()
        prompt_ts = str(call.response["ts"])
        # A typed answer carries no message reference: nobody can close the message yet.
        reply = payloads.thread_message(CHANNEL, "U1", "1", bot.ts(), thread)
        assert await bot.send(payloads.event_callback(reply)) == 200
        home = bot.runtime.settings.home
        # Decided and fully handled (the close attempt comes before the handler) ...
        await eventually(
            lambda: db_rows(home, "SELECT state, handled FROM prompts") == [("answered", 1)]
        )
        # ... yet nothing could close a message whose id the bot has not seen.
        assert [c for c in bot.fake.calls_to("chat.update") if c.args["ts"] == prompt_ts] == []

        held.release()  # recording the id now must notice the decision and close the message

        await eventually(
            lambda: any(c.args["ts"] == prompt_ts for c in bot.fake.calls_to("chat.update"))
        )
        await eventually(lambda: _completed(bot, thread))
        await bot.settle(thread)
        (message,) = [m for m in bot.fake.thread(CHANNEL, thread) if m["ts"] == prompt_ts]
        assert not _hasbuttons(message["blocks"])


@pytest.mark.parametrize("transport", ["http", "socket"])
async def test_click_is_acked_before_slack_answers_the_posts_it_causes(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path, transport: str
) -> None:
    write_agents(isolated_env, ECHO_AGENTS)
    async with slack_bot(monkeypatch, transport=transport) as bot:
        thread, post, prompt_ts = await _plan(bot, "a: echo: hi\nconfirm")
        # Slack stops answering the bot's own posts (as with a 429 and a long Retry-After).
        holds = [bot.fake.hold(m) for m in ("chat.update", "chat.postMessage")]
        click = asyncio.create_task(_click(bot, post, 0, "U1", thread, prompt_ts))
        (update,) = await holds[0].wait_held()  # the close reached Slack; its reply waits
        assert update.args["ts"] == prompt_ts
        # Ordering: the ack arrives while the close is still unanswered (guard, not timing).
        done, _ = await asyncio.wait({click}, timeout=10)
        assert click in done and not holds[0].released
        await click
        for hold in holds:
            hold.release()
        await eventually(lambda: _completed(bot, thread))


@pytest.mark.parametrize("transport", ["http", "socket"])
async def test_control_word_is_acked_before_its_reply_is_answered(
    monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    async with slack_bot(monkeypatch, transport=transport) as bot:
        held = bot.fake.hold("chat.postMessage")
        ts = bot.ts()
        event = payloads.app_mention(CHANNEL, "U1", "<@UBOT> help", ts)
        send = asyncio.create_task(bot.send(payloads.event_callback(event)))
        (reply,) = await held.wait_held()
        assert reply.args["thread_ts"] == ts and "`stop`" in reply.args["text"]
        done, _ = await asyncio.wait({send}, timeout=10)
        assert send in done and not held.released
        assert await send == 200
        held.release()
        await bot.settle(ts)


@pytest.mark.parametrize("transport", ["http", "socket"])
async def test_modal_submission_is_acked_before_the_answer_is_handled(
    monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    async with slack_bot(monkeypatch, transport=transport) as bot:
        root, _ = await bot.mention("start")
        await bot.replies_in(root)
        prompt = await bot.runtime.broker.create(
            conversation=bot.conversation(root),
            kind="free_text",
            question="Which dataset?",
            requester="U1",
            purpose="clarification",
        )
        held = bot.fake.hold("chat.update")
        meta = json.dumps({"prompt_id": prompt.id, "nonce": prompt.nonce})
        submission = payloads.view_submission(
            "raven_prompt_answer", meta, "U1", {"answer": {"text": "the public one"}}
        )
        send = asyncio.create_task(bot.send(submission, form=True))
        (update,) = await held.wait_held()  # closing the prompt waits on Slack
        assert update.args["ts"] == prompt.message_id
        done, _ = await asyncio.wait({send}, timeout=10)
        assert send in done and not held.released
        held.release()
        decided = await asyncio.wait_for(bot.runtime.broker.wait(prompt.id), 5)
        assert decided.answer == "the public one"
        await bot.settle(root)


async def test_blank_modal_answer_is_refused_in_the_modal(monkeypatch: pytest.MonkeyPatch) -> None:
    async with slack_bot(monkeypatch) as bot:
        root, _ = await bot.mention("start")
        await bot.replies_in(root)
        prompt = await bot.runtime.broker.create(
            conversation=bot.conversation(root),
            kind="free_text",
            question="Which dataset?",
            requester="U1",
            purpose="clarification",
        )
        meta = json.dumps({"prompt_id": prompt.id, "nonce": prompt.nonce})
        body = form_body(
            payloads.view_submission("raven_prompt_answer", meta, "U1", {"answer": {"text": " "}})
        )
        headers = {**sign(SECRET, body), "Content-Type": "application/x-www-form-urlencoded"}
        status, text = await bot.post_raw(body, headers)
        assert status == 200 and json.loads(text)["response_action"] == "errors"
        await bot.settle(root)
        stored = await bot.runtime.broker.get(prompt.id)
        assert stored is not None and stored.state == "pending"


PINGS = "Ship it? <!channel> <!here> @everyone <!subteam^S123> <!here|here> @here @channel"
# A live ping: a "<!…>" special other than a date, or a bare @everyone/@here/@channel.
_LIVE_PING = re.compile(r"<!(?!date\^)|@(?:everyone|here|channel)", re.IGNORECASE)


def _shown_strings(value: Any, key: str = "text") -> list[str]:
    """Every string Slack would display in these arguments (text, blocks, views)."""
    if isinstance(value, str):
        if key in {"blocks", "view"} and value[:1] in "[{":
            return _shown_strings(json.loads(value), key)
        return [value] if key in {"text", "title"} else []
    if isinstance(value, list):
        return [s for item in value for s in _shown_strings(item, key)]
    if isinstance(value, dict):
        return [s for k, item in value.items() for s in _shown_strings(item, k)]
    return []


def _assert_no_live_ping(args: dict[str, Any]) -> None:
    shown = [s for k in ("text", "blocks", "view") for s in _shown_strings(args.get(k), k)]
    assert shown, f"nothing displayed in {args}"
    live = [s for s in shown if _LIVE_PING.search(s)]
    assert live == [], f"live pings in {live}"


async def test_prompts_never_ping_in_text_blocks_modals_or_notes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with slack_bot(monkeypatch) as bot:
        root, _ = await bot.mention("start")
        await bot.replies_in(root)
        choice = await bot.runtime.broker.create(
            conversation=bot.conversation(root),
            kind="choice",
            question=PINGS,
            requester="U1",
            options=("<!here> go", "@everyone wait"),
            purpose="clarification",
        )
        # show
        post = _prompt_post(bot, root)
        _assert_no_live_ping(post)
        assert "Ship it?" in post["text"] and "channel" in post["text"]
        # close (chat.update)
        await _click(bot, post, 0, "U1", root, choice.message_id or "")
        update = (await bot.fake.wait_for_call("chat.update"))[0]
        _assert_no_live_ping(update.args)
        assert "go" in update.args["text"]
        # ephemeral note quoting the answer ("Already answered by U1: <!here> go.")
        await _click(bot, post, 1, "U1", root, choice.message_id or "")
        (note,) = await bot.fake.wait_for_call("chat.postEphemeral")
        assert "Already answered" in note.args["text"]
        _assert_no_live_ping(note.args)
        # modal (views.open) of a free-text prompt
        free = await bot.runtime.broker.create(
            conversation=bot.conversation(root),
            kind="free_text",
            question=PINGS,
            requester="U1",
            purpose="clarification",
        )
        (button,) = buttons(_prompt_post(bot, root))
        await bot.send(
            payloads.block_actions(
                button["action_id"],
                button["value"],
                "U1",
                CHANNEL,
                free.message_id or "",
                thread_ts=root,
                trigger_id="trig-1",
            ),
            form=True,
        )
        (opened,) = await bot.fake.wait_for_call("views.open")
        _assert_no_live_ping(opened.args)
        await bot.settle(root)
        # and every other call the bot made in this test
        for call in bot.fake.calls:
            if call.method in {"chat.postMessage", "chat.update", "chat.postEphemeral"}:
                _assert_no_live_ping(call.args)


# -- an unreachable Slack (issue #7: 13) -----------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _slack_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith(("bot.", "slack_sdk", "slack_bolt"))]


def _assert_one_line_each(records: list[logging.LogRecord]) -> None:
    assert [r.getMessage() for r in records if r.exc_info or r.exc_text] == []
    assert not any("Traceback" in r.getMessage() for r in records)


@pytest.mark.parametrize("transport", ["http", "socket"])
async def test_unreachable_slack_at_startup_logs_one_line_per_retry(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, transport: str
) -> None:
    caplog.set_level(logging.INFO)
    api_url = f"http://127.0.0.1:{_closed_port()}/api/"
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("RAVEN_SLACK_API_URL", api_url)
    monkeypatch.setenv("RAVEN_SLACK_HTTP_HOST", "127.0.0.1")
    monkeypatch.setenv("RAVEN_SLACK_HTTP_PORT", "0")
    if transport == "socket":
        monkeypatch.setenv("SLACK_APP_TOKEN", APP_TOKEN)
    else:
        monkeypatch.setenv("SLACK_SIGNING_SECRET", SECRET)
    settings = load_settings()
    runtime = await build_runtime(settings, [functools.partial(slack_adapter, settings)])
    adapter = runtime.adapters[0]
    assert isinstance(adapter, SlackAdapter)
    # Short backoff, so the test sees several retries (the default starts at 1 s).
    adapter.config = replace(adapter.config, connect_retry_initial=0.01, connect_retry_max=0.01)
    task = asyncio.create_task(serve(runtime))

    def retries() -> list[logging.LogRecord]:
        return [r for r in _slack_records(caplog) if "retrying at" in r.getMessage()]

    await eventually(lambda: len(retries()) >= 2)
    await adapter.close()
    assert await asyncio.wait_for(task, 30) == 0
    assert not adapter.ready.is_set()
    for record in retries():
        assert record.levelno == logging.WARNING
        assert api_url in record.getMessage()
        assert re.search(r"retrying at \d\d:\d\d:\d\d", record.getMessage())
    _assert_one_line_each(_slack_records(caplog))


async def test_socket_mode_losing_slack_while_running_logs_one_line_per_retry(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.INFO)
    fake = await FakeSlack().start()
    config = SlackConfig(
        bot_token=BOT_TOKEN,
        app_token=APP_TOKEN,
        api_url=fake.api_url,
        socket_ping_interval=0.05,
    )
    adapter = SlackAdapter(
        config,
        policy=AccessPolicy(),
        workspace=lambda _: tmp_path,
        event_log=tmp_path / "slack-events.db",
    )
    task = asyncio.create_task(adapter.serve(_NO_INGRESS))
    try:
        async with asyncio.timeout(10):
            await adapter.ready.wait()
        await fake.wait_connected()
        await fake.stop()  # Slack goes away: the socket drops and reconnecting fails

        def failures() -> list[logging.LogRecord]:
            return [r for r in _slack_records(caplog) if "Socket Mode cannot" in r.getMessage()]

        await eventually(lambda: len(failures()) >= 2)
        for record in failures():
            assert record.levelno == logging.WARNING
            assert re.search(r"retrying at \d\d:\d\d:\d\d \(in 0.05s\)", record.getMessage())
        _assert_one_line_each(_slack_records(caplog))
    finally:
        await adapter.close()
        await asyncio.wait_for(task, 30)


class _NoInbox:
    """An inbox that receives nothing (the adapter only has to connect)."""

    async def accept(self, msg: Any) -> None:
        raise AssertionError("no message expected")

    async def receive(self, msg: Any) -> bool:
        raise AssertionError("no message expected")

    async def knows(self, conv: Any) -> bool:
        return False

    async def quiesce(self, conv: Any) -> None:
        return None

    async def claim(self, platform: str, event_id: str) -> bool:
        return True

    async def recent(self, platform: str, since: float) -> list[Any]:
        return []  # nothing to read back


class _NoPrompts:
    """A broker nobody answers (the adapter only has to connect)."""

    async def answer(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no prompt expected")

    async def get(self, prompt_id: str) -> None:
        return None


_NO_INGRESS = Ingress(_NoInbox(), _NoPrompts())


async def test_rejected_token_stops_the_adapter_with_a_clear_error(tmp_path: Path) -> None:
    async with FakeSlack() as fake:
        fake.add_method("auth.test", lambda _: {"ok": False, "error": "invalid_auth"})
        config = SlackConfig(bot_token=BOT_TOKEN, signing_secret=SECRET, api_url=fake.api_url)
        adapter = SlackAdapter(
            config,
            policy=AccessPolicy(),
            workspace=lambda _: tmp_path,
            event_log=tmp_path / "slack-events.db",
        )
        with pytest.raises(RuntimeError, match="rejected SLACK_BOT_TOKEN \\(invalid_auth\\)"):
            await asyncio.wait_for(adapter.serve(_NO_INGRESS), 10)
        assert len(fake.calls_to("auth.test")) == 1


async def test_stop_right_after_a_mention_leaves_the_bot_working(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The scenario: `stop` straight after a message (cancelling the turn wherever it
    # is, a write included), then more mentions, in that thread and elsewhere, all answered.
    async with slack_bot(monkeypatch) as bot:
        for _ in range(3):
            ts, _ = await bot.mention("hello")
            await bot.mention("stop", thread_ts=ts)
            await eventually(lambda ts=ts: any("Stopped" in p["text"] for p in bot.posts(ts)))
            await bot.mention("are you still there?", thread_ts=ts)
            await eventually(
                lambda ts=ts: any("offline mode" in p["text"] for p in bot.posts(ts)[-1:])
            )
        fresh, _ = await bot.mention("a new thread")
        (reply,) = await bot.replies_in(fresh)
        assert "offline mode" in reply["text"]
        home = bot.runtime.settings.home
        assert db_rows(home, "SELECT COUNT(*) FROM turns WHERE status = 'running'") == [(0,)]


async def test_thread_replies_sent_while_the_bot_was_down_are_read_back_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FakeSlack() as fake:
        async with slack_bot(monkeypatch, fake=fake) as bot:
            root, _ = await bot.mention("hello")
            await bot.replies_in(root)
        # Down: a reply in the bot's thread that no event ever announced.
        missed = fake.add_thread_message(CHANNEL, root, "U1", "help")
        async with slack_bot(monkeypatch, fake=fake) as bot:
            replies = await bot.replies_in(root, 2)
            assert "`stop`" in replies[-1]["text"]
            # The event arriving late as well (a Slack retry) changes nothing.
            late = payloads.thread_message(CHANNEL, "U1", "help", missed, root)
            await bot.send(payloads.event_callback(late))
            await bot.settle(root)
            assert len(bot.posts(root)) == 2


async def test_mentions_and_dms_sent_while_the_bot_was_down_are_read_back_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Slack retries an event for minutes, not through an outage: without reading the
    # channels back, a mention or a DM sent while the bot was down was never answered.
    async with FakeSlack() as fake:
        async with slack_bot(monkeypatch, fake=fake) as bot:
            root, _ = await bot.mention("hello")
            await bot.replies_in(root)
            await bot.send(
                payloads.event_callback(payloads.message_im("D0DM", "U1", "hi", bot.ts()))
            )
            await eventually(lambda: len(fake.posted_texts("D0DM")) == 1)
        # Down: a new mention, a channel message not meant for the bot, and a DM.
        missed = fake.add_channel_message(CHANNEL, "U2", "<@UBOT> help")
        fake.add_channel_message(CHANNEL, "U2", "lunch anyone?")
        fake.add_channel_message("D0DM", "U1", "help")
        async with slack_bot(monkeypatch, fake=fake) as bot:
            (reply,) = await bot.replies_in(missed)  # answered in a thread of its own
            assert "`stop`" in reply["text"]
            await eventually(lambda: len(fake.posted_texts("D0DM")) == 2)
            # The mention's event arriving late as well (a Slack retry) changes nothing.
            late = payloads.app_mention(CHANNEL, "U2", "<@UBOT> help", missed)
            await bot.send(payloads.event_callback(late))
            await bot.settle(missed)
            assert len(bot.posts(missed)) == 1
            assert len(fake.posted_texts("D0DM")) == 2
            # Nothing else was taken for a message to the bot.
            assert {p.get("thread_ts") for p in bot.posts() if p["channel"] == CHANNEL} == {
                root,
                missed,
            }


def _firing(conv: ConversationRef, key: str) -> TurnRequested:
    """A scheduled task's firing, published the way the schedules feature does."""
    return TurnRequested(
        conversation=conv, text="check the queue", key=key, author_id="U1", author_name="alice"
    )


async def test_a_mention_sent_while_the_bot_was_down_is_answered_after_a_firing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 38: a firing is logged under its key (`task:t_…`), not a Slack ts; catch-up
    # once failed on it (`could not convert string to float`) and read nothing back.
    caplog.set_level(logging.WARNING, "bot.slack.catch_up")
    async with FakeSlack() as fake:
        async with slack_bot(monkeypatch, fake=fake) as bot:
            root, _ = await bot.mention("check the queue every morning")
            await bot.replies_in(root)
            conv = bot.conversation(root)
            await bot.runtime.bus.publish(_firing(conv, "task:t_1:2026-01-05T09:00:00Z"))
            # A `post: channel` firing runs in a real thread its headline starts.
            channel = bot.adapter.channel_level(conv)
            assert channel is not None
            headline = await bot.runtime.service.notify(
                channel, "⏰ Scheduled task", idempotency_key="task:t_2:2026-01-05T09:00:00Z:thread"
            )
            assert headline is not None
            own = replace(conv, thread=headline)
            await bot.runtime.bus.publish(_firing(own, "task:t_2:2026-01-05T09:00:00Z"))
            await bot.replies_in(root, 2)
            await bot.replies_in(headline)
            await bot.settle(root)
            await bot.settle(headline)
        # Down: a new mention, and replies in the task's thread and in the firing's own one.
        missed = fake.add_channel_message(CHANNEL, "U2", "<@UBOT> help")
        fake.add_thread_message(CHANNEL, root, "U1", "help")
        fake.add_thread_message(CHANNEL, headline, "U1", "help")
        async with slack_bot(monkeypatch, fake=fake) as bot:
            (reply,) = await bot.replies_in(missed)
            assert "`stop`" in reply["text"]
            assert "`stop`" in (await bot.replies_in(root, 3))[-1]["text"]
            assert "`stop`" in (await bot.replies_in(headline, 2))[-1]["text"]
            await bot.adapter.idle()
        assert [r.getMessage() for r in caplog.records if r.name == "bot.slack.catch_up"] == []


async def test_a_conversation_that_cannot_be_read_back_is_skipped_with_one_log_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # One conversation failing (here the network drops on its reads) once stopped the whole
    # catch-up: every other conversation's downtime went unanswered too.
    caplog.set_level(logging.WARNING, "bot.slack.catch_up")
    async with FakeSlack() as fake:
        async with slack_bot(monkeypatch, fake=fake) as bot:
            await bot.send(
                payloads.event_callback(payloads.message_im("D0DM", "U1", "hi", bot.ts()))
            )
            await eventually(lambda: len(fake.posted_texts("D0DM")) == 1)
            root, _ = await bot.mention("hello")
            await bot.replies_in(root)
        # Down: a DM and a mention; reading the DM back fails.
        fake.add_channel_message("D0DM", "U1", "help")
        missed = fake.add_channel_message(CHANNEL, "U2", "<@UBOT> help")
        fake.drop_reads("D0DM")
        async with slack_bot(monkeypatch, fake=fake) as bot:
            (reply,) = await bot.replies_in(missed)
            assert "`stop`" in reply["text"]
            await bot.adapter.idle()
            assert len(fake.posted_texts("D0DM")) == 1
        (line,) = [r.getMessage() for r in caplog.records if r.name == "bot.slack.catch_up"]
        assert "reading back channel D0DM failed, skipped" in line
