"""Offline replies on Slack say what happened in plain words (issue 39, findings 4 and 5): a
plan with a malformed line runs nothing and names the line; a plan that starts says so in a
sentence; a `post: channel` task, its fields written before what to do, opens its firing's
thread with the run's report, never a tool dump."""

from __future__ import annotations

import pytest

from host.features.schedules.feature import SchedulesFeature
from tests.helpers import db_rows, eventually
from tests.slack_harness import slack_bot

DUMP = ("here is what the tools returned", "`submit_graph`", "Offline mode (no model)")


async def test_plans_and_a_channel_task_read_as_plain_sentences(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with slack_bot(monkeypatch) as bot:
        home = bot.runtime.settings.home
        root, _ = await bot.mention("a1: shell: echo one\na2 shell: echo two [after a1]")
        (refusal,) = await bot.replies_in(root)
        # As Slack shows it (mrkdwn: the list's dash is a bullet).
        assert refusal["text"] == (
            "Nothing was run: line 2 of this plan is not a node.\n"
            "• line 2, `a2 shell: echo two [after a1]`: a `:` is missing after the id; write "
            "`a2: shell: echo two [after a1]`\n\n"
            "Every line of a plan is a node, `id: agent: task [after id, id]`, or `confirm`. "
            "Send the whole plan again once it is fixed."
        )
        await bot.settle(root)
        assert db_rows(home, "SELECT COUNT(*) FROM graph_runs") == [(0,)]

        # Fields before what to do; each firing starts its own thread in the channel.
        line = "schedule: every 2h | post: channel | s1: shell: echo tick"
        await bot.mention(line, thread_ts=root)
        await bot.settle(root)
        (prompt,) = [p for p in await bot.runtime.broker.pending() if p.purpose.startswith("sch")]
        outcome = await bot.runtime.broker.answer(prompt.id, prompt.nonce, "U1", "Approve")
        assert outcome.status == "accepted", outcome.message
        tasks = bot.runtime.feature(SchedulesFeature).tasks
        (task,) = await tasks.store.active()
        assert (task.schedule.post, task.schedule.what) == ("channel", "s1: shell: echo tick")
        assert "runs now" in await tasks.run_now(task.id)
        # The headline starts a thread at channel level; the firing's report is posted in it.
        await eventually(lambda: any("⏰ Scheduled task" in p["text"] for p in bot.posts()))
        (head_ts,) = [
            str(c.response["ts"])
            for c in bot.fake.calls_to("chat.postMessage")
            if c.ok and "⏰ Scheduled task" in str(c.args.get("text"))
        ]
        (report,) = await bot.replies_in(head_ts)
        assert "tick" in report["text"] and "completed" in report["text"], report["text"]
        for post in bot.posts():
            assert not any(marker in post["text"] for marker in DUMP), post["text"]
