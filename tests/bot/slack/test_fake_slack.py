"""The loopback fake Slack, driven by the real slack_sdk (and slack-bolt) clients.

Proxy variables are cleared by the autouse `isolated_env` fixture in tests/conftest.py
(slack_sdk honours HTTP(S)_PROXY and ignores NO_PROXY, which would hijack loopback).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any
from urllib.parse import parse_qs

import aiohttp
import pytest
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond, AsyncSay
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.signature import Clock, SignatureVerifier
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from tests.fakes.slack import FakeSlack, form_body, json_body, payloads, sign
from tests.fakes.slack.signing import FORM_CONTENT_TYPE, JSON_CONTENT_TYPE

BOT_TOKEN = "xoxb-1-fake-bot-token"
APP_TOKEN = "xapp-1-A1-1-fake-app-token"
SECRET = "fake-signing-secret"
TS_RE = re.compile(r"^\d{10}\.\d{6}$")


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    """A started fake Slack, stopped after the test."""
    async with FakeSlack(scopes=["chat:write", "app_mentions:read"]) as server:
        yield server


@pytest.fixture
def client(fake: FakeSlack) -> AsyncWebClient:
    """The real slack_sdk client pointed at the fake with a bot token."""
    return AsyncWebClient(base_url=fake.api_url, token=BOT_TOKEN)


@pytest.fixture
async def socket_client(fake: FakeSlack) -> AsyncIterator[SocketModeClient]:
    """A real Socket Mode client (built inside the loop) that acks every request."""
    sm = SocketModeClient(
        app_token=APP_TOKEN,
        web_client=AsyncWebClient(base_url=fake.api_url),
        ping_interval=1,
    )

    async def ack(c: Any, req: SocketModeRequest) -> None:
        await c.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))

    sm.socket_mode_request_listeners.append(ack)
    yield sm
    await sm.close()  # type: ignore[no-untyped-call]


# -- Web API ---------------------------------------------------------------------------------


async def test_proxy_variables_are_cleared() -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        assert name not in os.environ


async def test_auth_test_returns_identity_and_scopes(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    resp = await client.auth_test()
    assert resp["ok"] is True
    assert resp["user_id"] == "UBOT"
    assert resp["bot_id"] == "BBOT"
    assert resp["team_id"] == "T1"
    assert resp["is_enterprise_install"] is False
    assert resp["url"].startswith("https://")
    assert isinstance(resp.data, dict) and {"team", "user"} <= set(resp.data)
    assert resp.headers["X-OAuth-Scopes"] == "chat:write,app_mentions:read"
    (call,) = fake.calls_to("auth.test")
    assert call.verb == "POST"
    assert call.token == BOT_TOKEN
    assert call.headers["Authorization"] == f"Bearer {BOT_TOKEN}"
    assert call.at <= time.monotonic()


async def test_post_update_and_ephemeral(fake: FakeSlack, client: AsyncWebClient) -> None:
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "*hi*"}}]
    first = await client.chat_postMessage(channel="C1", text="hello", blocks=blocks)
    second = await client.chat_postMessage(channel="C1", text="reply", thread_ts=first["ts"])
    assert first["channel"] == "C1"
    assert TS_RE.match(first["ts"]) and TS_RE.match(second["ts"])
    assert float(second["ts"]) > float(first["ts"])
    assert first["message"]["blocks"] == blocks
    assert first["message"]["user"] == "UBOT" and first["message"]["bot_id"] == "BBOT"
    assert second["message"]["thread_ts"] == first["ts"]

    updated = await client.chat_update(channel="C1", ts=first["ts"], text="edited")
    assert updated["ts"] == first["ts"] and updated["text"] == "edited"
    assert fake.thread("C1", first["ts"])[0]["text"] == "edited"

    eph = await client.chat_postEphemeral(channel="C1", user="U1", text="psst")
    assert TS_RE.match(eph["message_ts"])

    assert fake.posted_texts() == ["hello", "reply"]
    assert fake.posted_texts("C2") == []
    call = fake.calls_to("chat.postMessage")[1]
    assert call.verb == "POST"
    assert call.args["thread_ts"] == first["ts"]
    assert [c.method for c in fake.calls] == [
        "chat.postMessage",
        "chat.postMessage",
        "chat.update",
        "chat.postEphemeral",
    ]


async def test_post_message_argument_errors(client: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError) as info, pytest.warns(UserWarning, match="`text`"):
        await client.chat_postMessage(channel="C1", text="")
    assert info.value.response["error"] == "no_text"


async def test_conversations_replies_serves_seeded_thread(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    root = "1700000100.000100"
    fake.add_thread_message("C1", root, "U1", "root", ts=root)  # ts == thread_ts: the parent
    fake.add_thread_message("C9", root, "U1", "other channel")
    fake.add_thread_message("C1", root, "U2", "first")
    fake.add_thread_message("C1", root, "UX", "bot says", bot_id="BX")
    posted = await client.chat_postMessage(channel="C1", text="mine", thread_ts=root)
    assert float(posted["ts"]) > float(root)

    resp = await client.conversations_replies(channel="C1", ts=root)
    texts = [m["text"] for m in resp["messages"]]
    assert texts == ["root", "first", "bot says", "mine"]  # newest last
    assert resp["has_more"] is False
    assert resp["messages"][0]["reply_count"] == 3
    assert resp["messages"][2]["bot_id"] == "BX"
    assert resp["messages"][1]["parent_user_id"] == "U1"
    assert fake.calls_to("conversations.replies")[0].verb == "GET"

    page = await client.conversations_replies(channel="C1", ts=root, limit=2)
    assert [m["text"] for m in page["messages"]] == ["root", "first"]
    assert page["has_more"] is True
    rest = await client.conversations_replies(
        channel="C1", ts=root, limit=2, cursor=page["response_metadata"]["next_cursor"]
    )
    assert [m["text"] for m in rest["messages"]] == ["bot says", "mine"]
    assert rest["has_more"] is False

    empty = await client.conversations_replies(channel="C1", ts="1.000000")
    assert empty["messages"] == []


async def test_strict_mode_reports_unknown_threads_and_messages() -> None:
    async with FakeSlack(strict=True) as strict:
        client = AsyncWebClient(base_url=strict.api_url, token=BOT_TOKEN)
        with pytest.raises(SlackApiError) as replies:
            await client.conversations_replies(channel="C1", ts="1.000000")
        with pytest.raises(SlackApiError) as update:
            await client.chat_update(channel="C1", ts="1.000000", text="x")
    assert replies.value.response["error"] == "thread_not_found"
    assert update.value.response["error"] == "message_not_found"


async def test_users_info(fake: FakeSlack, client: AsyncWebClient) -> None:
    fake.add_user("U1", "ada", real_name="Ada Lovelace", display_name="ada")
    resp = await client.users_info(user="U1")
    assert resp["user"]["name"] == "ada"
    assert resp["user"]["real_name"] == "Ada Lovelace"
    assert resp["user"]["profile"]["display_name"] == "ada"
    assert resp["user"]["is_bot"] is False
    assert fake.calls_to("users.info")[0].verb == "GET"
    with pytest.raises(SlackApiError) as info:
        await client.users_info(user="U404")
    assert info.value.response["error"] == "user_not_found"


async def test_views_open_records_the_view(fake: FakeSlack, client: AsyncWebClient) -> None:
    view = {
        "type": "modal",
        "callback_id": "feedback",
        "private_metadata": "C1|1700000000.000100",
        "title": {"type": "plain_text", "text": "Feedback"},
        "blocks": [],
    }
    resp = await client.views_open(trigger_id="123.456.abc", view=view)
    assert resp["view"]["id"].startswith("V")
    assert resp["view"]["callback_id"] == "feedback"
    assert fake.views[0]["private_metadata"] == "C1|1700000000.000100"
    assert fake.calls_to("views.open")[0].args["view"]["callback_id"] == "feedback"


async def test_reactions_add(fake: FakeSlack, client: AsyncWebClient) -> None:
    await client.reactions_add(channel="C1", timestamp="1700000000.000100", name="eyes")
    assert fake.reactions == [("C1", "1700000000.000100", "eyes")]
    with pytest.raises(SlackApiError) as info:
        await client.reactions_add(channel="C1", timestamp="1700000000.000100", name="eyes")
    assert info.value.response["error"] == "already_reacted"


async def test_auth_and_method_errors(fake: FakeSlack, client: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError) as unknown:
        await client.api_call("nope.nothing")
    assert unknown.value.response["error"] == "unknown_method"

    anonymous = AsyncWebClient(base_url=fake.api_url)
    with pytest.raises(SlackApiError) as no_token:
        await anonymous.chat_postMessage(channel="C1", text="x")
    assert no_token.value.response["error"] == "not_authed"

    app_level = AsyncWebClient(base_url=fake.api_url, token=APP_TOKEN)
    with pytest.raises(SlackApiError) as wrong_type:
        await app_level.chat_postMessage(channel="C1", text="x")
    assert wrong_type.value.response["error"] == "not_allowed_token_type"

    with pytest.raises(SlackApiError) as bot_for_socket:
        await client.apps_connections_open(app_token=BOT_TOKEN)
    assert bot_for_socket.value.response["error"] == "not_allowed_token_type"

    opened = await anonymous.apps_connections_open(app_token=APP_TOKEN)
    assert opened["url"].startswith(f"ws://127.0.0.1:{fake.port}/link/?ticket=")
    assert [c.ok for c in fake.calls] == [False, False, False, False, True]


async def test_query_form_and_token_argument_are_merged(fake: FakeSlack) -> None:
    blocks = [{"type": "divider"}]
    form = {"channel": "C1", "text": "via form", "blocks": json.dumps(blocks), "token": BOT_TOKEN}
    async with aiohttp.ClientSession() as session:
        url = f"{fake.api_url}chat.postMessage?unfurl_links=false"
        async with session.post(url, data=form) as resp:
            body = await resp.json()
        async with session.get(f"{fake.api_url}users.info", params={"user": "U9"}) as anon:
            assert (await anon.json())["error"] == "not_authed"
    assert body["ok"] is True
    (call,) = fake.calls_to("chat.postMessage")
    assert call.token == BOT_TOKEN
    assert call.args["blocks"] == blocks
    assert call.args["unfurl_links"] == "false"
    assert call.args["text"] == "via form"


async def test_custom_method(fake: FakeSlack, client: AsyncWebClient) -> None:
    fake.add_method("chat.delete", lambda args: {"ok": True, "channel": args["channel"]})
    resp = await client.chat_delete(channel="C1", ts="1.000000")
    assert resp["channel"] == "C1"


# -- faults ----------------------------------------------------------------------------------


async def test_429_without_a_retry_handler_raises(fake: FakeSlack, client: AsyncWebClient) -> None:
    fake.fail_next("chat.postMessage", "http429", retry_after=7)
    with pytest.raises(SlackApiError) as info:
        await client.chat_postMessage(channel="C1", text="x")
    assert info.value.response.status_code == 429
    assert info.value.response["error"] == "ratelimited"
    assert info.value.response.headers["Retry-After"] == "7"
    assert len(fake.calls_to("chat.postMessage")) == 1
    assert fake.posted_texts() == []


async def test_429_once_then_success_with_rate_limit_handler(fake: FakeSlack) -> None:
    client = AsyncWebClient(
        base_url=fake.api_url,
        token=BOT_TOKEN,
        retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=1)],
    )
    fake.fail_next("chat.postMessage", "http429", retry_after=0)
    resp = await client.chat_postMessage(channel="C1", text="eventually")
    assert resp["ok"] is True
    calls = fake.calls_to("chat.postMessage")
    assert [c.status for c in calls] == [429, 200]
    assert fake.posted_texts() == ["eventually"]


async def test_ok_false_raises_and_faults_stack(fake: FakeSlack, client: AsyncWebClient) -> None:
    fake.fail_next("chat.update", "ok_false")
    fake.fail_next("chat.update", "ok_false", error="msg_too_long")
    for expected in ("internal_error", "msg_too_long"):
        with pytest.raises(SlackApiError) as info:
            await client.chat_update(channel="C1", ts="1.000000", text="x")
        assert info.value.response.status_code == 200
        assert info.value.response["error"] == expected
    resp = await client.chat_update(channel="C1", ts="1.000000", text="x")
    assert resp["ok"] is True
    assert [c.error for c in fake.calls_to("chat.update")] == [
        "internal_error",
        "msg_too_long",
        None,
    ]


async def test_wait_for_call_names_what_arrived(fake: FakeSlack, client: AsyncWebClient) -> None:
    await client.auth_test()
    with pytest.raises(AssertionError, match=r"chat\.postMessage.*auth\.test"):
        await fake.wait_for_call("chat.postMessage", within=0.05)


async def test_wait_for_call_sees_a_late_call(fake: FakeSlack, client: AsyncWebClient) -> None:
    async def later() -> None:
        await asyncio.sleep(0.02)
        await client.chat_postMessage(channel="C1", text="late")

    task = asyncio.create_task(later())
    calls = await fake.wait_for_call("chat.postMessage", within=2.0)
    await task
    assert calls[0].args["text"] == "late"


# -- files and response_url ------------------------------------------------------------------


async def test_file_download_requires_a_bot_token(fake: FakeSlack) -> None:
    url = fake.add_file("F1", "notes.txt", b"hello file", "text/plain")
    assert fake.file_object("F1")["url_private_download"] == url
    async with aiohttp.ClientSession() as session:
        async with session.get(url, headers={"Authorization": f"Bearer {BOT_TOKEN}"}) as ok:
            assert ok.status == 200
            assert ok.content_type == "text/plain"
            assert await ok.read() == b"hello file"
        async with session.get(url) as anonymous:
            assert anonymous.status == 401
        async with session.get(url, headers={"Authorization": f"Bearer {APP_TOKEN}"}) as wrong:
            assert wrong.status == 401
        missing = f"{fake.base_url}/files/F404/x.txt"
        async with session.get(missing, headers={"Authorization": f"Bearer {BOT_TOKEN}"}) as nf:
            assert nf.status == 404
    assert fake.file_downloads == [("F1", 200), ("F1", 401), ("F1", 401), ("F404", 404)]


async def test_response_url_records_posts(fake: FakeSlack) -> None:
    webhook = AsyncWebhookClient(url=fake.response_url("r1"))
    resp = await webhook.send(text="done", replace_original=True)
    assert resp.status_code == 200
    (post,) = await fake.wait_for_response_url_post("r1")
    assert post.json == {"text": "done", "replace_original": True}


# -- Socket Mode -----------------------------------------------------------------------------


async def test_socket_mode_round_trip_and_reconnect(
    fake: FakeSlack, socket_client: SocketModeClient
) -> None:
    seen: list[dict[str, Any]] = []

    async def watch(c: Any, message: dict[str, Any], raw: str | None) -> None:
        seen.append(message)

    socket_client.message_listeners.append(watch)
    await asyncio.wait_for(socket_client.connect(), 5)  # type: ignore[no-untyped-call]
    await fake.wait_connected()
    (opened,) = fake.calls_to("apps.connections.open")
    assert opened.token == APP_TOKEN

    event = payloads.event_callback(
        payloads.app_mention("C1", "U1", "<@UBOT> hi", "1700000000.000100"), event_id="Ev1"
    )
    envelope_id = await fake.send_envelope("events_api", event)
    ack = await fake.wait_for_ack(envelope_id)
    assert ack == {"envelope_id": envelope_id}
    assert any(m.get("type") == "hello" for m in seen)
    received = next(m for m in seen if m.get("envelope_id") == envelope_id)
    assert received["payload"]["event_id"] == "Ev1"
    assert received["retry_attempt"] == 0 and received["accepts_response_payload"] is False

    await fake.send_disconnect()
    await fake.wait_connected(count=2)
    await fake.wait_for_call("apps.connections.open", count=2)
    assert fake.open_connections == 1

    action = payloads.block_actions("approve", "yes", "U1", "C1", "1700000000.000100")
    second = await fake.send_envelope("interactive", action)
    assert await fake.wait_for_ack(second) == {"envelope_id": second}


async def test_socket_mode_reconnects_after_server_close(
    fake: FakeSlack, socket_client: SocketModeClient
) -> None:
    await asyncio.wait_for(socket_client.connect(), 5)  # type: ignore[no-untyped-call]
    await fake.wait_connected()
    await fake.drop_connections()
    await fake.wait_connected(count=2)
    envelope_id = await fake.send_envelope(
        "slash_commands", payloads.slash_command("/raven", "status", "U1", "C1")
    )
    await fake.wait_for_ack(envelope_id)
    assert fake.envelopes[-1].frame["accepts_response_payload"] is True


async def test_unacked_envelope_times_out_with_a_message(fake: FakeSlack) -> None:
    sm = SocketModeClient(app_token=APP_TOKEN, web_client=AsyncWebClient(base_url=fake.api_url))
    try:
        await asyncio.wait_for(sm.connect(), 5)  # type: ignore[no-untyped-call]
        await fake.wait_connected()
        envelope_id = await fake.send_envelope("events_api", {"type": "event_callback"})
        with pytest.raises(AssertionError, match=envelope_id):
            await fake.wait_for_ack(envelope_id, within=0.05)
    finally:
        await sm.close()  # type: ignore[no-untyped-call]


async def test_send_envelope_without_a_connection_fails(fake: FakeSlack) -> None:
    with pytest.raises(AssertionError, match="no open Socket Mode connection"):
        await fake.send_envelope("events_api", {})


# -- payloads and signing through the real bolt ----------------------------------------------


def _bolt_app(fake: FakeSlack) -> AsyncApp:
    return AsyncApp(
        client=AsyncWebClient(base_url=fake.api_url, token=BOT_TOKEN),
        signing_secret=SECRET,
        process_before_response=True,
    )


async def _dispatch(
    app: AsyncApp, body: bytes, content_type: str, timestamp: int | None = None
) -> BoltResponse:
    """Hand bolt a signed request, as its HTTP adapters would."""
    headers: dict[str, str | Sequence[str]] = {
        "content-type": content_type,
        **sign(SECRET, body, timestamp),
    }
    return await app.async_dispatch(AsyncBoltRequest(body=body.decode(), headers=headers))


def test_signing_matches_slack_sdk_verifier() -> None:
    body = form_body({"type": "block_actions"})
    headers = sign(SECRET, body, timestamp=1_700_000_000)
    verifier = SignatureVerifier(SECRET, clock=_FixedClock(1_700_000_100))
    assert verifier.is_valid(
        body=body.decode(),
        timestamp=headers["X-Slack-Request-Timestamp"],
        signature=headers["X-Slack-Signature"],
    )
    assert json.loads(parse_qs(body.decode())["payload"][0]) == {"type": "block_actions"}
    assert not SignatureVerifier("other", clock=_FixedClock(1_700_000_000)).is_valid(
        body=body.decode(),
        timestamp=headers["X-Slack-Request-Timestamp"],
        signature=headers["X-Slack-Signature"],
    )


class _FixedClock(Clock):
    def __init__(self, now: float) -> None:
        self._now = now

    def now(self) -> float:
        return self._now


async def test_bolt_routes_a_signed_app_mention(fake: FakeSlack) -> None:
    app = _bolt_app(fake)

    @app.event("app_mention")
    async def on_mention(event: dict[str, Any], say: AsyncSay) -> None:
        await say(text=f"echo: {event['text']}", thread_ts=event.get("thread_ts") or event["ts"])

    ts = fake.next_ts()
    body = json_body(payloads.event_callback(payloads.app_mention("C1", "U1", "<@UBOT> hi", ts)))
    resp = await _dispatch(app, body, JSON_CONTENT_TYPE)
    assert resp.status == 200
    (call,) = await fake.wait_for_call("chat.postMessage")
    assert call.args["thread_ts"] == ts
    assert fake.posted_texts("C1") == ["echo: <@UBOT> hi"]
    assert len(fake.calls_to("auth.test")) == 1

    stale = await _dispatch(app, body, JSON_CONTENT_TYPE, timestamp=1)
    assert stale.status == 401


async def test_bolt_ignores_its_own_bot_message_but_not_others(fake: FakeSlack) -> None:
    app = _bolt_app(fake)
    seen: list[str] = []

    @app.event("message")
    async def on_message(event: dict[str, Any]) -> None:
        seen.append(event["bot_id"])

    for bot in ("BBOT", "BOTHER"):
        body = json_body(
            payloads.event_callback(payloads.bot_message("C1", bot, "beep", fake.next_ts()))
        )
        resp = await _dispatch(app, body, JSON_CONTENT_TYPE)
        assert resp.status == 200
    assert seen == ["BOTHER"]


async def test_bolt_block_action_updates_and_responds(fake: FakeSlack) -> None:
    app = _bolt_app(fake)

    @app.action("approve")
    async def on_approve(
        ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient, respond: AsyncRespond
    ) -> None:
        await ack()
        await client.chat_update(
            channel=body["channel"]["id"], ts=body["message"]["ts"], text="approved"
        )
        await respond(text=f"approved by {body['user']['id']}")

    payload = payloads.block_actions(
        "approve",
        "yes",
        "U1",
        "C1",
        "1700000000.000100",
        response_url=fake.response_url("act1"),
    )
    body = form_body(payload)
    resp = await _dispatch(app, body, FORM_CONTENT_TYPE)
    assert resp.status == 200
    (update,) = await fake.wait_for_call("chat.update")
    assert update.args["ts"] == "1700000000.000100"
    (post,) = await fake.wait_for_response_url_post("act1")
    assert post.json["text"] == "approved by U1"


async def test_bolt_view_submission_reads_state_values(fake: FakeSlack) -> None:
    app = _bolt_app(fake)
    got: dict[str, Any] = {}

    @app.view("feedback")
    async def on_submit(ack: AsyncAck, view: dict[str, Any]) -> None:
        await ack()
        got["meta"] = view["private_metadata"]
        got["text"] = view["state"]["values"]["b1"]["a1"]["value"]

    payload = payloads.view_submission("feedback", "C1|1.000000", "U1", {"b1": {"a1": "great"}})
    body = form_body(payload)
    resp = await _dispatch(app, body, FORM_CONTENT_TYPE)
    assert resp.status == 200
    assert got == {"meta": "C1|1.000000", "text": "great"}


async def test_url_verification_is_answered_without_api_calls(fake: FakeSlack) -> None:
    app = _bolt_app(fake)
    body = json_body(payloads.url_verification("chal-1"))
    resp = await _dispatch(app, body, JSON_CONTENT_TYPE)
    assert resp.status == 200
    assert json.loads(resp.body) == {"challenge": "chal-1"}
    assert fake.calls == []


def test_event_builders_shapes() -> None:
    f = {"id": "F1", "name": "a.txt"}
    im = payloads.message_im("D1", "U1", "hello", "1700000000.000100", files=[f])
    assert im["channel_type"] == "im" and im["subtype"] == "file_share" and im["files"] == [f]
    reply = payloads.thread_message("C1", "U1", "more", "1700000000.000300", "1700000000.000100")
    assert reply["thread_ts"] == "1700000000.000100" and "subtype" not in reply
    changed = payloads.message_changed("C1", "U1", "1700000000.000100", "new", "old")
    assert changed["subtype"] == "message_changed"
    assert changed["message"]["text"] == "new"
    assert changed["previous_message"]["text"] == "old"
    wrapped = payloads.event_callback(reply, event_id="EvX", team_id="T9", authed_user="UB")
    assert wrapped["event_id"] == "EvX" and wrapped["team_id"] == "T9"
    assert wrapped["authorizations"][0]["user_id"] == "UB"
    assert isinstance(wrapped["event_time"], int)
    action = payloads.block_actions(
        "go", "v", "U1", "C1", "1700000000.000100", thread_ts="1700000000.000050"
    )
    assert action["container"] == {
        "type": "message",
        "message_ts": "1700000000.000100",
        "channel_id": "C1",
        "is_ephemeral": False,
    }
    assert action["message"]["thread_ts"] == "1700000000.000050"
    assert action["actions"][0]["type"] == "button"
    assert action["response_url"].startswith("http://127.0.0.1:")


async def test_hold_serves_at_once_but_answers_only_on_release(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    hold = fake.hold("chat.postMessage", when=lambda args: args.get("channel") == "C1")
    held = asyncio.create_task(client.chat_postMessage(channel="C1", text="held"))
    (call,) = await hold.wait_held()
    # Served (the message exists, its ts is known) while the client still waits.
    assert call.ok and fake.thread("C1", str(call.response["ts"]))
    other = await client.chat_postMessage(channel="C2", text="not held")
    assert other["ok"] and not held.done()
    hold.release()
    assert (await held)["ts"] == call.response["ts"]
    after = await client.chat_postMessage(channel="C1", text="released holds hold nothing")
    assert after["ok"] and len(hold.calls) == 1
