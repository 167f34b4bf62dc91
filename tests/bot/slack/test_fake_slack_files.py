"""The fake Slack's external upload flow and its refusals, driven by the real
`slack_sdk` `AsyncWebClient.files_upload_v2`.

Proxy variables are cleared by the autouse `isolated_env` fixture in tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.slack import DEFAULT_SCOPES, FakeSlack

BOT_TOKEN = "xoxb-1-fake-bot-token"
CHANNEL = "C0GENERAL"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        yield server


@pytest.fixture
def client(fake: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(base_url=fake.api_url, token=BOT_TOKEN)


async def test_upload_v2_shares_the_file_in_the_thread(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    parent = await client.chat_postMessage(channel=CHANNEL, text="working on it")
    thread_ts = parent["ts"]

    result = await client.files_upload_v2(
        content=PNG,
        filename="chart.png",
        title="Campaign chart",
        channel=CHANNEL,
        thread_ts=thread_ts,
        initial_comment="Here is the chart",
    )

    assert [c.method for c in fake.calls[1:]] == [
        "files.getUploadURLExternal",
        "files.completeUploadExternal",
    ]
    asked = fake.calls_to("files.getUploadURLExternal")[0].args
    assert (asked["filename"], int(asked["length"])) == ("chart.png", len(PNG))
    (shared,) = fake.files_in(CHANNEL, thread_ts)
    assert (shared.name, shared.title, shared.data) == ("chart.png", "Campaign chart", PNG)
    assert (shared.initial_comment, shared.mimetype) == ("Here is the chart", "image/png")
    assert fake.uploads.upload_posts == [(shared.file_id, 200)]
    assert result["file"]["id"] == shared.file_id and result["file"]["size"] == len(PNG)
    # Right after completion Slack has not processed the shares yet.
    assert result["file"]["shares"] == {}

    # The thread now holds the file-share message, as Slack shows it.
    message = fake.thread(CHANNEL, thread_ts)[-1]
    assert message["ts"] == shared.message_ts and message["thread_ts"] == thread_ts
    assert (message["subtype"], message["text"], message["upload"]) == (
        "file_share",
        "Here is the chart",
        True,
    )
    assert [f["id"] for f in message["files"]] == [shared.file_id]
    replies = await client.conversations_replies(channel=CHANNEL, ts=thread_ts)
    assert replies["messages"][-1]["files"][0]["name"] == "chart.png"

    info = await client.files_info(file=shared.file_id)
    share = info["file"]["shares"]["public"][CHANNEL][0]
    assert (share["ts"], share["thread_ts"]) == (shared.message_ts, thread_ts)

    # The shared file downloads with the bot token, like url_private_download.
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            info["file"]["url_private_download"],
            headers={"Authorization": f"Bearer {BOT_TOKEN}"},
        ) as resp,
    ):
        assert await resp.read() == PNG


async def test_several_files_in_one_call_share_one_message(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    await client.files_upload_v2(
        file_uploads=[
            {"content": "diff --git a b", "filename": "change.patch", "title": "patch"},
            {"content": b"full output\n" * 50, "filename": "s2.log"},
        ],
        channel=CHANNEL,
    )
    assert [f.name for f in fake.files_in(CHANNEL)] == ["change.patch", "s2.log"]
    history = await client.conversations_history(channel=CHANNEL)
    (message,) = [m for m in history["messages"] if m.get("files")]
    assert [f["name"] for f in message["files"]] == ["change.patch", "s2.log"]
    assert "thread_ts" not in message


async def test_missing_files_write_is_missing_scope_with_needed(fake: FakeSlack) -> None:
    fake.scopes = [s for s in DEFAULT_SCOPES if s != "files:write"]
    client = AsyncWebClient(base_url=fake.api_url, token=BOT_TOKEN)

    with pytest.raises(SlackApiError) as info:
        await client.files_upload_v2(content=b"x", filename="a.txt", channel=CHANNEL)

    response = info.value.response
    assert response["error"] == "missing_scope"
    assert response["needed"] == "files:write"
    assert "files:write" not in response["provided"].split(",")
    assert response.headers["X-Accepted-OAuth-Scopes"] == "files:write"
    assert fake.shared_files == []
    # A doctor reads the granted scopes from auth.test's header.
    auth = await client.auth_test()
    assert "files:write" not in auth.headers["X-OAuth-Scopes"].split(",")


async def test_too_large_a_file_is_refused_before_upload() -> None:
    async with FakeSlack(max_upload_bytes=100) as fake:
        client = AsyncWebClient(base_url=fake.api_url, token=BOT_TOKEN)
        with pytest.raises(SlackApiError) as info:
            await client.files_upload_v2(content=b"x" * 101, filename="big.bin", channel=CHANNEL)
        assert info.value.response["error"] == "file_upload_size_restricted"
        assert fake.uploads.upload_posts == []
        assert fake.shared_files == []

        await client.files_upload_v2(content=b"x" * 100, filename="fits.bin", channel=CHANNEL)
        assert [f.name for f in fake.shared_files] == ["fits.bin"]


async def test_a_file_of_several_mib_is_taken_whole(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    # Slack takes files far larger than an aiohttp server's default 1 MiB body: so must the
    # fake, or a bot's ordinary upload looks refused as too large.
    data = bytes(range(256)) * (4 * 2**20 // 256)
    await client.files_upload_v2(content=data, filename="design.png", channel=CHANNEL)
    (shared,) = fake.shared_files
    assert (shared.name, shared.data) == ("design.png", data)


async def test_rate_limited_upload_raises_without_a_retry_handler(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    fake.fail_next("files.getUploadURLExternal", "http429", retry_after=7)
    with pytest.raises(SlackApiError) as info:
        await client.files_upload_v2(content=b"x", filename="a.txt", channel=CHANNEL)
    assert info.value.response.status_code == 429
    assert info.value.response["error"] == "ratelimited"
    assert info.value.response.headers["Retry-After"] == "7"
    assert fake.shared_files == []


async def test_rate_limited_completion_is_retried_by_the_handler(fake: FakeSlack) -> None:
    client = AsyncWebClient(
        base_url=fake.api_url,
        token=BOT_TOKEN,
        retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=1)],
    )
    fake.fail_next("files.completeUploadExternal", "http429", retry_after=0)

    await client.files_upload_v2(content=b"report", filename="r.md", channel=CHANNEL)

    statuses = [c.status for c in fake.calls_to("files.completeUploadExternal")]
    assert statuses == [429, 200]
    assert [f.data for f in fake.shared_files] == [b"report"]


async def test_exactly_n_calls_fail_then_the_method_works(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    fake.fail_next(
        "files.getUploadURLExternal",
        "ok_false",
        error="missing_scope",
        extra={"needed": "files:write", "provided": "chat:write"},
        times=2,
    )
    for _ in range(2):
        with pytest.raises(SlackApiError) as info:
            await client.files_upload_v2(content=b"x", filename="a.txt", channel=CHANNEL)
        assert info.value.response["needed"] == "files:write"
    await client.files_upload_v2(content=b"x", filename="a.txt", channel=CHANNEL)
    assert len(fake.shared_files) == 1


async def test_completing_an_upload_that_never_got_bytes_fails(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    started = await client.files_getUploadURLExternal(filename="a.txt", length=3)
    with pytest.raises(SlackApiError) as info:
        await client.files_completeUploadExternal(
            files=[{"id": started["file_id"], "title": "a"}], channel_id=CHANNEL
        )
    assert info.value.response["error"] == "file_not_found"
    assert fake.shared_files == []


async def test_an_unknown_upload_url_is_refused(fake: FakeSlack, client: AsyncWebClient) -> None:
    started = await client.files_getUploadURLExternal(filename="a.txt", length=3)
    bad_url = started["upload_url"].replace(started["file_id"], "FNOPE")
    async with aiohttp.ClientSession() as session, session.post(bad_url, data=b"abc") as resp:
        assert resp.status == 404
    assert fake.uploads.upload_posts == [("FNOPE", 404)]
