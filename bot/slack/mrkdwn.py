"""Markdown (as the model writes it) to Slack mrkdwn: parsed by markdown-it-py, rendered here.

Slack's `mrkdwn` is not Markdown: `*bold*`, `_italic_`, `~strike~`, `<url|label>`, no
headings, lists or tables, and styles that cannot span lines. So headings become bold lines,
lists get `•` or their number, tables become an aligned monospace code block (or
"• col: value · col: value" lines when a row would be wider than `TABLE_MAX_WIDTH`), and
`&`, `<`, `>` are escaped everywhere, code included (Slack decodes entities in code too).

Chat Markdown, not a document: a blank line appears only where the source had one, indented
text is not code, `[x]: url` lines are text (not hidden link definitions), entities such as
`&lt;` are shown as typed, and `*` never opens emphasis inside a word (`2*3*4`; Slack could
not show it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple

from markdown_it import MarkdownIt
from markdown_it.rules_inline import StateInline
from markdown_it.rules_inline.state_inline import Delimiter
from markdown_it.tree import SyntaxTreeNode

from bot.render.split import ZWSP, split_message
from bot.render.tables import aligned_lines, bullet_rows
from bot.slack.pings import neutralize_slack_args, neutralize_slack_pings
from core.reader_time import render_reader_times

__all__ = [
    "HR_LINE",
    "SLACK_CHUNK_LIMIT",
    "escape_mrkdwn",
    "markdown_to_mrkdwn",
    "neutralize_slack_args",
    "neutralize_slack_pings",
    "render_for_slack",
]

HR_LINE = "———"
# Below Slack's 4,000-char display cut-off for one message, with room for a footer.
SLACK_CHUNK_LIMIT = 3500

_LINKABLE = re.compile(r"^(?:https?|mailto|ftps?|sftp|tel):", re.IGNORECASE)
# Slack-native user/channel references the model may emit on purpose (e.g. naming the
# requester); "<!…>" specials are deliberately absent: they are escaped like any text.
_SLACK_REF = re.compile(r"<[@#][UWC][A-Z0-9]{2,}(?:\|[^<>\n]*)?>")
_TASK = re.compile(r"^\[([ xX])\][ \t]+")
_BACKTICK_RUN = re.compile("`{3,}")
_RIGHT = "text-align:right"
_CENTER = "text-align:center"


def escape_mrkdwn(text: str) -> str:
    """Escape the three characters Slack treats as control characters: & < >."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _as_is(text: str) -> str:
    return text


# --- parsing ------------------------------------------------------------------------------


def _emphasis_outside_words(state: StateInline, silent: bool) -> bool:
    """markdown-it's emphasis tokenizer with the `_` flanking rules for `*` as well: Slack
    cannot show intraword emphasis, so `2*3*4` and `foo**bar**` stay literal."""
    marker = state.src[state.pos]
    if silent or marker not in ("_", "*"):
        return False
    scanned = state.scanDelims(state.pos, False)
    for _ in range(scanned.length):
        token = state.push("text", "", 0)
        token.content = marker
        state.delimiters.append(
            Delimiter(
                marker=ord(marker),
                length=scanned.length,
                token=len(state.tokens) - 1,
                end=-1,
                open=scanned.can_open,
                close=scanned.can_close,
            )
        )
    state.pos += scanned.length
    return True


def _slack_reference(state: StateInline, silent: bool) -> bool:
    """`<@U123>` / `<#C123|name>` kept as one token (the ping neutraliser decides later)."""
    found = _SLACK_REF.match(state.src, state.pos)
    if found is None:
        return False
    if not silent:
        state.push("slack_ref", "", 0).content = found.group()
    state.pos = found.end()
    return True


def _parser() -> MarkdownIt:
    """CommonMark with tables and strikethrough, as chat Markdown (see the module doc)."""
    md = MarkdownIt("commonmark", {"html": False})
    md.enable(["table", "strikethrough"])
    # text_join would merge backslash escapes into text: they are rendered on their own.
    md.disable(["code", "reference", "entity", "text_join"])
    md.inline.ruler.at("emphasis", _emphasis_outside_words)
    md.inline.ruler.before("autolink", "slack_ref", _slack_reference)
    return md


# --- inline -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Mode:
    """How inline markup is shown: the markers for bold, italic and strike, and escaping."""

    bold: str
    italic: str
    strike: str
    escape: Callable[[str], str]

    @property
    def plain(self) -> bool:
        return self.escape is _as_is


_MRKDWN = _Mode("*", "_", "~", escape_mrkdwn)
# A heading is bold as a whole; a nested "*" would end that early.
_HEADING = _Mode("", "_", "~", escape_mrkdwn)
# Text without markup, unescaped: link labels and table cells (escaped after padding).
_PLAIN = _Mode("", "", "", _as_is)


def _inline_children(node: SyntaxTreeNode) -> list[SyntaxTreeNode]:
    """The inline nodes of a paragraph, heading or table cell."""
    return [grandchild for child in node.children for grandchild in child.children]


def _inlines(nodes: Sequence[SyntaxTreeNode], mode: _Mode) -> str:
    return "".join(_inline(node, mode) for node in nodes)


def _inline(node: SyntaxTreeNode, mode: _Mode) -> str:
    kind = node.type
    if kind == "text":
        return mode.escape(node.content)
    if kind == "text_special":  # a backslash escape
        return _escaped(node.content, mode)
    if kind in ("softbreak", "hardbreak"):
        return "\n"  # Slack keeps line breaks
    if kind == "code_inline":
        return node.content if mode.plain else f"`{escape_mrkdwn(node.content)}`"
    if kind == "slack_ref":
        return node.content
    if kind in ("link", "image"):
        return _link(node, mode)
    inner = _inlines(node.children, mode)
    marker = {"strong": mode.bold, "em": mode.italic, "s": mode.strike}.get(kind, "")
    return _styled(inner, marker)


def _escaped(char: str, mode: _Mode) -> str:
    literal = mode.escape(char)
    if not mode.plain and literal in ("*", "_", "~", "`"):
        # Slack has no escape for its markers; zero-width spaces on both sides keep the
        # character from opening or closing a style, whichever way Slack reads them.
        return ZWSP + literal + ZWSP
    return literal


def _styled(inner: str, marker: str) -> str:
    """`inner` between `marker`s, line by line: a Slack style ends at a line break."""
    if not marker:
        return inner
    return "\n".join(f"{marker}{line}{marker}" if line else line for line in inner.split("\n"))


def _link(node: SyntaxTreeNode, mode: _Mode) -> str:
    """A link or image: `<url|label>`, or `label (url)` where Slack cannot link it."""
    label = _inlines(node.children, _PLAIN).strip()
    url = str(node.attrs.get("href") or node.attrs.get("src") or "")
    if url.lower().startswith("www."):
        url = "http://" + url
    if mode.plain:
        return url if label in ("", url, url.removeprefix("mailto:")) else f"{label} ({url})"
    if not _LINKABLE.match(url):
        # Relative or odd-scheme targets aren't clickable in Slack; show them as text.
        return escape_mrkdwn(url if not label else f"{label} ({url})")
    if not label or label == url:
        return f"<{url}>"
    return f"<{url}|{escape_mrkdwn(label)}>"


# --- blocks -------------------------------------------------------------------------------


class _Line(NamedTuple):
    """One output line; code lines are never indented under a list item (Slack would not
    see the fence)."""

    text: str
    code: bool = False


def _code(lines: Sequence[str]) -> list[_Line]:
    """A code block: Slack's fence is always three backticks and ends at the next three
    anywhere, so a run of backticks inside is broken up (shown alike, read as text)."""
    body = [_BACKTICK_RUN.sub(lambda m: ZWSP.join(m.group()), line) for line in lines]
    return [_Line(line, code=True) for line in ("```", *body, "```")]


class _Renderer:
    """mrkdwn lines of a parsed document; `source` is its text, line by line."""

    def __init__(self, source: list[str]) -> None:
        self._source = source

    def blocks(self, nodes: Sequence[SyntaxTreeNode]) -> list[_Line]:
        """Blocks one after another, a blank line between two only where the source had
        one (chat text often puts a list right under its first line)."""
        out: list[_Line] = []
        for node in nodes:
            lines = self._block(node)
            if lines and out and self._blank_above(node):
                out.append(_Line(""))
            out += lines
        return out

    def _blank_above(self, node: SyntaxTreeNode) -> bool:
        if node.map is None or node.map[0] == 0:
            return False
        return not self._source[node.map[0] - 1].strip(" \t>")

    def _block(self, node: SyntaxTreeNode) -> list[_Line]:
        kind = node.type
        if kind == "paragraph":
            return [_Line(line) for line in _inlines(_inline_children(node), _MRKDWN).split("\n")]
        if kind == "heading":
            text = _inlines(_inline_children(node), _HEADING).strip()
            return [_Line(line) for line in _styled(text, "*").split("\n")] if text else []
        if kind == "fence":
            body = node.content.removesuffix("\n")
            # Slack ignores info strings (and would show one as code), so the fence is bare.
            return _code([escape_mrkdwn(line) for line in body.split("\n")] if body else [])
        if kind == "hr":
            return [_Line(HR_LINE)]
        if kind == "blockquote":
            return [_Line(f"> {t}" if t else ">", c) for t, c in self.blocks(node.children)]
        if kind in ("bullet_list", "ordered_list"):
            return self._list(node)
        if kind == "table":
            return _table(node)
        return self.blocks(node.children)

    def _list(self, node: SyntaxTreeNode) -> list[_Line]:
        """Items under their marker, nested content indented two spaces a level."""
        out: list[_Line] = []
        for n, item in enumerate(node.children):
            body = self.blocks(item.children)
            if not item.children or item.children[0].type != "paragraph":
                body.insert(0, _Line(""))  # a fence or list can't follow the marker
            marker, first = _item_marker(node.type == "ordered_list", item.info, body[0].text)
            if n and self._blank_above(item):
                out.append(_Line(""))
            out.append(_Line(f"{marker} {first}".rstrip()))
            out += [_Line("  " + ln.text) if ln.text and not ln.code else ln for ln in body[1:]]
        return out


def _item_marker(ordered: bool, number: str, first: str) -> tuple[str, str]:
    """The marker a list item shows ("3.", "•", "• ☑", "• ☐") and its first line's rest."""
    if ordered:
        return f"{number}.", first
    task = _TASK.match(first)
    if task is None:
        return "•", first
    return ("• ☑" if task[1] in "xX" else "• ☐"), first[task.end() :]


def _table(node: SyntaxTreeNode) -> list[_Line]:
    rows = [row.children for section in node.children for row in section.children]
    if not rows:
        return []
    aligns = [_alignment(str(cell.attrs.get("style", ""))) for cell in rows[0]]
    plain = [[_inlines(_inline_children(cell), _PLAIN) for cell in row] for row in rows]
    lines = aligned_lines(plain, aligns)
    if lines is None:
        styled = [[_inlines(_inline_children(cell), _MRKDWN) for cell in row] for row in rows]
        return [_Line(line) for line in bullet_rows(styled, _as_is)]
    # Pad first, escape after: an entity like "&amp;" shows as one column in the client.
    return _code([escape_mrkdwn(line) for line in lines])


def _alignment(style: str) -> str:
    if _CENTER in style:
        return "center"
    return "right" if _RIGHT in style else "left"


# --- entry points -------------------------------------------------------------------------


def markdown_to_mrkdwn(md: str) -> str:
    """Convert model-written Markdown to Slack mrkdwn (code kept verbatim, & < > escaped)."""
    text = md.replace("\r\n", "\n").replace("\r", "\n")
    tree = SyntaxTreeNode(_parser().parse(text))
    lines = _Renderer(text.split("\n")).blocks(tree.children)
    rendered = "\n".join(line.text for line in lines).strip("\n")
    return render_reader_times(rendered, _slack_date)


def _slack_date(unix: int) -> str:
    """A time each reader's Slack shows in their own zone (`tomorrow 9:00 AM`)."""
    fallback = datetime.fromtimestamp(unix, UTC).strftime("%-d %b %Y %H:%M UTC")
    return f" (<!date^{unix}^{{date_short_pretty}} {{time}}|{fallback}> your time)"


def render_for_slack(md: str, limit: int = SLACK_CHUNK_LIMIT) -> list[str]:
    """Markdown to ready-to-post Slack messages: convert, neutralize pings, split."""
    return split_message(neutralize_slack_pings(markdown_to_mrkdwn(md)), limit)
