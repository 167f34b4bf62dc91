"""A run's status message as Block Kit: its title, how many nodes settled, and a `table`
block with one row per node (id, what it runs, state) — the message's text stays as it is,
the fallback Slack shows in notifications and where blocks cannot be drawn.

The status message reaches the adapter as text (the outbox records text, so a redelivery
after a crash carries the same message); its lines are the ones `progress_text` writes, read
back here. Anything else, or a run too big for one table (Slack: 100 rows of at most 20
cells, one table per message), gets no blocks and is posted as text alone.
"""

from __future__ import annotations

import re
from typing import Any

from bot.slack.mrkdwn import render_for_slack

# Slack's limits: 100 rows per table (the header is one of them).
MAX_TABLE_ROWS = 100
# A cell this long at most (a note or a task line is a glimpse; the text has it all).
CELL_CHARS = 200
_TITLE = re.compile(r"^\*\*Run `[^`\n]+`\*\* — ")
_SETTLED = re.compile(r"^\d+/\d+ settled$")
_STATES = "pending|queued|running|completed|exception|failed|skipped|cancelled|\\*not approved\\*"
_NODE = re.compile(
    rf"^- (?P<icon>\S+) `(?P<node>[^`]+)` (?P<what>.*?): (?P<state>{_STATES})"
    r"(?: — (?P<note>.*))?$"
)
HEADER = ("Node", "Task", "State")


def run_status_blocks(text: str) -> list[dict[str, Any]] | None:
    """The blocks of a run's status message, or None when `text` is not one (or too big)."""
    lines = text.split("\n")
    if len(lines) < 3 or not _TITLE.match(lines[0]) or not _SETTLED.match(lines[1]):
        return None
    rows: list[tuple[str, str, str]] = []
    for line in lines[2:]:
        match = _NODE.match(line)
        if match is None:
            return None
        state = match["state"].strip("*")
        note = f" — {_unfenced(match['note'])}" if match["note"] else ""
        rows.append((match["node"], _unfenced(match["what"]), f"{match['icon']} {state}{note}"))
    if len(rows) + 1 > MAX_TABLE_ROWS:
        return None
    title = render_for_slack(lines[0])
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": title[0] if title else "Run"}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": lines[1]}]},
        {
            "type": "table",
            "column_settings": [{"is_wrapped": False}, {"is_wrapped": True}, {"is_wrapped": True}],
            "rows": [[raw_text_cell(c) for c in row] for row in (HEADER, *rows)],
        },
    ]


def raw_text_cell(text: str) -> dict[str, str]:
    shown = text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"
    return {"type": "raw_text", "text": shown or " "}


def _unfenced(text: str) -> str:
    """A Markdown code span's content (`inline_code` fences it, padded with a space where
    the content starts or ends with a backtick); other text as it is."""
    fence = re.match(r"`+", text)
    width = len(fence.group()) if fence else 0
    if not width or len(text) < 2 * width or not text.endswith("`" * width):
        return text
    inner = text[width:-width]
    padded = inner.startswith(" ") and inner.endswith(" ") and len(inner) >= 2
    if padded and (inner[1:].startswith("`") or inner[:-1].endswith("`")):
        inner = inner[1:-1]
    return inner
