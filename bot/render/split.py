"""Split long messages into platform-sized chunks without breaking fenced code blocks.

Pure text: shared by the Slack and Discord adapters (each passes its own size limit).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeAlias

from bot.render.fences import closes_fence, open_fence

__all__ = ["ZWSP", "neutralize_broadcasts", "split_message"]

ZWSP = "\u200b"

# An HTML/Slack entity; a hard cut backs off rather than leave "&am" | "p;" across two chunks.
_ENTITY = re.compile(r"&#?[0-9A-Za-z]{1,10};")
# Words for the word-boundary split: a token is its leading whitespace plus a word, and a
# "<...>" group (a Slack link or mention, which may contain spaces) counts as part of a word.
_TOKEN = re.compile(r"\s*(?:<[^<>\n]{0,500}>|\S)+|\s+\Z")
_BROADCAST = re.compile(r"@(?=(?:everyone|here|channel))", re.IGNORECASE)


@dataclass(frozen=True)
class _Fence:
    """A fenced code block: its opening line, body lines and closing line (None: unclosed)."""

    opener: str
    body: tuple[str, ...]
    closer: str | None

    @property
    def text(self) -> str:
        lines = [self.opener, *self.body]
        if self.closer is not None:
            lines.append(self.closer)
        return "\n".join(lines)


# A unit is what line-level splitting never cuts: one text line, or one whole code block.
_Unit: TypeAlias = str | _Fence


def _unit_text(unit: _Unit) -> str:
    return unit.text if isinstance(unit, _Fence) else unit


def _paragraphs(text: str) -> list[tuple[str, list[_Unit]]]:
    """Paragraphs as (separator before it, units); blank lines inside code don't separate."""
    lines = text.split("\n")
    paras: list[tuple[str, list[_Unit]]] = []
    units: list[_Unit] = []
    blanks: list[str] = []
    sep = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        unit: _Unit
        m = open_fence(line)
        if m is not None:
            j = i + 1
            while j < len(lines) and not closes_fence(lines[j], m["fence"]):
                j += 1
            closer = lines[j] if j < len(lines) else None
            unit = _Fence(line, tuple(lines[i + 1 : j]), closer)
            i = j + 1
        elif not line.strip():
            if units:
                paras.append((sep, units))
                units = []
            blanks.append(line)
            i += 1
            continue
        else:
            unit = line
            i += 1
        if not units:
            # The original blank lines, so paragraphs sharing a chunk keep their spacing.
            sep = "\n" + "\n".join(blanks) + "\n" if paras else ""
            blanks = []
        units.append(unit)
    if units:
        paras.append((sep, units))
    return paras


class _Packer:
    """Greedily fills chunks up to the limit; a piece that doesn't fit starts a new chunk."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: list[str] = []
        self.cur = ""
        self.open = False  # tracked apart from `cur` because code bodies may hold empty lines

    def add(self, sep: str, piece: str) -> bool:
        """Append `piece` (joined by `sep`) or start a new chunk; False if it exceeds the limit."""
        if self.open and len(self.cur) + len(sep) + len(piece) <= self.limit:
            self.cur += sep + piece
            return True
        if len(piece) <= self.limit:
            self.flush()
            self.cur, self.open = piece, True
            return True
        return False

    def extend(self, pieces: list[str]) -> None:
        """Take the pre-split pieces of one over-long unit; the last stays open for packing."""
        if not pieces:
            return
        self.flush()
        self.chunks.extend(pieces[:-1])
        self.cur, self.open = pieces[-1], True

    def flush(self) -> None:
        if self.open:
            self.chunks.append(self.cur)
        self.cur, self.open = "", False


def _hard_cut(s: str, limit: int) -> list[str]:
    pieces: list[str] = []
    while len(s) > limit:
        cut = limit
        amp = s.rfind("&", max(1, limit - 12), limit)
        if amp != -1:
            m = _ENTITY.match(s, amp)
            if m is not None and m.end() > limit:
                cut = amp
        pieces.append(s[:cut])
        s = s[cut:]
    pieces.append(s)
    return pieces


def _split_line(line: str, limit: int) -> list[str]:
    """One over-long line at word boundaries (the break replaces the whitespace), else hard."""
    out: list[str] = []
    cur = ""
    for tok in _TOKEN.findall(line):
        if len(cur) + len(tok) <= limit:
            cur += tok
            continue
        word = tok
        if cur:
            out.append(cur)
            cur = ""
            word = tok.lstrip()
            if len(word) <= limit:
                cur = word
                continue
        pieces = _hard_cut(word, limit)
        out.extend(pieces[:-1])
        cur = pieces[-1]
    if cur:
        out.append(cur)
    return out


def _split_fence(fence: _Fence, limit: int) -> list[str]:
    """An over-long code block: each piece closes the fence and the next reopens it."""
    m = open_fence(fence.opener)
    assert m is not None  # _Fence is only built from a matching opener
    close = m["indent"] + m["fence"]
    ends = [len(close)] + ([len(fence.closer)] if fence.closer is not None else [])
    budget = limit - len(fence.opener) - max(ends) - 2
    lines = list(fence.body)
    if budget < 1 or not lines:
        # No room for the fences themselves (absurdly small limit): cut it as plain text.
        packer = _Packer(limit)
        for line in fence.text.split("\n"):
            if not packer.add("\n", line):
                packer.extend(_hard_cut(line, limit))
        packer.flush()
        return packer.chunks
    packer = _Packer(budget)
    for line in lines:
        if not packer.add("\n", line):
            # Code is cut hard, not at spaces: a word split would drop the space it breaks on.
            packer.extend(_hard_cut(line, budget))
    packer.flush()
    out: list[str] = []
    for k, body in enumerate(packer.chunks):
        end = fence.closer if k == len(packer.chunks) - 1 else close
        out.append(fence.opener + "\n" + body + ("" if end is None else "\n" + end))
    return out


def split_message(text: str, limit: int) -> list[str]:
    """Split text into chunks of at most `limit` chars: paragraphs, lines, words, then hard.

    Code blocks are kept whole when they fit; a longer one is closed and reopened per chunk.
    """
    if limit < 1:
        raise ValueError(f"limit must be positive, got {limit}")
    if not text.strip():
        return []
    packer = _Packer(limit)
    for sep, units in _paragraphs(text):
        if packer.add(sep, "\n".join(_unit_text(u) for u in units)):
            continue
        # Over-long paragraph: give it a fresh chunk (a paragraph break beats a line break),
        # then pack it line by line; its tail stays open so the next paragraph can join it.
        packer.flush()
        for unit in units:
            if packer.add("\n", _unit_text(unit)):
                continue
            if isinstance(unit, _Fence):
                packer.extend(_split_fence(unit, limit))
            else:
                packer.extend(_split_line(unit, limit))
    packer.flush()
    return [c for c in packer.chunks if c.strip()]


def neutralize_broadcasts(text: str) -> str:
    """Break @everyone/@here/@channel with a zero-width space after "@" (idempotent)."""
    return _BROADCAST.sub("@" + ZWSP, text)
