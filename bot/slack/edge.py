"""The HTTP Events API endpoint, on its own thread and event loop.

Slack wants every POST answered within 3 s and retries what is not; the bot's loop runs
turns, encoders and collections, and its one SQLite writer queues an event's claim behind
their writes. So the endpoint lives apart: its thread verifies the signature, stores an
event in its own queue file (`SlackEventLog`, its own connection) and answers 200; the
bot's loop then hands the event to the bolt app, whose listener records it in raven.db,
and removes it from the queue. A crash in between leaves it queued: it is handed over at
the next start (the listener's dedup keeps that from doubling anything).

Requests that are not event callbacks (URL verification, button clicks, modal
submissions: rare, and a modal's validation errors travel in the answer) are answered by
the bolt app on the bot's loop, as before.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.signature import SignatureVerifier

from bot.slack.config import SlackConfig
from bot.slack.event_log import QueuedEvent, SlackEventLog

log = logging.getLogger(__name__)


def event_id_of(body: bytes, headers: dict[str, str]) -> str | None:
    """The `event_id` of an Events API callback (None for any other request)."""
    if not headers.get("content-type", "").startswith("application/json"):
        return None
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    if not isinstance(payload, dict) or payload.get("type") != "event_callback":
        return None
    event_id = payload.get("event_id")
    return event_id if isinstance(event_id, str) and event_id else None


class SlackEdge:
    """Serves `config.http_path` (and `/healthz`) from a thread of its own."""

    def __init__(self, config: SlackConfig, app: AsyncApp, queue: SlackEventLog) -> None:
        self._config = config
        self._app = app
        self._queue = queue
        self._verifier = SignatureVerifier(config.signing_secret or "")
        self._bot_loop: asyncio.AbstractEventLoop | None = None
        self._edge_loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # Events being handed to the bolt app on the bot's loop (owned here).
        self._handing: set[asyncio.Task[None]] = set()
        self.port: int | None = None

    async def start(self) -> None:
        """Hand over what a crash left queued, then listen (raises when it cannot bind)."""
        self._bot_loop = asyncio.get_running_loop()
        for event in await asyncio.to_thread(self._queue.pending):
            self._hand_over(event)
        listening: concurrent.futures.Future[int] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._serve, args=(listening,), name="slack-edge", daemon=True
        )
        self._thread.start()
        self.port = await asyncio.wrap_future(listening)

    async def stop(self) -> None:
        """Stop listening; wait for the events already handed over (idempotent)."""
        loop, thread = self._edge_loop, self._thread
        self._thread = None
        if loop is not None and thread is not None:
            if not loop.is_closed():  # closed: it never listened (`start` raised)
                loop.call_soon_threadsafe(loop.stop)
            await asyncio.to_thread(thread.join)
        while self._handing:
            await asyncio.gather(*self._handing, return_exceptions=True)

    # -- the edge's thread ----------------------------------------------------------------

    def _serve(self, listening: concurrent.futures.Future[int]) -> None:
        loop = asyncio.new_event_loop()
        self._edge_loop = loop
        try:
            runner = loop.run_until_complete(self._listen())
        except Exception as exc:  # handed to `start`, which raises it (the loop closed first)
            loop.close()
            listening.set_exception(exc)
            return
        listening.set_result(int(runner.addresses[0][1]))
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(runner.cleanup())
            loop.close()

    async def _listen(self) -> web.AppRunner:
        web_app = web.Application()
        web_app.router.add_post(self._config.http_path, self._request)
        web_app.router.add_get("/healthz", _health)
        runner = web.AppRunner(web_app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, self._config.http_host, self._config.http_port).start()
        except BaseException:
            await runner.cleanup()
            raise
        return runner

    async def _request(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        if not self._verifier.is_valid(
            body=body,
            timestamp=headers.get("x-slack-request-timestamp"),
            signature=headers.get("x-slack-signature"),
        ):
            return web.Response(status=401, text="invalid request signature")
        event_id = event_id_of(body, headers)
        if event_id is None:
            return await self._answered_by_bolt(body, headers, request.query_string)
        event = QueuedEvent(event_id, body, headers)
        if self._queue.add(event):
            assert self._bot_loop is not None
            self._bot_loop.call_soon_threadsafe(self._hand_over, event)
        return web.Response(status=200)

    async def _answered_by_bolt(
        self, body: bytes, headers: dict[str, str], query: str
    ) -> web.Response:
        assert self._bot_loop is not None
        request = AsyncBoltRequest(body=body.decode("utf-8"), query=query, headers=dict(headers))
        answer = asyncio.run_coroutine_threadsafe(self._app.async_dispatch(request), self._bot_loop)
        return await to_aiohttp_response(await asyncio.wrap_future(answer))

    # -- the bot's loop ---------------------------------------------------------------------

    def _hand_over(self, event: QueuedEvent) -> None:
        assert self._bot_loop is not None
        task = self._bot_loop.create_task(self._handle(event), name=f"slack:{event.event_id}")
        self._handing.add(task)
        task.add_done_callback(self._handing.discard)

    async def _handle(self, event: QueuedEvent) -> None:
        request = AsyncBoltRequest(body=event.body.decode("utf-8"), headers=dict(event.headers))
        try:
            answer = await self._app.async_dispatch(request)
        except Exception:
            log.exception(
                "slack: event %s failed; it is handed over again at the next start", event.event_id
            )
            return
        if answer.status != 200:
            log.warning(
                "slack: event %s was not recorded (%s); it is handed over again at the next start",
                event.event_id,
                answer.status,
            )
            return
        await asyncio.to_thread(self._queue.done, event.event_id)


async def _health(_: web.Request) -> web.Response:
    return web.Response(text="ok")
