"""The real bot process over the HTTP Events API (`raven-bot run` with a signing secret)
against the loopback fake: an event is acknowledged while raven.db cannot be written (the
ack waits for the edge's own queue only), the bot is killed with SIGKILL before recording
it, and after the restart it is answered exactly once, a Slack retry included."""

from __future__ import annotations

import signal
import socket
import sqlite3
from asyncio.subprocess import Process
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import aiohttp
import pytest

from tests.bot_process import bot_process
from tests.fakes.slack import FakeSlack, json_body, payloads, sign
from tests.helpers import eventually
from tests.slack_harness import BOT_TOKEN, CHANNEL, SECRET

# Real processes: `-m "not slow"` skips them.
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _bot(fake: FakeSlack, home: Path, port: int) -> AbstractAsyncContextManager[Process]:
    return bot_process(
        home,
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SECRET,
        RAVEN_SLACK_API_URL=fake.api_url,
        RAVEN_SLACK_HTTP_HOST="127.0.0.1",
        RAVEN_SLACK_HTTP_PORT=str(port),
    )


async def _serving(session: aiohttp.ClientSession, port: int) -> bool:
    try:
        async with session.get(f"http://127.0.0.1:{port}/healthz") as resp:
            return resp.status == 200
    except aiohttp.ClientError:
        return False


async def _post(
    session: aiohttp.ClientSession, port: int, body: bytes, *, retry: int | None = None
) -> int:
    headers = {**sign(SECRET, body), "Content-Type": "application/json"}
    if retry is not None:
        headers |= {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"}
    async with session.post(
        f"http://127.0.0.1:{port}/slack/events", data=body, headers=headers
    ) as resp:
        return resp.status


async def test_an_event_acked_before_a_kill_9_is_answered_once_after_the_restart(
    isolated_env: Path,
) -> None:
    port = _free_port()
    async with FakeSlack() as fake, aiohttp.ClientSession() as session:
        ts = fake.next_ts()
        event = payloads.app_mention(CHANNEL, "U1", "<@UBOT> help", ts)
        body = json_body(payloads.event_callback(event, event_id="Ev0001"))

        def replies() -> list[object]:
            return [
                c
                for c in fake.calls_to("chat.postMessage")
                if c.args.get("thread_ts") == ts and c.args.get("channel") == CHANNEL
            ]

        async with _bot(fake, isolated_env, port) as proc:
            await eventually(lambda: _serving(session, port), within=60)
            # Another process holds raven.db's write lock: the bot cannot record anything.
            blocker = sqlite3.connect(isolated_env / "raven.db", isolation_level=None)
            blocker.execute("BEGIN IMMEDIATE")
            try:
                assert await _post(session, port, body) == 200
                proc.send_signal(signal.SIGKILL)
                await proc.wait()

                async def edge_gone() -> bool:
                    return not await _serving(session, port)

                # The endpoint's own process ends with the bot (its stdin pipe closes).
                await eventually(edge_gone, within=30)
            finally:
                blocker.execute("ROLLBACK")
                blocker.close()
        assert replies() == []
        async with _bot(fake, isolated_env, port):
            await eventually(lambda: _serving(session, port), within=60)
            await eventually(lambda: len(replies()) == 1, within=60)
            # Slack retries the delivery it saw answered late: acknowledged, not answered.
            assert await _post(session, port, body, retry=1) == 200
            await eventually(lambda: _serving(session, port), within=60)
            queue = sqlite3.connect(isolated_env / "slack-events.db")
            try:

                def drained() -> bool:
                    return queue.execute("SELECT COUNT(*) FROM slack_events").fetchone()[0] == 0

                await eventually(drained, within=60)
            finally:
                queue.close()
        assert len(replies()) == 1
