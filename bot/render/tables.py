"""Markdown pipe tables for platforms without tables (Slack, Discord): parsed once, shown
as an aligned monospace block when it fits, else one bullet per row."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

TABLE_MAX_WIDTH = 100
_TABLE_DELIM = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")

Table = tuple[list[list[str]], list[str]]  # rows (header first), alignment per column


def display_width(text: str) -> int:
    """Monospace columns `text` occupies: wide East Asian characters take two, marks none."""
    width = 0
    for ch in text:
        if unicodedata.category(ch) in ("Mn", "Me", "Cf"):
            continue
        width += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return width


def _cells(line: str) -> list[str]:
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|") and not s.endswith("\\|"):
        s = s[:-1]
    return [c.strip() for c in _CELL_SPLIT.split(s)]


def _alignment(delim: str) -> str:
    if delim.startswith(":") and delim.endswith(":"):
        return "center"
    return "right" if delim.endswith(":") else "left"


def table_at(lines: list[str], i: int) -> tuple[Table, int] | None:
    """A GFM pipe table starting at line i: ((rows incl. header, alignments), next line)."""
    if i + 1 >= len(lines) or "|" not in lines[i] or "|" not in lines[i + 1]:
        return None
    if not _TABLE_DELIM.match(lines[i + 1]):
        return None
    header, delims = _cells(lines[i]), _cells(lines[i + 1])
    if len(header) != len(delims):
        return None
    rows = [header]
    j = i + 2
    while j < len(lines) and lines[j].strip() and "|" in lines[j]:
        cells = _cells(lines[j])[: len(header)]
        rows.append(cells + [""] * (len(header) - len(cells)))
        j += 1
    return (rows, [_alignment(d) for d in delims]), j


def _pad(text: str, width: int, align: str) -> str:
    gap = width - display_width(text)
    if align == "right":
        return " " * gap + text
    if align == "center":
        return " " * (gap // 2) + text + " " * (gap - gap // 2)
    return text + " " * gap


def aligned_lines(plain_rows: list[list[str]], aligns: list[str]) -> list[str] | None:
    """The rows (cells already plain text) as aligned monospace lines, None when too wide."""
    widths = [max(1, *(display_width(row[k]) for row in plain_rows)) for k in range(len(aligns))]

    def fmt(row: list[str]) -> str:
        return " | ".join(_pad(c, w, a) for c, w, a in zip(row, widths, aligns, strict=True))

    lines = [fmt(plain_rows[0]), "-+-".join("-" * w for w in widths), *map(fmt, plain_rows[1:])]
    if max(display_width(line) for line in lines) > TABLE_MAX_WIDTH:
        return None
    return [line.rstrip() for line in lines]


def bullet_rows(rows: list[list[str]], cell: Callable[[str], str]) -> list[str]:
    """One `• header: value · …` line per row (each cell converted by `cell`)."""
    headers = [cell(h) for h in rows[0]]
    out = []
    for row in rows[1:]:
        # Empty cells are skipped: "col: " pairs are noise in the one-line-per-row form.
        pairs = [
            f"{h}: {cell(v)}" if h else cell(v) for h, v in zip(headers, row, strict=True) if v
        ]
        if pairs:
            out.append("• " + " · ".join(pairs))
    return out
