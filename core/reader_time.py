"""A time each reader sees in their own zone.

The host writes a time in a named zone (`Thu 3 Dec 2026 09:00 CET`) followed by
`reader_mark(when)`; each platform turns the mark into its native time, which every reader's
client shows in that reader's own zone (Slack's `<!date>`, Discord's `<t:…>`), and a surface
without one (the console) drops it. A mark in text the bot did not write renders the same
way: a time pings nobody.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime

_MARK = re.compile(" ?\u27e8t:(\\d{1,12})\u27e9")


def reader_mark(when: datetime) -> str:
    """The mark after a shown time (aware) that each reader's client shows in their zone."""
    return f" \u27e8t:{int(when.timestamp())}\u27e9"


def render_reader_times(text: str, render: Callable[[int], str]) -> str:
    """`text` with each mark (and its leading space) replaced by `render(unix_seconds)`."""
    return _MARK.sub(lambda m: render(int(m.group(1))), text)


def drop_reader_times(text: str) -> str:
    """`text` without marks, for surfaces with no time of their own."""
    return render_reader_times(text, lambda _: "")
