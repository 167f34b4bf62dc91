"""A loopback fake Discord (REST API v10 + gateway) and payload builders, for driving the
real discord.py client offline."""

from __future__ import annotations

from tests.fakes.discord import payloads
from tests.fakes.discord.commands import CommandSync
from tests.fakes.discord.server import (
    INTERACTION_TTL_S,
    MESSAGE_CONTENT_INTENT,
    FakeDiscord,
    Recorded,
    StoredAttachment,
    UploadedFile,
)

__all__ = [
    "INTERACTION_TTL_S",
    "MESSAGE_CONTENT_INTENT",
    "CommandSync",
    "FakeDiscord",
    "Recorded",
    "StoredAttachment",
    "UploadedFile",
    "payloads",
]
