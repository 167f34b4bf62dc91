"""Markdown (as the model writes it) to Slack mrkdwn, and neutralization of Slack pings.

Line-oriented: Slack formatting can't span lines, so inline styles are converted per line.
Tables become an aligned monospace code block, or "• col: value · col: value" lines when a
rendered row would be wider than `TABLE_MAX_WIDTH` (a code block that wide wraps unreadably).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from bot.render.fences import closes_fence, open_fence
from bot.render.split import ZWSP, neutralize_broadcasts, split_message
from bot.render.tables import aligned_lines, bullet_rows, table_at

__all__ = [
    "HR_LINE",
    "SLACK_CHUNK_LIMIT",
    "escape_mrkdwn",
    "markdown_to_mrkdwn",
    "neutralize_slack_args",
    "neutralize_slack_pings",
    "render_for_slack",
]

HR_LINE = "———"
# Below Slack's 4,000-char display cut-off for one message, with room for a footer.
SLACK_CHUNK_LIMIT = 3500

_Mode = Literal["mrkdwn", "heading", "plain"]

# Private-use sentinels stand in for emitted markers and protected spans while the emphasis
# pass runs, so it can never re-read a marker it produced or reach inside code or a link.
_BOLD, _ITAL, _STRIKE = "\ue001", "\ue002", "\ue003"
_SLOT_OPEN, _SLOT_CLOSE = "\ue004", "\ue005"
_SENTINELS = re.compile("[\ue001-\ue005]")
_SLOT = re.compile(f"{_SLOT_OPEN}(\\d+){_SLOT_CLOSE}")
_MARKERS: dict[_Mode, tuple[str, str, str]] = {
    "mrkdwn": ("*", "_", "~"),
    "heading": ("", "_", "~"),  # the whole heading is already bold; nested "*" would break it
    "plain": ("", "", ""),
}

_ASCII_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_BACKTICKS = re.compile(r"`+")
_LINK = re.compile(
    r"(?P<bang>!?)\[(?P<label>(?:[^\[\]\\]|\\.|\[[^\[\]]*\])*)\]"
    r"\(\s*(?:<(?P<angle>[^<>\n]*)>|(?P<url>(?:[^\s()<>]|\([^\s()<>]*\))+))"
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^()]*\)))?\s*\)"
)
# Markdown autolinks, plus Slack-native user/channel references the model may emit on purpose
# (e.g. mentioning the requester); "<!...>" specials are deliberately absent: they get escaped.
_ANGLE = re.compile(
    r"<(?:(?P<auto>(?:https?|mailto|ftps?|sftp):[^\s<>]*)"
    r"|(?P<email>[\w.+-]+@[\w-]+(?:\.[\w-]+)+)"
    r"|(?P<ref>[@#][UWC][A-Z0-9]{2,}(?:\|[^<>]*)?))>"
)
_BARE_URL = re.compile(r"(?:https?://|www\.)[^\s<>]+", re.IGNORECASE)
_LINKABLE = re.compile(r"^(?:https?|mailto|ftps?|sftp|tel):", re.IGNORECASE)
_STRIKE_RE = re.compile(r"(?<!~)~~(?![\s~])(.+?)(?<![\s~])~~(?!~)")
_DELIM_RUN = re.compile(r"\*+|_+")

_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(?:=+|-+)[ \t]*$")
_HR = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_QUOTE = re.compile(r"^ {0,3}> ?(.*)$")
_UL = re.compile(r"^(?P<indent>[ \t]*)[-*+][ \t]+(?P<body>.*)$")
_OL = re.compile(r"^(?P<indent>[ \t]*)(?P<num>\d{1,9})[.)][ \t]+(?P<body>.*)$")
_TASK = re.compile(r"^\[([ xX])\][ \t]+")
# Every "<!…>" special except a date (`<!date^1700000000^{time}|…>`), which pings nobody.
_SPECIAL_MENTION = re.compile(r"<!(?!date\^\d+\^)([^<>]*)>")
# A user mention pings that person; the bot never means to, so none survives (its label, or
# the id, is shown as plain `@text`).
_USER_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|([^<>]*))?>")
# Web API arguments and Block Kit keys whose string values Slack displays.
_DISPLAYED_ARGS = frozenset({"text", "blocks", "attachments", "view"})
_DISPLAYED_KEYS = frozenset({"text", "fallback", "pretext", "title", "footer", "author_name"})


def escape_mrkdwn(text: str) -> str:
    """Escape the three characters Slack treats as control characters: & < >."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# --- inline -------------------------------------------------------------------------------


@dataclass
class _Delim:
    """A run of "*" or "_" during CommonMark's delimiter matching."""

    char: str
    length: int
    left: int  # characters not yet used by a match (rendered literally)
    can_open: bool
    can_close: bool
    opens: list[str] = field(default_factory=list)  # markers opened here, innermost first
    closes: list[str] = field(default_factory=list)  # markers closed here, innermost first

    def render(self) -> str:
        """The markers closed here, the characters no match used, the markers opened here."""
        return "".join(self.closes) + self.char * self.left + "".join(reversed(self.opens))


def _is_space(ch: str) -> bool:
    return ch == "" or ch.isspace()


def _is_punct(ch: str) -> bool:
    # Sentinels and protected spans count as punctuation, as the "`", "[" or ")" they replaced
    # would in CommonMark's flanking rules ("**`code`**" must still be bold).
    return ch != "" and (unicodedata.category(ch)[0] in "PS" or "\ue000" <= ch <= "\uf8ff")


def _rule_of_three(opener: _Delim, closer: _Delim) -> bool:
    return (
        (opener.can_close or closer.can_open)
        and (opener.length + closer.length) % 3 == 0
        and not (opener.length % 3 == 0 and closer.length % 3 == 0)
    )


def _emphasis(s: str) -> str:
    """Turn * and _ emphasis into sentinels with CommonMark's delimiter-run algorithm."""
    parts = _split_delimiter_runs(s)
    _match_delimiters([p for p in parts if isinstance(p, _Delim)])
    return "".join(p if isinstance(p, str) else p.render() for p in parts)


def _split_delimiter_runs(s: str) -> list[str | _Delim]:
    """`s` as text between runs of "*" or "_", each run a `_Delim` that knows its flanking."""
    parts: list[str | _Delim] = []
    pos = 0
    for m in _DELIM_RUN.finditer(s):
        before = s[m.start() - 1] if m.start() else ""
        after = s[m.end()] if m.end() < len(s) else ""
        parts.append(s[pos : m.start()])
        parts.append(_delimiter_run(m.group(), before, after))
        pos = m.end()
    parts.append(s[pos:])
    return parts


def _delimiter_run(run: str, before: str, after: str) -> _Delim:
    """A run of one delimiter character, between the characters `before` and `after` it."""
    left = not _is_space(after) and (not _is_punct(after) or _is_space(before) or _is_punct(before))
    right = not _is_space(before) and (
        not _is_punct(before) or _is_space(after) or _is_punct(after)
    )
    # The "_" rules apply to "*" too: Slack can't render intraword emphasis, so
    # "2*3*4" and "foo**bar**" stay literal instead of turning into stray markers.
    return _Delim(
        char=run[0],
        length=len(run),
        left=len(run),
        can_open=left and (not right or _is_punct(before)),
        can_close=right and (not left or _is_punct(after)),
    )


def _match_delimiters(delims: list[_Delim]) -> None:
    """Pair closers with earlier openers, recording on each the markers it opens or closes."""
    # Per-character stacks of usable openers keep this linear on adversarial input.
    stacks: dict[str, list[int]] = {"*": [], "_": []}
    for ci, closer in enumerate(delims):
        if closer.can_close:
            _close_openers(delims, closer, stacks)
        if closer.can_open and closer.left > 0:
            stacks[closer.char].append(ci)


def _close_openers(delims: list[_Delim], closer: _Delim, stacks: dict[str, list[int]]) -> None:
    """Match `closer` against the open delimiters of its character, innermost first."""
    stack = stacks[closer.char]
    k = len(stack) - 1
    while closer.left > 0 and k >= 0:
        oi = stack[k]
        opener = delims[oi]
        if _rule_of_three(opener, closer):
            k -= 1
            continue
        _pair(opener, closer)
        # Openers inside the matched span are gone: emphasis can't interleave.
        for other in stacks.values():
            while other and other[-1] > oi:
                other.pop()
        if opener.left == 0:
            stack.pop()
            k -= 1


def _pair(opener: _Delim, closer: _Delim) -> None:
    """Use two characters of each for bold when both have them, else one for italics."""
    use = 2 if opener.left >= 2 and closer.left >= 2 else 1
    marker = _BOLD if use == 2 else _ITAL
    opener.left -= use
    closer.left -= use
    opener.opens.append(marker)
    closer.closes.append(marker)


def _trim_url(url: str) -> str:
    # GFM autolink rule: trailing punctuation and an unbalanced ")" end the sentence, not the URL.
    while url:
        last = url[-1]
        if last in "?!.,:;*_~'\"" or (last == ")" and url.count("(") < url.count(")")):
            url = url[:-1]
        else:
            break
    return url


def _render_link(m: re.Match[str], mode: _Mode) -> str:
    label = _inline(m["label"], "plain").strip()
    url = (m["angle"] if m["angle"] is not None else m["url"]).strip()
    if url.lower().startswith("www."):
        url = "http://" + url
    if mode == "plain":
        return url if not label or label == url else f"{label} ({url})"
    if not _LINKABLE.match(url):
        # Relative or odd-scheme targets aren't clickable in Slack; show them as text.
        return escape_mrkdwn(url if not label else f"{label} ({url})")
    # Slack's link syntax ends at ">" and labels at "|": keep the URL free of both and spaces.
    url = url.replace(" ", "%20").replace("|", "%7C")
    if not label or label == url:
        return f"<{url}>"
    return f"<{url}|{escape_mrkdwn(label)}>"


def _render_angle(m: re.Match[str], mode: _Mode) -> str:
    if m["email"] is not None:
        return m["email"] if mode == "plain" else f"<mailto:{m['email']}|{m['email']}>"
    if m["auto"] is not None and mode == "plain":
        return m["auto"]
    return m.group()  # a Markdown autolink is already Slack syntax; so is <@U…> / <#C…>


def _find_closing_backticks(text: str, start: int, n: int) -> int:
    for m in _BACKTICKS.finditer(text, start):
        if len(m.group()) == n:
            return m.start()
    return -1


class _Token(NamedTuple):
    """What an inline reader consumed: its rendering, where it ended, and whether the
    rendering is protected from the emphasis and escaping passes (kept in a slot)."""

    text: str
    end: int
    protected: bool = True


def _escaper(mode: _Mode) -> Callable[[str], str]:
    """Escapes & < > except in "plain" mode, which escapes nothing."""
    return (lambda s: s) if mode == "plain" else escape_mrkdwn


def _read_backslash(text: str, i: int, mode: _Mode) -> _Token | None:
    """A backslash escape of ASCII punctuation, or a trailing backslash (a hard break)."""
    if i + 1 == len(text):
        return _Token("", i + 1, protected=False)  # a Markdown hard break; Slack keeps newlines
    if text[i + 1] not in _ASCII_PUNCT:
        return None
    literal = _escaper(mode)(text[i + 1])
    if mode != "plain" and literal in "*_~`":
        # Slack has no escape for its markers; zero-width spaces on both sides keep
        # the character from opening or closing a style, whichever way Slack reads them.
        literal = ZWSP + literal + ZWSP
    return _Token(literal, i + 2)


def _read_code_span(text: str, i: int, mode: _Mode) -> _Token:
    """A code span; a backtick run with no closing run of the same length stays literal."""
    run = _BACKTICKS.match(text, i)
    assert run is not None
    end = _find_closing_backticks(text, run.end(), len(run.group()))
    if end == -1:
        return _Token(run.group(), run.end(), protected=False)
    code = text[run.end() : end]
    if len(code) > 2 and code[0] == " " and code[-1] == " " and code.strip():
        code = code[1:-1]
    return _Token(code if mode == "plain" else f"`{escape_mrkdwn(code)}`", end + len(run.group()))


def _read_link(text: str, i: int, mode: _Mode) -> _Token | None:
    """A Markdown link or image."""
    m = _LINK.match(text, i)
    return None if m is None else _Token(_render_link(m, mode), m.end())


def _read_angle(text: str, i: int, mode: _Mode) -> _Token | None:
    """An autolink, or a Slack user/channel reference."""
    m = _ANGLE.match(text, i)
    return None if m is None else _Token(_render_angle(m, mode), m.end())


def _read_bare_url(text: str, i: int, mode: _Mode) -> _Token | None:
    """A bare http(s):// or www. URL starting a word, without trailing punctuation."""
    if i > 0 and text[i - 1].isalnum():
        return None
    m = _BARE_URL.match(text, i)
    url = _trim_url(m.group()) if m is not None else ""
    if not _BARE_URL.fullmatch(url):
        return None
    # Protected so "_" in a URL never becomes italics; "&" still needs escaping.
    return _Token(_escaper(mode)(url), i + len(url))


_InlineReader = Callable[[str, int, _Mode], _Token | None]
# By the character a construct starts with; anything else is text for the emphasis pass.
_INLINE_READERS: dict[str, _InlineReader] = {
    "\\": _read_backslash,
    "`": _read_code_span,
    "[": _read_link,
    "!": _read_link,
    "<": _read_angle,
    **dict.fromkeys("hHwW", _read_bare_url),
}


def _inline(text: str, mode: _Mode) -> str:
    """Convert one line of inline Markdown; "plain" drops all markup and escapes nothing."""
    slots: list[str] = []
    buf: list[str] = []
    i = 0
    while i < len(text):
        reader = _INLINE_READERS.get(text[i])
        token = reader(text, i, mode) if reader is not None else None
        if token is None:
            buf.append(text[i])
            i += 1
        elif token.protected:
            slots.append(token.text)
            buf.append(f"{_SLOT_OPEN}{len(slots) - 1}{_SLOT_CLOSE}")
            i = token.end
        else:
            buf.append(token.text)
            i = token.end
    return _style("".join(buf), slots, mode)


def _style(text: str, slots: list[str], mode: _Mode) -> str:
    """Strikethrough and emphasis as `mode`'s markers, text escaped, protected slots put back."""
    s = _emphasis(_STRIKE_RE.sub(f"{_STRIKE}\\1{_STRIKE}", text))
    s = _escaper(mode)(s)  # sentinels and slots contain no & < >, so escaping can't touch them
    bold, ital, strike = _MARKERS[mode]
    s = s.replace(_BOLD, bold).replace(_ITAL, ital).replace(_STRIKE, strike)
    return _SLOT.sub(lambda m: slots[int(m[1])], s)


# --- tables -------------------------------------------------------------------------------


def _render_table(rows: list[list[str]], aligns: list[str]) -> list[str]:
    lines = aligned_lines([[_inline(c, "plain") for c in row] for row in rows], aligns)
    if lines is None:
        return bullet_rows(rows, lambda c: _inline(c, "mrkdwn"))
    # Pad first, escape after: an entity like "&amp;" shows as one column in the client.
    return ["```", *map(escape_mrkdwn, lines), "```"]


# --- blocks -------------------------------------------------------------------------------


def _dedent(line: str, n: int) -> str:
    k = 0
    while k < n and k < len(line) and line[k] == " ":
        k += 1
    return line[k:]


def _list_level(stack: list[int], indent: int) -> int:
    """Nesting level from indentation, whether the model indents by 2, 3 or 4 spaces."""
    while stack and indent < stack[-1]:
        stack.pop()
    if not stack or indent > stack[-1]:
        stack.append(indent)
    return len(stack) - 1


def _heading(text: str) -> str:
    content = _inline(text.strip(), "heading")
    return f"*{content}*" if content else ""


@dataclass
class _Blocks:
    """The state of one block-level conversion: the input lines and the output so far."""

    lines: list[str]
    out: list[str] = field(default_factory=list)
    stack: list[int] = field(default_factory=list)  # indentation of the open list items


# Each block reader converts the construct starting at line i and returns the next line's
# index, or returns None (touching nothing) when line i does not start that construct.
_BlockReader = Callable[[_Blocks, int], int | None]


def _read_blank(b: _Blocks, i: int) -> int | None:
    """Blank lines collapse into one."""
    if b.lines[i].strip():
        return None
    if b.out and b.out[-1] != "":
        b.out.append("")
    return i + 1


def _read_fenced_code(b: _Blocks, i: int) -> int | None:
    """A fenced code block, to the closing fence or the end of the text."""
    fence = open_fence(b.lines[i])
    if fence is None:
        return None
    indent = len(fence["indent"])
    j = i + 1
    body: list[str] = []
    while j < len(b.lines) and not closes_fence(b.lines[j], fence["fence"]):
        body.append(_dedent(b.lines[j], indent))
        j += 1
    # Slack ignores info strings (and would show one as code), so the fence is bare;
    # Slack renders entities inside code too, so the body is escaped like text.
    b.out.extend(["```", *(escape_mrkdwn(line) for line in body), "```"])
    return j + 1


def _read_rule(b: _Blocks, i: int) -> int | None:
    """A thematic break (---, ***, ___)."""
    if not _HR.match(b.lines[i]):
        return None
    b.stack.clear()
    b.out.append(HR_LINE)
    return i + 1


def _read_atx_heading(b: _Blocks, i: int) -> int | None:
    """A "#" heading, bold; an empty one is dropped."""
    m = _HEADING.match(b.lines[i])
    if m is None:
        return None
    b.stack.clear()
    if heading := _heading(m[2] or ""):
        b.out.append(heading)
    return i + 1


def _read_quote(b: _Blocks, i: int) -> int | None:
    """A block quote: its lines converted as a document of their own, then quoted."""
    if not _QUOTE.match(b.lines[i]):
        return None
    b.stack.clear()
    inner: list[str] = []
    while i < len(b.lines) and (q := _QUOTE.match(b.lines[i])) is not None:
        inner.append(q[1])
        i += 1
    b.out.extend(f"> {q}" if q else ">" for q in _convert_lines(inner))
    return i


def _read_table(b: _Blocks, i: int) -> int | None:
    """A GFM pipe table."""
    found = table_at(b.lines, i)
    if found is None:
        return None
    b.stack.clear()
    (rows, aligns), end = found
    b.out.extend(_render_table(rows, aligns))
    return end


def _read_list_item(b: _Blocks, i: int) -> int | None:
    """A bulleted, numbered or task list item, indented by its nesting level."""
    m = _UL.match(b.lines[i]) or _OL.match(b.lines[i])
    if m is None:
        return None
    level = _list_level(b.stack, len(m["indent"].expandtabs(4)))
    marker, body = _item_marker(m)
    b.out.append(("  " * level + marker + " " + _inline(body, "mrkdwn")).rstrip())
    return i + 1


def _item_marker(m: re.Match[str]) -> tuple[str, str]:
    """The marker a list item shows ("3.", "•", "• ☑", "• ☐") and the rest of its text."""
    body = m["body"].strip()
    if "num" in m.groupdict():
        return m["num"] + ".", body
    task = _TASK.match(body)
    if task is None:
        return "•", body
    return ("• ☑" if task[1] in "xX" else "• ☐"), body[task.end() :]


def _read_text(b: _Blocks, i: int) -> int:
    """Anything else: a list item's continuation, a setext heading, or a line of text."""
    line = b.lines[i]
    indent = len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip())
    text = line.strip()
    if indent and b.stack:
        # A continuation line inside a list item: indent it under the item's text.
        depth = sum(1 for w in b.stack if w < indent)
        b.out.append("  " * depth + _inline(text, "mrkdwn"))
        return i + 1
    b.stack.clear()
    if i + 1 < len(b.lines) and _SETEXT.match(b.lines[i + 1]):
        if heading := _heading(text):
            b.out.append(heading)
        return i + 2
    b.out.append(_inline(text, "mrkdwn"))
    return i + 1


# Tried in order at each line; the last reads any line, so one always applies.
_BLOCK_READERS: tuple[_BlockReader, ...] = (
    _read_blank,
    _read_fenced_code,
    _read_rule,
    _read_atx_heading,
    _read_quote,
    _read_table,
    _read_list_item,
    _read_text,
)


def _convert_lines(lines: list[str]) -> list[str]:
    """Convert Markdown lines to mrkdwn lines, one block construct at a time."""
    blocks = _Blocks(lines)
    i = 0
    while i < len(lines):
        i = next(end for read in _BLOCK_READERS if (end := read(blocks, i)) is not None)
    return blocks.out


def markdown_to_mrkdwn(md: str) -> str:
    """Convert model-written Markdown to Slack mrkdwn (code kept verbatim, & < > escaped)."""
    text = md.replace("\r\n", "\n").replace("\r", "\n")
    # The conversion uses private-use code points as sentinels; none may come from the input.
    text = _SENTINELS.sub("\ufffd", text)
    return "\n".join(_convert_lines(text.split("\n"))).strip("\n")


def neutralize_slack_pings(text: str) -> str:
    """Make <!channel>/<!here>/<!everyone>/<!subteam^…>, user mentions (<@U123>, shown as
    `@U123` or `@label`) and bare @channel etc. inert.

    Idempotent and safe on converted mrkdwn.
    """
    # Every "<!...>" special is escaped so Slack shows it literally; none should come from
    # the model, and a blanket rule also covers forms like "<!here|here>".
    text = _SPECIAL_MENTION.sub(lambda m: f"&lt;!{m[1]}&gt;", text)
    text = _USER_MENTION.sub(lambda m: f"@{m[2] or m[1]}", text)
    return neutralize_broadcasts(text)


def _neutralize_plain(text: str) -> str:
    # plain_text never pings, but is shown verbatim: break "<!" rather than escaping it.
    text = _USER_MENTION.sub(lambda m: f"@{m[2] or m[1]}", text)
    return neutralize_broadcasts(text.replace("<!", "<" + ZWSP + "!"))


def _neutralize_value(value: Any, *, plain: bool) -> Any:
    if isinstance(value, str):
        return _neutralize_plain(value) if plain else neutralize_slack_pings(value)
    if isinstance(value, list):
        return [_neutralize_value(item, plain=plain) for item in value]
    if isinstance(value, Mapping):
        is_plain = value.get("type") == "plain_text"
        return {
            key: (
                _neutralize_value(item, plain=is_plain)
                if key in _DISPLAYED_KEYS or not isinstance(item, str)
                else item
            )
            for key, item in value.items()
        }
    return value


def neutralize_slack_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """Web API arguments with every displayed string made ping-free: `text` and each text
    field inside `blocks`, `attachments` and `view` (ids, values and metadata untouched).

    The Slack adapter sends every call through this, so no outgoing string bypasses it.
    """
    return {
        key: _neutralize_value(value, plain=False) if key in _DISPLAYED_ARGS else value
        for key, value in args.items()
    }


def render_for_slack(md: str, limit: int = SLACK_CHUNK_LIMIT) -> list[str]:
    """Markdown to ready-to-post Slack messages: convert, neutralize pings, split."""
    return split_message(neutralize_slack_pings(markdown_to_mrkdwn(md)), limit)
