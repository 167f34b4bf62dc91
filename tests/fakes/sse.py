"""Server-sent events for the loopback model fakes: a reply streamed event by event, at a
set pace, optionally cut off mid-way (the connection dropped, or the body ended early)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

# One event: its `event:` name (None: data only, as Chat Completions sends) and its data.
Event = tuple[str | None, Mapping[str, Any] | str]


@dataclass(frozen=True)
class Cut:
    """Where a stream stops early: after `after` events, with the connection dropped (as a
    crashed server or a broken proxy) or, when `drop` is False, a cleanly ended body."""

    after: int
    drop: bool = True


def pieces(text: str, size: int = 8) -> list[str]:
    """`text` in pieces of `size` characters, as a model streams tokens (at least one)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


async def send_events(
    request: web.Request,
    events: Sequence[Event],
    *,
    pace: float,
    closing: asyncio.Event,
    cut: Cut | None = None,
    headers: Mapping[str, str] | None = None,
) -> web.StreamResponse:
    """Stream `events` as `text/event-stream`, `pace` seconds apart (waiting on `closing`, so
    stopping the fake ends it at once), stopping early at `cut`."""
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            **(headers or {}),
        }
    )
    await response.prepare(request)
    for n, (name, data) in enumerate(events):
        if cut is not None and n >= cut.after:
            if cut.drop and request.transport is not None:
                request.transport.abort()  # no end of the chunked body: a torn connection
                return response
            break
        if pace > 0 and n > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(closing.wait(), timeout=pace)
        payload = data if isinstance(data, str) else json.dumps(data)
        frame = (f"event: {name}\n" if name else "") + f"data: {payload}\n\n"
        await response.write(frame.encode())
    await response.write_eof()
    return response
