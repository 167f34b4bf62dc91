"""Sign request bodies the way Slack does (v0 HMAC-SHA256), for HTTP Events/interactivity tests."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any
from urllib.parse import urlencode

__all__ = [
    "FORM_CONTENT_TYPE",
    "JSON_CONTENT_TYPE",
    "command_body",
    "form_body",
    "json_body",
    "sign",
]

FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"
JSON_CONTENT_TYPE = "application/json"


def sign(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """Headers `X-Slack-Request-Timestamp` and `X-Slack-Signature` for exactly these bytes.

    `timestamp` defaults to now; bolt rejects anything more than 300 s away from its clock.
    """
    ts = int(time.time()) if timestamp is None else timestamp
    base = b"v0:" + str(ts).encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": str(ts), "X-Slack-Signature": f"v0={digest}"}


def form_body(payload: dict[str, Any]) -> bytes:
    """An interactivity body: `payload=<json>`, urlencoded (send as FORM_CONTENT_TYPE)."""
    return urlencode({"payload": json.dumps(payload)}).encode()


def command_body(payload: dict[str, str]) -> bytes:
    """A slash-command body: the fields themselves, urlencoded (no `payload=` wrapper, unlike
    interactivity; send as FORM_CONTENT_TYPE)."""
    return urlencode(payload).encode()


def json_body(payload: dict[str, Any]) -> bytes:
    """An Events API body: the JSON bytes (send as JSON_CONTENT_TYPE)."""
    return json.dumps(payload).encode()
