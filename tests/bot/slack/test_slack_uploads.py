"""Files into Slack threads through the outbox and the real slack_sdk (`files_upload_v2`)
against the loopback fake: once, not doubled by a redelivery, a refusal said once and not
retried, a rate limit retried; `doctor` says when the token lacks files:write."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.slack.doctor import check_slack, required_scopes
from bot.slack.normalize import DM_THREAD
from core.ids import ConversationRef
from host.conversation.outbox import Outbox
from host.runtime.messages import OutboundFile
from tests.fakes.slack import DEFAULT_SCOPES, FakeSlack
from tests.helpers import eventually
from tests.slack_harness import BOT_TOKEN, CHANNEL, SlackBot, buttons, slack_bot

UPLOAD_URL = "files.getUploadURLExternal"


def _file(tmp_path: Path, name: str = "design.svg", data: bytes = b"<svg/>") -> OutboundFile:
    path = tmp_path / name
    path.write_bytes(data)
    return OutboundFile(name=name, path=path, size=len(data), content_type="image/svg+xml")


def _outbox(bot: SlackBot, *, channel: bool = True) -> Outbox:
    channels = {"slack": bot.adapter} if channel else {}
    return Outbox(bot.runtime.conversation_log, channels, retry_delays=(0.0, 0.0, 0.0))


async def _thread(bot: SlackBot) -> str:
    ts, _ = await bot.mention("hello")
    await bot.replies_in(ts)
    await bot.settle(ts)
    return ts


async def test_a_file_lands_in_the_thread_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    async with slack_bot(monkeypatch) as bot:
        ts = await _thread(bot)
        outbox = _outbox(bot)
        await outbox.attach(bot.conversation(ts), [_file(tmp_path)], key="run:r1:files")
        await outbox.idle()
        (shared,) = bot.fake.uploads.shared
        assert (shared.name, shared.data) == ("design.svg", b"<svg/>")
        assert (shared.channel, shared.thread_ts) == (CHANNEL, ts)
        shares = [m for m in bot.fake.thread(CHANNEL, ts) if m.get("subtype") == "file_share"]
        assert len(shares) == 1
        await outbox.attach(bot.conversation(ts), [_file(tmp_path)], key="run:r1:files")
        await outbox.idle()
        assert len(bot.fake.uploads.shared) == 1
        assert len(bot.fake.calls_to(UPLOAD_URL)) == 1


async def test_a_redelivery_after_slack_has_the_file_does_not_double(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    async with slack_bot(monkeypatch) as bot:
        ts = await _thread(bot)
        conv, file = bot.conversation(ts), _file(tmp_path)
        # Recorded, then shared, then the process died before recording that it was sent.
        await _outbox(bot, channel=False).attach(conv, [file], key="k")
        await bot.adapter.upload(conv, file, idempotency_key="k:0", redelivery=False)
        restarted = _outbox(bot)
        await restarted.redeliver_pending("slack")
        await restarted.idle()
        assert len(bot.fake.uploads.shared) == 1
        assert len(bot.fake.calls_to(UPLOAD_URL)) == 1
        assert await bot.runtime.conversation_log.delivery_of("k:0") == "sent"


async def test_a_redelivery_in_a_dm_after_slack_has_the_file_does_not_double(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Regression: a DM has no thread, and the check for an earlier share looked nowhere.
    async with slack_bot(monkeypatch) as bot:
        conv = ConversationRef("slack", bot.fake.team_id, "D0DM", DM_THREAD)
        file = _file(tmp_path)
        await _outbox(bot, channel=False).attach(conv, [file], key="k")
        await bot.adapter.upload(conv, file, idempotency_key="k:0", redelivery=False)
        restarted = _outbox(bot)
        await restarted.redeliver_pending("slack")
        await restarted.idle()
        assert [f.channel for f in bot.fake.uploads.shared] == ["D0DM"]
        assert await bot.runtime.conversation_log.delivery_of("k:0") == "sent"


async def test_a_crash_between_record_and_send_uploads_exactly_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    async with slack_bot(monkeypatch) as bot:
        ts = await _thread(bot)
        await _outbox(bot, channel=False).attach(bot.conversation(ts), [_file(tmp_path)], key="k")
        for _ in range(2):  # two restarts: the second finds it sent
            restarted = _outbox(bot)
            await restarted.redeliver_pending("slack")
            await restarted.idle()
        assert [f.thread_ts for f in bot.fake.uploads.shared] == [ts]


async def test_missing_files_write_is_said_once_and_not_retried(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scopes = [s for s in DEFAULT_SCOPES if s != "files:write"]
    async with FakeSlack(scopes=scopes) as fake, slack_bot(monkeypatch, fake=fake) as bot:
        ts = await _thread(bot)
        replies = len(bot.posts(ts))
        conv = bot.conversation(ts)
        files = [_file(tmp_path), _file(tmp_path, "report.md", b"# done")]
        outbox = _outbox(bot)
        await outbox.attach(conv, files, key="run:r1:files")
        await outbox.idle()
        restarted = _outbox(bot)
        await restarted.redeliver_pending("slack")
        await restarted.idle()
        notices = [p["text"] for p in bot.posts(ts)[replies:]]
        assert notices == [
            "I couldn't attach `design.svg`, `report.md`: this workspace hasn't given me "
            "permission to upload files (files:write). Ask an admin to reinstall the app with "
            "that scope."
        ]
        assert len(fake.calls_to(UPLOAD_URL)) == 1
        assert fake.uploads.shared == []


async def test_a_file_too_large_for_slack_is_said_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    async with FakeSlack(max_upload_bytes=3) as fake, slack_bot(monkeypatch, fake=fake) as bot:
        ts = await _thread(bot)
        replies = len(bot.posts(ts))
        outbox = _outbox(bot)
        await outbox.attach(bot.conversation(ts), [_file(tmp_path)], key="k")
        await outbox.idle()
        (notice,) = [p["text"] for p in bot.posts(ts)[replies:]]
        assert notice.startswith("I couldn't attach `design.svg`: Slack refused it as too large")
        assert len(fake.calls_to(UPLOAD_URL)) == 1


async def test_a_rate_limit_is_retried_and_the_file_delivered(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    async with slack_bot(monkeypatch) as bot:
        ts = await _thread(bot)
        # More 429s than the client's own retries: the outbox tries again.
        bot.fake.fail_next(UPLOAD_URL, "http429", retry_after=0, times=4)
        outbox = _outbox(bot)
        await outbox.attach(bot.conversation(ts), [_file(tmp_path)], key="k")
        await outbox.idle()
        assert len(bot.fake.calls_to(UPLOAD_URL)) == 5
        assert [f.name for f in bot.fake.uploads.shared] == ["design.svg"]
        assert await bot.runtime.conversation_log.delivery_of("k:0") == "sent"


async def test_doctor_says_when_the_token_lacks_files_write() -> None:
    assert "files:write" in required_scopes()  # the manifest asks for it
    scopes = [s for s in required_scopes() if s != "files:write"]
    async with FakeSlack(scopes=scopes) as fake:
        ok, detail = await check_slack(BOT_TOKEN, fake.api_url)
    assert not ok
    assert "missing scopes: files:write" in detail
    assert "without files:write no file is attached" in detail
    async with FakeSlack(scopes=required_scopes()) as fake:
        ok, _ = await check_slack(BOT_TOKEN, fake.api_url)
    assert ok


async def test_a_run_report_brings_the_full_output_it_shortened_as_a_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The assembled bot, offline: an approved command prints more than the report shows.
    async with slack_bot(monkeypatch) as bot:
        ts, _ = await bot.mention("s1: shell: seq 1 300")
        await eventually(lambda: any(p.get("blocks") for p in bot.posts(ts)))
        prompt = next(
            c for c in bot.fake.calls_to("chat.postMessage") if c.ok and c.args.get("blocks")
        )
        await bot.click(buttons(prompt.args)[0], "U1", ts, prompt.response["ts"])
        await eventually(lambda: len(bot.fake.uploads.shared) == 1)
        await bot.settle(ts)
        (shared,) = bot.fake.uploads.shared
        assert (shared.name, shared.thread_ts) == ("s1-output.md", ts)
        assert shared.data.decode().split() == [str(n) for n in range(1, 301)]
        (report,) = [p for p in bot.posts(ts) if "Attached to this thread" in p["text"]]
        assert "s1-output.md" in report["text"]
        report_ts = next(
            c.response["ts"]
            for c in bot.fake.calls_to("chat.postMessage")
            if c.ok and c.args is report
        )
        assert float(report_ts) < float(shared.message_ts or 0)  # the file follows the reply
