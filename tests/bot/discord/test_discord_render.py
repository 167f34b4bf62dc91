"""Discord rendering: Markdown Discord lacks is converted, code is kept verbatim, @everyone
and @here are broken, and messages split at 2,000 characters never inside a code fence."""

from __future__ import annotations

import pytest

from bot.discord.markdown import (
    DISCORD_CHUNK_LIMIT,
    HR_LINE,
    markdown_to_discord,
    plain_cell,
    render_for_discord,
)
from bot.render import ZWSP


def _fences_balanced(chunk: str) -> bool:
    return sum(1 for line in chunk.split("\n") if line.strip().startswith("```")) % 2 == 0


def test_discord_markdown_passes_through() -> None:
    md = "# Title\n## Sub\n**bold** *it* ~~gone~~ `code` [link](https://x.y)\n- a\n  - b\n> quote"
    assert markdown_to_discord(md) == md


def test_deep_headings_rules_and_task_boxes_are_converted() -> None:
    assert markdown_to_discord("#### Details ####") == "**Details**"
    assert markdown_to_discord("---") == HR_LINE
    assert markdown_to_discord("- [x] done\n- [ ] todo") == "- ☑ done\n- ☐ todo"


def test_a_table_becomes_an_aligned_code_block() -> None:
    out = markdown_to_discord("| name | n |\n|---|--:|\n| **alpha** | 1 |\n| [b](http://b) | 22 |")
    assert out.split("\n") == [
        "```",
        "name         |  n",
        "-------------+---",
        "alpha        |  1",
        "b (http://b) | 22",
        "```",
    ]


def test_a_wide_table_becomes_bullets() -> None:
    wide = "x" * 120
    out = markdown_to_discord(f"| k | v |\n|---|---|\n| a | {wide} |")
    assert out == f"• k: a · v: {wide}"


def test_code_blocks_are_verbatim() -> None:
    md = "```md\n| a | b |\n|---|---|\n#### not a heading\n---\n```"
    assert markdown_to_discord(md) == md


def test_broadcasts_are_broken_but_user_mentions_kept() -> None:
    (chunk,) = render_for_discord("@everyone and @here, ask <@123>")
    assert f"@{ZWSP}everyone" in chunk and f"@{ZWSP}here" in chunk and "<@123>" in chunk


def test_plain_cells_drop_markup() -> None:
    assert plain_cell("**a** _b_ `c` ~~d~~") == "a b c d"
    assert plain_cell("snake_case_name") == "snake_case_name"


@pytest.mark.parametrize("block_lines", [10, 400, 1500])
def test_splitting_never_leaves_a_fence_open(block_lines: int) -> None:
    code = "\n".join(f"line {i} of the listing" for i in range(block_lines))
    md = f"Intro paragraph.\n\n```python\n{code}\n```\n\nAfter the code."
    chunks = render_for_discord(md)
    assert all(len(c) <= DISCORD_CHUNK_LIMIT for c in chunks)
    assert all(_fences_balanced(c) for c in chunks)
    rejoined = "\n".join(chunks)
    assert "line 0 of the listing" in rejoined
    assert f"line {block_lines - 1} of the listing" in rejoined
    if len(md) > DISCORD_CHUNK_LIMIT and block_lines > 100:
        # the block had to split: every piece reopens the fence with its language
        assert sum(c.count("```python") for c in chunks) == len(
            [c for c in chunks if "of the listing" in c]
        )


def test_long_prose_splits_on_paragraphs() -> None:
    paragraphs = [f"Paragraph {i}. " + "word " * 80 for i in range(12)]
    chunks = render_for_discord("\n\n".join(paragraphs))
    assert len(chunks) > 1 and all(len(c) <= DISCORD_CHUNK_LIMIT for c in chunks)
    assert all(c.lstrip().startswith("Paragraph") for c in chunks)


def test_empty_text_renders_nothing() -> None:
    assert render_for_discord("   \n") == []
