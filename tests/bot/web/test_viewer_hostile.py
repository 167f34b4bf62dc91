"""Hostile text in a run's records (outputs, summaries, ids, transcripts, verdicts) reaches
the page as text the reader can see, never as markup that acts: the page, parsed, has no
script but the viewer's own, no event handler, no script or data link and no raw bidi
control; and every response carries the strict headers."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import aiohttp
import pytest

from bot.web.server import CSP
from core.store import Store
from tests.bot.web.seed import CHANNEL, SeedNode, seed_run, serving, token

SCRIPT = "<script>alert(1)</script>"
MD_LINK = "[x](javascript:alert(1))"
MD_LINKS = (
    MD_LINK,
    "[y](JaVaScRiPt:alert(2))",
    "[z](javascript&colon;alert(3))",
    "<javascript:alert(4)>",
    "[v](vbscript:msgbox(5))",
    "[d](data:text/html;base64,PHNjcmlwdD5hbGVydCg2KTwvc2NyaXB0Pg==)",
    "[p](data:image/png;base64,iVBORw0KGgo=)",
    "![i](data:image/png;base64,iVBORw0KGgo=)",
)
A_HREF = '<a href="javascript:alert(7)">click</a>'
SVG = "<svg onload=alert(8)>"
IMG = "<img src=x onerror=alert(9)>"
DATA_LINK = '<a href="data:text/html,<script>alert(10)</script>">d</a>'
RLO = "\u202e"
LRI = "\u2066"
BIDI = f"safe{RLO}txt.exe{LRI}hidden"
# Shown as written (not Markdown): every one must be visible on the page as text.
PLAIN = (SCRIPT, MD_LINK, A_HREF, SVG, IMG, DATA_LINK)
EVERYTHING = "\n\n".join((*PLAIN, *MD_LINKS, BIDI))

_URL_ATTRIBUTES = {"href", "src", "xlink:href", "action", "formaction", "srcset", "poster"}
_BAD_SCHEMES = ("javascript:", "data:", "vbscript:")


class _Audit(HTMLParser):
    """What a page would do in a browser: its scripts, handlers, links and visible text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.scripts: list[str | None] = []
        self.handlers: list[tuple[str, str, str | None]] = []
        self.bad_urls: list[tuple[str, str, str]] = []
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "script":
            self.scripts.append(dict(attrs).get("src"))
        for name, value in attrs:
            if name.startswith("on"):
                self.handlers.append((tag, name, value))
            if name in _URL_ATTRIBUTES and value is not None:
                # As a browser reads a URL: spaces and controls inside the scheme ignored.
                squeezed = "".join(c for c in value if ord(c) > 0x20).lower()
                if squeezed.startswith(_BAD_SCHEMES):
                    self.bad_urls.append((tag, name, value))

    handle_startendtag = handle_starttag

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _audit(body: str) -> _Audit:
    audit = _Audit()
    audit.feed(body)
    audit.close()
    assert all(src is not None and src.endswith("static/viewer.js") for src in audit.scripts), (
        audit.scripts
    )
    assert len(audit.scripts) == 1
    assert audit.handlers == []
    assert audit.bad_urls == []
    for tag in ("iframe", "object", "embed", "form", "base", "foreignobject"):
        assert tag not in audit.tags
    for control in (RLO, LRI, "\u202a", "\u202b", "\u202c", "\u202d", "\u2067", "\u2068"):
        assert control not in body
    return audit


async def _seed_hostile(store: Store, home: Path) -> None:
    transcript: tuple[dict[str, object], ...] = (
        {
            "type": "tool",
            "name": SCRIPT,
            "input": {"path": IMG, "note": BIDI},
            "output": f"{SVG}\n{A_HREF}",
            "is_error": True,
        },
        {"type": "answer", "text": f"{DATA_LINK} {MD_LINK}"},
        {"type": SVG, SCRIPT: BIDI},
        {"type": "note", "text": "a note " + IMG},
    )
    nodes = [
        SeedNode(
            "fetch",
            agent=IMG,
            prompt=f"{SCRIPT} {BIDI}",
            output=EVERYTHING,
            transcript=transcript,
            verdict={SCRIPT: IMG, "reason": f"{A_HREF} {BIDI}", "score": [SVG]},
            error=f"{SVG} {BIDI}",
            state="failed",
        ),
        # Ids the graph admission would refuse, but a record is data: shown as text anyway.
        SeedNode(SVG, agent=f"{RLO}llehs", deps=("fetch",), output=SCRIPT),
        SeedNode(f"n{LRI}x", agent=SCRIPT, deps=(SVG,), state="pending", output=None),
    ]
    await seed_run(store, home, CHANNEL, nodes, run_id="r1", summary=EVERYTHING, state="failed")


async def test_a_run_page_shows_hostile_records_as_text_only(store: Store, home: Path) -> None:
    await _seed_hostile(store, home)
    async with (
        serving(store, home) as base,
        aiohttp.ClientSession() as client,
        client.get(f"{base}/v/{token(home, CHANNEL)}/run/r1") as response,
    ):
        assert response.status == 200
        body = await response.text()
    audit = _audit(body)
    text = "".join(audit.text)
    for hostile in PLAIN:
        assert hostile in text, hostile
    assert "⟨U+202E⟩" in text and "⟨U+2066⟩" in text
    # The graph drew all three boxes, labels escaped.
    assert body.count('class="node state-') == 3
    assert "<svg onload" not in body and "<img src=x" not in body and "<script>alert" not in body


async def test_the_overview_shows_a_hostile_summary_as_text_only(store: Store, home: Path) -> None:
    await _seed_hostile(store, home)
    async with (
        serving(store, home) as base,
        aiohttp.ClientSession() as client,
        client.get(f"{base}/v/{token(home, CHANNEL)}/") as response,
    ):
        assert response.status == 200
        body = await response.text()
    text = "".join(_audit(body).text)
    assert SCRIPT in text and SVG in text


@pytest.mark.parametrize("link", [*MD_LINKS, A_HREF, DATA_LINK])
async def test_no_hostile_link_in_an_output_becomes_a_link(
    store: Store, home: Path, link: str
) -> None:
    await seed_run(store, home, CHANNEL, [SeedNode("a", output=f"see {link} now")])
    async with (
        serving(store, home) as base,
        aiohttp.ClientSession() as client,
        client.get(f"{base}/v/{token(home, CHANNEL)}/run/r1") as response,
    ):
        body = await response.text()
    _audit(body)


async def test_every_response_carries_the_strict_headers(store: Store, home: Path) -> None:
    await seed_run(store, home, CHANNEL, [SeedNode("a")])
    link = token(home, CHANNEL)
    paths = [
        ("GET", f"/v/{link}/"),
        ("GET", f"/v/{link}/run/r1"),
        ("HEAD", f"/v/{link}/run/r1"),
        ("GET", f"/v/{link}/run/r1/events"),
        ("GET", "/static/viewer.css"),
        ("GET", "/static/viewer.js"),
        ("GET", "/static/nothing.js"),
        ("GET", "/"),
        ("GET", f"/v/{link}/run/r-missing"),
        ("GET", f"/v/{link}x/run/r1"),
        ("POST", f"/v/{link}/run/r1"),
        ("GET", "/" + "x" * 3000),
    ]
    async with serving(store, home, poll_seconds=0.01) as base, aiohttp.ClientSession() as client:
        for method, path in paths:
            async with client.request(method, base + path) as response:
                await response.read()
                headers = response.headers
                assert headers.get("Content-Security-Policy") == CSP, path
                assert headers.get("X-Content-Type-Options") == "nosniff", path
                assert headers.get("Referrer-Policy") == "no-referrer", path
                assert headers.get("Cache-Control") == "no-store", path
                assert headers.get("X-Frame-Options") == "DENY", path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


async def test_ordinary_links_in_an_output_stay_links_without_a_referrer(
    store: Store, home: Path
) -> None:
    output = "[docs](https://example.org/a) [mail](mailto:ops@example.org) [up](../notes.md)"
    await seed_run(store, home, CHANNEL, [SeedNode("a", output=output)])
    async with (
        serving(store, home) as base,
        aiohttp.ClientSession() as client,
        client.get(f"{base}/v/{token(home, CHANNEL)}/run/r1") as response,
    ):
        body = await response.text()
    _audit(body)
    for href in ("https://example.org/a", "mailto:ops@example.org", "../notes.md"):
        assert f'<a rel="noopener noreferrer nofollow" href="{href}">' in body


def _node_with(field: str, hostile: str) -> tuple[SeedNode, str]:
    """A node (and the run's summary) with `hostile` in exactly one field."""
    tool: dict[str, object] = {"type": "tool", "name": "read", "input": {}, "output": "ok"}
    nodes = {
        "summary": SeedNode("a"),
        "output": SeedNode("a", output=hostile),
        "prompt": SeedNode("a", prompt=hostile),
        "error": SeedNode("a", state="failed", error=hostile),
        "node id": SeedNode(hostile),
        "agent": SeedNode("a", agent=hostile),
        "tool name": SeedNode("a", transcript=({**tool, "name": hostile},)),
        "tool input": SeedNode("a", transcript=({**tool, "input": {"path": hostile}},)),
        "tool output": SeedNode("a", transcript=({**tool, "output": hostile},)),
        "answer": SeedNode("a", transcript=({"type": "answer", "text": hostile},)),
        "odd step": SeedNode("a", transcript=({"type": hostile, hostile: 1},)),
        "verdict field": SeedNode("a", verdict={hostile: "pass"}),
        "verdict value": SeedNode("a", verdict={"reason": hostile}),
    }
    return nodes[field], hostile if field == "summary" else "say hello"


@pytest.mark.parametrize(
    "field",
    [
        "summary",
        "output",
        "prompt",
        "error",
        "node id",
        "agent",
        "tool name",
        "tool input",
        "tool output",
        "answer",
        "odd step",
        "verdict field",
        "verdict value",
    ],
)
@pytest.mark.parametrize("hostile", [SCRIPT, SVG, IMG, A_HREF], ids=["script", "svg", "img", "a"])
async def test_each_field_shows_hostile_text_as_text(
    store: Store, home: Path, field: str, hostile: str
) -> None:
    node, summary = _node_with(field, hostile)
    await seed_run(store, home, CHANNEL, [node], summary=summary)
    async with (
        serving(store, home) as base,
        aiohttp.ClientSession() as client,
        client.get(f"{base}/v/{token(home, CHANNEL)}/run/r1") as response,
    ):
        assert response.status == 200
        body = await response.text()
    text = "".join(_audit(body).text)
    # JSON (a tool's input) writes the quotes of an attribute as \"; the rest as it is.
    assert hostile.replace('"', '\\"') in text if field == "tool input" else hostile in text
