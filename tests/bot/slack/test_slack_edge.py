"""The Slack HTTP edge's own parts: the event queue file, and a port already taken."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, cast

import pytest

from bot.slack.config import SlackConfig
from bot.slack.edge import SlackEdge
from bot.slack.event_log import QueuedEvent, SlackEventLog, event_id_of


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
