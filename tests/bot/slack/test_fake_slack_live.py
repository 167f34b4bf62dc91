"""The fake Slack's thread status (`assistant.threads.setStatus`) and `/raven` slash commands
over Socket Mode, driven by the real slack_sdk client and a real slack-bolt AsyncApp.

Proxy variables are cleared by the autouse `isolated_env` fixture in tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.slack import FakeSlack, command_body, sign
from tests.fakes.slack.signing import FORM_CONTENT_TYPE

BOT_TOKEN = "xoxb-1-fake-bot-token"
APP_TOKEN = "xapp-1-A1-1-fake-app-token"
CHANNEL = "C0GENERAL"


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        yield server


@pytest.fixture
def client(fake: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(base_url=fake.api_url, token=BOT_TOKEN)


# -- thread status ---------------------------------------------------------------------------


async def test_set_status_is_recorded_in_order_and_cleared(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    thread = (await client.chat_postMessage(channel=CHANNEL, text="go"))["ts"]

    await client.assistant_threads_setStatus(
        channel_id=CHANNEL,
        thread_ts=thread,
        status="is running `s2`: pytest -q…",
        loading_messages=["Running tests…", "Reading logs…"],
    )
    assert fake.current_status(CHANNEL, thread) == "is running `s2`: pytest -q…"
    await client.assistant_threads_setStatus(channel_id=CHANNEL, thread_ts=thread, status="")

    history = fake.status_history(CHANNEL, thread)
    assert [u.status for u in history] == ["is running `s2`: pytest -q…", ""]
    assert history[0].loading_messages == ("Running tests…", "Reading logs…")
    assert [u.seq for u in history] == [1, 2]
    assert fake.current_status(CHANNEL, thread) == ""
    assert fake.status_texts(CHANNEL, "1.000000") == []


async def test_a_reply_or_two_minutes_hide_the_status(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    thread = (await client.chat_postMessage(channel=CHANNEL, text="go"))["ts"]
    await client.assistant_threads_setStatus(
        channel_id=CHANNEL, thread_ts=thread, status="thinking"
    )
    await client.chat_postMessage(channel=CHANNEL, thread_ts=thread, text="done")
    assert fake.current_status(CHANNEL, thread) == ""

    await client.assistant_threads_setStatus(channel_id=CHANNEL, thread_ts=thread, status="again")
    assert fake.current_status(CHANNEL, thread) == "again"
    fake.advance(119)
    assert fake.current_status(CHANNEL, thread) == "again"
    fake.advance(1)
    assert fake.current_status(CHANNEL, thread) == ""


async def test_a_status_set_after_the_clock_moved_lasts_its_two_minutes(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    # Regression: statuses were stamped with the wall clock, not the fake's, so one set
    # after `advance` looked expired at once.
    thread = (await client.chat_postMessage(channel=CHANNEL, text="go"))["ts"]
    fake.advance(600)
    await client.assistant_threads_setStatus(channel_id=CHANNEL, thread_ts=thread, status="late")
    assert fake.current_status(CHANNEL, thread) == "late"
    fake.advance(119)
    assert fake.current_status(CHANNEL, thread) == "late"


async def test_set_status_needs_chat_write_or_assistant_write(fake: FakeSlack) -> None:
    fake.scopes = ["app_mentions:read"]
    client = AsyncWebClient(base_url=fake.api_url, token=BOT_TOKEN)
    with pytest.raises(SlackApiError) as info:
        await client.assistant_threads_setStatus(
            channel_id=CHANNEL, thread_ts="1700000000.000100", status="x"
        )
    assert info.value.response["error"] == "missing_scope"
    assert info.value.response["needed"] == "assistant:write"
    assert fake.statuses.updates == []

    fake.scopes = ["assistant:write"]
    await client.assistant_threads_setStatus(
        channel_id=CHANNEL, thread_ts="1700000000.000100", status="x"
    )
    assert fake.status_texts(CHANNEL, "1700000000.000100") == ["x"]


async def test_set_status_rate_limit_raises_429(fake: FakeSlack, client: AsyncWebClient) -> None:
    fake.fail_next("assistant.threads.setStatus", "http429", retry_after=3)
    with pytest.raises(SlackApiError) as info:
        await client.assistant_threads_setStatus(
            channel_id=CHANNEL, thread_ts="1700000000.000100", status="x"
        )
    assert info.value.response.status_code == 429
    assert fake.statuses.updates == []


# -- slash commands over Socket Mode ---------------------------------------------------------


@pytest.fixture
async def bolt(fake: FakeSlack) -> AsyncIterator[AsyncApp]:
    """A bolt app with a `/raven` command, connected to the fake over Socket Mode."""
    app = AsyncApp(client=AsyncWebClient(base_url=fake.api_url, token=BOT_TOKEN))

    @app.command("/raven")
    async def raven(ack: AsyncAck, respond: AsyncRespond, command: dict[str, Any]) -> None:
        words = command["text"].split()
        if words[:1] == ["help"]:
            await ack("Commands: status, stop, help")
            return
        await ack()
        if words[:1] == ["status"]:
            await respond("Nothing is running.", response_type="ephemeral")
        elif words[:1] == ["announce"]:
            await respond("Raven is here.", response_type="in_channel")
        else:
            await app.client.chat_postEphemeral(
                channel=command["channel_id"], user=command["user_id"], text="Unknown command."
            )

    handler = AsyncSocketModeHandler(app, app_token=APP_TOKEN)
    await handler.connect_async()  # type: ignore[no-untyped-call]
    await fake.wait_connected()
    yield app
    await handler.close_async()  # type: ignore[no-untyped-call]


async def test_slash_command_answered_ephemerally_through_response_url(
    fake: FakeSlack, bolt: AsyncApp
) -> None:
    command = await fake.send_slash_command("status", user="U7", user_name="ada")

    assert command.ack == {"envelope_id": command.envelope_id}
    assert command.ack_payload is None
    payload = command.payload
    assert (payload["command"], payload["text"], payload["user_id"]) == ("/raven", "status", "U7")
    assert (payload["user_name"], payload["channel_id"]) == ("ada", CHANNEL)
    assert payload["team_id"] == fake.team_id and payload["trigger_id"]
    assert payload["response_url"].startswith(fake.base_url)
    envelope = fake.envelopes[-1]
    assert (envelope.type, envelope.frame["accepts_response_payload"]) == ("slash_commands", True)

    (post,) = await fake.wait_for_response_url_post(command.response_url_id)
    assert post.json["text"] == "Nothing is running."
    assert post.json["response_type"] == "ephemeral"
    assert fake.responses_to(command) == [post]


async def test_slash_command_answered_in_the_ack(fake: FakeSlack, bolt: AsyncApp) -> None:
    command = await fake.send_slash_command("help")
    assert command.ack_payload == {"text": "Commands: status, stop, help"}
    assert fake.responses_to(command) == []


async def test_slash_command_in_channel_and_post_ephemeral(fake: FakeSlack, bolt: AsyncApp) -> None:
    announced = await fake.send_slash_command("announce")
    (post,) = await fake.wait_for_response_url_post(announced.response_url_id)
    assert post.json["response_type"] == "in_channel"

    await fake.send_slash_command("frobnicate", user="U9")
    await fake.wait_for_call("chat.postEphemeral")
    (ephemeral,) = fake.ephemeral_posts(user="U9")
    assert (ephemeral["channel"], ephemeral["text"]) == (CHANNEL, "Unknown command.")
    assert fake.ephemeral_posts(user="U7") == []


async def test_slash_command_payload_over_http_reaches_a_bolt_listener(fake: FakeSlack) -> None:
    """The same payload, as a signed form POST (the HTTP Events API transport)."""
    secret = "fake-signing-secret"
    app = AsyncApp(
        client=AsyncWebClient(base_url=fake.api_url, token=BOT_TOKEN),
        signing_secret=secret,
        process_before_response=True,
    )

    @app.command("/raven")
    async def raven(ack: AsyncAck, respond: AsyncRespond) -> None:
        await ack()
        await respond("Nothing is running.", response_type="ephemeral")

    payload, url_id = fake.slash_command_payload("status", user="U3")
    body = command_body(payload)
    headers: dict[str, str | Sequence[str]] = {
        **sign(secret, body),
        "Content-Type": FORM_CONTENT_TYPE,
    }
    resp = await app.async_dispatch(AsyncBoltRequest(body=body.decode(), headers=headers))
    assert resp.status == 200
    (post,) = await fake.wait_for_response_url_post(url_id)
    assert (post.json["response_type"], post.json["text"]) == ("ephemeral", "Nothing is running.")
