"""The real discord.py adapter against the loopback fake Discord, through the assembled bot:
mentions, threads, DMs, dedup across reconnects, egress rules and access policy."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from core.ids import ConversationRef
from host.runtime.events import TurnRequested
from tests.discord_harness import ALICE, BOB, GENERAL, DiscordBot, discord_bot, shared_fake
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.discord import payloads

BOT_SENDS = ("POST", "/channels/{channel_id}/messages")
RANDOM = "700000000000000002"  # the fake guild's second channel


async def _online(monkeypatch: pytest.MonkeyPatch, fake: FakeAnthropic) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
    monkeypatch.setenv("RAVEN_MODEL_MAX_RETRIES", "0")


def _user_texts(model: FakeAnthropic) -> list[str]:
    texts = []
    for request in model.requests:
        content = request["json"]["messages"][-1]["content"]
        texts.append(
            content
            if isinstance(content, str)
            else "\n".join(b.get("text", "") for b in content if b.get("type") == "text")
        )
    return texts


def _sends(bot: DiscordBot, channel: str | None = None) -> list[dict[str, Any]]:
    calls = bot.fake.requests_to(*BOT_SENDS)
    return [
        c.json or {}
        for c in calls
        if c.status == 200 and (channel is None or c.path.split("/")[2] == channel)
    ]


async def _turn(bot: DiscordBot, text: str, **kwargs: Any) -> str:
    """Mention the bot in #general; return the thread id once the turn has run."""
    root = await bot.mention(text, **kwargs)
    await bot.settle(root["id"])
    return str(root["id"])


# -- threads, DMs and which messages count -------------------------------------------------


async def test_a_mention_gets_a_threaded_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    async with discord_bot(monkeypatch) as bot:
        thread = await _turn(bot, "hello")
        assert bot.fake.threads[thread]["parent_id"] == GENERAL
        assert bot.fake.threads[thread]["name"] == "hello"
        (reply,) = bot.texts(thread)
        assert "offline" in reply.lower()
        assert bot.texts(GENERAL) == []  # nothing in the channel itself


async def test_inline_mode_replies_in_the_channel(monkeypatch: pytest.MonkeyPatch) -> None:
    async with discord_bot(monkeypatch, env={"RAVEN_DISCORD_THREADS": "false"}) as bot:
        await bot.mention("hello")
        await bot.wait_texts(GENERAL)
        await bot.settle("main")
        assert bot.fake.threads == {}
        assert len(bot.texts(GENERAL)) == 1


async def test_a_dm_is_answered_in_the_dm(monkeypatch: pytest.MonkeyPatch) -> None:
    async with discord_bot(monkeypatch) as bot:
        dm = bot.fake.dm_channel_for(ALICE)["id"]
        await bot.fake.send_message(dm, ALICE, "hi there", dm=True)
        texts = await bot.wait_texts(dm)
        assert "offline" in texts[0].lower()


async def test_replies_in_the_bots_thread_need_no_mention(monkeypatch: pytest.MonkeyPatch) -> None:
    async with discord_bot(monkeypatch) as bot:
        thread = await _turn(bot, "first")
        await bot.say(thread, "help", user=BOB)
        texts = await bot.wait_texts(thread, 2)
        assert "stop" in texts[1] and "status" in texts[1]


async def test_unaddressed_messages_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    async with discord_bot(monkeypatch) as bot:
        chatter = await bot.say(GENERAL, "just chatting")
        # then a mention, whose reply proves the earlier message was seen and dropped
        thread = await _turn(bot, "now you")
        assert len(bot.texts(thread)) == 1
        assert bot.texts(GENERAL) == []
        assert not await bot.runtime.service.knows(bot.conversation(chatter["id"]))


async def test_other_bots_are_ignored_unless_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    robot = "100000000000000077"
    async with discord_bot(monkeypatch) as bot:
        bot.fake.add_user(robot, "robot", bot=True)
        ignored = await bot.mention("hello from a bot", user=robot)
        thread = await _turn(bot, "hello from a person")
        assert bot.texts(thread) and bot.texts(ignored["id"]) == []
    async with discord_bot(monkeypatch, env={"RAVEN_DISCORD_ALLOW_BOTS": "true"}) as bot:
        bot.fake.add_user(robot, "robot", bot=True)
        allowed = await bot.mention("hello from a bot", user=robot)
        assert await bot.wait_texts(allowed["id"])


async def test_a_bare_mention_is_help(monkeypatch: pytest.MonkeyPatch) -> None:
    async with discord_bot(monkeypatch) as bot:
        thread = await _turn(bot, "")
        assert "stop" in bot.texts(thread)[0]


# -- dedup ---------------------------------------------------------------------------------


async def test_a_redelivered_message_makes_one_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    async with discord_bot(monkeypatch) as bot:
        root = await bot.mention("once please")
        await bot.fake.dispatch("MESSAGE_CREATE", root)
        await bot.fake.dispatch("MESSAGE_CREATE", root)
        await bot.settle(root["id"])
        assert len(bot.texts(root["id"])) == 1


async def test_a_gateway_resume_replays_missed_events_once(monkeypatch: pytest.MonkeyPatch) -> None:
    async with discord_bot(monkeypatch) as bot:
        root = await bot.mention("before the drop")
        await bot.settle(root["id"])
        missed = bot.fake.build_message(
            GENERAL, BOB, f"<@{bot.fake.bot_id}> while you were away", mention_bot=True
        )
        bot.fake.queue_missed("MESSAGE_CREATE", missed)
        bot.fake.queue_missed("MESSAGE_CREATE", root)  # a duplicate of a handled one
        await bot.fake.close_gateway(4000)
        await bot.fake.wait_for(lambda: bot.fake.resumes >= 1)
        texts = await bot.wait_texts(missed["id"])
        await bot.settle(missed["id"])
        assert len(texts) == 1 and len(bot.texts(root["id"])) == 1
        assert bot.fake.identifies == 1  # resumed, not re-identified


async def test_a_new_session_after_invalid_session_still_dedups(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with discord_bot(monkeypatch) as bot:
        root = await bot.mention("hello")
        await bot.settle(root["id"])
        bot.fake.forget_sessions()
        await bot.fake.close_gateway(4000)
        await bot.fake.wait_for(lambda: bot.fake.identifies >= 2)
        await bot.fake.dispatch("MESSAGE_CREATE", root)
        again = await bot.mention("are you back?")
        await bot.settle(again["id"])
        assert len(bot.texts(root["id"])) == 1 and len(bot.texts(again["id"])) == 1


async def test_dedup_survives_a_restart(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    async with discord_bot(monkeypatch) as bot:
        root = await bot.mention("only once")
        await bot.settle(root["id"])
    # a new process (same RAVEN_HOME) and a gateway that delivers the message again
    async with discord_bot(monkeypatch) as bot:
        await bot.fake.dispatch("MESSAGE_CREATE", root)
        later = await _turn(bot, "and this")
        assert bot.texts(later) and bot.texts(root["id"]) == []


# -- egress --------------------------------------------------------------------------------


async def test_every_message_is_sent_without_pings(monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeAnthropic() as model:
        model.queue_text("@everyone look, and @here too, <@&300000000000000001> and <@1>")
        await _online(monkeypatch, model)
        async with discord_bot(monkeypatch) as bot:
            thread = await _turn(bot, "ping them")
            (sent,) = _sends(bot, thread)
            assert sent["allowed_mentions"] == {"parse": []}
            assert "@\u200beveryone" in sent["content"] and "@\u200bhere" in sent["content"]


async def test_a_long_reply_splits_without_breaking_code(monkeypatch: pytest.MonkeyPatch) -> None:
    code = "\n".join(f"print({i})  # a line of the listing" for i in range(150))
    answer = f"Here is the script:\n\n```python\n{code}\n```\n\nRun it with python."
    async with FakeAnthropic() as model:
        model.queue_text(answer)
        await _online(monkeypatch, model)
        async with discord_bot(monkeypatch) as bot:
            thread = await _turn(bot, "write a long script")
            texts = bot.texts(thread)
            assert len(texts) >= 3 and all(len(t) <= 2000 for t in texts)
            for text in texts:
                fences = [ln for ln in text.split("\n") if ln.startswith("```")]
                assert len(fences) % 2 == 0, text
            joined = "\n".join(texts)
            assert "print(0)" in joined and "print(149)" in joined
            assert texts[-1].rstrip().endswith("Run it with python.")


async def test_mentions_are_shown_to_the_model_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeAnthropic() as model:
        model.queue_text("ok")
        await _online(monkeypatch, model)
        async with discord_bot(monkeypatch) as bot:
            await _turn(bot, f"ask <@{BOB}> about it")
            text = _user_texts(model)[-1]
            assert "ask @Bob about it" in text
            assert f"<@{bot.fake.bot_id}>" not in text and "Alice (" in text


async def test_a_mention_in_a_thread_rereads_it_with_authors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    thread_id = "710000000000000001"
    async with FakeAnthropic() as model:
        model.queue_text("here is my view")
        await _online(monkeypatch, model)
        async with discord_bot(monkeypatch) as bot:
            # A thread people started themselves: the bot is not part of it yet.
            thread = payloads.thread(
                thread_id, "design chat", guild_id=bot.guild, parent_id=GENERAL, owner_id=ALICE
            )
            bot.fake.threads[thread_id] = thread
            await bot.fake.dispatch("THREAD_CREATE", {**thread, "newly_created": True})
            await bot.say(thread_id, f"I think we should use <@{ALICE}>'s data", user=BOB)
            await bot.say(thread_id, "agreed, the CSV one", user=ALICE)
            await bot.mention("what do you think?", channel=thread_id)
            await bot.settle(thread_id)
            assert len(model.requests) == 1  # the unaddressed messages were not turns
            text = _user_texts(model)[-1]
            assert f"Bob ({BOB}): I think we should use @Alice's data" in text
            assert f"Alice ({ALICE}): agreed, the CSV one" in text
            assert text.rstrip().endswith("what do you think?")
            assert bot.texts(thread_id) == ["here is my view"]


async def test_an_attachment_is_downloaded_into_the_workspace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FakeAnthropic() as model:
        model.queue_text("got it")
        await _online(monkeypatch, model)
        async with discord_bot(monkeypatch) as bot:
            attachment = bot.fake.add_attachment("data.csv", b"a,b\n1,2\n", content_type="text/csv")
            await _turn(bot, "look at this", attachments=[attachment])
            text = _user_texts(model)[-1]
            assert "data.csv (8 bytes):" in text
            path = Path(text.split("data.csv (8 bytes): ")[1].splitlines()[0].strip())
            assert await asyncio.to_thread(path.read_bytes) == b"a,b\n1,2\n"
            assert "workspaces" in str(path)


async def test_an_attachment_over_the_cap_is_not_downloaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FakeAnthropic() as model:
        model.queue_text("too big")
        await _online(monkeypatch, model)
        async with discord_bot(monkeypatch, env={"RAVEN_ATTACHMENT_MAX_BYTES": "4"}) as bot:
            attachment = bot.fake.add_attachment("big.bin", b"0123456789")
            await _turn(bot, "this one", attachments=[attachment])
            assert "big.bin: not downloaded (too large or unavailable)" in _user_texts(model)[-1]
            assert bot.fake.downloads == []


async def test_a_429_is_retried_and_the_reply_posted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    async with discord_bot(monkeypatch) as bot:
        bot.fake.rate_limit(*BOT_SENDS, retry_after=0.05, times=2)
        thread = await _turn(bot, "hello")
        assert len(bot.texts(thread)) == 1
        statuses = [c.status for c in bot.fake.requests_to(*BOT_SENDS)]
        assert statuses[:3] == [429, 429, 200]


async def test_a_429_that_never_ends_is_surfaced(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with discord_bot(monkeypatch, allow_errors=True) as bot:
        bot.fake.rate_limit(*BOT_SENDS, retry_after=0.01, times=5)
        root = await bot.mention("hello")
        # discord.py gives up after five tries: the outbox says why and retries later …
        await bot.fake.wait_for(lambda: "rate-limited the bot" in caplog.text)
        # … and the reply arrives exactly once when Discord lets it through
        await bot.fake.wait_for(lambda: len(bot.texts(root["id"])) == 1, timeout=20)
        await bot.settle(root["id"])
        assert len(bot.texts(root["id"])) == 1


async def test_a_refused_send_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    async with discord_bot(monkeypatch, allow_errors=True) as bot:
        bot.fake.fail(*BOT_SENDS, status=403, code=50001, message="Missing Access", times=20)
        root = await bot.mention("hello")
        await bot.settle(root["id"])
        await bot.fake.wait_for(lambda: bool(bot.fake.requests_to(*BOT_SENDS)))
        attempts = len(bot.fake.requests_to(*BOT_SENDS))
        assert attempts == 1  # a 403 will not change: the outbox gives up at once


# -- access policy -------------------------------------------------------------------------


async def test_a_user_not_allowed_gets_a_private_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    async with discord_bot(monkeypatch, env={"RAVEN_ALLOWED_USERS": ALICE}) as bot:
        root = await bot.mention("let me in", user=BOB)
        dm = bot.fake.dm_channel_for(BOB)["id"]
        texts = await bot.wait_texts(dm)
        assert "allowed users" in texts[0]
        assert bot.texts(root["id"]) == [] and bot.fake.threads == {}


async def test_a_role_admits_a_user(monkeypatch: pytest.MonkeyPatch) -> None:
    role = "300000000000000005"
    fake_env = {"RAVEN_ALLOWED_USERS": ALICE, "RAVEN_DISCORD_ALLOWED_ROLES": role}
    from tests.fakes.discord import FakeDiscord

    async with FakeDiscord() as fake:
        fake.add_role(role, "engineers")
        fake.add_user(ALICE, "alice", global_name="Alice")
        fake.add_user(BOB, "bob", global_name="Bob", roles=[role])
        async with discord_bot(monkeypatch, env=fake_env, fake=fake) as bot:
            thread = await _turn(bot, "hello", user=BOB)
            assert bot.texts(thread)


async def test_another_guild_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async with discord_bot(
        monkeypatch, env={"RAVEN_DISCORD_ALLOWED_GUILDS": "800000000000000099"}
    ) as bot:
        root = await bot.mention("hello")
        texts = await bot.wait_texts(bot.fake.dm_channel_for(ALICE)["id"])
        assert "server" in texts[0] and bot.texts(root["id"]) == []


async def test_only_allowed_channels(monkeypatch: pytest.MonkeyPatch) -> None:
    async with discord_bot(
        monkeypatch, env={"RAVEN_ALLOWED_CHANNELS": "700000000000000002"}
    ) as bot:
        root = await bot.mention("hello")
        texts = await bot.wait_texts(bot.fake.dm_channel_for(ALICE)["id"])
        assert "channel" in texts[0] and bot.texts(root["id"]) == []
        allowed = await bot.mention("hello", channel="700000000000000002")
        assert await bot.wait_texts(allowed["id"])


# -- control words -------------------------------------------------------------------------


async def test_status_and_help_control_words(monkeypatch: pytest.MonkeyPatch) -> None:
    async with discord_bot(monkeypatch) as bot:
        thread = await _turn(bot, "status")
        assert "Status" in bot.texts(thread)[0]
        await bot.say(thread, "help")
        texts = await bot.wait_texts(thread, 2)
        assert "stop" in texts[1]


async def test_doctor_checks_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    from bot.discord.factory import discord_doctor
    from bot.settings import load_settings
    from tests.fakes.discord import FakeDiscord

    async with FakeDiscord() as fake:
        monkeypatch.setenv("DISCORD_TOKEN", "discord-test-token.abcdefghijklmnop")
        monkeypatch.setenv("RAVEN_DISCORD_API_URL", fake.base_url)
        ok, detail = await discord_doctor(load_settings())
        assert ok and "Message Content intent" in detail
        fake.fail("GET", "/users/@me", status=401, code=0, message="401: Unauthorized")
        ok, detail = await discord_doctor(load_settings())
        assert not ok and "rejected" in detail
    ok, detail = await discord_doctor(load_settings())  # the fake is gone
    assert not ok and "unreachable" in detail


async def test_doctor_says_when_raven_cannot_be_registered_in_an_allowed_guild(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bot.discord.factory import discord_doctor
    from bot.settings import load_settings
    from tests.fakes.discord import FakeDiscord

    async with FakeDiscord() as fake:
        monkeypatch.setenv("DISCORD_TOKEN", "discord-test-token.abcdefghijklmnop")
        monkeypatch.setenv("RAVEN_DISCORD_API_URL", fake.base_url)
        monkeypatch.setenv("RAVEN_DISCORD_ALLOWED_GUILDS", fake.guild_id)
        ok, detail = await discord_doctor(load_settings())
        assert ok and "/raven" not in detail
        # A guild whose invite lacked applications.commands: Discord refuses its commands.
        monkeypatch.setenv("RAVEN_DISCORD_ALLOWED_GUILDS", f"{fake.guild_id},123456789")
        ok, detail = await discord_doctor(load_settings())
        assert ok  # the typed words still work there
        assert detail.endswith(
            "/raven cannot be registered in guild(s) 123456789: invite the bot again with the "
            "applications.commands scope (the typed words work meanwhile)"
        )


async def test_without_thread_permission_the_reply_goes_inline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with discord_bot(monkeypatch) as bot:
        bot.fake.fail(
            "POST",
            "/channels/{channel_id}/messages/{message_id}/threads",
            status=403,
            code=50013,
            message="Missing Permissions",
            times=5,
        )
        root = await bot.mention("hello")
        await bot.settle(root["id"])
        assert bot.fake.threads == {}
        (reply,) = bot.texts(GENERAL)
        assert "offline" in reply.lower()
        await bot.mention("status", channel=GENERAL)
        await bot.fake.wait_for(lambda: len(bot.texts(GENERAL)) == 2)


async def test_messages_sent_while_the_bot_was_down_are_read_back_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with shared_fake() as fake:
        async with discord_bot(monkeypatch, fake=fake) as bot:
            thread = await _turn(bot, "first question")
            assert len(bot.texts(thread)) == 1
        # Down: a reply in the bot's thread and a new mention in the channel, never delivered.
        in_thread = fake.build_message(thread, ALICE, "help")
        mention = fake.build_message(GENERAL, BOB, f"<@{fake.bot_id}> status", mention_bot=True)
        async with discord_bot(monkeypatch, fake=fake) as bot:
            await bot.fake.wait_for(lambda: len(bot.texts(thread)) == 2)
            texts = await bot.wait_texts(mention["id"])
            assert "Status" in texts[0] and "stop" in bot.texts(thread)[1]
            # The gateway delivering them late as well changes nothing.
            await bot.fake.dispatch("MESSAGE_CREATE", in_thread)
            await bot.fake.dispatch("MESSAGE_CREATE", mention)
            await bot.settle(thread)
            await bot.settle(mention["id"])
            assert len(bot.texts(thread)) == 2 and len(bot.texts(mention["id"])) == 1


def _firing(conv: ConversationRef, key: str) -> TurnRequested:
    """A scheduled task's firing, published the way the schedules feature does."""
    return TurnRequested(
        conversation=conv, text="check the queue", key=key, author_id=ALICE, author_name="alice"
    )


async def test_messages_sent_while_the_bot_was_down_are_read_back_after_a_firing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 38: a firing is logged under its key (`task:t_…`), not a snowflake; catch-up
    # took it for the conversation's newest message and read that conversation and its
    # channel back no more, so a mention sent while the bot was down got no reply.
    async with shared_fake() as fake:
        async with discord_bot(monkeypatch, fake=fake) as bot:
            thread = await _turn(bot, "check the queue every morning")
            conv = bot.conversation(thread)
            await bot.runtime.bus.publish(_firing(conv, "task:t_1:2026-01-05T09:00:00Z"))
            # A `post: channel` firing runs in a real thread its headline starts.
            channel = bot.adapter.channel_level(conv)
            assert channel is not None
            headline = await bot.runtime.service.notify(
                channel, "Scheduled task", idempotency_key="task:t_2:2026-01-05T09:00:00Z:thread"
            )
            assert headline is not None
            own = replace(conv, thread=headline)
            await bot.runtime.bus.publish(_firing(own, "task:t_2:2026-01-05T09:00:00Z"))
            await bot.wait_texts(thread, 2)
            await bot.wait_texts(headline)
            await bot.settle(thread)
            await bot.settle(headline)
        # Down: replies in the task's thread and in the firing's own one, and a new mention.
        fake.build_message(thread, ALICE, "help")
        fake.build_message(headline, ALICE, "help")
        mention = fake.build_message(GENERAL, BOB, f"<@{fake.bot_id}> status", mention_bot=True)
        async with discord_bot(monkeypatch, fake=fake) as bot:
            assert "Status" in (await bot.wait_texts(mention["id"]))[0]
            assert "stop" in (await bot.wait_texts(thread, 3))[-1]
            assert "stop" in (await bot.wait_texts(headline, 2))[-1]


async def test_a_channel_that_cannot_be_read_back_is_skipped_with_one_log_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "bot.discord.ingress")
    async with shared_fake() as fake:
        async with discord_bot(monkeypatch, fake=fake) as bot:
            await _turn(bot, "hello")
            other = await bot.mention("hello", channel=RANDOM)
            await bot.settle(other["id"], RANDOM)
        # Down: mentions in both channels; reading #general back is refused.
        fake.build_message(GENERAL, BOB, f"<@{fake.bot_id}> status", mention_bot=True)
        missed = fake.build_message(RANDOM, BOB, f"<@{fake.bot_id}> status", mention_bot=True)
        fake.fail("GET", f"/channels/{GENERAL}/messages", status=403, code=50001, times=99)
        async with discord_bot(monkeypatch, fake=fake) as bot:
            assert "Status" in (await bot.wait_texts(missed["id"]))[0]
            await bot.adapter.idle()
        (line,) = [r.getMessage() for r in caplog.records if r.name == "bot.discord.ingress"]
        assert f"reading back channel {GENERAL} failed, skipped" in line
