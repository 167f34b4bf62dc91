"""The reply to `status`: what is live in the thread, section by section, and finished work
in one short line at the end.

Each status source says what is live (a `**Heading**:` and `- ` bullets, or bare bullets)
and may end with one `Recent: …` line for what it finished; those are gathered into a single
`Recent: …; …` line, last, so finished work never takes more room than that.

Sections are separated by a blank line, and a line that is not a bullet after a bullet
starts a paragraph of its own: in Markdown a line right under a list item continues it, which
showed the `**Scheduled tasks**:` heading indented under the last bullet before it. Likewise
after a table's last row: a line right under it would be one more row.
"""

from __future__ import annotations

from collections.abc import Sequence

RECENT = "Recent: "


def status_reply(head: str, sections: Sequence[str]) -> str:
    """`head`, then each non-empty section, then the merged recent line."""
    blocks: list[str] = [head]
    recent: list[str] = []
    for section in sections:
        kept: list[str] = []
        for line in section.splitlines():
            if line.startswith(RECENT):
                recent.append(line.removeprefix(RECENT).strip().rstrip("."))
            else:
                kept.append(line)
        block = _paragraphs(kept).strip("\n")
        if block:
            blocks.append(block)
    if recent:
        blocks.append(RECENT + "; ".join(recent) + ".")
    return "\n\n".join(blocks)


def _paragraphs(lines: Sequence[str]) -> str:
    """`lines` with a blank line before each unindented non-bullet that follows a bullet (or
    its indented continuation), and before each line that is no table row after a row."""
    out: list[str] = []
    in_list = in_table = False
    for line in lines:
        bullet = line.startswith("- ")
        row = line.startswith("|")
        continued = in_list and line[:1].isspace() and bool(line.strip())
        if line.strip() and ((in_list and not bullet and not continued) or (in_table and not row)):
            out.append("")
        if line.strip():
            in_list = bullet or continued
        in_table = row  # a blank line already ends a table
        out.append(line)
    return "\n".join(out)
