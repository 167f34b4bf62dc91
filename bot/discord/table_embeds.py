"""A reply holding a Markdown pipe table, as Discord shows a table best: the prose as the
message's content, the first table as embeds with one field per row (its name the row's
first cell, its value the other cells as `Header: value` lines).

Within Discord's limits only (25 fields an embed, 10 embeds, 256 characters a field name,
1,024 a value, 6,000 in all the embeds of a message) and when the prose fits one message;
otherwise the reply is posted as today, the table as aligned monospace. Cells are plain
text with Discord's markdown escaped, and @everyone/@here made inert (the message also
allows no mentions), so nothing in a cell formats or pings.
"""

from __future__ import annotations

from dataclasses import dataclass

import discord

from bot.discord.markdown import render_for_discord
from bot.render.first_table import ProseAndTable, first_table
from bot.render.split import neutralize_broadcasts
from core.reader_time import render_reader_times

FIELDS_PER_EMBED = 25
MAX_EMBEDS = 10
FIELD_NAME_CHARS = 256
FIELD_VALUE_CHARS = 1024
EMBED_TOTAL_CHARS = 6000
# An empty field value is refused; a row with nothing but its first cell shows this.
_NOTHING = "—"


@dataclass(frozen=True)
class TableMessage:
    """What to send: the message's text parts and the embeds its first part carries."""

    chunks: list[str]
    embeds: list[discord.Embed]


def with_table_embeds(text: str, chunks: list[str]) -> TableMessage:
    """`text` posted with its first table as embeds, or `chunks` (today's rendering) alone."""
    found = first_table(text)
    embeds = _embeds(found) if found is not None else None
    if found is None or embeds is None:
        return TableMessage(chunks, [])
    prose = "\n\n".join(p for p in (found.before, found.after) if p.strip())
    parts = render_for_discord(prose) if prose else [""]
    if len(parts) > 1:
        return TableMessage(chunks, [])
    return TableMessage(parts, embeds)


def _embeds(found: ProseAndTable) -> list[discord.Embed] | None:
    """One field per row, 25 to an embed; None when Discord's limits do not allow it."""
    fields = [_field(found.header, row) for row in found.body]
    if not fields or len(fields) > FIELDS_PER_EMBED * MAX_EMBEDS:
        return None
    if any(
        len(name) > FIELD_NAME_CHARS or len(value) > FIELD_VALUE_CHARS for name, value in fields
    ):
        return None
    if sum(len(name) + len(value) for name, value in fields) > EMBED_TOTAL_CHARS:
        return None
    embeds = []
    for start in range(0, len(fields), FIELDS_PER_EMBED):
        embed = discord.Embed()
        for name, value in fields[start : start + FIELDS_PER_EMBED]:
            embed.add_field(name=name, value=value, inline=False)
        embeds.append(embed)
    return embeds


def _field(header: list[str], row: list[str]) -> tuple[str, str]:
    name = _shown(row[0]) or _NOTHING
    lines = [
        f"**{_shown(h)}**: {_shown(v)}" if h else _shown(v)
        for h, v in zip(header[1:], row[1:], strict=True)
        if v
    ]
    return name, "\n".join(lines) or _NOTHING


def _shown(cell: str) -> str:
    """A plain cell as Discord shows it verbatim: markdown escaped, broadcasts inert, and a
    time also in each reader's own zone."""
    shown = neutralize_broadcasts(discord.utils.escape_markdown(cell))
    return render_reader_times(shown, lambda unix: f" (<t:{unix}:f> your time)")
