"""Long output as people read it in chat: its head and its tail, with what was left out
between them counted (the end of a command's output is where its errors are)."""

from __future__ import annotations

from dataclasses import dataclass

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
    omission is counted in characters."""
    text = text.rstrip("\n")
    lines = text.split("\n")
    if (
        len(lines) <= limits.head_lines + limits.tail_lines
        and len(text) <= limits.head_chars + limits.tail_chars
    ):
        return text
    cut = False
    head = _fitting(lines, limits.head_lines, limits.head_chars)
    if not head:
        head, cut = [lines[0][: limits.head_chars]], True
    rest = lines[len(head) :]
    tail = _fitting(rest[::-1], limits.tail_lines, limits.tail_chars)[::-1]
    if not tail:
        # The last line is too long for the tail (or is the head's own line): its end.
        tail, cut = [(rest or lines)[-1][-limits.tail_chars :]], True
    if cut:
        # The head is a prefix of `text` and the tail a suffix: what lies between.
        omitted = len(text) - len("\n".join(head)) - len("\n".join(tail))
        note = f"… {omitted:,} characters omitted …"
    else:
        count = len(lines) - len(head) - len(tail)
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
