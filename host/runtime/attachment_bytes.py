"""The bytes of a file about to be attached, read the one safe way every adapter shares."""

from __future__ import annotations

import asyncio

from core.safe_read import read_regular
from host.runtime.messages import OutboundFile
from host.runtime.ports import FileRefused

UNREADABLE = (
    "it is no longer a plain file where the run left it (moved, removed, or replaced by a link)"
)


async def attachment_bytes(file: OutboundFile) -> bytes:
    """`file`'s bytes (as many as were recorded), read off the event loop without following
    any link; FileRefused (`unreadable`) when that is not possible."""
    try:
        return await asyncio.to_thread(read_regular, file.path, limit=file.size)
    except OSError as exc:
        raise FileRefused(
            f"cannot read {file.name} safely: {exc}", reason="unreadable", why=UNREADABLE
        ) from exc


__all__ = ["UNREADABLE", "attachment_bytes"]
