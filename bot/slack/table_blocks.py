"""A reply holding a Markdown pipe table, as Block Kit: the prose before it as a section,
the table as a native `table` block (header row bold), the prose after it as a section.

The message's `text` stays today's rendering (the table as aligned monospace or bullets):
it is the notification and the fallback where blocks are not drawn. Slack allows one table
per message, so only the first table becomes a block (any later one stays monospace in its
section); a table over Slack's limits (100 rows, 20 cells a row), or a reply long enough to
be posted in parts, gets no blocks at all. Other Slack apps report that Slack pins the table
to the bottom of the message whatever its place among the blocks: prose after a table may
show above it.

Cells are plain text shown verbatim (`raw_text`, or a bold `rich_text` header), so nothing
in one is read as mrkdwn; `<!…>` is broken up and @channel/@here/@everyone made inert
before the outgoing neutraliser sees them, so they show as written and ping nobody.
"""

from __future__ import annotations

from typing import Any

from bot.render.first_table import ProseAndTable, first_table
from bot.render.split import ZWSP, neutralize_broadcasts
from bot.slack.mrkdwn import markdown_to_mrkdwn, render_for_slack
from bot.slack.run_blocks import MAX_TABLE_ROWS, raw_text_cell, run_status_blocks
from core.reader_time import drop_reader_times
from host.runtime.messages import OutboundMessage

# Slack's limits: cells in a row, and characters in a section's mrkdwn text. (Its 10,000
# characters in all of a table's cells cannot be reached: the text, which shows every cell,
# is one part of at most 3,500 characters.)
MAX_TABLE_CELLS = 20
SECTION_CHARS = 3000

Block = dict[str, Any]


def message_blocks(message: OutboundMessage) -> list[Block] | None:
    """The blocks to post `message` with, or None to post its text alone: a run's status
    message as one row per node, else the first Markdown table of the text as a table."""
    run_status = run_status_blocks(message.text)
    if run_status is not None:
        return run_status
    found = first_table(message.text)
    if found is None or not _fits(found) or len(render_for_slack(message.text)) > 1:
        return None
    before, after = (
        markdown_to_mrkdwn(p) if p.strip() else "" for p in (found.before, found.after)
    )
    if len(before) > SECTION_CHARS or len(after) > SECTION_CHARS:
        return None
    return [*_section(before), _table(found), *_section(after)]


def _fits(found: ProseAndTable) -> bool:
    return len(found.rows) <= MAX_TABLE_ROWS and len(found.header) <= MAX_TABLE_CELLS


def _section(mrkdwn: str) -> list[Block]:
    """A mrkdwn section, or none for no prose."""
    if not mrkdwn.strip():
        return []
    return [{"type": "section", "text": {"type": "mrkdwn", "text": mrkdwn}}]


def _table(found: ProseAndTable) -> Block:
    return {
        "type": "table",
        "column_settings": [{"align": align, "is_wrapped": True} for align in found.aligns],
        "rows": [
            [_header_cell(_inert(h)) for h in found.header],
            *([raw_text_cell(_inert(c)) for c in row] for row in found.body),
        ],
    }


def _header_cell(text: str) -> Block:
    shown = raw_text_cell(text)["text"]
    bold = {"type": "text", "text": shown, "style": {"bold": True}}
    return {
        "type": "rich_text",
        "elements": [{"type": "rich_text_section", "elements": [bold]}],
    }


def _inert(text: str) -> str:
    """Shown as written and pinging nobody: a time in the writer's zone only (raw text has
    no reader's time), `<!here>` broken by a zero-width space, bare @channel/@here/@everyone
    likewise (a `<@U…>` becomes `@U…` in the outgoing call)."""
    return neutralize_broadcasts(drop_reader_times(text).replace("<!", "<" + ZWSP + "!"))
