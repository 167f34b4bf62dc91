"""Regression: a redelivered upload was taken for delivered when an EARLIER batch shared a
file of the same name and size in the thread.

The Slack adapter recognises its own earlier share by name and size only (Slack keeps no
metadata on a file share), and a retry after any failure is a redelivery. So when a second
run in a thread attaches `s1-output.md` with the same size as the first run's (the same
command run again), and its first attempt is rate-limited, the retry finds the first run's
share, marks the second file sent, and the thread never gets it. Discord's check (name and
size among the last 50 messages) has the same gap.

Now the outbox tells the adapter how many copies other deliveries put there
(`earlier_copies`), and only one more counts as this file's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from host.conversation.outbox import Outbox
from host.runtime.messages import OutboundFile
from tests.slack_harness import slack_bot

UPLOAD_URL = "files.getUploadURLExternal"


async def test_a_retried_file_is_not_mistaken_for_an_earlier_runs_share(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    async with slack_bot(monkeypatch) as bot:
        ts, _ = await bot.mention("hello")
        await bot.replies_in(ts)
        await bot.settle(ts)
        conv = bot.conversation(ts)
        outbox = Outbox(
            bot.runtime.conversation_log, {"slack": bot.adapter}, retry_delays=(0.0, 0.0)
        )
        first, second = tmp_path / "r1", tmp_path / "r2"
        for run in (first, second):
            run.mkdir()
            (run / "s1-output.md").write_bytes(b"same output\n")
        await outbox.attach(conv, [_file(first)], key="run:r1:files")
        await outbox.idle()
        # The second run's first attempt is refused for now: its retry is a redelivery.
        bot.fake.fail_next(UPLOAD_URL, "http429", retry_after=0, times=4)
        await outbox.attach(conv, [_file(second)], key="run:r2:files")
        await outbox.idle()
        assert await bot.runtime.conversation_log.delivery_of("run:r2:files:0") == "sent"
        assert [f.name for f in bot.fake.files_in("C0GENERAL", ts)] == ["s1-output.md"] * 2


def _file(run_dir: Path) -> OutboundFile:
    path = run_dir / "s1-output.md"
    return OutboundFile(
        name=path.name, path=path, size=path.stat().st_size, content_type="text/markdown"
    )
