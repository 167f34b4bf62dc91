"""The private-network check for HTTP servers: a URL from a pasted config must not reach the
bot's own machine, the cloud metadata address or the office network unless an admin allows it."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit


class PrivateNetworkRefused(ValueError):
    """The URL's host is (or resolves to) a loopback, private or link-local address."""


async def refuse_private_network(url: str) -> None:
    """Raise `PrivateNetworkRefused` when the URL's host is not a public address. Names are
    resolved, so a public-looking name pointing at 127.0.0.1 is refused too."""
    host = urlsplit(url).hostname or ""
    addresses = await _addresses(host)
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if not ip.is_global or ip.is_multicast:
            raise PrivateNetworkRefused(
                f"{url}: {host} is a private-network address ({ip}); set"
                ' "allow_private_network": true on this server to allow it'
            )


async def _addresses(host: str) -> list[str]:
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    if host.lower() in {"localhost", "localhost."} or host.lower().endswith(".localhost"):
        return ["127.0.0.1"]
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return []  # unresolvable: the connection fails on its own with a clear error
    return [str(info[4][0]) for info in infos]
