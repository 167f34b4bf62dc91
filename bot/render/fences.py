"""Fenced code block lines (CommonMark), shared by the renderers and the splitter."""

from __future__ import annotations

import re

# A fence line: any indentation (fences inside list items count too), 3+ backticks or tildes,
# then the info string. A backtick fence's info string may not contain a backtick (CommonMark),
# which keeps one-line "```code```" from opening a block that swallows the rest of the text.
_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


def open_fence(line: str) -> re.Match[str] | None:
    """The match (groups indent, fence, info) when `line` opens a fenced block."""
    m = _FENCE_OPEN.match(line)
    if m is None or (m["fence"][0] == "`" and "`" in m["info"]):
        return None
    return m


def closes_fence(line: str, fence: str) -> bool:
    """True when `line` closes a block opened with `fence`."""
    s = line.strip()
    return len(s) >= len(fence) and set(s) == {fence[0]}
