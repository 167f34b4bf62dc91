"""The Slack HTTP endpoint's own process: `python -m bot.slack.edge_process`.

It shares nothing with the bot but the queue file: not the interpreter lock, not the
garbage collector, not the CPU the bot's loop is busy with. For each POST it verifies the
signature; an event callback is stored in the queue (`SlackEventLog`, committed) and
answered 200 at once, then announced to the bot on stdout as one JSON line
(`{"event": id}`). Any other request (URL verification, button clicks, modal submissions)
is forwarded to the bot's bolt app over a private Unix socket and its answer relayed.

The bot writes the settings as one JSON line on stdin (the signing secret travels there,
never in argv or the environment) and keeps stdin open: when it closes, the bot is gone
(a crash included) and this process ends. The first line on stdout is
`{"listening": port}`, or `{"error": why}` before it exits.
"""

from __future__ import annotations

import asyncio
import errno
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import ClientSession, UnixConnector, web
from pydantic import BaseModel, ConfigDict
from slack_sdk.signature import SignatureVerifier

from bot.slack.event_log import QueuedEvent, SlackEventLog, event_id_of

BIND_PAUSE_SECONDS = 0.1
# Headers a forwarded request keeps (the others describe the connection, not the request).
_HOP_BY_HOP = {"host", "content-length", "connection", "transfer-encoding", "keep-alive"}


class EdgeSettings(BaseModel):
    """What the bot tells the edge at start (one JSON line on stdin)."""

    model_config = ConfigDict(extra="forbid")

    host: str
    port: int
    path: str
    queue: Path
    bot_socket: Path
    signing_secret: str
    # How long a port in use is tried again: the edge of a bot that was just killed may
    # still hold it for a moment.
    bind_wait_seconds: float = 2.0


class Edge:
    """The endpoint: verify, queue and announce events; forward everything else."""

    def __init__(self, settings: EdgeSettings, announce: Callable[[dict[str, Any]], None]) -> None:
        self._settings = settings
        self._announce = announce
        self._verifier = SignatureVerifier(settings.signing_secret)
        self._queue = SlackEventLog(settings.queue)
        self._bot: ClientSession | None = None

    async def listen(self) -> web.AppRunner:
        app = web.Application()
        app.router.add_post(self._settings.path, self._request)
        app.router.add_get("/healthz", _health)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        self._bot = ClientSession(connector=UnixConnector(path=str(self._settings.bot_socket)))
        deadline = asyncio.get_running_loop().time() + self._settings.bind_wait_seconds
        while True:
            try:
                await web.TCPSite(runner, self._settings.host, self._settings.port).start()
                return runner
            except OSError as exc:
                late = asyncio.get_running_loop().time() >= deadline
                if exc.errno != errno.EADDRINUSE or late:
                    await self.close(runner)
                    raise
                await asyncio.sleep(BIND_PAUSE_SECONDS)

    async def close(self, runner: web.AppRunner) -> None:
        await runner.cleanup()
        if self._bot is not None:
            await self._bot.close()
        self._queue.close()

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
            return await self._forward(request, body, headers)
        if self._queue.add(QueuedEvent(event_id, body, headers)):
            self._announce({"event": event_id})
        return web.Response(status=200)

    async def _forward(
        self, request: web.Request, body: bytes, headers: dict[str, str]
    ) -> web.Response:
        assert self._bot is not None
        kept = {k: v for k, v in headers.items() if k not in _HOP_BY_HOP}
        url = f"http://bot{request.path_qs}"
        async with self._bot.post(url, data=body, headers=kept) as answer:
            relayed = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP}
            return web.Response(status=answer.status, body=await answer.read(), headers=relayed)


async def _health(_: web.Request) -> web.Response:
    return web.Response(text="ok")


def _say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def _serve() -> int:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        settings = EdgeSettings.model_validate_json(await reader.readline())
    except ValueError as exc:
        _say({"error": f"bad settings on stdin: {exc}"})
        return 2
    edge = Edge(settings, _say)
    try:
        runner = await edge.listen()
    except OSError as exc:
        _say({"error": exc.strerror or str(exc)})  # asyncio's names the address
        return 1
    _say({"listening": int(runner.addresses[0][1])})
    # Serve until the bot closes stdin (it stopped, or it died: the pipe closes either way).
    while await reader.read(4096):
        pass
    await edge.close(runner)
    return 0


def main() -> int:
    return asyncio.run(_serve())


if __name__ == "__main__":
    sys.exit(main())
