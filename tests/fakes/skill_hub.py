"""A skill hub on 127.0.0.1 (aiohttp): answers `GET /search` with whatever the test scripts,
records the queries, and can hold its answer until released (a slow hub)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web


class FakeHub:
    """The hub's scripted answer, status and delay, and the queries it received."""

    def __init__(self) -> None:
        self.answer: Any = {"skills": []}
        self.status = 200
        self.delay = False  # hold every answer until `release` is set
        self.queries: list[dict[str, str]] = []
        self.release = asyncio.Event()
        self.url = ""

    async def search(self, request: web.Request) -> web.Response:
        self.queries.append({**request.query, "auth": request.headers.get("Authorization", "")})
        if self.delay:
            await self.release.wait()
        return web.json_response(self.answer, status=self.status)


@asynccontextmanager
async def serving_hub() -> AsyncIterator[FakeHub]:
    """A running fake hub; `url` is its base URL."""
    hub = FakeHub()
    app = web.Application()
    app.router.add_get("/search", hub.search)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    hub.url = f"http://127.0.0.1:{port}"
    try:
        yield hub
    finally:
        hub.release.set()
        await runner.cleanup()
