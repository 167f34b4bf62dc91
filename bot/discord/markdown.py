"""Model-written Markdown → Discord messages. Discord renders most Markdown itself; what it
lacks is converted (tables, deep headings, rules, task boxes), code is kept verbatim (its
fence made one Discord reads), and the result is split at 2,000 characters without breaking
a code fence."""

from __future__ import annotations

import re

from bot.render.fences import closes_fence, open_fence
from bot.render.split import ZWSP, neutralize_broadcasts, split_message
from bot.render.tables import aligned_lines, bullet_rows, table_at
from core.reader_time import render_reader_times

DISCORD_CHUNK_LIMIT = 2000
HR_LINE = "———"
_DEEP_HEADING = re.compile(r"^ {0,3}#{4,6}[ \t]+(?P<text>.*?)(?:[ \t]+#+)?[ \t]*$")
_HR = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_TASK = re.compile(r"^(?P<lead>[ \t]*[-*+][ \t]+)\[(?P<mark>[ xX])\][ \t]+")
_LINK = re.compile(r"\[([^\]\n]+)\]\((\S+?)\)")
_BACKTICK_RUN = re.compile("`{3,}")
_MARKUP = re.compile(r"\*\*|__|~~|`|(?<!\w)[*_](?=\S)|(?<=\S)[*_](?!\w)")


def plain_cell(text: str) -> str:
    """A table cell as plain text for a monospace block (links keep their target)."""
    return _MARKUP.sub("", _LINK.sub(r"\1 (\2)", text))


def _table(rows: list[list[str]], aligns: list[str]) -> list[str]:
    lines = aligned_lines([[plain_cell(c) for c in row] for row in rows], aligns)
    if lines is None:
        return bullet_rows(rows, lambda c: c)
    return ["```", *lines, "```"]


def _line(line: str) -> str:
    heading = _DEEP_HEADING.match(line)
    if heading:
        return f"**{heading['text']}**"  # Discord renders only #, ## and ###
    if _HR.match(line):
        return HR_LINE
    task = _TASK.match(line)
    if task:
        box = "☑" if task["mark"] in "xX" else "☐"
        return f"{task['lead']}{box} {line[task.end() :]}"
    return line


def _code_block(fence: re.Match[str], body: list[str]) -> list[str]:
    """A code block as Discord reads one: fenced by exactly three backticks (it knows no
    longer fence and no tildes, and ends a block at the next three backticks anywhere), so
    a run of backticks inside is broken up (shown alike); the body is kept as it is."""
    indent, info = fence["indent"], fence["info"].strip()
    code = [_BACKTICK_RUN.sub(lambda m: ZWSP.join(m.group()), line) for line in body]
    return [f"{indent}```{info}", *code, f"{indent}```"]


def markdown_to_discord(md: str) -> str:
    """Convert what Discord cannot show; code blocks pass through untouched."""
    lines = md.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        fence = open_fence(lines[i])
        if fence is not None:
            j = i + 1
            while j < len(lines) and not closes_fence(lines[j], fence["fence"]):
                j += 1
            out.extend(_code_block(fence, lines[i + 1 : j]))
            i = j + 1
            continue
        found = table_at(lines, i)
        if found is not None:
            (rows, aligns), i = found
            out.extend(_table(rows, aligns))
            continue
        out.append(_line(lines[i]))
        i += 1
    # A time each reader's Discord shows in their own zone.
    return render_reader_times(
        "\n".join(out).strip("\n"), lambda unix: f" (<t:{unix}:f> your time)"
    )


def render_for_discord(md: str, limit: int = DISCORD_CHUNK_LIMIT) -> list[str]:
    """Markdown to ready-to-post Discord messages: convert, break @everyone/@here, split."""
    return split_message(neutralize_broadcasts(markdown_to_discord(md)), limit)
