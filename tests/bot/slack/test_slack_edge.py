"""The Slack HTTP edge's own parts: the event queue file, a port already taken, and the
endpoint's process (what it is given, and its restart)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from bot.slack.config import SlackConfig
from bot.slack.edge import SlackEdge
from bot.slack.event_log import QueuedEvent, SlackEventLog, event_id_of
from tests.fakes.slack import json_body, payloads, sign
from tests.helpers import eventually


def test_the_queue_keeps_one_row_per_event_until_it_is_done(tmp_path: Path) -> None:
    path = tmp_path / "slack-events.db"
    queue = SlackEventLog(path)
    first = QueuedEvent("Ev1", b'{"n": 1}', {"content-type": "application/json"})
    assert queue.add(first)
    assert not queue.add(QueuedEvent("Ev1", b'{"n": "retry"}', {}))  # a retry while queued
    assert queue.add(QueuedEvent("Ev2", b"{}", {}))
    queue.done("Ev2")
    queue.close()
    reopened = SlackEventLog(path)  # what a restart finds
    try:
        assert reopened.pending() == [first]
    finally:
        reopened.close()


def test_only_event_callbacks_are_queued() -> None:
    json_headers = {"content-type": "application/json"}
    assert event_id_of(b'{"type": "event_callback", "event_id": "Ev9"}', json_headers) == "Ev9"
    assert event_id_of(b'{"type": "url_verification", "challenge": "c"}', json_headers) is None
    assert event_id_of(b"not json", json_headers) is None
    form = {"content-type": "application/x-www-form-urlencoded"}
    assert event_id_of(b"payload=%7B%7D", form) is None


async def test_a_port_already_taken_fails_start_and_stop_still_works(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        config = SlackConfig(
            bot_token="xoxb-test", signing_secret="s", http_host="127.0.0.1", http_port=port
        )
        queue = SlackEventLog(tmp_path / "slack-events.db")
        # The app is never reached; a port in use is not tried again.
        edge = SlackEdge(config, cast(Any, None), queue, bind_wait_seconds=0)
        with pytest.raises(OSError, match=f"(?i){port}.*address already in use"):
            await edge.start()
        await edge.stop()
        queue.close()


class RecordingApp:
    """The bolt app's one method the edge calls: records what it was handed, answers 200."""

    def __init__(self) -> None:
        self.bodies: list[str] = []

    async def async_dispatch(self, request: AsyncBoltRequest) -> BoltResponse:
        self.bodies.append(request.raw_body)
        return BoltResponse(status=200, body='{"ok": true}')


async def test_the_endpoint_process_holds_no_secret_and_is_started_again_if_it_dies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where the bot's secrets are (`make run` reads them from the environment).
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "the-signing-secret")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    config = SlackConfig(
        bot_token="xoxb-secret-token",
        signing_secret="the-signing-secret",
        http_host="127.0.0.1",
        http_port=0,
    )
    queue = SlackEventLog(tmp_path / "slack-events.db")
    app = RecordingApp()
    edge = SlackEdge(config, cast(Any, app), queue)
    await edge.start()
    try:
        process = edge._process
        assert process is not None
        # Neither its command line nor its environment carries a token or the secret.
        for name in ("cmdline", "environ"):
            seen = await asyncio.to_thread(Path(f"/proc/{process.pid}/{name}").read_bytes)
            assert b"secret" not in seen, name
        process.kill()  # as if it crashed

        async with aiohttp.ClientSession() as session:

            async def delivered() -> bool:
                body = json_body(payloads.event_callback({"type": "app_mention"}, event_id="Ev42"))
                headers = {**sign(config.signing_secret or "", body)}
                headers["Content-Type"] = "application/json"
                url = f"http://127.0.0.1:{edge.port}{config.http_path}"
                try:
                    async with session.post(url, data=body, headers=headers) as answer:
                        return answer.status == 200
                except aiohttp.ClientError:
                    return False  # not listening again yet

            await eventually(delivered, within=30)
        await eventually(lambda: any('"Ev42"' in body for body in app.bodies), within=30)
        assert edge._process is not process
    finally:
        await edge.stop()
        queue.close()
