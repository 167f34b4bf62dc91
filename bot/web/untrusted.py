"""Text the bot did not write, made safe to show in a page.

Everything shown passes through Jinja2's autoescaping; on top of that:
- bidirectional controls (which can make text read in an order other than it is stored,
  Trojan Source style) are shown as visible `⟨U+202E⟩` marks instead of acting;
- Markdown outputs are rendered by markdown-it-py with raw HTML off, so a `<script>` in an
  output is text, and a link or image opens only http(s), mailto or a relative target
  (markdown-it's own check lets `data:image/...` through); the page's
  Content-Security-Policy stops whatever slipped through anyway;
- long text is cut with a note, so one huge output cannot make a page unreadable.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Final

from markdown_it import MarkdownIt
from markupsafe import Markup

# Explicit directional formatting characters (Unicode TR9) and the invisible marks.
_BIDI: Final = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
SHOWN_CHARS: Final = 20_000
_SCHEME: Final = re.compile(r"^([a-z][a-z0-9+.-]*):")
_LINK_SCHEMES: Final = frozenset({"http", "https", "mailto"})


def visible_controls(text: str) -> str:
    """`text` with every bidirectional control shown as a visible mark."""
    return _BIDI.sub(lambda m: f"⟨U+{ord(m.group()):04X}⟩", text)


def cut(text: str, limit: int = SHOWN_CHARS) -> str:
    """At most `limit` characters of `text`, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n\n… ({len(text) - limit:,} more characters not shown)"


def shown(text: str | None, limit: int = SHOWN_CHARS) -> str:
    """Untrusted text as it is shown: cut and with its controls visible (escaped later)."""
    return visible_controls(cut(text or "", limit))


class _UntrustedMarkdown(MarkdownIt):
    """Markdown whose links and images open only http(s), mailto or relative targets."""

    def validateLink(self, url: str) -> bool:  # markdown-it's name
        # As a browser reads a URL: spaces and controls inside the scheme are ignored.
        scheme = _SCHEME.match("".join(c for c in url if ord(c) > 0x20).lower())
        return scheme is None or scheme.group(1) in _LINK_SCHEMES


@cache
def _markdown() -> MarkdownIt:
    # CommonMark with tables and strikethrough; `html: False` keeps raw HTML as text.
    md = _UntrustedMarkdown("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    return md


def markdown(text: str | None, limit: int = SHOWN_CHARS) -> Markup:
    """Untrusted Markdown as safe HTML: raw HTML escaped, unsafe link targets dropped, links
    opened without a referrer, images not loaded from anywhere (the page's policy)."""
    html = _markdown().render(shown(text, limit))
    # Every link leaves without the page's address (its token) and without an opener.
    html = html.replace("<a href=", '<a rel="noopener noreferrer nofollow" href=')
    return Markup(html)  # markdown-it output with raw HTML disabled
