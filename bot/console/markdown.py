"""Markdown for a terminal: rendered with `rich` on a terminal, plain text when piped.

The bot writes chat Markdown (Slack/Discord style): a newline is a line break, not a space,
so single newlines are kept as line breaks here too. Raw HTML is not interpreted (shown as
text), and links show their address, so what a person reads is what was sent. Control
characters (an escape sequence in a command or a model's output could rewrite the screen)
are shown as visible symbols, never sent to the terminal.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence

from markdown_it import MarkdownIt
from markdown_it.token import Token
from markdown_it.tree import SyntaxTreeNode
from rich.console import Console
from rich.markdown import Markdown

from bot.render.tables import display_width

CODE_INDENT = "    "
# Bidirectional overrides and isolates reorder what a terminal shows (a command could read
# differently from what runs): shown by code point instead.
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible_controls(text: str) -> str:
    """`text` with control characters (but newline and tab) shown as symbols: C0 as their
    Unicode control pictures (ESC as ␛), DEL as ␡, C1 and bidi controls as `<U+XXXX>`."""
    text = text.replace("\r\n", "\n")

    def picture(m: re.Match[str]) -> str:
        code = ord(m.group())
        if code < 0x20:
            return chr(0x2400 + code)
        return "\u2421" if code == 0x7F else f"<U+{code:04X}>"

    text = _CONTROL.sub(picture, text)
    return _BIDI.sub(lambda m: f"<U+{ord(m.group()):04X}>", text)


def parse(text: str) -> list[Token]:
    """Tokens of `text` (CommonMark, tables and strikethrough, no raw HTML), with every soft
    line break made a hard one (chat Markdown)."""
    parser = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
    tokens = parser.parse(visible_controls(text))
    for token in tokens:
        for child in token.children or ():
            if child.type == "softbreak":
                child.type = "hardbreak"
    return tokens


class _ChatMarkdown(Markdown):
    """rich's Markdown over `parse`: line breaks kept, HTML shown as text, link addresses
    shown next to their text (no hidden terminal hyperlinks)."""

    def __init__(self, text: str) -> None:
        super().__init__("", hyperlinks=False)
        self.markup = text
        self.parsed = parse(text)


def terminal_lines(text: str, *, width: int, color_system: str | None) -> list[str]:
    """`text` rendered for a terminal `width` columns wide, one string (with ANSI styles)
    per screen line; `color_system` as the real terminal's `rich` console detected it.

    Each top-level block is rendered on its own, with a blank line between two only where
    the source had one (rich would put one between every two blocks)."""
    source = visible_controls(text).split("\n")
    nodes = SyntaxTreeNode(parse("\n".join(source))).children
    lines: list[str] = []
    for n, node in enumerate(nodes):
        if node.map is None:
            continue
        if n and _blank_above(source, node):
            lines.append("")
        chunk = "\n".join(source[node.map[0] : node.map[1]])
        lines += _rich_lines(chunk, width=width, color_system=color_system)
    return lines or [""]


def _blank_above(source: list[str], node: SyntaxTreeNode) -> bool:
    """True when the source line above `node` is blank (or unknown)."""
    if node.map is None or node.map[0] == 0:
        return True
    above = source[node.map[0] - 1] if node.map[0] <= len(source) else ""
    return not above.strip(" \t>")


def _rich_lines(text: str, *, width: int, color_system: str | None) -> list[str]:
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width,
        force_terminal=True,
        color_system=color_system,  # type: ignore[arg-type]
        highlight=False,
        emoji=False,
        markup=False,
        soft_wrap=False,
    )
    console.print(_ChatMarkdown(text))
    lines = [line.rstrip(" ") for line in buffer.getvalue().split("\n")]
    # rich starts some blocks (lists) with a blank line: the gaps are ours to decide.
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def plain_lines(text: str) -> list[str]:
    """`text` as plain text for a pipe: emphasis markers, headings' `#` and code fences
    removed; inline code keeps its backticks; code blocks are indented four spaces; link
    addresses follow their text; blank lines where the source had them."""
    source = visible_controls(text)
    lines = _Plain(source.split("\n")).blocks(SyntaxTreeNode(parse(source)).children)
    while lines and not lines[-1]:
        lines.pop()
    return [line.rstrip() for line in lines] or [""]


class _Plain:
    """Plain-text rendering of a parsed tree; `source` is the parsed text's lines."""

    def __init__(self, source: list[str]) -> None:
        self._source = source

    def blocks(self, nodes: Sequence[SyntaxTreeNode], *, tight: bool = False) -> list[str]:
        """Blocks one after another, a blank line between two only where the source had
        one (chat text often puts a list right under its first line)."""
        out: list[str] = []
        for n, node in enumerate(nodes):
            if n and not tight and self._blank_before(node):
                out.append("")
            out += self._block(node)
        return out

    def _blank_before(self, node: SyntaxTreeNode) -> bool:
        return _blank_above(self._source, node)

    def _block(self, node: SyntaxTreeNode) -> list[str]:
        kind = node.type
        if kind in ("paragraph", "heading", "inline"):
            return _inlines(node.children if kind == "inline" else _inline_of(node)).split("\n")
        if kind in ("fence", "code_block"):
            code = node.content.rstrip("\n").split("\n")
            return [CODE_INDENT + line if line else "" for line in code]
        if kind in ("bullet_list", "ordered_list"):
            return self._list(node)
        if kind == "blockquote":
            return ["> " + line if line else ">" for line in self.blocks(node.children)]
        if kind == "hr":
            return ["---"]
        if kind == "table":
            return self._table(node)
        return self.blocks(node.children)

    def _list(self, node: SyntaxTreeNode) -> list[str]:
        out: list[str] = []
        ordered = node.type == "ordered_list"
        number = int(str(node.attrs.get("start", 1))) if ordered else 0
        items = node.children
        tight = all(p.hidden for item in items for p in item.children if p.type == "paragraph")
        for n, item in enumerate(items):
            # The source's own marker (`-`, `*`, `+`, `1.`, `1)`), so nothing changes needlessly.
            marker = f"{number}{node.markup} " if ordered else f"{node.markup or '-'} "
            number += 1
            body = self.blocks(item.children, tight=tight) or [""]
            if n and not tight:
                out.append("")
            out.append(marker + body[0])
            out += [" " * len(marker) + line if line else "" for line in body[1:]]
        return out

    def _table(self, node: SyntaxTreeNode) -> list[str]:
        rows = [
            [" ".join(self.blocks(cell.children)) for cell in row.children]
            for section in node.children
            for row in section.children
        ]
        if not rows:
            return []
        columns = max(len(row) for row in rows)
        widths = [
            max(display_width(r[i]) if i < len(r) else 0 for r in rows) for i in range(columns)
        ]
        out = []
        for n, row in enumerate(rows):
            cells = [c + " " * (widths[i] - display_width(c)) for i, c in enumerate(row)]
            out.append(" | ".join(cells).rstrip())
            if n == 0:
                out.append("-+-".join("-" * w for w in widths))
        return out


def _inline_of(node: SyntaxTreeNode) -> list[SyntaxTreeNode]:
    return [grandchild for child in node.children for grandchild in child.children]


def _inlines(nodes: Sequence[SyntaxTreeNode]) -> str:
    return "".join(_inline(node) for node in nodes)


def _inline(node: SyntaxTreeNode) -> str:
    kind = node.type
    if kind in ("text", "html_inline"):
        return node.content
    if kind == "code_inline":
        longest = max((len(run) for run in re.findall("`+", node.content)), default=0)
        fence = "`" * (longest + 1)
        pad = " " if node.content.startswith("`") or node.content.endswith("`") else ""
        return f"{fence}{pad}{node.content}{pad}{fence}"
    if kind in ("softbreak", "hardbreak"):
        return "\n"
    if kind == "image":
        return str(node.attrs.get("alt", "")) or _inlines(node.children)
    inner = _inlines(node.children)
    if kind == "link":
        href = str(node.attrs.get("href", ""))
        return inner if not href or href in (inner, f"mailto:{inner}") else f"{inner} ({href})"
    return inner
