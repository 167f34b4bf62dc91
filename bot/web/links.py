"""The viewer's links as the Host posts them: `RecordLinks` over the signing key.

Expiry is rounded up to the next whole hour, so every link made within one hour is the same
text: a status message edited every round does not change for its link alone.
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Callable
from urllib.parse import quote

from bot.web.tokens import Grant, LinkKey
from core.ids import ConversationRef

_HOUR = 3600.0
_EVERY_ADDRESS = frozenset({"0.0.0.0", "::", "[::]"})


def base_url(public_url: str, host: str, port: int | None) -> str:
    """Where links point: RAVEN_WEB_PUBLIC_URL, else the address the viewer listens on."""
    if public_url:
        return public_url
    if host in _EVERY_ADDRESS:
        # Listening everywhere: a link names this machine, not an address nobody can open.
        host = socket.getfqdn()
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


class WebLinks:
    """Signed links to one conversation's records, good for RAVEN_WEB_LINK_HOURS."""

    def __init__(
        self,
        key: LinkKey,
        base: str,
        hours: float,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._key = key
        self._base = base.rstrip("/")
        self._seconds = hours * _HOUR
        self._clock = clock

    def token(self, conv: ConversationRef) -> str:
        """A token for `conv`'s records, expiring at least `hours` from now."""
        expires = math.ceil((self._clock() + self._seconds) / _HOUR) * _HOUR
        return self._key.sign(Grant(conv.id, expires))

    def conversation(self, conv: ConversationRef) -> str:
        return self._url(conv, "")

    def run(self, conv: ConversationRef, run_id: str) -> str:
        return self._url(conv, f"run/{quote(run_id, safe='')}")

    def campaign(self, conv: ConversationRef, campaign_id: str) -> str:
        return self._url(conv, f"campaign/{quote(campaign_id, safe='')}")

    def _url(self, conv: ConversationRef, page: str) -> str:
        return f"{self._base}/v/{self.token(conv)}/{page}"
