"""Signed, expiring capabilities: a viewer link opens one conversation's records until it
expires, and nothing else.

A token is `v1.<payload>.<signature>`: the payload (base64url JSON) names the conversation
and the expiry; the signature is HMAC-SHA256 over the version and payload with a key kept in
RAVEN_HOME/web.key (made on first use, readable by the bot's user only, never logged). The
standard library's `hmac` does the work: no token library adds anything to these few lines.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

VERSION: Final = "v1"
KEY_FILE: Final = "web.key"
_KEY_BYTES: Final = 32
# No honest token is anywhere near this long: longer input is refused before any decoding.
MAX_TOKEN_CHARS: Final = 1024

Refusal = Literal["malformed", "tampered", "expired"]


@dataclass(frozen=True)
class Grant:
    """What a valid token opens: one conversation's records, until `expires_at`."""

    conversation_id: str
    expires_at: float


class TokenRefused(Exception):
    """A token that opens nothing; `reason` is logged, never shown."""

    def __init__(self, reason: Refusal) -> None:
        super().__init__(reason)
        self.reason: Refusal = reason


class LinkKey:
    """The signing key, read (or made) once from RAVEN_HOME."""

    def __init__(self, key: bytes) -> None:
        if len(key) < _KEY_BYTES:
            raise ValueError("a link key has at least 32 bytes")
        self._key = key

    @classmethod
    def load(cls, home: Path) -> LinkKey:
        """RAVEN_HOME/web.key, made with fresh random bytes when absent (blocking: a file).
        Two processes making it at once agree: the first link wins and both read it."""
        path = home / KEY_FILE
        try:
            return cls(_read_key(path))
        except FileNotFoundError:
            pass
        fd, tmp = tempfile.mkstemp(dir=home, prefix=f".{KEY_FILE}.", suffix=".tmp")  # 0600
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(secrets.token_bytes(_KEY_BYTES))
                handle.flush()
                os.fsync(handle.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            os.unlink(tmp)
        return cls(_read_key(path))

    def sign(self, grant: Grant) -> str:
        """The token of `grant`."""
        payload = _b64(
            json.dumps(
                {"c": grant.conversation_id, "e": int(grant.expires_at)}, separators=(",", ":")
            ).encode()
        )
        return f"{VERSION}.{payload}.{_b64(self._mac(payload))}"

    def verify(self, token: str, *, now: float) -> Grant:
        """The grant `token` carries; TokenRefused when it is malformed, altered or expired."""
        if len(token) > MAX_TOKEN_CHARS or token.count(".") != 2:
            raise TokenRefused("malformed")
        version, payload, signature = token.split(".")
        if version != VERSION:
            raise TokenRefused("malformed")
        try:
            given = _unb64(signature)
        except ValueError:
            raise TokenRefused("malformed") from None
        # Compared before the payload is parsed: nothing unsigned is ever read.
        if not hmac.compare_digest(given, self._mac(payload)):
            raise TokenRefused("tampered")
        try:
            data = json.loads(_unb64(payload))
            grant = Grant(str(data["c"]), float(data["e"]))
        except (ValueError, KeyError, TypeError):
            raise TokenRefused("malformed") from None
        if now >= grant.expires_at:
            raise TokenRefused("expired")
        return grant

    def _mac(self, payload: str) -> bytes:
        return hmac.new(self._key, f"{VERSION}.{payload}".encode(), hashlib.sha256).digest()


def _read_key(path: Path) -> bytes:
    # Never through a link: RAVEN_HOME is the bot's, but a planted link would name any file.
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        # A key others can read lets them make links: one copied in loosely is tightened.
        if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
            os.fchmod(fd, 0o600)
        return handle.read()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    if not text or not all(c.isalnum() or c in "-_" for c in text) or not text.isascii():
        raise ValueError("not base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except binascii.Error as exc:
        raise ValueError(str(exc)) from None
