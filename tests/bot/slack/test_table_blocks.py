"""Replies holding a table (issue 41, part 5) on Slack: the table as a native `table` block
between mrkdwn sections, the text (the notification) as it always was; nothing in a cell
pings; a table over Slack's limits is posted as text alone."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bot.render.split import ZWSP
from bot.slack.mrkdwn import render_for_slack
from bot.slack.pings import neutralize_slack_args
from bot.slack.table_blocks import message_blocks
from core.pipe_table import pipe_table
from host.features.schedules.feature import SchedulesFeature
from host.runtime.messages import OutboundMessage
from tests.slack_harness import slack_bot


def _message(text: str) -> OutboundMessage:
    return OutboundMessage(text=text, idempotency_key="k")


def _blocks(post: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = post.get("blocks") or []
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks)


def _cells(table: dict[str, Any]) -> list[list[str]]:
    """Each row's shown text (a bold rich_text header cell read through its one element)."""
    rows = []
    for row in table["rows"]:
        shown = []
        for cell in row:
            if cell["type"] == "raw_text":
                shown.append(cell["text"])
            else:
                (section,) = cell["elements"]
                shown.append("".join(e["text"] for e in section["elements"]))
        rows.append(shown)
    return rows


async def test_status_in_a_thread_posts_its_tasks_as_a_table_block_with_the_text_as_fallback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with slack_bot(monkeypatch) as bot:
        ts, _ = await bot.mention("schedule: every 2h | s1: shell: echo tick", thread_ts=None)
        await bot.settle(ts)
        conv = bot.conversation(ts)
        (prompt,) = await bot.runtime.broker.pending(conv)
        outcome = await bot.runtime.broker.answer(prompt.id, prompt.nonce, "U1", "Approve")
        assert outcome.status == "accepted", outcome.message
        (task,) = await bot.runtime.feature(SchedulesFeature).tasks.store.active()
        await bot.settle(ts)
        before = len(bot.posts(ts))

        await bot.mention("status", thread_ts=ts)
        posts = await bot.replies_in(ts, before + 1)
        status = posts[before]

        # The notification text is today's rendering: the table as monospace or bullets.
        assert status["text"].startswith("*Status*: running nothing")
        assert f"Task: `{task.id}`" in status["text"]
        blocks = _blocks(status)
        assert [b["type"] for b in blocks] == ["section", "table", "section"]
        assert blocks[0]["text"]["text"].startswith("*Status*: running nothing")
        assert "*Scheduled tasks*" in blocks[0]["text"]["text"]
        header, row = _cells(blocks[1])
        assert header == ["Task", "Owner", "Schedule", "Next", "What"]
        assert row[:3] == [task.id, task.owner_name, f"every 2h ({task.schedule.tz})"]
        assert row[3][:3] in ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
        assert "⟨" not in row[3] and "<!date" not in row[3]  # raw text has no reader's time
        assert row[4] == "s1: shell: echo tick"
        assert blocks[1]["rows"][0][0]["type"] == "rich_text"  # a bold header row
        await bot.settle(ts)


def test_a_table_cell_never_pings_and_is_shown_as_written() -> None:
    table = pipe_table(
        ["Who", "Says"],
        [["@channel", "<!here> and <!channel|x> *bold* <@U123>"], ["`@everyone`", "a | b"]],
    )
    blocks = message_blocks(_message(f"Intro\n\n{table}\n\nOutro"))
    assert blocks is not None
    # As the adapter sends it: every call goes through the ping neutraliser.
    sent = neutralize_slack_args({"blocks": blocks})["blocks"]
    cells = _cells(sent[1])
    assert cells[1] == [
        f"@{ZWSP}channel",
        f"<{ZWSP}!here> and <{ZWSP}!channel|x> bold @U123",  # plain: markup dropped
    ]
    assert cells[2] == [f"@{ZWSP}everyone", "a | b"]
    shown = json.dumps(sent)
    assert "<!" not in shown and "<@" not in shown and "@channel" not in shown
    assert [b["type"] for b in sent] == ["section", "table", "section"]


def test_a_table_over_slacks_limits_is_text_alone() -> None:
    rows = [[str(i), "x"] for i in range(100)]  # 101 rows with the header
    assert message_blocks(_message(pipe_table(["n", "x"], rows))) is None
    assert message_blocks(_message(pipe_table(["n", "x"], rows[:99]))) is not None
    wide = [f"c{i}" for i in range(21)]
    assert message_blocks(_message(pipe_table(wide, [wide]))) is None
    assert message_blocks(_message(pipe_table(wide[:20], [wide[:20]]))) is not None


def test_only_the_first_table_is_a_block_and_prose_or_code_is_text_alone() -> None:
    first = pipe_table(["a", "b"], [["1", "2"]])
    second = pipe_table(["c", "d"], [["3", "4"]])
    blocks = message_blocks(_message(f"{first}\n\nbetween\n\n{second}"))
    assert blocks is not None
    assert [b["type"] for b in blocks] == ["table", "section"]
    assert _cells(blocks[0]) == [["a", "b"], ["1", "2"]]
    # The later table stays aligned monospace in the section after.
    assert blocks[1]["text"]["text"] == render_for_slack(f"between\n\n{second}")[0]
    assert message_blocks(_message("no table here")) is None
    assert message_blocks(_message(f"```\n{first}\n```")) is None  # a table in code is code
    long = "word " * 900  # posted in parts: the table stays in the text
    assert message_blocks(_message(f"{long}\n\n{first}")) is None


async def test_a_status_message_edited_in_place_carries_its_new_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with slack_bot(monkeypatch) as bot:
        ts, _ = await bot.mention("hello")
        await bot.settle(ts)
        conv = bot.conversation(ts)
        first = pipe_table(["Round", "Ended"], [["1", "running"]])
        posted = await bot.adapter.post(conv, _message(f"Campaign\n\n{first}"))
        second = pipe_table(["Round", "Ended"], [["1", "finished"], ["2", "<!channel>"]])
        await bot.adapter.edit(conv, posted, _message(f"Campaign\n\n{second}"))
        (update,) = [c.args for c in bot.fake.calls_to("chat.update") if c.ok]
        assert update["ts"] == posted
        assert update["text"] == render_for_slack(f"Campaign\n\n{second}")[0]
        (table,) = [b for b in _blocks(update) if b["type"] == "table"]
        assert _cells(table)[1:] == [["1", "finished"], ["2", f"<{ZWSP}!channel>"]]
