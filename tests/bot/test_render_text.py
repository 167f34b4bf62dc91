"""Text rendering for chat egress: Markdown to Slack mrkdwn, ping neutralization, splitting."""

from __future__ import annotations

import random
import re

import pytest

from bot.render import ZWSP, neutralize_broadcasts, split_message
from bot.render.tables import TABLE_MAX_WIDTH, display_width
from bot.slack.mrkdwn import (
    HR_LINE,
    markdown_to_mrkdwn,
    neutralize_slack_args,
    neutralize_slack_pings,
    render_for_slack,
)

# --- Markdown -> mrkdwn ---------------------------------------------------------------------

INLINE_CASES = [
    ("**bold**", "*bold*"),
    ("__bold__", "*bold*"),
    ("*italic*", "_italic_"),
    ("_italic_", "_italic_"),
    ("~~strike~~", "~strike~"),
    ("***both***", "_*both*_"),
    ("**bold *italic***", "*bold _italic_*"),
    ("*italic **bold***", "_italic *bold*_"),
    ("~~**gone**~~", "~*gone*~"),
    ("a **b** c *d* e", "a *b* c _d_ e"),
    ("**Note**: read this", "*Note*: read this"),
    ("snake_case_name stays", "snake_case_name stays"),
    ("2*3*4 = 24", "2*3*4 = 24"),
    ("**unclosed bold", "**unclosed bold"),
    ("[docs](https://example.com/a_b_c)", "<https://example.com/a_b_c|docs>"),
    ("[q](https://e.com/?a=1&b=2)", "<https://e.com/?a=1&b=2|q>"),
    ("[a < b & c](https://e.com)", "<https://e.com|a &lt; b &amp; c>"),
    ("[**bold** label](https://e.com)", "<https://e.com|bold label>"),
    ("[https://e.com](https://e.com)", "<https://e.com>"),
    (
        "[wiki](https://en.wikipedia.org/wiki/Foo_(bar))",
        "<https://en.wikipedia.org/wiki/Foo_(bar)|wiki>",
    ),
    ("[rel](/docs/x_y)", "rel (/docs/x_y)"),
    ("see https://e.com/a_b_c_d.", "see https://e.com/a_b_c_d."),
    ("**https://e.com/x_y**", "*https://e.com/x_y*"),
    ("https://e.com/?a=1&b=2", "https://e.com/?a=1&amp;b=2"),
    ("<https://auto.example/x_y>", "<https://auto.example/x_y>"),
    ("<ops@example.com>", "<mailto:ops@example.com|ops@example.com>"),
    ("`**not bold** _nor_ ~~this~~`", "`**not bold** _nor_ ~~this~~`"),
    ("use `x_y_z` and _em_", "use `x_y_z` and _em_"),
    ("`a < b && c`", "`a &lt; b &amp;&amp; c`"),
    ("**`code` in bold**", "*`code` in bold*"),
    ("![diagram](https://e.com/d.png)", "<https://e.com/d.png|diagram>"),
    ("![](https://e.com/d.png)", "<https://e.com/d.png>"),
    ("a & b < c > d", "a &amp; b &lt; c &gt; d"),
    ("<b>html</b>", "&lt;b&gt;html&lt;/b&gt;"),
    ("hi <@U12345>, see <#C0123|general>", "hi <@U12345>, see <#C0123|general>"),
    ("\\*literal\\*", f"{ZWSP}*{ZWSP}literal{ZWSP}*{ZWSP}"),
]


@pytest.mark.parametrize(("md", "expected"), INLINE_CASES)
def test_inline(md: str, expected: str) -> None:
    assert markdown_to_mrkdwn(md) == expected


BLOCK_CASES = [
    ("# Title", "*Title*"),
    ("### **Bold** heading ###", "*Bold heading*"),
    ("## Sub with _it_", "*Sub with _it_*"),
    ("#hashtag is not a heading", "#hashtag is not a heading"),
    ("Title\n=====\nbody", "*Title*\nbody"),
    ("intro\n# Heading\nbody", "intro\n*Heading*\nbody"),
    ("- one\n- two", "• one\n• two"),
    ("* one\n+ two", "• one\n• two"),
    ("- a\n  - b\n    - c\n- d", "• a\n  • b\n    • c\n• d"),
    ("- a\n    - b\n        - c", "• a\n  • b\n    • c"),
    ("- item with **bold** and *it*", "• item with *bold* and _it_"),
    ("- a\n  continued", "• a\n  continued"),
    ("1. first\n2. second", "1. first\n2. second"),
    ("1. step\n   - detail\n2. next", "1. step\n  • detail\n2. next"),
    ("3) third", "3. third"),
    ("- [ ] todo\n- [x] done", "• ☐ todo\n• ☑ done"),
    ("> quoted **text**", "> quoted *text*"),
    ("> a\n>\n> b", "> a\n>\n> b"),
    ("> a < b", "> a &lt; b"),
    ("> - listed", "> • listed"),
    ("---", HR_LINE),
    ("***", HR_LINE),
    ("___", HR_LINE),
    ("- - -", HR_LINE),
    ("before\n\n---\n\nafter", f"before\n\n{HR_LINE}\n\nafter"),
    ("a\n\n\n\nb", "a\n\nb"),
    ("\n\n  lead and trail  \n\n", "lead and trail"),
]


@pytest.mark.parametrize(("md", "expected"), BLOCK_CASES)
def test_blocks(md: str, expected: str) -> None:
    assert markdown_to_mrkdwn(md) == expected


# Chat Markdown, not a document: what CommonMark would hide or re-read stays as typed, and
# Slack styles (which end at a line break) are closed and reopened on every line.
CHAT_CASES = [
    ("foo**bar** and 2*3", "foo**bar** and 2*3"),
    ("a **bold\nacross** lines", "a *bold*\n*across* lines"),
    ("Title *with\nbreak*\n---", "*Title _with_*\n*_break_*"),
    ("intro\n\n    indented is not code", "intro\n\nindented is not code"),
    ("[1]: https://e.com\nsee [1]", "[1]: https://e.com\nsee [1]"),
    ("AT&amp;T &lt;b&gt;", "AT&amp;amp;T &amp;lt;b&amp;gt;"),
    ("- ```\n  code\n  ```\n- next", "•\n```\ncode\n```\n• next"),
    ("1. one\n2. two\n\n   more about two", "1. one\n2. two\n\n  more about two"),
]


@pytest.mark.parametrize(("md", "expected"), CHAT_CASES)
def test_chat_markdown(md: str, expected: str) -> None:
    assert markdown_to_mrkdwn(md) == expected


CODE_CASES = [
    ("```python\nx = 1\n```", "```\nx = 1\n```"),
    ("```\nif a < b && c > d:\n```", "```\nif a &lt; b &amp;&amp; c &gt; d:\n```"),
    ("```md\n**bold** _it_ [x](https://e.com) # h\n- li\n```", None),
    ("~~~js\nlet a = `t`;\n~~~", "```\nlet a = `t`;\n```"),
    ("```\nline\n\n\nafter blank lines\n```", "```\nline\n\n\nafter blank lines\n```"),
    ("```sh\nunclosed", "```\nunclosed\n```"),
    ("- item\n  ```py\n  nested()\n  ```\n- next", "• item\n```\nnested()\n```\n• next"),
]


@pytest.mark.parametrize(("md", "expected"), CODE_CASES)
def test_fenced_code(md: str, expected: str | None) -> None:
    out = markdown_to_mrkdwn(md)
    if expected is None:  # the body must come through untouched by inline conversion
        expected = "```\n" + md.split("\n", 1)[1]
    assert out == expected


# --- tables ---------------------------------------------------------------------------------


def _code_lines(out: str) -> list[str]:
    lines = out.split("\n")
    assert lines[0] == "```"
    assert lines[-1] == "```"
    return lines[1:-1]


def test_small_table_is_an_aligned_code_block() -> None:
    md = "| Name | Age | City |\n|------|----:|:----:|\n| Alice | 30 | NYC |\n| Bob | 4 | LA |"
    assert markdown_to_mrkdwn(md) == (
        "```\nName  | Age | City\n------+-----+-----\nAlice |  30 | NYC\nBob   |   4 |  LA\n```"
    )


def test_table_columns_line_up_with_markup_entities_and_wide_characters() -> None:
    md = (
        "Intro\n\n"
        "| Key | Value |\n| --- | --- |\n"
        "| `a_b` | **x** & y |\n| 日本 | [link](https://e.com) |\n| <tag> | z |\n\n"
        "After"
    )
    out = markdown_to_mrkdwn(md)
    assert out.startswith("Intro\n\n```\n")
    assert out.endswith("```\n\nAfter")
    body = _code_lines(out.split("\n\n")[1])
    unescaped = [ln.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">") for ln in body]
    # Markup is stripped (a code block can't render it); links keep their URL as text.
    assert unescaped[2].startswith("a_b ")
    assert "x & y" in unescaped[2]
    assert "link (https://e.com)" in unescaped[3]
    # The separator sits at the same display column on every row ("日本" is 4 columns wide).
    cols = {display_width(ln[: ln.find("|")]) for ln in unescaped if "|" in ln}
    cols.add(unescaped[1].find("+"))
    assert len(cols) == 1


def test_wide_table_becomes_bullet_lines() -> None:
    long = "word " * 25
    md = f"| Name | Notes |\n|---|---|\n| **Ann** | {long} |\n| Bo | |"
    out = markdown_to_mrkdwn(md)
    assert "```" not in out
    assert out.split("\n") == [f"• Name: *Ann* · Notes: {long.strip()}", "• Name: Bo"]
    assert max(len(row) for row in md.split("\n")) > TABLE_MAX_WIDTH


def test_pipe_lines_without_delimiter_row_are_not_a_table() -> None:
    assert markdown_to_mrkdwn("a | b\nc | d") == "a | b\nc | d"


# --- ping neutralization --------------------------------------------------------------------

PING_CASES = [
    ("<!channel>", "&lt;!channel&gt;"),
    ("<!here>", "&lt;!here&gt;"),
    ("<!everyone>", "&lt;!everyone&gt;"),
    ("<!here|here>", "&lt;!here|here&gt;"),
    ("<!subteam^S0123|@oncall>", "&lt;!subteam^S0123|@oncall&gt;"),
    ("<!subteam^S0123>", "&lt;!subteam^S0123&gt;"),
    ("@channel", f"@{ZWSP}channel"),
    ("hey @here!", f"hey @{ZWSP}here!"),
    ("@everyone look", f"@{ZWSP}everyone look"),
    ("@Channel", f"@{ZWSP}Channel"),
    # A user mention pings too: shown as plain text (issue 18: model output pings nobody).
    ("<@U123>", "@U123"),
    ("<@U123|alice> and <#C99|general>", "@alice and <#C99|general>"),
    ("<@W0ABC|here>", f"@{ZWSP}here"),
    ("<https://e.com|site>", "<https://e.com|site>"),
    ("&lt;!channel&gt;", "&lt;!channel&gt;"),
]


@pytest.mark.parametrize(("text", "expected"), PING_CASES)
def test_neutralize_slack_pings(text: str, expected: str) -> None:
    assert neutralize_slack_pings(text) == expected


@pytest.mark.parametrize("text", [t for t, _ in PING_CASES])
def test_neutralize_slack_pings_is_idempotent(text: str) -> None:
    once = neutralize_slack_pings(text)
    assert neutralize_slack_pings(once) == once


@pytest.mark.parametrize(
    "md",
    [
        "ping <!channel> now",
        "`<!here>` in code",
        "```\n<!everyone>\n```",
        "[<!channel>](https://e.com)",
        "@here and @channel and @everyone",
        "<!subteam^S1|@team> please",
    ],
)
def test_rendered_slack_text_cannot_ping(md: str) -> None:
    text = "\n".join(render_for_slack(md))
    assert "<!" not in text
    assert not re.search(r"@(here|channel|everyone)", text)


def test_render_for_slack_defuses_user_mentions_and_keeps_links() -> None:
    md = "Done, <@U42>: see [the **report**](https://e.com/r_1)"
    assert render_for_slack(md) == ["Done, @U42: see <https://e.com/r_1|the report>"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("@everyone", f"@{ZWSP}everyone"),
        ("hi @here and @channel", f"hi @{ZWSP}here and @{ZWSP}channel"),
        ("mail me@example.com", "mail me@example.com"),
        (f"@{ZWSP}everyone", f"@{ZWSP}everyone"),
    ],
)
def test_neutralize_broadcasts(text: str, expected: str) -> None:
    assert neutralize_broadcasts(text) == expected
    assert neutralize_broadcasts(expected) == expected


# --- splitting ------------------------------------------------------------------------------

FENCE_LINE = re.compile(r"^\s*(```|~~~)")


def _squash(text: str) -> str:
    """Content with fence lines and whitespace removed, for comparing across a split."""
    kept = [ln for ln in text.split("\n") if not FENCE_LINE.match(ln)]
    return re.sub(r"\s+", "", "".join(kept))


def _fences_balanced(chunk: str) -> bool:
    return sum(1 for ln in chunk.split("\n") if FENCE_LINE.match(ln)) % 2 == 0


def test_short_text_is_one_chunk() -> None:
    text = "Hello\n\nworld\n```py\nx\n```"
    assert split_message(text, 100) == [text]


@pytest.mark.parametrize("text", ["", "   ", "\n\n \n", "\t"])
def test_whitespace_only_is_no_chunks(text: str) -> None:
    assert split_message(text, 10) == []


def test_splits_on_paragraphs_first() -> None:
    text = "para one\n\npara two is longer\n\npara three"
    assert split_message(text, 25) == ["para one", "para two is longer", "para three"]
    # Paragraphs that fit together share a chunk and keep their blank line.
    assert split_message(text, 30) == ["para one\n\npara two is longer", "para three"]


def test_paragraph_break_preferred_over_line_break() -> None:
    text = "short\n\nline one of two\nline two of two"
    assert split_message(text, 35) == ["short", "line one of two\nline two of two"]


def test_splits_long_paragraph_on_lines() -> None:
    text = "line a\nline b\nline c\nline d"
    chunks = split_message(text, 14)
    assert chunks == ["line a\nline b", "line c\nline d"]
    assert "\n".join(chunks) == text


def test_single_huge_line_splits_on_words() -> None:
    words = [f"w{i:03d}" for i in range(200)]
    text = " ".join(words)
    chunks = split_message(text, 50)
    assert all(len(c) <= 50 for c in chunks)
    assert " ".join(chunks) == text  # each break replaced exactly one space


def test_word_longer_than_limit_is_hard_cut() -> None:
    text = "x" * 25
    assert split_message(text, 10) == ["x" * 10, "x" * 10, "x" * 5]


def test_hard_cut_does_not_split_an_entity() -> None:
    chunks = split_message("aaaaaaa&amp;bbbb", 10)
    assert chunks == ["aaaaaaa", "&amp;bbbb"]


def test_code_block_that_fits_is_never_split() -> None:
    code = "```py\nprint(1)\n\nprint(2)\n```"
    text = f"intro line\n\n{code}\n\nafter"
    chunks = split_message(text, len(code) + 2)
    assert code in chunks
    assert all(_fences_balanced(c) for c in chunks)


def test_code_block_inside_a_paragraph_moves_whole() -> None:
    code = "```\n" + "\n".join(f"row {i}" for i in range(5)) + "\n```"
    text = "Here it is:\n" + code + "\nDone."
    chunks = split_message(text, len(code) + 1)
    assert chunks == ["Here it is:", code, "Done."]


def test_over_long_code_block_is_reopened_with_its_info_string() -> None:
    body = [f"line {i}" for i in range(30)]
    text = "```python\n" + "\n".join(body) + "\n```"
    chunks = split_message(text, 60)
    assert len(chunks) > 1
    for c in chunks:
        assert len(c) <= 60
        assert c.startswith("```python\n")
        assert c.endswith("\n```")
    inner = [ln for c in chunks for ln in c.split("\n")[1:-1]]
    assert inner == body


def test_over_long_code_line_is_cut_inside_fences() -> None:
    text = "```\n" + "y" * 100 + "\n```"
    chunks = split_message(text, 30)
    assert all(len(c) <= 30 and c.startswith("```\n") and c.endswith("\n```") for c in chunks)
    assert "".join(c[4:-4] for c in chunks) == "y" * 100


def test_render_for_slack_splits_converted_code_with_bare_fences() -> None:
    md = "Result:\n\n```python\n" + "\n".join(f"x_{i} = {i} < {i + 1}" for i in range(40)) + "\n```"
    chunks = render_for_slack(md, limit=200)
    assert chunks[0] == "Result:"
    for c in chunks[1:]:
        assert len(c) <= 200
        assert c.startswith("```\n")
        assert c.endswith("\n```")
        assert "&lt;" in c
        assert "python" not in c


def test_invalid_limit_is_rejected() -> None:
    with pytest.raises(ValueError, match="positive"):
        split_message("text", 0)


def _random_doc(rng: random.Random) -> str:
    def words(n: int) -> str:
        return " ".join(
            "".join(rng.choice("abcdefghij&<>*_.") for _ in range(rng.randint(1, 9)))
            for _ in range(n)
        )

    blocks = []
    for _ in range(rng.randint(1, 10)):
        kind = rng.random()
        if kind < 0.2:
            info = rng.choice(["", "python", "js"])
            lines = [words(rng.randint(0, 8)) for _ in range(rng.randint(0, 15))]
            blocks.append("\n".join([f"```{info}", *lines, "```"]))
        elif kind < 0.3:
            blocks.append(words(rng.randint(20, 80)))  # one long line
        elif kind < 0.35:
            blocks.append("z" * rng.randint(40, 300))  # one unbreakable word
        else:
            blocks.append("\n".join(words(rng.randint(1, 12)) for _ in range(rng.randint(1, 5))))
    seps = ["\n", "\n\n", "\n\n\n", "\n \n"]
    return "".join(b + rng.choice(seps) for b in blocks)


@pytest.mark.parametrize("seed", range(8))
def test_split_properties_on_random_documents(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(60):
        text = _random_doc(rng)
        limit = rng.choice([25, 40, 64, 100, 250, 1000])
        chunks = split_message(text, limit)
        assert chunks, text
        for c in chunks:
            assert 0 < len(c) <= limit
            assert c.strip()
            assert _fences_balanced(c), (limit, c)
        assert _squash("\n".join(chunks)) == _squash(text)
        if len(text.strip()) <= limit:
            assert len(chunks) == 1


def test_slack_args_neutralised_in_text_blocks_and_views_only() -> None:
    args = {
        "channel": "C1",
        "text": "<!channel> @here see <@U1>",
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": "<!subteam^S1> <!here|here>"}},
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": "expires <!date^1700000000^{time}|soon>"}],
            },
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "action_id": "prompt:<!x>",
                        "text": {"type": "plain_text", "text": "<!everyone> @channel"},
                        "value": "<!here>",
                    }
                ],
            },
        ],
        "view": {"title": {"type": "plain_text", "text": "@everyone"}, "private_metadata": "@here"},
        "metadata": {"event_payload": {"key": "<!here>"}},
    }
    out = neutralize_slack_args(args)
    assert out["text"] == "&lt;!channel&gt; @\u200bhere see @U1"
    assert out["blocks"][0]["text"]["text"] == "&lt;!subteam^S1&gt; &lt;!here|here&gt;"
    assert out["blocks"][1]["elements"][0]["text"] == "expires <!date^1700000000^{time}|soon>"
    button = out["blocks"][2]["elements"][0]
    assert button["text"]["text"] == "<\u200b!everyone> @\u200bchannel"
    assert button["action_id"] == "prompt:<!x>" and button["value"] == "<!here>"
    assert out["view"] == {
        "title": {"type": "plain_text", "text": "@\u200beveryone"},
        "private_metadata": "@here",
    }
    assert out["metadata"] == args["metadata"] and out["channel"] == "C1"
    assert neutralize_slack_args(out) == out  # idempotent
