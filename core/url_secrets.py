"""The secret parts of a URL (`https://user:token@proxy/?key=…`): masked when shown, and
redacted wherever the URL's credentials could be echoed."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def mask_url(url: str) -> str:
    """The URL with credentials (`user:password@`) and any query string masked."""
    parts = urlsplit(url)
    if "@" not in parts.netloc and not parts.query:
        return url
    host = parts.netloc.rpartition("@")[2]
    netloc = f"****@{host}" if "@" in parts.netloc else host
    return urlunsplit((parts.scheme, netloc, parts.path, "****" if parts.query else "", ""))


def url_credentials(url: str | None) -> list[str]:
    """The secret parts of a URL (userinfo, password, query) for log redaction."""
    if not url:
        return []
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    return [v for v in (userinfo, parts.password, parts.query) if v]
