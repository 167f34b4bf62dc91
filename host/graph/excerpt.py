"""Long output as people read it in chat: its head and its tail, with what was left out
between them counted (the end of a command's output is where its errors are)."""

from __future__ import annotations

from dataclasses import dataclass

from agents.process import OMITTED_LINE

# What a chat report shows of one output, at most: the tail gets more, errors end outputs.
HEAD_LINES = 10
TAIL_LINES = 30
HEAD_CHARS = 800
TAIL_CHARS = 1600


@dataclass(frozen=True)
class ExcerptLimits:
    """How much of an output's head and tail an excerpt keeps."""

    head_lines: int = HEAD_LINES
    tail_lines: int = TAIL_LINES
    head_chars: int = HEAD_CHARS
    tail_chars: int = TAIL_CHARS


def excerpt(text: str, limits: ExcerptLimits = ExcerptLimits()) -> str:
    """`text` whole when it fits `limits`, else its first and last lines with one line
    between them saying how much was omitted (`… 99,960 lines omitted …`). A line too long
    for its side is cut (its start kept at the head, its end at the tail), and then the
    omission is counted in characters.

    An output whose middle was already dropped when it was captured (it carries the
    capture's `…[N lines, M bytes of output omitted]…` line) has its head taken before that
    line and its tail after it, and those lines counted in."""
    text = text.rstrip("\n")
    lines = text.split("\n")
    gap = next((n for n, line in enumerate(lines) if OMITTED_LINE.fullmatch(line)), None)
    if gap is None:
        if (
            len(lines) <= limits.head_lines + limits.tail_lines
            and len(text) <= limits.head_chars + limits.tail_chars
        ):
            return text
        before, after, dropped_lines, dropped_size = lines, None, 0, 0
    else:
        found = OMITTED_LINE.fullmatch(lines[gap])
        assert found is not None
        before, after = lines[:gap], lines[gap + 1 :]
        dropped_lines = int(found["lines"].replace(",", ""))
        dropped_size = int(found["bytes"].replace(",", "")) - len(lines[gap]) - 2
    cut = False
    head = _fitting(before, limits.head_lines, limits.head_chars)
    if not head and before:
        head, cut = [before[0][: limits.head_chars]], True
    rest = before[len(head) :] if after is None else after
    tail = _fitting(rest[::-1], limits.tail_lines, limits.tail_chars)[::-1]
    if not tail:
        # The last line is too long for the tail (or is the head's own line): its end.
        tail, cut = [(rest or before or [""])[-1][-limits.tail_chars :]], True
    # The stored lines, plus those the capture dropped (the gap line stands for them).
    total = len(lines) if gap is None else len(before) + len(after or []) + dropped_lines - 1
    count = total - len(head) - len(tail)
    if cut or count <= 0:
        # The head is a prefix of `text` and the tail a suffix: what lies between.
        omitted = len(text) - len("\n".join(head)) - len("\n".join(tail)) + dropped_size
        note = f"… {omitted:,} characters omitted …"
    else:
        note = f"… {count:,} line{'' if count == 1 else 's'} omitted …"
    return "\n".join([*head, note, *tail])


def _fitting(lines: list[str], count: int, chars: int) -> list[str]:
    """The first lines of `lines`, at most `count` of them and `chars` characters."""
    taken: list[str] = []
    used = 0
    for line in lines[:count]:
        used += len(line) + 1
        if used > chars:
            break
        taken.append(line)
    return taken
