"""Shared files: downloaded (within a size cap) into the conversation workspace, and
described to the Host. Every platform uses this; only the url and its headers differ."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import aiohttp

from host.runtime.messages import Attachment

log = logging.getLogger(__name__)

DOWNLOAD_TIMEOUT_SECONDS = 60.0


def attachment_path(folder: Path, message_id: str, name: str) -> Path:
    """Where a shared file lands: `<workspace>/attachments/<message>-<safe name>`."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:120] or "file"
    return folder / "attachments" / f"{message_id.replace('.', '_')}-{safe}"


async def download(
    attachment: Attachment,
    target: Path,
    *,
    cap: int,
    headers: Mapping[str, str] | None = None,
    platform: str,
) -> Attachment:
    """The attachment with `local_path` set once saved; unchanged when it has no url, is
    larger than `cap`, or the download fails (logged, never raised)."""
    if attachment.url is None or attachment.size > cap:
        return attachment
    timeout = aiohttp.ClientTimeout(total=DOWNLOAD_TIMEOUT_SECONDS)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(attachment.url, headers=dict(headers or {})) as resp,
        ):
            if resp.status != 200:
                log.warning(
                    "%s: file download %s → HTTP %s", platform, attachment.name, resp.status
                )
                return attachment
            data = await resp.content.read(cap + 1)
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.warning("%s: file download %s failed: %s", platform, attachment.name, exc)
        return attachment
    if len(data) > cap:
        return attachment
    await asyncio.to_thread(_write_bytes, target, data)
    return attachment.model_copy(update={"local_path": target, "size": len(data)})


def files_note(attachments: Sequence[Attachment]) -> str:
    """What the Host is told about the shared files ("" when there are none)."""
    notes = [
        f"- {a.name} ({a.size} bytes): {a.local_path}"
        if a.local_path is not None
        else f"- {a.name}: not downloaded (too large or unavailable)"
        for a in attachments
    ]
    return "Files shared with this message:\n" + "\n".join(notes) if notes else ""


def _write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
