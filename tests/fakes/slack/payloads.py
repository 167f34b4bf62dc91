"""Builders for realistic Slack payloads (Events API, interactivity, slash commands).

Event builders (`app_mention`, `message_im`, `thread_message`, `bot_message`,
`message_changed`) return the inner `event`; wrap it with `event_callback(...)` to get the
HTTP body / Socket Mode `events_api` payload. Interaction builders (`block_actions`,
`view_submission`, `slash_command`) return the full payload; for HTTP send it with
`signing.form_body(...)` (slash commands: `urllib.parse.urlencode`).

Defaults match `FakeSlack()`: team `T1`, app `A1`, bot user `UBOT`.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

__all__ = [
    "UNSET_RESPONSE_URL",
    "VERIFICATION_TOKEN",
    "app_mention",
    "block_actions",
    "bot_message",
    "event_callback",
    "message_changed",
    "message_im",
    "slash_command",
    "thread_message",
    "url_verification",
    "view_submission",
]

VERIFICATION_TOKEN = "fake-verification-token"
# Never leaves the machine (port 9 refuses): pass `fake.response_url(id)` to really record.
UNSET_RESPONSE_URL = "http://127.0.0.1:9/response_url/unset"


def _rich_text(text: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "rich_text",
            "block_id": uuid.uuid4().hex[:5],
            "elements": [
                {"type": "rich_text_section", "elements": [{"type": "text", "text": text}]}
            ],
        }
    ]


def _trigger_id() -> str:
    return f"{int(time.time())}.1234567890.{uuid.uuid4().hex}"


def _user_message(
    *,
    channel: str,
    user: str,
    text: str,
    ts: str,
    thread_ts: str | None,
    files: list[dict[str, Any]] | None,
    client_msg_id: str | None,
    team: str,
    channel_type: str | None,
    event_type: str = "message",
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": event_type,
        "client_msg_id": client_msg_id or str(uuid.uuid4()),
        "text": text,
        "user": user,
        "ts": ts,
        "blocks": _rich_text(text),
        "team": team,
        "channel": channel,
        "event_ts": ts,
    }
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    if files:
        event["files"] = files
        event["upload"] = False
        event["display_as_bot"] = False
        if event_type == "message":
            event["subtype"] = "file_share"
    if channel_type is not None:
        event["channel_type"] = channel_type
    return event


def event_callback(
    event: dict[str, Any],
    *,
    event_id: str | None = None,
    team_id: str = "T1",
    api_app_id: str = "A1",
    authed_user: str = "UBOT",
    event_time: int | None = None,
) -> dict[str, Any]:
    """Wrap an event in the `event_callback` envelope Slack POSTs (and sends as events_api)."""
    return {
        "token": VERIFICATION_TOKEN,
        "team_id": team_id,
        "context_team_id": team_id,
        "context_enterprise_id": None,
        "api_app_id": api_app_id,
        "event": event,
        "type": "event_callback",
        "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
        "event_time": event_time if event_time is not None else int(time.time()),
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": team_id,
                "user_id": authed_user,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
        "event_context": f"4-{uuid.uuid4().hex}",
    }


def app_mention(
    channel: str,
    user: str,
    text: str,
    ts: str,
    thread_ts: str | None = None,
    files: list[dict[str, Any]] | None = None,
    client_msg_id: str | None = None,
    *,
    team: str = "T1",
) -> dict[str, Any]:
    """An `app_mention` event (`text` should contain `<@UBOT>` like Slack's)."""
    return _user_message(
        channel=channel,
        user=user,
        text=text,
        ts=ts,
        thread_ts=thread_ts,
        files=files,
        client_msg_id=client_msg_id,
        team=team,
        channel_type=None,
        event_type="app_mention",
    )


def message_im(
    channel: str,
    user: str,
    text: str,
    ts: str,
    thread_ts: str | None = None,
    files: list[dict[str, Any]] | None = None,
    client_msg_id: str | None = None,
    *,
    team: str = "T1",
) -> dict[str, Any]:
    """A direct-message `message` event (`channel_type: im`; with files, subtype file_share)."""
    return _user_message(
        channel=channel,
        user=user,
        text=text,
        ts=ts,
        thread_ts=thread_ts,
        files=files,
        client_msg_id=client_msg_id,
        team=team,
        channel_type="im",
    )


def thread_message(
    channel: str,
    user: str,
    text: str,
    ts: str,
    thread_ts: str,
    files: list[dict[str, Any]] | None = None,
    client_msg_id: str | None = None,
    *,
    parent_user_id: str | None = None,
    channel_type: str = "channel",
    team: str = "T1",
) -> dict[str, Any]:
    """A channel `message` event replying in a thread (carries `thread_ts`)."""
    event = _user_message(
        channel=channel,
        user=user,
        text=text,
        ts=ts,
        thread_ts=thread_ts,
        files=files,
        client_msg_id=client_msg_id,
        team=team,
        channel_type=channel_type,
    )
    if parent_user_id is not None:
        event["parent_user_id"] = parent_user_id
    return event


def bot_message(
    channel: str,
    bot_id: str,
    text: str,
    ts: str,
    thread_ts: str | None = None,
    *,
    username: str = "otherbot",
    user: str | None = None,
    app_id: str | None = None,
    subtype: str | None = "bot_message",
    channel_type: str = "channel",
) -> dict[str, Any]:
    """A message from a bot: `bot_id`, and by default `subtype: bot_message`.

    For a message posted by an app's bot user with a bot token (no subtype, `user` set),
    pass `subtype=None, user="U…"`.
    """
    event: dict[str, Any] = {"type": "message"}
    if subtype is not None:
        event["subtype"] = subtype
    event.update(
        {
            "text": text,
            "ts": ts,
            "bot_id": bot_id,
            "username": username,
            "channel": channel,
            "event_ts": ts,
            "channel_type": channel_type,
        }
    )
    if user is not None:
        event["user"] = user
    if app_id is not None:
        event["app_id"] = app_id
        event["bot_profile"] = {"id": bot_id, "app_id": app_id, "name": username, "deleted": False}
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return event


def message_changed(
    channel: str,
    user: str,
    ts: str,
    text: str,
    previous_text: str,
    *,
    event_ts: str | None = None,
    thread_ts: str | None = None,
    channel_type: str = "channel",
) -> dict[str, Any]:
    """A `message_changed` event: message `ts` by `user` edited from `previous_text`."""
    edited_at = event_ts or f"{int(float(ts)) + 60}.000200"
    message: dict[str, Any] = {
        "type": "message",
        "user": user,
        "text": text,
        "ts": ts,
        "edited": {"user": user, "ts": edited_at},
        "blocks": _rich_text(text),
    }
    previous: dict[str, Any] = {
        "type": "message",
        "user": user,
        "text": previous_text,
        "ts": ts,
        "blocks": _rich_text(previous_text),
    }
    if thread_ts is not None:
        message["thread_ts"] = thread_ts
        previous["thread_ts"] = thread_ts
    return {
        "type": "message",
        "subtype": "message_changed",
        "hidden": True,
        "message": message,
        "previous_message": previous,
        "channel": channel,
        "ts": edited_at,
        "event_ts": edited_at,
        "channel_type": channel_type,
    }


def block_actions(
    action_id: str,
    value: str,
    user: str,
    channel: str,
    message_ts: str,
    thread_ts: str | None = None,
    response_url: str = UNSET_RESPONSE_URL,
    trigger_id: str | None = None,
    *,
    block_id: str = "actions",
    message_text: str = "",
    user_name: str | None = None,
    channel_name: str = "general",
    team_id: str = "T1",
    api_app_id: str = "A1",
    is_ephemeral: bool = False,
) -> dict[str, Any]:
    """A `block_actions` payload for a button click on message `message_ts`.

    Pass `response_url=fake.response_url("id")` so `respond()` reaches the fake.
    """
    name = user_name or user.lower()
    message: dict[str, Any] = {
        "type": "message",
        "user": "UBOT",
        "bot_id": "BBOT",
        "app_id": api_app_id,
        "text": message_text,
        "ts": message_ts,
        "team": team_id,
    }
    if thread_ts is not None:
        message["thread_ts"] = thread_ts
    return {
        "type": "block_actions",
        "user": {"id": user, "username": name, "name": name, "team_id": team_id},
        "api_app_id": api_app_id,
        "token": VERIFICATION_TOKEN,
        "container": {
            "type": "message",
            "message_ts": message_ts,
            "channel_id": channel,
            "is_ephemeral": is_ephemeral,
        },
        "trigger_id": trigger_id or _trigger_id(),
        "team": {"id": team_id, "domain": "fake-team"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel, "name": channel_name},
        "message": message,
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [
            {
                "action_id": action_id,
                "block_id": block_id,
                "text": {"type": "plain_text", "text": action_id, "emoji": True},
                "value": value,
                "type": "button",
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }


def view_submission(
    callback_id: str,
    private_metadata: str,
    user: str,
    values: dict[str, dict[str, Any]],
    *,
    view_id: str = "V00000001",
    user_name: str | None = None,
    team_id: str = "T1",
    api_app_id: str = "A1",
    trigger_id: str | None = None,
) -> dict[str, Any]:
    """A `view_submission` payload.

    `values` maps block_id → {action_id → value}; a str value becomes
    `{"type": "plain_text_input", "value": value}`, a dict is used as the element state.
    """
    state = {
        block_id: {
            action_id: (
                value if isinstance(value, dict) else {"type": "plain_text_input", "value": value}
            )
            for action_id, value in actions.items()
        }
        for block_id, actions in values.items()
    }
    name = user_name or user.lower()
    return {
        "type": "view_submission",
        "team": {"id": team_id, "domain": "fake-team"},
        "user": {"id": user, "username": name, "name": name, "team_id": team_id},
        "api_app_id": api_app_id,
        "token": VERIFICATION_TOKEN,
        "trigger_id": trigger_id or _trigger_id(),
        "view": {
            "id": view_id,
            "team_id": team_id,
            "type": "modal",
            "blocks": [],
            "private_metadata": private_metadata,
            "callback_id": callback_id,
            "state": {"values": state},
            "hash": f"{int(time.time())}.{uuid.uuid4().hex[:8]}",
            "title": {"type": "plain_text", "text": "Form", "emoji": True},
            "clear_on_close": False,
            "notify_on_close": False,
            "close": None,
            "submit": {"type": "plain_text", "text": "Submit", "emoji": True},
            "previous_view_id": None,
            "root_view_id": view_id,
            "app_id": api_app_id,
            "external_id": "",
            "app_installed_team_id": team_id,
            "bot_id": "BBOT",
        },
        "response_urls": [],
        "is_enterprise_install": False,
        "enterprise": None,
    }


def slash_command(
    command: str,
    text: str,
    user: str,
    channel: str,
    response_url: str = UNSET_RESPONSE_URL,
    trigger_id: str | None = None,
    *,
    user_name: str | None = None,
    channel_name: str = "general",
    team_id: str = "T1",
    api_app_id: str = "A1",
) -> dict[str, str]:
    """A slash-command payload (form fields over HTTP, the same dict in Socket Mode)."""
    return {
        "token": VERIFICATION_TOKEN,
        "team_id": team_id,
        "team_domain": "fake-team",
        "channel_id": channel,
        "channel_name": channel_name,
        "user_id": user,
        "user_name": user_name or user.lower(),
        "command": command,
        "text": text,
        "api_app_id": api_app_id,
        "is_enterprise_install": "false",
        "response_url": response_url,
        "trigger_id": trigger_id or _trigger_id(),
    }


def url_verification(challenge: str) -> dict[str, Any]:
    """The `url_verification` handshake body."""
    return {"token": VERIFICATION_TOKEN, "challenge": challenge, "type": "url_verification"}
