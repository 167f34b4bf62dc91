"""Web access for the research specialist, off unless configured: `web_fetch` (a page as
text, http(s) only, size and time capped, private network addresses refused) and
`web_search` (a configured search endpoint that answers JSON, e.g. SearXNG's `format=json`)."""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from pydantic import BaseModel, Field

from agents.tools import Tool
from agents.workspace_tools import ToolContext

MAX_PAGE_BYTES: Final = 2_000_000
MAX_PAGE_CHARS: Final = 16_000
MAX_RESULTS: Final = 10
_SKIP_TAGS: Final = frozenset({"script", "style", "noscript", "template", "svg", "head"})
_BLOCK_TAGS: Final = frozenset(
    {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article"}
)


@dataclass(frozen=True)
class WebConfig:
    """Which web tools exist and how they behave."""

    fetch: bool = False
    search_url: str | None = None  # `{url}?q=…&format=json` → {"results": [{title,url,content}]}
    timeout_seconds: float = 15.0
    # Tests talk to loopback servers; the bot never sets this.
    allow_private: bool = False
    # Where names are looked up (aiohttp's threaded getaddrinfo; tests inject a stub).
    resolver: Callable[[], AbstractResolver] = aiohttp.ThreadedResolver


class WebError(ValueError):
    """A URL the tools refuse, or an answer they cannot use."""


class _Text(HTMLParser):
    """Visible text of an HTML page, one block per line."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.title = ""
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """Enter skipped elements and start new blocks."""
        if tag in _SKIP_TAGS:
            self._skip += 1
        if tag == "title":
            self._in_title = True
        if tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        """Leave skipped elements."""
        if tag in _SKIP_TAGS and self._skip:
            self._skip -= 1
        if tag == "title":
            self._in_title = False

    def handle_data(self, data: str) -> None:
        """Keep visible text."""
        if self._in_title:
            self.title += data
        elif not self._skip:
            self.parts.append(data)

    def text(self) -> str:
        """The page text, whitespace tidied."""
        lines = (" ".join(line.split()) for line in "".join(self.parts).splitlines())
        return "\n".join(line for line in lines if line)


def _refusal(host: str, address: str) -> WebError | None:
    """Why `address` (of `host`) must not be fetched: anything but a global unicast address
    (private, loopback, link-local, shared, reserved, unspecified, multicast)."""
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    ip = mapped or ip
    if ip.is_global and not ip.is_multicast:
        return None
    return WebError(
        f"Refused: `{host}` resolves to a private network address ({ip}); only public pages "
        "can be fetched."
    )


class PublicOnlyResolver(AbstractResolver):
    """Looks names up, then refuses the answer if any address is not public. aiohttp then
    connects to exactly these addresses: no second lookup a rebinding DNS could answer."""

    def __init__(self, inner: AbstractResolver) -> None:
        self._inner = inner

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """The inner resolver's answer, when every address in it is public."""
        results = await self._inner.resolve(host, port, family)
        for result in results:
            if (refused := _refusal(host, result["host"])) is not None:
                raise refused
        return results

    async def close(self) -> None:
        """Close the inner resolver."""
        await self._inner.close()


def _check_url(url: str, allow_private: bool) -> None:
    """An http(s) URL; a literal IP address must be public (aiohttp does not resolve it)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebError(f"Refused: `{url}` is not an http(s) URL.")
    if allow_private:
        return
    try:
        refused = _refusal(parts.hostname, parts.hostname)
    except ValueError:
        return  # a name: checked by PublicOnlyResolver on the connection's own lookup
    if refused is not None:
        raise refused


def page_text(body: str, content_type: str) -> str:
    """The readable text of a fetched body (HTML stripped; other text as is)."""
    if "html" not in content_type:
        return body
    parser = _Text()
    parser.feed(body)
    parser.close()
    title = " ".join(parser.title.split())
    return f"# {title}\n\n{parser.text()}" if title else parser.text()


def web_tools(config: WebConfig) -> list[Tool[ToolContext]]:
    """The configured web tools (an empty list when none is configured)."""
    tools: list[Tool[ToolContext]] = []
    timeout = aiohttp.ClientTimeout(total=config.timeout_seconds)
    if config.fetch:

        async def web_fetch(ctx: ToolContext, args: WebFetchInput) -> str:
            _check_url(args.url, config.allow_private)
            inner = config.resolver()
            resolver = inner if config.allow_private else PublicOnlyResolver(inner)
            connector = aiohttp.TCPConnector(resolver=resolver)
            try:
                async with (
                    aiohttp.ClientSession(timeout=timeout, connector=connector) as session,
                    session.get(args.url, allow_redirects=False) as resp,
                ):
                    if resp.status in (301, 302, 303, 307, 308):
                        return f"HTTP {resp.status}: redirected to {resp.headers.get('Location')}"
                    data = await resp.content.read(MAX_PAGE_BYTES + 1)
                    kind = resp.headers.get("Content-Type", "")
                    status = resp.status
            finally:
                await resolver.close()  # a resolver handed in is not the connector's to close
            text = page_text(data[:MAX_PAGE_BYTES].decode(errors="replace"), kind)
            cut = "\n…[page truncated]" if len(text) > MAX_PAGE_CHARS else ""
            return f"HTTP {status} {args.url}\n\n{text[:MAX_PAGE_CHARS]}{cut}"

        tools.append(
            Tool(
                "web_fetch",
                "Fetch a public web page (http/https) and return its text; cite its URL.",
                WebFetchInput,
                web_fetch,
            )
        )
    if config.search_url:
        base = config.search_url

        async def web_search(ctx: ToolContext, args: WebSearchInput) -> str:
            params = {"q": args.query, "format": "json"}
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.get(base, params=params) as resp,
            ):
                if resp.status != 200:
                    raise WebError(f"the search provider answered HTTP {resp.status}")
                payload = await resp.json(content_type=None)
            return format_results(payload, args.limit)

        tools.append(
            Tool(
                "web_search",
                "Search the web; returns titles, URLs and snippets (fetch a page to read it).",
                WebSearchInput,
                web_search,
            )
        )
    return tools


def format_results(payload: Any, limit: int) -> str:
    """`- title — url\\n  snippet` lines from a SearXNG-style JSON answer."""
    results = payload.get("results") if isinstance(payload, dict) else None
    if not isinstance(results, list):
        raise WebError("the search provider's answer has no `results` list")
    lines = []
    for item in results[:limit]:
        if not isinstance(item, dict) or not item.get("url"):
            continue
        title = re.sub(r"\s+", " ", str(item.get("title", "")))[:200]
        snippet = re.sub(r"\s+", " ", str(item.get("content", "")))[:300]
        lines.append(f"- {title} — {item['url']}\n  {snippet}")
    return "\n".join(lines) if lines else "No results."


class WebFetchInput(BaseModel):
    """Input of `web_fetch`."""

    url: str = Field(min_length=8, max_length=2000, description="An http(s) URL.")


class WebSearchInput(BaseModel):
    """Input of `web_search`."""

    query: str = Field(min_length=1, max_length=500)
    limit: int = Field(5, ge=1, le=MAX_RESULTS)


def web_tools_hook(config: WebConfig) -> Callable[[Path], Sequence[Tool[ToolContext]]] | None:
    """The `web_tools` hook of `default_specialists` (None when nothing is configured)."""
    tools = web_tools(config)
    if not tools:
        return None

    def hook(workspace: Path) -> Sequence[Tool[ToolContext]]:
        return tools

    return hook


__all__ = ["WebConfig", "WebError", "format_results", "page_text", "web_tools", "web_tools_hook"]
