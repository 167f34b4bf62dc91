"""The HTTP Events API endpoint, in a process of its own (`bot.slack.edge_process`).

Slack wants every POST answered within 3 s and retries what is not; the bot's loop runs
turns, encoders and collections, and its one SQLite writer queues an event's claim behind
their writes. A thread of the bot's own still waited for the interpreter lock and stopped
for every collection (ack p99 35–60 ms at 200 events/s with the bot busy). So the endpoint
lives in another process: it verifies the signature, stores an event in the queue file
(`SlackEventLog`) and answers 200; it then announces the event on its stdout, and the bot's
loop hands it to the bolt app, whose listener records it in raven.db, and removes it from
the queue. A crash in between leaves it queued: it is handed over at the next start (the
listener's dedup keeps that from doubling anything).

Requests that are not event callbacks (URL verification, button clicks, modal
submissions: rare, and a modal's validation errors travel in the answer) are forwarded by
the edge to the bolt app here, over a Unix socket in a folder only this user can enter.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest

from bot.slack.config import SlackConfig
from bot.slack.edge_process import EdgeSettings
from bot.slack.event_log import QueuedEvent, SlackEventLog

log = logging.getLogger(__name__)

STOP_SECONDS = 5.0  # the edge's time to close its socket once told to, before it is killed
RESTART_SECONDS = 1.0  # pause before starting an edge that died again
# What the edge's interpreter needs of the environment.
_EDGE_ENV = frozenset({"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "TZ"})


class EdgeStartError(OSError):
    """The edge process could not listen; the message says why."""


class SlackEdge:
    """Runs the edge process for `config.http_path` and takes in what it announces."""

    def __init__(
        self,
        config: SlackConfig,
        app: AsyncApp,
        queue: SlackEventLog,
        *,
        bind_wait_seconds: float = 2.0,
    ) -> None:
        """`bind_wait_seconds`: how long a port in use is tried again at start."""
        self._config = config
        self._bind_wait = bind_wait_seconds
        self._app = app
        self._queue = queue
        self._folder: Path | None = None
        self._forwarded: web.AppRunner | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._stopping = False
        # Events being handed to the bolt app (owned here).
        self._handing: set[asyncio.Task[None]] = set()
        self.port: int | None = None

    async def start(self) -> None:
        """Hand over what a crash left queued, then start the edge (EdgeStartError when it
        cannot listen)."""
        for event in await asyncio.to_thread(self._queue.pending):
            self._hand_over(event)
        self._folder = Path(tempfile.mkdtemp(prefix="raven-slack-"))  # mode 0700
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._answer_forwarded)
        self._forwarded = web.AppRunner(app, access_log=None)
        await self._forwarded.setup()
        await web.UnixSite(self._forwarded, str(self._socket)).start()
        try:
            self.port = await self._launch(self._config.http_port)
        except BaseException:
            await self._close_forwarding()
            raise
        self._watcher = asyncio.create_task(self._watch(), name="slack-edge")

    async def stop(self) -> None:
        """Stop the edge (it closes its socket); wait for the events already handed over
        (idempotent)."""
        self._stopping = True
        watcher, self._watcher = self._watcher, None
        await self._end_process()
        if watcher is not None:
            await asyncio.gather(watcher, return_exceptions=True)
        await self._close_forwarding()
        while self._handing:
            await asyncio.gather(*self._handing, return_exceptions=True)

    @property
    def _socket(self) -> Path:
        assert self._folder is not None
        return self._folder / "bolt.sock"

    # -- the edge process -----------------------------------------------------------------

    async def _launch(self, port: int) -> int:
        """Start the edge on `port` (0: any) and return the port it listens on."""
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot.slack.edge_process",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            # Its own session: a Ctrl-C at the console is the bot's to handle; the edge ends
            # when the bot closes its stdin (or dies: the pipe closes all the same).
            start_new_session=True,
            # Nothing of the bot's environment (tokens, keys): the signing secret comes on
            # stdin.
            env={k: v for k, v in os.environ.items() if k in _EDGE_ENV},
        )
        self._process = process
        assert process.stdin is not None and process.stdout is not None
        settings = EdgeSettings(
            host=self._config.http_host,
            port=port,
            path=self._config.http_path,
            queue=self._queue.path,
            bot_socket=self._socket,
            signing_secret=self._config.signing_secret or "",
            bind_wait_seconds=self._bind_wait,
        )
        process.stdin.write(settings.model_dump_json().encode() + b"\n")
        await process.stdin.drain()
        first = json.loads(await process.stdout.readline() or b'{"error": "it exited"}')
        if "listening" not in first:
            await self._end_process()
            raise EdgeStartError(f"the Slack HTTP endpoint did not start: {first.get('error')}")
        return int(first["listening"])

    async def _watch(self) -> None:
        """Take in the events the edge announces; start it again if it dies."""
        while True:
            process = self._process
            assert process is not None and process.stdout is not None
            while line := await process.stdout.readline():
                try:
                    await self._announced(line)
                except Exception:  # one bad line must not end the watch; the event stays queued
                    log.exception("slack: could not take in %r from the HTTP endpoint", line[:200])
            if self._stopping:
                return
            code = await process.wait()
            log.error("slack: the HTTP endpoint's process ended (%s); starting it again", code)
            while not self._stopping:
                await asyncio.sleep(RESTART_SECONDS)
                try:
                    await self._launch(self.port or self._config.http_port)
                    break
                except OSError as exc:  # EdgeStartError, or it could not be spawned
                    log.error("slack: %s; trying again", exc)
            if self._stopping:
                return

    async def _announced(self, line: bytes) -> None:
        message = json.loads(line)
        event_id = message.get("event") if isinstance(message, dict) else None
        if isinstance(event_id, str):
            event = await asyncio.to_thread(self._queue.get, event_id)
            if event is not None:
                self._hand_over(event)

    async def _end_process(self) -> None:
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        assert process.stdin is not None
        process.stdin.close()  # its cue to close the socket and exit
        try:
            await asyncio.wait_for(process.wait(), STOP_SECONDS)
        except TimeoutError:
            log.warning("slack: the HTTP endpoint's process did not stop; killed")
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

    async def _close_forwarding(self) -> None:
        if self._forwarded is not None:
            await self._forwarded.cleanup()
            self._forwarded = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    # -- the bot's loop ---------------------------------------------------------------------

    async def _answer_forwarded(self, request: web.Request) -> web.Response:
        """A request the edge verified and forwards: bolt answers it."""
        body = await request.read()
        bolt = AsyncBoltRequest(
            body=body.decode("utf-8"),
            query=request.query_string,
            headers={k.lower(): v for k, v in request.headers.items()},
        )
        return await to_aiohttp_response(await self._app.async_dispatch(bolt))

    def _hand_over(self, event: QueuedEvent) -> None:
        task = asyncio.get_running_loop().create_task(
            self._handle(event), name=f"slack:{event.event_id}"
        )
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
