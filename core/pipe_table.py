"""A Markdown pipe table, as replies write their rows of the same fields: chat adapters
show it natively (Slack's table block, Discord's embed fields), the console draws it."""

from __future__ import annotations

from collections.abc import Sequence


def pipe_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """`header` and `rows` as a GFM pipe table; a `|` or a line break in a cell cannot
    end the cell or the row (escaped, joined)."""
    lines = [_row(header), "|" + "|".join("---" for _ in header) + "|"]
    lines += [_row(row) for row in rows]
    return "\n".join(lines)


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _cell(text: str) -> str:
    one_line = " ".join(text.split())
    return one_line.replace("|", "\\|") or " "
