"""The research agent's web tools against loopback servers: off unless configured, pages
as text (scripts dropped, size capped), private addresses refused, search results from a
SearXNG-style JSON endpoint, and research getting them only when configured."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from agents.models.types import ToolCall
from agents.specialists import default_specialists
from agents.tools import ToolRegistry
from agents.web_tools import WebConfig, format_results, page_text, web_tools, web_tools_hook
from agents.workspace_tools import ToolContext

PAGE = """<html><head><title>Benchmarks 2026</title><script>steal()</script></head>
<body><h1>Results</h1><p>Model A scored <b>91.2</b>.</p><style>p{}</style>
<div>Source: the 2026 leaderboard</div></body></html>"""


@pytest.fixture
async def site() -> AsyncIterator[str]:
    async def page(_: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    async def search(request: web.Request) -> web.Response:
        assert request.query["format"] == "json"
        results = [
            {"title": "Leaderboard", "url": "https://example.org/lb", "content": "scores"},
            {"title": "no url"},
            {"title": f"About {request.query['q']}", "url": "https://example.org/q", "content": ""},
        ]
        return web.json_response({"results": results})

    app = web.Application()
    app.router.add_get("/page", page)
    app.router.add_get("/search", search)
    runner = web.AppRunner(app)
    await runner.setup()
    server = web.TCPSite(runner, "127.0.0.1", 0)
    await server.start()
    port = server._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def _call(config: WebConfig, name: str, tmp_path: Path, **args: object) -> tuple[str, bool]:
    result = await ToolRegistry(web_tools(config)).dispatch(
        ToolCall(id="t", name=name, input=dict(args)), ToolContext(workspace=tmp_path)
    )
    return result.content, result.is_error


async def test_nothing_unless_configured() -> None:
    assert web_tools(WebConfig()) == [] and web_tools_hook(WebConfig()) is None
    research = default_specialists()["research"]
    assert "web_fetch" not in research.tools(Path("/tmp")).names()
    assert "no web access" in research.system_prompt


async def test_fetch_returns_the_visible_text(site: str, tmp_path: Path) -> None:
    config = WebConfig(fetch=True, allow_private=True)
    out, err = await _call(config, "web_fetch", tmp_path, url=f"{site}/page")
    assert not err and out.startswith(f"HTTP 200 {site}/page")
    assert "# Benchmarks 2026" in out and "Model A scored 91.2." in out
    assert "steal" not in out and "p{}" not in out


async def test_private_addresses_are_refused(site: str, tmp_path: Path) -> None:
    out, err = await _call(WebConfig(fetch=True), "web_fetch", tmp_path, url=f"{site}/page")
    assert err and "private network address" in out
    out, err = await _call(WebConfig(fetch=True), "web_fetch", tmp_path, url="file:///etc/passwd")
    assert err and "not an http(s) URL" in out


class StubResolver(AbstractResolver):
    """Answers every name with one address (a DNS that points a public name inward)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.lookups: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.lookups.append(host)
        return [
            ResolveResult(
                hostname=host, host=self.address, port=port, family=family, proto=0, flags=0
            )
        ]

    async def close(self) -> None:
        return None


async def test_the_address_checked_is_the_address_connected_to(site: str, tmp_path: Path) -> None:
    # The check resolved the name once and aiohttp again to connect: a DNS answering the
    # second lookup with a private address (rebinding) reached the loopback service.
    port = site.rsplit(":", 1)[1]
    stub = StubResolver("127.0.0.1")
    config = WebConfig(fetch=True, resolver=lambda: stub)
    out, err = await _call(config, "web_fetch", tmp_path, url=f"http://public.test:{port}/page")
    assert err and "private network address (127.0.0.1)" in out
    assert stub.lookups == ["public.test"]  # one lookup, by the connection itself


@pytest.mark.parametrize(
    "host", ["100.64.0.1", "0.0.0.0", "[::ffff:127.0.0.1]", "169.254.169.254", "224.0.0.1"]
)
async def test_addresses_that_are_not_public_unicast_are_refused(host: str, tmp_path: Path) -> None:
    out, err = await _call(WebConfig(fetch=True), "web_fetch", tmp_path, url=f"http://{host}/")
    assert err and "private network address" in out


async def test_search_lists_results(site: str, tmp_path: Path) -> None:
    config = WebConfig(search_url=f"{site}/search")
    out, err = await _call(config, "web_search", tmp_path, query="llm benchmarks", limit=5)
    assert not err
    assert out.splitlines() == [
        "- Leaderboard — https://example.org/lb",
        "  scores",
        "- About llm benchmarks — https://example.org/q",
        "  ",
    ]


def test_configured_research_gets_the_tools_and_is_told_to_cite() -> None:
    hook = web_tools_hook(WebConfig(fetch=True, search_url="http://127.0.0.1:9/search"))
    research = default_specialists(web_tools=hook)["research"]
    names = research.tools(Path("/tmp")).names()
    assert "web_fetch" in names and "web_search" in names
    assert "cite the URL" in research.system_prompt


def test_text_helpers() -> None:
    assert page_text("plain body", "text/plain") == "plain body"
    with pytest.raises(ValueError, match="no `results` list"):
        format_results({"nope": 1}, 3)
    assert format_results({"results": []}, 3) == "No results."
