"""Replies holding a table (issue 41, part 5) on Discord: the prose as the message, the
table as embeds with one field per row; nothing in a cell pings or formats; a table over
Discord's limits stays aligned text."""

from __future__ import annotations

from typing import Any

import discord
import pytest

from bot.discord.markdown import render_for_discord
from bot.discord.table_embeds import with_table_embeds
from bot.render.split import ZWSP
from core.pipe_table import pipe_table
from host.features.schedules.feature import SchedulesFeature
from host.runtime.messages import OutboundMessage
from tests.discord_harness import ALICE, discord_bot


def _fields(message: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f["name"], f["value"]) for e in message.get("embeds") or [] for f in e["fields"]]


async def test_schedule_list_posts_its_tasks_as_an_embed_with_one_field_per_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with discord_bot(monkeypatch) as bot:
        root = await bot.mention("schedule: every 2h | s1: shell: echo @everyone tick")
        thread = str(root["id"])
        await bot.settle(thread)
        (prompt,) = await bot.runtime.broker.pending(bot.conversation(thread))
        outcome = await bot.runtime.broker.answer(prompt.id, prompt.nonce, ALICE, "Approve")
        assert outcome.status == "accepted", outcome.message
        (task,) = await bot.runtime.feature(SchedulesFeature).tasks.store.active()
        await bot.settle(thread)
        before = len(bot.fake.bot_messages(thread))

        await bot.say(thread, "schedule: list")
        await bot.fake.wait_for(lambda: len(bot.fake.bot_messages(thread)) > before)
        listed = bot.fake.bot_messages(thread)[before]

        ((name, value),) = _fields(listed)
        # Plain: the code span's backticks are not shown, markdown is escaped.
        assert name == discord.utils.escape_markdown(task.id)
        lines = value.split("\n")
        assert lines[0] == f"**Owner**: {task.owner_name}"
        assert lines[1] == f"**Schedule**: every 2h ({task.schedule.tz})"
        assert lines[2].startswith("**Next**: ") and "(<t:" in lines[2]  # each reader's time
        # The cell never pings or formats: @everyone broken, markdown escaped.
        assert lines[3] == f"**What**: s1: shell: echo @{ZWSP}everyone tick"
        assert "Owner" not in listed["content"]  # the table is not repeated as text
        await bot.settle(thread)


def test_cells_are_escaped_and_ping_free_and_the_prose_is_the_content() -> None:
    table = pipe_table(["Who", "Says"], [["@here", "*bold* \\*lit\\* <@123> @everyone"], ["x", ""]])
    text = f"Before\n\n{table}\n\nAfter"
    posted = with_table_embeds(text, render_for_discord(text))
    assert posted.chunks == ["Before\n\nAfter"]
    (embed,) = posted.embeds
    assert [(f.name, f.value) for f in embed.fields] == [
        (f"@{ZWSP}here", f"**Says**: bold \\*lit\\* <@123> @{ZWSP}everyone"),
        ("x", "—"),  # a row with only its first cell
    ]


def test_tables_over_discords_limits_stay_text() -> None:
    def posted(rows: list[list[str]]) -> tuple[list[str], list[discord.Embed]]:
        text = pipe_table(["n", "v"], rows)
        result = with_table_embeds(text, render_for_discord(text))
        return result.chunks, result.embeds

    many = [[str(i), "x"] for i in range(251)]  # 25 fields × 10 embeds is 250
    assert posted(many)[1] == []
    chunks, embeds = posted(many[:250])
    assert [len(e.fields) for e in embeds] == [25] * 10
    assert chunks == [""]
    long_value = [["a", "y" * 1025]]
    assert posted(long_value) == (render_for_discord(pipe_table(["n", "v"], long_value)), [])
    total = [[str(i), "z" * 400] for i in range(20)]  # 8,000 characters in all the embeds
    assert posted(total)[1] == []
    no_table = "just words"
    assert with_table_embeds(no_table, ["just words"]).embeds == []
    text = "Intro\n\n" + "word " * 500 + "\n\n" + pipe_table(["n", "v"], [["1", "2"]])
    assert with_table_embeds(text, render_for_discord(text)).embeds == []  # prose in parts


async def test_a_message_edited_in_place_carries_its_new_table_as_embeds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with discord_bot(monkeypatch) as bot:
        root = await bot.mention("hello")
        thread = str(root["id"])
        await bot.settle(thread)
        conv = bot.conversation(thread)
        first = pipe_table(["Round", "Ended"], [["1", "running"]])
        posted = await bot.adapter.post(
            conv, OutboundMessage(text=f"Now\n\n{first}", idempotency_key="t")
        )
        second = pipe_table(["Round", "Ended"], [["1", "finished"]])
        await bot.adapter.edit(
            conv, posted, OutboundMessage(text=f"Then\n\n{second}", idempotency_key="t")
        )
        (shown,) = [m for m in bot.fake.bot_messages(thread) if str(m["id"]) == posted]
        assert shown["content"] == "Then"
        assert _fields(shown) == [("1", "**Ended**: finished")]
