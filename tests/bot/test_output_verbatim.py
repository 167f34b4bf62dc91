"""Command output as each platform shows it: verbatim in a code block, nothing inside read
as markup, pings inert; a long output's head and tail with the omitted count; short texts
cut at a word."""

from __future__ import annotations

import io
import re

import pytest

from agents.process import _Capture
from bot.console.markdown import plain_lines, terminal_lines
from bot.console.screen import markdown_for
from bot.discord.markdown import DISCORD_CHUNK_LIMIT, render_for_discord
from bot.render.fences import closes_fence, open_fence
from bot.render.shorten import shortened
from bot.render.split import ZWSP
from bot.slack.mrkdwn import render_for_slack
from core.markdown import code_block
from host.graph.excerpt import excerpt

# printf "*PASSED* 3 _of_ 5\n> note\n" and friends: what Markdown would take for markup.
HOSTILE = "*PASSED* 3 _of_ 5\n> note\n# FAILED tests\n~~gone~~ [x](y) <b>\n<!channel> @everyone"
LS = (
    "total 8\n"
    "-rw-r--r-- 1 alice staff  120 Dec  6 03:32 a_file.txt\n"
    "drwxr-xr-x 2 alice staff 4096 Dec  6 03:32 *dir*"
)
DF = (
    "Filesystem      Size  Used Avail Use% Mounted on\n"
    "/dev/sda1        98G   40G   54G  43% /\n"
    "tmpfs           7.8G     0  7.8G   0% /dev/shm"
)
TICKS = "before\n```\nfenced ``` inside\n````\nafter"
BROKEN = f"`{ZWSP}`{ZWSP}`"


def _report(output: str) -> str:
    return f"**Output of `s1`**:\n{code_block(output)}\nFull record: `raven-bot runs show r1`"


# -- Slack ------------------------------------------------------------------------------------


def test_slack_shows_output_verbatim_in_a_code_block() -> None:
    (shown,) = render_for_slack(_report(HOSTILE))
    assert shown == (
        "*Output of `s1`*:\n```\n*PASSED* 3 _of_ 5\n&gt; note\n# FAILED tests\n"
        f"~~gone~~ [x](y) &lt;b&gt;\n&lt;!channel&gt; @{ZWSP}everyone\n```\n"
        "Full record: `raven-bot runs show r1`"
    )


def test_slack_code_block_is_not_ended_by_backticks_inside() -> None:
    (shown,) = render_for_slack(_report(TICKS))
    body = shown.split("\n")[1:-1]
    assert body == [
        "```",
        "before",
        BROKEN,
        f"fenced {BROKEN} inside",
        f"`{ZWSP}`{ZWSP}`{ZWSP}`",
        "after",
        "```",
    ]


def test_slack_keeps_columns() -> None:
    (shown,) = render_for_slack(_report(f"{LS}\n{DF}"))
    assert shown.split("\n")[2:8] == [*LS.split("\n"), *DF.split("\n")]


# -- Discord ----------------------------------------------------------------------------------


def test_discord_shows_output_verbatim_in_a_code_block() -> None:
    (shown,) = render_for_discord(_report(HOSTILE))
    assert shown == (
        "**Output of `s1`**:\n```\n*PASSED* 3 _of_ 5\n> note\n# FAILED tests\n"
        f"~~gone~~ [x](y) <b>\n<!channel> @{ZWSP}everyone\n```\n"
        "Full record: `raven-bot runs show r1`"
    )


def test_discord_fences_with_three_backticks_and_breaks_runs_inside() -> None:
    # Discord knows no longer fence (nor `~~~`): a block opened with four would end early.
    (shown,) = render_for_discord(_report(TICKS))
    assert shown.split("\n")[1:9] == [
        "```",
        "before",
        BROKEN,
        f"fenced {BROKEN} inside",
        f"`{ZWSP}`{ZWSP}`{ZWSP}`",
        "after",
        "```",
        "Full record: `raven-bot runs show r1`",
    ]
    (tilde,) = render_for_discord("~~~python\n# not a heading\n~~~")
    assert tilde == "```python\n# not a heading\n```"


def test_discord_split_of_a_long_report_keeps_the_tail_in_code_blocks() -> None:
    wide = "\n".join(f"{n:>6} " + "x" * 70 for n in range(1, 5001))
    chunks = render_for_discord(_report(excerpt(wide)))
    assert len(chunks) > 1 and all(len(c) <= DISCORD_CHUNK_LIMIT for c in chunks)
    for chunk in chunks:
        fences = [line for line in chunk.split("\n") if line.startswith("```")]
        assert len(fences) % 2 == 0, chunk  # each part opens and closes its block
    joined = "\n".join(chunks)
    assert "… 4,9" in joined and "lines omitted …" in joined
    assert chunks[-1].endswith(f"  5000 {'x' * 70}\n```\nFull record: `raven-bot runs show r1`")


# -- console ----------------------------------------------------------------------------------


def test_console_shows_output_as_it_was() -> None:
    text = _report(f"{HOSTILE}\n{LS}\n{DF}")
    output = [*HOSTILE.split("\n"), *LS.split("\n"), *DF.split("\n")]
    plain = plain_lines(text)
    assert plain[1 : 1 + len(output)] == [f"    {line}" for line in output]
    shown = terminal_lines(text, width=100, color_system=None)
    # rich pads a code block by one column: nothing else moves.
    assert shown[1 : 1 + len(output)] == [f" {line}" for line in output]


def test_runs_show_renders_markdown_for_a_terminal_or_plain_for_a_pipe() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    text = "**Run `r1` completed** — plan\n" + code_block("*PASSED*")
    shown = markdown_for(Terminal(), text)
    assert "**" not in shown and "`" not in shown, shown
    assert "*PASSED*" in shown
    piped = markdown_for(io.StringIO(), text)
    assert piped == "Run `r1` completed — plan\n    *PASSED*\n"


# -- long output ------------------------------------------------------------------------------


def test_a_long_output_shows_its_head_and_tail_with_the_omitted_count() -> None:
    seq = "\n".join(str(n) for n in range(1, 100_001)) + "\n"
    lines = excerpt(seq).split("\n")
    assert lines == [
        *(str(n) for n in range(1, 11)),
        "… 99,960 lines omitted …",
        *(str(n) for n in range(99_971, 100_001)),
    ]
    assert excerpt("short\noutput\n") == "short\noutput"


def test_a_captured_output_counts_what_the_capture_dropped() -> None:
    capture = _Capture(200_000)
    data = "".join(f"{n}\n" for n in range(1, 100_001)).encode()
    for start in range(0, len(data), 4096):
        capture.feed(data[start : start + 4096])
    stored = capture.text()
    assert re.search(r"…\[[\d,]+ lines, 388,895 bytes of output omitted\]…", stored)
    assert excerpt(stored) == excerpt(data.decode())


def test_one_long_line_keeps_its_start_and_end() -> None:
    line = "a" * 1000 + "b" * 3000 + "c" * 1000
    assert excerpt(line) == "a" * 800 + "\n… 2,600 characters omitted …\n" + "b" * 600 + "c" * 1000


# -- short texts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "limit", "shown"),
    [
        ("hello world", 20, "hello world"),
        ("hello world again", 12, "hello world…"),
        ("hello world again", 11, "hello…"),
        ("see (database, runs) here", 17, "see (database…"),
        ("abcdefghij", 5, "abcd…"),
    ],
)
def test_shortened_cuts_at_a_word(text: str, limit: int, shown: str) -> None:
    assert shortened(text, limit) == shown
    assert len(shortened(text, limit)) <= limit


def test_fence_helpers_agree_with_the_renderers() -> None:
    # The splitter reads the same fences the renderers write.
    opener = open_fence("```")
    assert opener is not None and not closes_fence(BROKEN, opener["fence"])
