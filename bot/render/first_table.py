"""A message's first Markdown pipe table, cut out of its prose: for platforms that draw a
table natively (Slack's `table` block, Discord's embed fields) beside the text around it.

Cells come back as plain text (markup dropped, escapes such as `\\|` undone, a link as
`label (url)`): each platform shows them verbatim, so nothing in a cell is read as markup.
"""

from __future__ import annotations

from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.token import Token

from bot.render.fences import closes_fence, open_fence
from bot.render.tables import table_at


@dataclass(frozen=True)
class ProseAndTable:
    """The Markdown before the table, the table (header first, plain cells) and after it."""

    before: str
    rows: list[list[str]]
    aligns: list[str]
    after: str

    @property
    def header(self) -> list[str]:
        return self.rows[0]

    @property
    def body(self) -> list[list[str]]:
        return self.rows[1:]


def first_table(md: str) -> ProseAndTable | None:
    """The first pipe table outside code blocks in `md` with the prose around it, or None."""
    lines = md.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    i = 0
    while i < len(lines):
        fence = open_fence(lines[i])
        if fence is not None:
            i += 1
            while i < len(lines) and not closes_fence(lines[i], fence["fence"]):
                i += 1
            i += 1
            continue
        found = table_at(lines, i)
        if found is not None:
            (rows, aligns), end = found
            return ProseAndTable(
                before="\n".join(lines[:i]).strip("\n"),
                rows=[[plain_cell(cell.replace("\\|", "|")) for cell in row] for row in rows],
                aligns=aligns,
                after="\n".join(lines[end:]).strip("\n"),
            )
        i += 1
    return None


def plain_cell(cell: str) -> str:
    """A cell's Markdown as the plain text a reader would see."""
    tokens = MarkdownIt("commonmark", {"html": False}).enable("strikethrough").parseInline(cell)
    return "".join(_plain(tokens[0].children or [])).strip() if tokens else cell


def _plain(children: list[Token]) -> list[str]:
    out: list[str] = []
    href: str | None = None
    label: list[str] = []
    for token in children:
        if token.type == "link_open":
            href, label = str(token.attrs.get("href", "")), []
        elif token.type == "link_close":
            text = "".join(label)
            out.append(text if not href or href == text else f"{text} ({href})")
            href = None
        else:
            piece = _piece(token)
            (label if href is not None else out).append(piece)
    return out


def _piece(token: Token) -> str:
    if token.type in ("text", "text_special", "code_inline"):
        return token.content
    if token.type in ("softbreak", "hardbreak"):
        return " "
    if token.type == "image":
        return token.content
    return ""
