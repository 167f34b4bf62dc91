"""Markdown pieces every layer writes for people."""

from __future__ import annotations

import re


def code_block(text: str) -> str:
    """`text` as a Markdown code block: its fence is longer than any backtick run inside,
    so nothing in it can close the block."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"
