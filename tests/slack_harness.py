"""Runs the real assembled bot with its Slack adapter against the loopback fake Slack."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from bot.app import Runtime, build_runtime, serve
from bot.settings import load_settings
from bot.slack.adapter import SlackAdapter
from bot.slack.factory import slack_adapter
from core.ids import ConversationRef
from tests.fakes.slack import FakeSlack, SlashCommand, command_body, json_body, payloads, sign
from tests.helpers import eventually

SECRET = "test-signing-secret"
BOT_TOKEN = "xoxb-0000-1111-testtoken"
APP_TOKEN = "xapp-1-A1-0000-testtoken"
CHANNEL = "C0GENERAL"


@dataclass
class SlackBot:
    """The running bot, its fake Slack and helpers to talk to it."""

    fake: FakeSlack
    runtime: Runtime
    adapter: SlackAdapter
    transport: str
    session: aiohttp.ClientSession

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.adapter.http_port}/slack/events"

    def ts(self) -> str:
        return self.fake.next_ts()

    async def post_raw(self, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
        async with self.session.post(self.url, data=body, headers=headers) as resp:
            return resp.status, await resp.text()

    async def send(
        self, payload: dict[str, Any], *, retry_num: int | None = None, form: bool = False
    ) -> int:
        """Deliver an event/interaction over the configured transport; HTTP status (or 200)."""
        if self.transport == "socket":
            kind = (
                "interactive"
                if payload.get("type") in {"block_actions", "view_submission"}
                else "events_api"
            )
            envelope = await self.fake.send_envelope(kind, payload, retry_attempt=retry_num or 0)
            await self.fake.wait_for_ack(envelope)
            return 200
        if form:
            from tests.fakes.slack import form_body

            body = form_body(payload)
            content_type = "application/x-www-form-urlencoded"
        else:
            body = json_body(payload)
            content_type = "application/json"
        headers = {**sign(SECRET, body), "Content-Type": content_type}
        if retry_num is not None:
            headers["X-Slack-Retry-Num"] = str(retry_num)
            headers["X-Slack-Retry-Reason"] = "http_timeout"
        status, _ = await self.post_raw(body, headers)
        return status

    async def mention(
        self,
        text: str,
        *,
        user: str = "U1",
        thread_ts: str | None = None,
        event_id: str | None = None,
        files: list[dict[str, Any]] | None = None,
        ts: str | None = None,
    ) -> tuple[str, dict[str, Any]]:
        ts = ts or self.ts()
        event = payloads.app_mention(
            CHANNEL, user, f"<@UBOT> {text}", ts, thread_ts=thread_ts, files=files
        )
        body = payloads.event_callback(event, event_id=event_id)
        assert await self.send(body) == 200
        return ts, body

    async def replies_in(self, thread: str, count: int = 1) -> list[dict[str, Any]]:
        """Wait for `count` bot posts in a thread; return all of them."""
        await eventually(lambda: len(self.posts(thread)) >= count)
        return self.posts(thread)

    def conversation(self, thread: str) -> ConversationRef:
        """The conversation of a thread in the test channel."""
        return ConversationRef("slack", self.fake.team_id, CHANNEL, thread)

    async def settle(self, thread: str) -> None:
        """Wait until everything delivered so far has run its course: the adapter's after-ack
        work (clicks, refusals) and the thread's dispatch, turns and graph runs.

        Deliveries are acked only after their listener ran (`process_before_response`), so
        once `send` returned, whatever the delivery started is covered by this wait.
        """
        await self.adapter.idle()
        await self.runtime.service.quiesce(self.conversation(thread))
        await self.adapter.idle()

    async def click(self, button: dict[str, Any], user: str, thread: str, prompt_ts: str) -> None:
        """`user` clicks `button` of the prompt posted as `prompt_ts` in `thread`."""
        body = payloads.block_actions(
            button["action_id"],
            button["value"],
            user,
            CHANNEL,
            prompt_ts,
            thread_ts=thread,
            response_url=self.fake.response_url("r1"),
        )
        assert await self.send(body, form=True) == 200

    async def slash(self, text: str, *, user: str = "U1", command: str = "/raven") -> SlashCommand:
        """`user` types `command text` in the test channel, over the bot's transport. The ack
        is in the result; later answers are `fake.responses_to(result)` (response_url) and
        `fake.ephemeral_posts(user)`."""
        if self.transport == "socket":
            return await self.fake.send_slash_command(
                text, user=user, channel=CHANNEL, command=command
            )
        payload, url_id = self.fake.slash_command_payload(
            text, user=user, channel=CHANNEL, command=command
        )
        body = command_body(payload)
        headers = {**sign(SECRET, body), "Content-Type": "application/x-www-form-urlencoded"}
        status, answer = await self.post_raw(body, headers)
        assert status == 200, f"{command} {text} was answered {status}: {answer}"
        return SlashCommand("", payload, {"payload": json.loads(answer)} if answer else {}, url_id)

    def posts(self, thread: str | None = None) -> list[dict[str, Any]]:
        calls = [c for c in self.fake.calls_to("chat.postMessage") if c.ok]
        return [c.args for c in calls if thread is None or c.args.get("thread_ts") == thread]


def buttons(post: dict[str, Any]) -> list[dict[str, Any]]:
    """The buttons of a post (its blocks as the Web API got them; none without blocks)."""
    blocks = post.get("blocks") or []
    blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
    actions = [b for b in blocks if b["type"] == "actions"]
    return list(actions[0]["elements"]) if actions else []


@asynccontextmanager
async def slack_bot(
    monkeypatch: pytest.MonkeyPatch,
    *,
    transport: str = "http",
    env: dict[str, str] | None = None,
    fake: FakeSlack | None = None,
) -> AsyncIterator[SlackBot]:
    """Start FakeSlack (unless given) and the bot; stop both afterwards."""
    own_fake = fake is None
    fake = fake or FakeSlack()
    if own_fake:
        await fake.start()
    fake.add_user("U1", "alice", real_name="Alice A", display_name="alice")
    fake.add_user("U2", "bob", real_name="Bob B", display_name="bob")
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("RAVEN_SLACK_API_URL", fake.api_url)
    monkeypatch.setenv("RAVEN_SLACK_HTTP_HOST", "127.0.0.1")
    monkeypatch.setenv("RAVEN_SLACK_HTTP_PORT", "0")
    if transport == "socket":
        monkeypatch.setenv("SLACK_APP_TOKEN", APP_TOKEN)
    else:
        monkeypatch.setenv("SLACK_SIGNING_SECRET", SECRET)
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    runtime = await build_runtime(settings, [functools.partial(slack_adapter, settings)])
    adapter = runtime.adapters[0]
    assert isinstance(adapter, SlackAdapter)
    task = asyncio.create_task(serve(runtime))
    session = aiohttp.ClientSession()
    try:
        # A hang guard: with the product's defaults, start-up loads the MiniLM embedder first.
        async with asyncio.timeout(60):
            await adapter.ready.wait()
        if transport == "socket":
            await fake.wait_connected()
        yield SlackBot(fake, runtime, adapter, transport, session)
    finally:
        await session.close()
        await adapter.close()
        await asyncio.wait_for(task, 30)
        if own_fake:
            await fake.stop()


__all__ = ["APP_TOKEN", "BOT_TOKEN", "CHANNEL", "SECRET", "SlackBot", "buttons", "slack_bot"]
